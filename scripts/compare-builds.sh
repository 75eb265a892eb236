#!/usr/bin/env bash
# Cold starts of one function under every strategy on two builds of thaw,
# side by side in one session: BEFORE and AFTER are checkouts with `make
# build` done (e.g. a git worktree of an older commit, and this one). Each
# round starts BEFORE's thawd on a fresh data directory, runs `thaw bench
# strategies`, stops it, then does the same with AFTER, so drift of this
# machine hits both alike. Results: OUT/{before,after}-ROUND/ and, per
# strategy, medians with p10-p90 of set-up and total in OUT/compare.md.
#   usage: scripts/compare-builds.sh BEFORE AFTER
#   ROUNDS (default 2), REPS per round (default 5), FUNCTION (default hello),
#   STRATEGIES (default all six), OUT (default /tmp/thaw-compare)
set -euo pipefail
BEFORE=$(cd "$1" && pwd); AFTER=$(cd "$2" && pwd)
ROUNDS=${ROUNDS:-2}; REPS=${REPS:-5}; FUNCTION=${FUNCTION:-hello}
STRATEGIES=${STRATEGIES:-vanilla,cached,reap,faasnap,premap,snapbpf}
OUT=${OUT:-/tmp/thaw-compare}
mkdir -p "$OUT"
run() { # name checkout round
  local name=$1 src=$2 round=$3 data store pid
  data=$(mktemp -d /var/tmp/thaw-compare.XXXXXX)
  chmod go-w "$data" # the socket's directory: thawd refuses one others may write to
  store=$(mktemp -d /dev/shm/thaw-compare-store.XXXXXX)
  "$src/bin/thawd" --data-dir "$data/data" --store-dir "$store" --listen "$data/thawd.sock" >"$data/thawd.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do [[ -S $data/thawd.sock ]] && break; sleep 0.3; done
  echo "[compare] $name, round $round"
  if ! (cd "$src" && THAW_URL="unix:$data/thawd.sock" bin/thaw bench strategies --functions "$FUNCTION" \
    --strategies "$STRATEGIES" --reps "$REPS" --out "$OUT/$name-$round") >"$OUT/$name-$round.txt" 2>&1; then
    tail -20 "$OUT/$name-$round.txt" "$data/thawd.log"
    kill "$pid"; exit 1
  fi
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$data" "$store"
}
for r in $(seq "$ROUNDS"); do
  run before "$BEFORE" "$r"
  run after "$AFTER" "$r"
done
python3 - "$OUT" "$STRATEGIES" >"$OUT/compare.md" <<'PY'
import glob, json, statistics, sys
out, strategies = sys.argv[1], sys.argv[2].split(",")
samples = {}
for side in ("before", "after"):
    for f in sorted(glob.glob(f"{out}/{side}-*/strategies.jsonl")):
        for line in open(f):
            d = json.loads(line)
            samples.setdefault((side, d["strategy"]), []).append(d)
def q(xs, p):
    xs = sorted(xs); i = (len(xs) - 1) * p; lo = int(i); hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (i - lo)
def cell(side, s, key):
    v = [d[key] for d in samples.get((side, s), [])]
    return f"{statistics.median(v):.1f} ({q(v, .1):.1f}–{q(v, .9):.1f})" if v else "–"
print("| strategy | set-up before | set-up after | total before | total after | samples |")
print("|---|---:|---:|---:|---:|---:|")
for s in strategies:
    n = len(samples.get(("before", s), [])), len(samples.get(("after", s), []))
    print(f"| {s} | {cell('before', s, 'setup_ms')} | {cell('after', s, 'setup_ms')} | "
          f"{cell('before', s, 'total_ms')} | {cell('after', s, 'total_ms')} | {n[0]}/{n[1]} |")
PY
cat "$OUT/compare.md"
