#!/usr/bin/env bash
# make cluster-demo: a thaw cluster on this machine. Two thawd nodes, each
# in a network namespace of its own, behind HAProxy (127.0.0.1), and an
# object store (MinIO) in a namespace of its own behind an emulated link
# (1 ms round trip, 1 Gbit/s): the nodes' snapshot registry. The function
# is prepared on the node HAProxy routes it to and pushed to the store,
# invoked through the balancer, then that node is killed (thawd and its
# QEMUs, SIGKILL) and the function is invoked again: the other node, which
# never saw it, imports it from the registry and restores it lazily. Each
# request prints the node that ran it, how long it took and what came from
# the registry. Then a schedule fires every second on the nodes' shared NATS
# cluster (three nats-servers): one node fires it, and when that node is
# killed another takes over, each tick fired once. Everything is removed
# on exit, also on Ctrl-C.
# docs/cluster.md explains the design.
set -euo pipefail
cd "$(dirname "$0")/.."

FN=${THAW_CLUSTER_FN:-hello}
NODES=${THAW_CLUSTER_NODES:-3}
IMAGE=${THAW_IMAGE:-${THAW_CACHE:-$HOME/.cache/thaw}/images/current}
DIR=$(mktemp -d /tmp/thaw-cluster-demo-XXXXXX)
exec 3>&1
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

LINK_RTT=${THAW_CLUSTER_RTT:-1ms}
LINK_RATE=${THAW_CLUSTER_RATE:-1000}
bin/thaw-cluster up --nodes "$NODES" --dir "$DIR" --image "$IMAGE" --quiet --thawd-arg=--memory=256 \
  --store-rtt "$LINK_RTT" --store-rate "$LINK_RATE" --push-on-prepare=false >"$DIR/up.log" 2>&1 &
