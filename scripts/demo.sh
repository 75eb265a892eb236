#!/usr/bin/env bash
# thaw's main job, end to end, on real VMs: start the daemon, create the
# hello function, boot its VM, invoke it warm, snapshot it, then cold-start
# it from the snapshot a few times and show where the time goes.
set -euo pipefail
cd "$(dirname "$0")/.."

DATA=${THAW_DEMO_DIR:-$PWD/build/demo}
SOCK=$DATA/thawd.sock # the CLI talks to the daemon over its Unix socket
# A TCP listener too, to show the token (a free port unless THAW_DEMO_ADDR says).
ADDR=${THAW_DEMO_ADDR:-127.0.0.1:$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}
# The functions listener: endpoints' callers, apart from the API.
FN_ADDR=${THAW_DEMO_FUNCTIONS_ADDR:-127.0.0.1:$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}
MEM=${THAW_DEMO_MEMORY:-512}
export THAW_URL="unix:$SOCK"
thaw() { bin/thaw "$@"; }
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

rm -rf "$DATA"
mkdir -p "$DATA"
chmod go-w "$DATA" # the socket's directory: thawd refuses one others may write to
STORE=${THAW_DEMO_STORE:-/dev/shm/thaw-demo-store} # premap's memory store (shared memory), removed at the end
rm -rf "$STORE"
# --standby-memory: ready clones (a fresh clone, restored ahead, for each request).
bin/thawd --data-dir "$DATA/data" --store-dir "$STORE" --listen "$SOCK" --listen "$ADDR" \
  --functions-listen "$FN_ADDR" --standby-memory 2048 >"$DATA/thawd.log" 2>&1 &
THAWD=$!
cleanup() {
  kill "$THAWD" 2>/dev/null || true
  wait "$THAWD" 2>/dev/null || true
  rm -rf "$STORE"
  echo
  echo "daemon stopped (log: $DATA/thawd.log)"
}
trap cleanup EXIT

step "starting thawd on unix:$SOCK and http://$ADDR (first start probes KVM: up to 20 s)"
for _ in $(seq 1 300); do
  thaw info >/dev/null 2>&1 && break
  kill -0 "$THAWD" 2>/dev/null || { cat "$DATA/thawd.log"; exit 1; }
  sleep 0.2
done
thaw info

step "who may drive thawd: the socket (0660: root and --socket-group), or TCP with the token"
ls -l "$SOCK" "$DATA/data/token"
echo "-- TCP without the token:"
env -u THAW_TOKEN -u THAW_TOKEN_FILE THAW_URL="http://$ADDR" bin/thaw info || echo "(exit code $?)"
echo "-- TCP with THAW_TOKEN_FILE:"
THAW_URL="http://$ADDR" THAW_TOKEN_FILE="$DATA/data/token" bin/thaw info | sed -n 1p
echo "-- a web page's cross-site text/plain POST (even with the token):"
curl -sS -X POST "http://$ADDR/v1/functions" -H 'Origin: http://evil.example' -H 'Content-Type: text/plain' \
  -H "Authorization: Bearer $(cat "$DATA/data/token")" --data '{"name":"pwned","directory":"/etc"}' -w ' (HTTP %{http_code})\n'

# A function of the demo's own, in two versions: it greets with its
# environment's GREETING and proves it holds the secret API_KEY (delivered
# at restore, never in a snapshot) by a digest of it.
greet() { # greet DIR MARK
  mkdir -p "$1"
  cat >"$1/handler.py" <<PY
import hashlib
import os

MARK = "$2"
key_seen_at_restore = None


def on_restore():
    global key_seen_at_restore
    key_seen_at_restore = "API_KEY" in os.environ


def handle(event):
    key = os.environ.get("API_KEY", "")
    return {"version": MARK, "greeting": os.environ["GREETING"] + ", " + (event or {}).get("name", "world"),
            "api_key_sha256": hashlib.sha256(key.encode()).hexdigest()[:12], "key_at_restore": key_seen_at_restore}
PY
}
greet "$DATA/greet-v1" v1
greet "$DATA/greet-v2" v2
KEY1="demo-key-$(head -c 6 /dev/urandom | od -An -tx1 | tr -d ' \n')"

