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
for pkg in $($GO list ./... | grep -v /e2e); do
	for target in $($GO test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		n=$((n + 1))
		echo "[fuzz] $pkg $target ($FUZZTIME)"
		if ! $GO test -run='^$' -fuzz="^${target}\$" -fuzztime="$FUZZTIME" "$pkg" >/tmp/thaw-fuzz.$$ 2>&1; then
			cat /tmp/thaw-fuzz.$$
			fail=1
		fi
	done
done
rm -f /tmp/thaw-fuzz.$$
echo "[fuzz] $n targets, $([ $fail = 0 ] && echo all passed || echo FAILURES)"
exit $fail
