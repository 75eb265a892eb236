#!/usr/bin/env bash
# The triggers' benchmarks on real VMs (docs/bench/triggers.md):
#   1. endpoint overhead: the same kept-alive function called through its
#      endpoint and through the API (POST /v1/functions/NAME/invoke), one
#      request at a time, alternating rounds, in one run;
#   2. load: 50 concurrent keep-alive clients for 60 s against the endpoint
#      (hey, built from its Go module);
#   3. asynchronous invocations: enqueue-to-start on an idle node (one at a
#      time), and sustained throughput (a burst queued, drained).
# Raw outputs and summary.md go to OUT (default docs/results/triggers-<date>).
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE=${THAW_CACHE:-$HOME/.cache/thaw}
HEY_VERSION=${HEY_VERSION:-v0.1.4}
HEY=$CACHE/hey/$HEY_VERSION/hey
if [ ! -x "$HEY" ]; then
  echo "[bench] building hey $HEY_VERSION into $(dirname "$HEY")" >&2
  mkdir -p "$(dirname "$HEY")"
  GOBIN=$(dirname "$HEY") go install "github.com/rakyll/hey@$HEY_VERSION"
fi
OUT=${OUT:-docs/results/triggers-$(date +%Y-%m-%d)}
DURATION=${DURATION:-60s}
CLIENTS=${CLIENTS:-50}
ROUNDS=${ROUNDS:-4}
PER_ROUND=${PER_ROUND:-250}
ASYNC_BURST=${ASYNC_BURST:-1000} # a multiple of 8 (hey's clients)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
DIR=$(mktemp -d /tmp/thaw-bench-triggers-XXXXXX)
API=127.0.0.1:$(free_port)
FN_ADDR=127.0.0.1:$(free_port)
SOCK=$DIR/thawd.sock
export THAW_URL="unix:$SOCK"
bin/thawd --data-dir "$DIR/data" --store-dir "/dev/shm/thaw-bench-triggers" --listen "$SOCK" --listen "$API" \
  --functions-listen "$FN_ADDR" --memory 256 --keep-alive 10m --keep-alive-max-idle 4 --async-concurrency 4 >"$DIR/thawd.log" 2>&1 &
THAWD=$!
cleanup() {
  kill "$THAWD" 2>/dev/null || true
  wait "$THAWD" 2>/dev/null || true
  rm -rf "$DIR" /dev/shm/thaw-bench-triggers
}
trap cleanup EXIT
for _ in $(seq 1 300); do bin/thaw info >/dev/null 2>&1 && break; sleep 0.2; done
TOKEN=$(cat "$DIR/data/token")

echo "[bench] deploying hello (max 4 VMs)" >&2
bin/thaw deploy hello --dir functions/hello --max-concurrency 4 >/dev/null
bin/thaw endpoint create hello >/dev/null
EP="http://$FN_ADDR/hello"
INV="http://$API/v1/functions/hello/invoke"
for _ in $(seq 1 20); do curl -sf "$EP" >/dev/null; done # the kept VM is warm

# p50 of a hey summary, in ms.
p50() { awk '/50% in/ {printf "%.3f", $3*1000}' "$1"; }
pct() { awk -v p="$2%" '$1 == p && $2 == "in" {printf "%.3f", $3*1000}' "$1"; }

echo "[bench] overhead: $ROUNDS rounds of $PER_ROUND sequential requests, API and endpoint alternating" >&2
for r in $(seq 1 "$ROUNDS"); do
  "$HEY" -n "$PER_ROUND" -c 1 -m POST -T application/json -d '{"event":{}}' -H "Authorization: Bearer $TOKEN" "$INV" >"$OUT/overhead-api-$r.txt"
  "$HEY" -n "$PER_ROUND" -c 1 "$EP" >"$OUT/overhead-endpoint-$r.txt"
done

echo "[bench] load: $CLIENTS keep-alive clients for $DURATION" >&2
"$HEY" -z "$DURATION" -c "$CLIENTS" "$EP" >"$OUT/load-endpoint.txt"
curl -s --unix-socket "$SOCK" http://thawd/metrics | grep -E '^thaw_endpoint_requests_total' >"$OUT/load-endpoint-statuses.txt" || true