step "a secret: sealed on the daemon, shown only as a version and a digest"
printf %s "$KEY1" | thaw secret set api-key
thaw secret list

step "deploy: one command from code to a published version (build, boot, snapshot, publish; live -> 1)"
thaw deploy greet --dir "$DATA/greet-v1" --memory 256 --env GREETING=Hello --secret API_KEY=api-key
thaw invoke greet --event '{"name":"deploy"}'
echo "(the key's digest: $(printf %s "$KEY1" | sha256sum | cut -c1-12))"

step "deploy version 2: live moves to it; version 1 stays invocable as greet:1"
thaw deploy greet --dir "$DATA/greet-v2"
thaw invoke greet
thaw invoke greet:1
thaw function versions greet

step "rollback: live back to version 1 in about a millisecond, nothing boots"
thaw rollback greet
thaw invoke greet

step "a new secret value reaches the next cold start, with no new snapshot"
KEY2="demo-key-$(head -c 6 /dev/urandom | od -An -tx1 | tr -d ' \n')"
printf %s "$KEY2" | thaw secret set api-key
thaw invoke greet
echo "(the new key's digest: $(printf %s "$KEY2" | sha256sum | cut -c1-12))"
echo "-- the key's plaintext in any file under the data directory (snapshots, logs, catalog):"
if grep -rlaF -e "$KEY1" -e "$KEY2" "$DATA/data" "$STORE" 2>/dev/null; then echo "FOUND (a bug)"; exit 1; else echo "none"; fi

step "delete greet in one step: its VMs (kept idle, standby), snapshots, versions and aliases"
thaw function delete greet --cascade --yes

step "create the function 'hello' ($MEM MiB guest)"
thaw function create hello --dir functions/hello --memory "$MEM"

step "boot a VM for it (a real QEMU VM; ~10-20 s under TCG)"
VM=$(thaw vm boot hello -q)   # -q: only the id on stdout (progress goes to stderr)
thaw vm get "$VM"

step "warm invocation on the running VM"
thaw invoke hello --vm "$VM" --event '{"name":"warm world"}'

step "snapshot the VM (device state + sparse memory file)"
SNAP=$(thaw snapshot create "$VM" -q)
thaw snapshot get "$SNAP"
thaw vm delete "$VM"

step "cold invocation: restore a fresh VM from $SNAP and invoke it (no ready clone yet, and it says so); thawd keeps the VM idle, and restores a ready clone in the background"
thaw invoke hello --event '{"name":"cold world"}'
ready_clones() { thaw vm list --state ready -q; }
for i in 1 2; do
  for _ in $(seq 1 300); do [ -n "$(ready_clones)" ] && break; sleep 0.2; done
  step "next invocation $i: a ready clone serves it (mode ready): restored, resumed and warmed ahead, never used, renewed at dispatch"
  thaw invoke hello --event "{\"name\":\"fresh world $i\"}"
done
step "with no ready clone waiting, the kept VM serves it (mode pooled): as fast as warm, but it served a request before"
for id in $(ready_clones); do thaw vm delete "$id"; done
thaw invoke hello --event '{"name":"pooled world"}'