UP=$!
cleanup() {
  trap - EXIT
  trap '' INT TERM # a second Ctrl-C does not cut the clean-up short
  kill -TERM "$UP" 2>/dev/null || true # thaw-cluster stops HAProxy and the nodes, removes the namespaces
  wait "$UP" 2>/dev/null || true
  rm -rf "$DIR"
  printf '\ncluster removed\n' >&3 # the script's stdout: a trap runs under the interrupted command's redirections
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step "starting $NODES nodes and an object store in network namespaces, and HAProxy (state in $DIR)"
for _ in $(seq 1 600); do
  [ -f "$DIR/cluster.env" ] && break
  kill -0 "$UP" 2>/dev/null || { cat "$DIR/up.log"; exit 1; }
  sleep 0.2
done
[ -f "$DIR/cluster.env" ] || { echo "the cluster did not start in 2 minutes" >&2; cat "$DIR/up.log"; exit 1; }
# shellcheck disable=SC1091
. "$DIR/cluster.env"
TOKEN=$(cat "$THAW_TOKEN_FILE")
echo "balancer: $THAW_URL   nodes: $CLUSTER_NODES"
echo "object store: $STORE_ENDPOINT behind $STORE_LINK; measured: the link adds $STORE_RTT_MS ms to a request, GET $STORE_GET_MBIT Mbit/s"
bin/thaw-cluster status --dir "$DIR"

# node_for asks the balancer which node serves a function: any request
# under /v1/functions/NAME hashes like its invocations, and every answer
# names its node in the Thaw-Node header.
node_for() {
  curl -sS -o /dev/null -D - -H "Authorization: Bearer $TOKEN" "$THAW_URL/v1/functions/$1" |
    awk -F': *' 'tolower($1)=="thaw-node" {sub(/\r$/, "", $2); print $2}'
}

# on NODE CMD...: the thaw CLI against one node, over its Unix socket.
on() {
  local node=$1 var
  shift
  var=$(echo "$node" | tr 'a-z-' 'A-Z_')_SOCKET
  THAW_URL="unix:${!var}" bin/thaw "$@"
}

# prepare_on NODE: the function on NODE, prepared (booted, working set
# recorded, warm snapshot taken); prints the warm snapshot's id.
prepare_on() {
  on "$1" function create "$FN" --dir "functions/$FN" --memory 256 >/dev/null
  on "$1" --json prepare "$FN" --event '{"name":"record"}' | python3 -c 'import json, sys; print(json.load(sys.stdin)["warm_snapshot"]["id"])'
}

# fetched NODE: compressed bytes NODE's chunk cache fetched from the
# registry since it started (its metrics, over its Unix socket).
fetched() {
  local var
  var=$(echo "$1" | tr 'a-z-' 'A-Z_')_SOCKET
  curl -sS --unix-socket "${!var}" http://thawd/metrics | awk '$1=="thaw_registry_fetched_bytes_total" {printf "%.0f", $2}'
}

N=0
# invoke: one invocation through the balancer; prints the node, status and time.
invoke() {
  N=$((N + 1))
  local out
  STATUS=000
  out=$(curl -sS -o "$DIR/body" -D "$DIR/headers" -w '%{http_code} %{time_total}' \
    -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
    -d '{"event":{"name":"cluster"}}' "$THAW_URL/v1/functions/$FN/invoke" || true)
  STATUS=${out%% *}
  local node
  node=$(awk -F': *' 'tolower($1)=="thaw-node" {sub(/\r$/, "", $2); print $2}' "$DIR/headers")
  python3 - "$N" "${node:--}" "$out" "$DIR/body" <<'PY'
import json, sys
n, node, out, body = sys.argv[1], sys.argv[2], sys.argv[3].split(), open(sys.argv[4], "rb").read()
status, secs = (out + ["000", "0"])[:2]
try:
    doc = json.loads(body)
    what = json.dumps(doc.get("result")) + "  (%s, %s)" % (doc.get("mode", "?"), doc.get("strategy", "?"))
    t = doc.get("timing", {})
    r = t.get("restore") or {}
    if t.get("import_ms"):
        what += "  imported from the registry in %.0f ms" % t["import_ms"]
    if r.get("source") == "registry":
        st = doc.get("strategy_stats") or {}
        what += "; memory from the registry: %.1f MiB fetched on demand" % (st.get("source_fetched_bytes", 0) / 2**20)
except ValueError:
    what = body.decode(errors="replace").strip().splitlines()[0] if body else "(no body)"
print("request %-3s node %-8s HTTP %s  %7.1f ms  %s" % (n, node, status, float(secs) * 1000, what))
PY
}

OWNER=$(node_for "$FN")
OTHER=$(for n in $CLUSTER_NODES; do [ "$n" != "$OWNER" ] && echo "$n" && break; done)
step "the balancer routes $FN to $OWNER: preparing it there (boot, record, warm snapshot; TCG: 10-30 s)"
SNAP=$(prepare_on "$OWNER")
step "pushing $SNAP from $OWNER to the object store"
on "$OWNER" --json snapshot push "$SNAP" 2>/dev/null | python3 -c '
import json, sys
p = json.load(sys.stdin)
print("pushed in %.0f ms: %d chunks, %.1f MiB uploaded (%.1f MiB of data stored as %.1f MiB)" % (
    p["push_ms"], p["chunks"], p["uploaded_bytes"] / 2**20, p["data_bytes"] / 2**20, p["stored_bytes"] / 2**20))'
echo "$OTHER holds $(on "$OTHER" --json function list | python3 -c '
import json, sys
d = json.load(sys.stdin)
d = d.get("functions", d.get("items", [])) if isinstance(d, dict) else d
print(len(d or []))') functions: nothing of $FN"

step "invoking $FN through the balancer"
for _ in 1 2 3; do invoke; done

step "killing $OWNER (SIGKILL to thawd and its QEMUs)"
KILLED=$(date +%s%N)
bin/thaw-cluster kill --dir "$DIR" "$OWNER"
for _ in $(seq 1 50); do
  invoke
  [ "$STATUS" = 200 ] && break
  sleep 0.1
done
echo "first successful invocation answered $((($(date +%s%N) - KILLED) / 1000000)) ms after the kill"
echo "$OTHER fetched $(($(fetched "$OTHER") / 1024)) KiB from the registry (function, device state, strategy files, memory pages)"
for _ in 1 2; do invoke; done
sleep 1.5
step "HAProxy's view after its health checks (every 500 ms, down after 2 failures)"
bin/thaw-cluster status --dir "$DIR"

# fired NODE: the schedule's firings on NODE, and whether it leads (metrics).
fired() {
  local var
  var=$(echo "$1" | tr 'a-z-' 'A-Z_')_SOCKET
  curl -sS --unix-socket "${!var}" http://thawd/metrics 2>/dev/null | awk '
    $1 ~ /^thaw_schedule_firings_total\{result="fired",schedule="tick"\}/ {f=$2}
    $1 == "thaw_schedules_leader" {l=$2}
    END {printf "%d %s", f, (l == 1 ? "leader" : "-")}'
}
firings_table() {
  local total=0 n f
  for n in $ALIVE; do
    f=$(fired "$n")
    printf '  %-8s fired %3s  %s\n' "$n" "${f%% *}" "${f#* }"
    total=$((total + ${f%% *}))
  done
  if [ "${EARLIER:-0}" -gt 0 ]; then
    echo "  in all: $((total + EARLIER)) firings in $(($(date +%s) - SCHED_START)) s ($EARLIER by $LEADER before it was killed)"
  else
    echo "  in all: $total firings in $(($(date +%s) - SCHED_START)) s"
  fi
}
if [ -n "${NATS_URL:-}" ]; then
  ALIVE=$(echo "$CLUSTER_NODES" | tr ' ' '\n' | grep -vx "$OWNER" | xargs)
  step "a schedule on the cluster: the nodes share NATS JetStream ($NATS_URL); one node fires each tick"
  THAW_URL=$THAW_URL THAW_TOKEN_FILE=$THAW_TOKEN_FILE THAW_CACERT=$THAW_CACERT \
    bin/thaw schedule create "$FN" --name tick --cron '* * * * * *' --event '{"name":"cron"}'
  SCHED_START=$(date +%s)
  sleep 8
  firings_table
  LEADER=""
  for n in $ALIVE; do
    f=$(fired "$n")
    if [ "${f#* }" = leader ]; then LEADER=$n; fi
  done
  if [ -n "$LEADER" ]; then
    step "killing $LEADER, which fires the schedule (SIGKILL): another node takes its lease (6 s) and fires on"
    f=$(fired "$LEADER")
    EARLIER=${f%% *}
    bin/thaw-cluster kill --dir "$DIR" "$LEADER"
    ALIVE=$(echo "$ALIVE" | tr ' ' '\n' | grep -vx "$LEADER" | xargs)
    sleep 12
    firings_table
    echo "  (each tick is claimed once, by compare-and-set, before it is queued: never twice; the ticks"
    echo "   while no node held the lease are skipped, the schedule's missed policy)"
  fi
fi
