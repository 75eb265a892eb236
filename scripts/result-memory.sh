#!/usr/bin/env bash
# The daemon's memory for large results: starts BIN/thawd on a fresh data
# directory, boots a VM of a function that returns a JSON string of SIZE
# characters and invokes it warm once with a small result. The daemon's
# VmRSS then is its idle size; its peak resident set is reset to it
# (/proc/PID/clear_refs 5). Then REPS times: invokes the large result with
# BIN/thaw (a process of its own, so the caller's copy is not counted),
# checks the result it got, and prints one JSON line with the daemon's peak
# (VmHWM) so far and the peak's growth over the idle size (KiB). The first
# line is one result's cost; the later ones show whether it accumulates.
# Needs root (thawd does) and a built guest image.
#   usage: scripts/result-memory.sh BIN IMAGE [SIZE] [REPS] [GUEST_MIB]
set -euo pipefail
BIN=$(readlink -f "$1"); IMAGE=$(readlink -f "$2")
SIZE=${3:-30000000}; REPS=${4:-3}; GUEST_MIB=${5:-512}
WORK=$(mktemp -d /tmp/thaw-result-memory.XXXXXX)
chmod 0700 "$WORK"
SOCK=$WORK/thawd.sock
STORE=/dev/shm/$(basename "$WORK")-store
export THAW_URL="unix:$SOCK"
"$BIN/thawd" --data-dir "$WORK/data" --store-dir "$STORE" --listen "$SOCK" --image "$IMAGE" \
  --accel "${THAW_ACCEL:-tcg}" --invoke-timeout 10m >"$WORK/thawd.log" 2>&1 &
PID=$!
cleanup() {
  kill "$PID" 2>/dev/null || true
  wait "$PID" 2>/dev/null || true
  rm -rf "$WORK" "$STORE"
}
trap cleanup EXIT
for _ in $(seq 1 300); do
  "$BIN/thaw" info >/dev/null 2>&1 && break
  kill -0 "$PID" 2>/dev/null || { cat "$WORK/thawd.log" >&2; exit 1; }
  sleep 0.2
done
mkdir "$WORK/fn"
cat >"$WORK/fn/handler.py" <<'PY'
def handle(event):
    return "x" * event["n"]
PY
"$BIN/thaw" function create big --dir "$WORK/fn" --memory "$GUEST_MIB" >/dev/null
VM=$("$BIN/thaw" --json vm boot big | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
"$BIN/thaw" --json invoke big --vm "$VM" --event '{"n":10}' >/dev/null
kib() { awk -v f="$1:" '$1 == f {print $2}' "/proc/$PID/status"; }
sleep 2
echo 5 >"/proc/$PID/clear_refs" # VmHWM := VmRSS
rss=$(kib VmRSS)
for rep in $(seq 1 "$REPS"); do
  t0=$(date +%s.%N)
  "$BIN/thaw" --json invoke big --vm "$VM" --event "{\"n\":$SIZE}" >"$WORK/out.json"
  t1=$(date +%s.%N)
  hwm=$(kib VmHWM)
  python3 - "$WORK/out.json" "$SIZE" "$rep" "$rss" "$hwm" "$t0" "$t1" <<'PY'
import json, sys
path, size, rep, rss, hwm, t0, t1 = sys.argv[1:]
with open(path) as f:
    inv = json.load(f)
ok = inv.get("ok") is True and inv.get("result") == "x" * int(size)
size, rss, hwm = int(size), int(rss), int(hwm)
print(json.dumps({"rep": int(rep), "result_bytes": size + 2, "result_ok": ok, "rss_idle_kib": rss,
                  "hwm_kib": hwm, "delta_kib": hwm - rss, "delta_over_result": round((hwm - rss) * 1024 / (size + 2), 2),
                  "invoke_s": round(float(t1) - float(t0), 2)}))
if not ok:
    sys.exit("the caller did not get the result: " + json.dumps({k: v for k, v in inv.items() if k != "result"})[:2000])
PY
done