step "prepare: record the working set, take the warm snapshot, build REAP, FaaSnap and SnapBPF artifacts"
thaw prepare hello --event '{"name":"record"}'
WARM=$(thaw --json snapshot list --function hello | python3 -c '
import json, sys
d = json.load(sys.stdin)
snaps = d if isinstance(d, list) else next(v for v in d.values() if isinstance(v, list))
print(sorted(snaps, key=lambda s: s["created_at"])[-1]["id"])')

step "place the warm snapshot in the memory store (premap maps it from there)"
thaw snapshot store "$WARM"

step "cold start under every restore strategy, snapshot files evicted from the page cache first"
printf '%-9s %10s %10s %10s %8s\n' strategy setup_ms resume_ms total_ms major_faults
for s in vanilla cached reap faasnap premap snapbpf; do
  thaw --json invoke hello --strategy "$s" --evict-cache --event '{"name":"strategies"}' | python3 -c '
import json, sys
d = json.load(sys.stdin)
r = d["timing"]["restore"]
print("%-9s %10.1f %10.1f %10.1f %8d" % (d["strategy"], r["setup_ms"], r["resume_ms"], d["timing"]["total_ms"], d["process"]["major_faults"]))'
done

step "the VMM pool: after a restore, thawd starts a VMM for that snapshot and strategy ahead of the next one"
pool_invoke() {
  thaw --json invoke hello --strategy faasnap --event '{"name":"pool"}' | python3 -c '
import json, sys
d = json.load(sys.stdin)
r = d["timing"]["restore"]
print("%-8s %10.1f %10.1f %10.1f" % (r["vmm"], r["setup_ms"], r["resume_ms"], d["timing"]["total_ms"]))'
}
printf '%-8s %10s %10s %10s\n' vmm setup_ms resume_ms total_ms
pool_invoke
until thaw --json vm list | python3 -c '
import json, sys
d = json.load(sys.stdin)
vms = d if isinstance(d, list) else next(v for v in d.values() if isinstance(v, list))
sys.exit(0 if any(v["state"] == "standby" and v.get("strategy") == "faasnap" for v in vms) else 1)'; do sleep 0.2; done
pool_invoke
thaw vm list

step "a handler error comes back structured (exit code 3)"
thaw function create fail --dir functions/fail --memory 256 >/dev/null
FVM=$(thaw vm boot fail -q)
thaw invoke fail --vm "$FVM" --event '{"why":"demo"}' || echo "(exit code $?)"
thaw snapshot create "$FVM" >/dev/null # for its asynchronous invocations below
thaw vm delete "$FVM"

step "an HTTP endpoint: callers reach 'hello' on the functions listener (http://$FN_ADDR) with its own key"
KEY=$(thaw --json endpoint create hello --auth key | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
thaw endpoint get hello
echo "-- curl with the endpoint's key (the request becomes an event; the result the response):"
curl -sS -H "Authorization: Bearer $KEY" "http://$FN_ADDR/hello/greet" -w '  (HTTP %{http_code})\n'
echo "-- without it, and with the API token (refused there):"
curl -sS "http://$FN_ADDR/hello" -w '  (HTTP %{http_code})\n'
curl -sS -H "Authorization: Bearer $(cat "$DATA/data/token")" "http://$FN_ADDR/hello" -w '  (HTTP %{http_code})\n'

step "an asynchronous invocation: queued durably (202 at once), run with retries, its outcome kept"
ID=$(thaw invoke hello --async --event '{"name":"async world"}')
echo "queued $ID"
for _ in $(seq 1 100); do
  thaw --json async status "$ID" | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["state"] in ("succeeded","failed") else 1)' && break
  sleep 0.1
done
thaw async status "$ID"
echo "-- a function that always raises, retried twice, then a dead letter:"
thaw async set fail --retries 2 --backoff 200ms >/dev/null
FID=$(thaw invoke fail --async --event '{"why":"async demo"}')
for _ in $(seq 1 100); do
  thaw --json async status "$FID" | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["state"] == "failed" else 1)' && break
  sleep 0.2
done
thaw dlq list

step "history"
thaw invocations --limit 10

step "metrics (Prometheus text format at /metrics): cold starts by strategy, the VMM pool, VMs by state"
curl -s --unix-socket "$SOCK" http://thawd/metrics |
  grep -E '^thaw_(restore_setup_seconds_count|strategy_fallbacks_total|vmm_pool_total|vms)\b' || true
