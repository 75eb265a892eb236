#!/usr/bin/env bash
# make cluster-demo: a thaw cluster on this machine. Two thawd nodes, each
# in a network namespace of its own, behind HAProxy (127.0.0.1); the
# function is prepared on the node HAProxy routes it to, invoked through
# the balancer, then that node is killed (thawd and its QEMUs, SIGKILL)
# and the function is invoked again: the other node serves it. Each
# request prints the node that ran it and how long it took. Everything is
# removed on exit, also on Ctrl-C. docs/cluster.md explains the design.
set -euo pipefail
cd "$(dirname "$0")/.."

FN=${THAW_CLUSTER_FN:-hello}
NODES=${THAW_CLUSTER_NODES:-2}
IMAGE=${THAW_IMAGE:-${THAW_CACHE:-$HOME/.cache/thaw}/images/current}
DIR=$(mktemp -d /tmp/thaw-cluster-demo-XXXXXX)
exec 3>&1
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

bin/thaw-cluster up --nodes "$NODES" --dir "$DIR" --image "$IMAGE" --quiet --thawd-arg=--memory=256 >"$DIR/up.log" 2>&1 &
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

step "starting $NODES nodes in network namespaces and HAProxy (state in $DIR)"
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
# recorded, warm snapshot taken).
prepare_on() {
  on "$1" function create "$FN" --dir "functions/$FN" --memory 256 >/dev/null
  on "$1" prepare "$FN" --event '{"name":"record"}' >/dev/null
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
except ValueError:
    what = body.decode(errors="replace").strip().splitlines()[0] if body else "(no body)"
print("request %-3s node %-8s HTTP %s  %7.1f ms  %s" % (n, node, status, float(secs) * 1000, what))
PY
}

OWNER=$(node_for "$FN")
OTHER=$(for n in $CLUSTER_NODES; do [ "$n" != "$OWNER" ] && echo "$n" && break; done)
step "the balancer routes $FN to $OWNER: preparing it there (boot, record, warm snapshot; TCG: 10-30 s)"
prepare_on "$OWNER"

step "invoking $FN through the balancer"
for _ in 1 2 3; do invoke; done

# ---- REGISTRY: the one place that changes when the snapshot registry lands.
# Until then the other node prepares the function itself, ahead of the
# failure. With the registry this becomes a push from $OWNER
# (`thaw snapshot push`) and nothing on $OTHER: it restores the snapshot
# from the registry on its first invocation.
step "until the snapshot registry lands: $OTHER prepares $FN too"
prepare_on "$OTHER"
# ---- end REGISTRY

step "killing $OWNER (SIGKILL to thawd and its QEMUs)"
KILLED=$(date +%s%N)
bin/thaw-cluster kill --dir "$DIR" "$OWNER"
for _ in $(seq 1 50); do
  invoke
  [ "$STATUS" = 200 ] && break
  sleep 0.1
done
echo "first successful invocation answered $((($(date +%s%N) - KILLED) / 1000000)) ms after the kill"
for _ in 1 2; do invoke; done
sleep 1.5
step "HAProxy's view after its health checks (every 500 ms, down after 2 failures)"
bin/thaw-cluster status --dir "$DIR"
