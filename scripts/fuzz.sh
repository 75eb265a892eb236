#!/usr/bin/env bash
# Runs every Go fuzz target in the repository for FUZZTIME each (default 3s):
# `make test` runs them briefly, `make fuzz` longer (FUZZTIME=60s). New
# inputs that fail are written under the package's testdata/fuzz and fail
# the run; commit them as regression seeds.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-3s}
GO=${GO:-go}
fail=0
n=0
# The targets are found in the sources (func FuzzX(f *testing.F) in a
# _test.go file), not with `go test -list`, which builds every package's
# test binary only to list them (minutes on a busy machine).
for dir in $(grep -rlE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' cmd internal client wire 2>/dev/null | xargs -r -n1 dirname | sort -u); do
	pkg=./$dir
	for target in $(grep -hoE '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' "$dir"/*_test.go | sed -E 's/^func (Fuzz[A-Za-z0-9_]*).*/\1/' | sort -u); do
		n=$((n + 1))
		echo "[fuzz] $pkg $target ($FUZZTIME)"
		ok=0
		for attempt in 1 2; do
			if $GO test -run='^$' -fuzz="^${target}\$" -fuzztime="$FUZZTIME" "$pkg" >/tmp/thaw-fuzz.$$ 2>&1; then
				ok=1
				break
			fi
			# Go's fuzzing engine sometimes fails a short run with a bare "context
			# deadline exceeded" when a busy machine stalls its workers at the end;
			# that is no finding (no failing input is written), so run it again once.
			grep -q "Failing input written" /tmp/thaw-fuzz.$$ && break
			grep -q "context deadline exceeded" /tmp/thaw-fuzz.$$ || break
			echo "[fuzz] $target: the engine timed out without a finding; again"
		done
		if [ $ok = 0 ]; then
			cat /tmp/thaw-fuzz.$$
			fail=1
		fi
	done
done
rm -f /tmp/thaw-fuzz.$$
echo "[fuzz] $n targets, $([ $fail = 0 ] && echo all passed || echo FAILURES)"
exit $fail