echo "[bench] async: enqueue-to-start on an idle node, 100 one at a time" >&2
python3 - "$SOCK" >"$OUT/async-start.txt" <<'EOF'
import http.client, json, socket, sys, time, statistics
sock = sys.argv[1]
class UnixConn(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX); self.sock.connect(sock)
def call(method, path, body=None):
    c = UnixConn("thawd"); c.request(method, path, body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse(); d = r.read(); c.close(); return r.status, json.loads(d) if d else None
def ts(s):  # RFC 3339 with nanoseconds
    from datetime import datetime
    s = s.rstrip("Z"); base, _, frac = s.partition(".")
    return datetime.fromisoformat(base).timestamp() + float("0." + (frac or "0"))
delays = []
for i in range(100):
    st, acc = call("POST", "/v1/functions/hello/invoke?async=true", json.dumps({"event": {"n": i}}))
    assert st == 202, (st, acc)
    while True:
        _, s = call("GET", "/v1/async/" + acc["id"])
        if s["state"] in ("succeeded", "failed"): break
        time.sleep(0.01)
    delays.append((ts(s["started_at"]) - ts(s["enqueued_at"])) * 1000)
delays.sort()
print("n=%d p50_ms=%.2f p90_ms=%.2f p99_ms=%.2f max_ms=%.2f" % (len(delays), delays[len(delays)//2], delays[int(len(delays)*.9)], delays[int(len(delays)*.99)], delays[-1]))
EOF

echo "[bench] async: $ASYNC_BURST queued at once (8 clients), then drained" >&2
before=$(curl -s --unix-socket "$SOCK" http://thawd/metrics | awk '/^thaw_async_outcomes_total\{condition="success",function="hello"\}/ {print $2}')
before=${before:-0}
start=$(date +%s.%N)
"$HEY" -n "$ASYNC_BURST" -c 8 -m POST -T application/json -d '{"event":{}}' -H "Authorization: Bearer $TOKEN" "$INV?async=true" >"$OUT/async-enqueue.txt"
ASYNC_BURST=$(awk '/\[202\]/ {print $2}' "$OUT/async-enqueue.txt") # hey sends a multiple of its clients
while :; do
  done_n=$(curl -s --unix-socket "$SOCK" http://thawd/metrics | awk '/^thaw_async_outcomes_total\{condition="success",function="hello"\}/ {print $2}')
  [ "$(python3 -c "print(int(float('${done_n:-0}') - float('$before') >= $ASYNC_BURST))")" = 1 ] && break
  sleep 0.2
done
end=$(date +%s.%N)
python3 -c "print('queued=%d drained_s=%.2f completions_per_s=%.1f' % ($ASYNC_BURST, $end-$start, $ASYNC_BURST/($end-$start)))" >"$OUT/async-throughput.txt"

{
  echo "# Triggers benchmark, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "hello, 256 MiB guest, TCG, kept alive (pooled); $(nproc) cores shared with other engineers' test runs."
  echo
  echo "| round | API p50 ms | endpoint p50 ms | overhead ms |"
  echo "|---|---|---|---|"
  for r in $(seq 1 "$ROUNDS"); do
    a=$(p50 "$OUT/overhead-api-$r.txt"); e=$(p50 "$OUT/overhead-endpoint-$r.txt")
    echo "| $r | $a | $e | $(python3 -c "print('%.3f' % ($e - $a))") |"
  done
  echo
  echo "Load ($CLIENTS clients, $DURATION): $(awk '/Requests\/sec/ {print $2}' "$OUT/load-endpoint.txt") requests/s;" \
    "p50 $(pct "$OUT/load-endpoint.txt" 50) ms, p90 $(pct "$OUT/load-endpoint.txt" 90) ms, p99 $(pct "$OUT/load-endpoint.txt" 99) ms."
  grep -A20 'Status code distribution' "$OUT/load-endpoint.txt" | grep '\[' || true
  echo
  echo "Async enqueue-to-start (idle node, one at a time): $(cat "$OUT/async-start.txt")"
  echo
  echo "Async burst: $(cat "$OUT/async-throughput.txt"); enqueue $(awk '/Requests\/sec/ {print $2}' "$OUT/async-enqueue.txt") requests/s"
} >"$OUT/summary.md"
cat "$OUT/summary.md"
