#!/usr/bin/env bash
# Manual end-to-end check of the guest image and agent under QEMU (TCG):
#   1. accelerator probe mode prints THAW-PROBE-OK and QEMU exits by itself;
#   2. boot with the "hello" function: ping until pong, invoke, error paths,
#      host disconnect/reconnect, a request split across writes;
#   3. snapshot (x-ignore-shared, RAM in a shared file), restore into two new
#      QEMU processes from the same files, reconnect to each new agent socket
#      and invoke again;
#   4. boot with the "fail" function: structured ValueError with traceback.
#
# Usage: guest/smoke-test.sh   (builds the image first if needed; keeps the
# temporary directory on failure for its console logs)
# Env: THAW_SMOKE_KERNEL=vmlinux (default: the uncompressed PVH kernel, fast under
#      TCG) or vmlinuz (the bzImage); the probe is always run with both.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMG="$("$ROOT/guest/build-image.sh")"
T="$(mktemp -d /tmp/thaw-smoke.XXXXXX)"
echo "image: $IMG" >&2
echo "work dir: $T" >&2

mkdir "$T/fn"
cp -r "$ROOT/functions/." "$T/fn/"
mkfs.ext4 -q -d "$T/fn" -L thawfn "$T/fn.ext4" 16M

if python3 - "$IMG" "$T" "$ROOT" <<'EOF'; then rm -rf "$T"; else echo "FAILED; logs in $T" >&2; exit 1; fi
import json
import os
import subprocess
import sys
import time

IMG, T, ROOT = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, f"{ROOT}/guest")
from smoke_vm import QMP, Agent, qemu_argv  # noqa: E402
KERNEL = os.environ.get("THAW_SMOKE_KERNEL", "vmlinux")
META = json.load(open(f"{IMG}/image.json"))
MEM = "256M"
procs = []
timings = {}


def check(cond, what):
    if not cond:
        raise SystemExit(f"CHECK FAILED: {what}")
    print(f"  ok: {what}")


def qemu(vmdir, append, mem_path, share, disks=True, incoming=False, kernel=None):
    os.makedirs(vmdir, exist_ok=True)
    argv = qemu_argv(IMG, vmdir, append, MEM, mem_path, share, kernel or KERNEL,
                     fn_disk=f"{T}/fn.ext4" if disks else None, qmp=True)
    if incoming:
        argv += ["-incoming", "defer"]
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    procs.append(p)
    return p


def private_dirty_kb(pid, path):
    """Private_Dirty of the mapping of `path` in process `pid` (COW copies)."""
    total, inside = 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5:  # mapping header
                inside = fields[-1] == path
            elif inside and fields[0] == "Private_Dirty:":
                total += int(fields[1])
    return total


def agent_log(vmdir):
    with open(f"{vmdir}/console.log", errors="replace") as f:
        return f.read()


try:
    for kernel in ("vmlinuz", "vmlinux"):
        print(f"== probe mode ({kernel})")
        t0 = time.monotonic()
        p = qemu(f"{T}/probe-{kernel}", META["cmdline"] + " thaw.probe=1",
                 f"{T}/probe-{kernel}/mem", "on", disks=False, kernel=kernel)
        p.wait(timeout=120)
        timings[f"probe with {kernel} (QEMU start to exit)"] = time.monotonic() - t0
        check("THAW-PROBE-OK" in agent_log(f"{T}/probe-{kernel}"), "console shows THAW-PROBE-OK")
        check(p.returncode == 0, f"QEMU exited by itself (rc {p.returncode})")

    print(f"== boot hello ({KERNEL})")
    vm1 = f"{T}/vm1"
    t0 = time.monotonic()
    p1 = qemu(vm1, META["cmdline"] + " thaw.function=hello", f"{vm1}/mem", "on")
    ag = Agent(f"{vm1}/agent.sock")
    pong = ag.wait_pong()
    timings["boot to first pong"] = time.monotonic() - t0
    print("  pong:", pong)
    check(pong["function"] == "hello" and pong["agent"] == "thaw-agent/1", "pong fields")

    r = ag.call({"op": "invoke", "function": "hello", "event": {"name": "thaw"}})
    print("  hello:", r)
    check(r["ok"] and r["result"] == {"message": "hello, thaw!"}, "invoke hello")
    r = ag.call({"op": "invoke", "function": "hello", "event": [1, 2]})
    check(r["ok"] and r["result"] == {"message": "hello, world!"}, "non-dict event")
    r = ag.call({"op": "invoke", "function": "fail", "event": 1})
    check(not r["ok"] and r["error"]["type"] == "FunctionNotFound", "wrong function -> FunctionNotFound")
    ag.sock.sendall(b"{not json\n")
    r = ag.recv(30)
    check(r["id"] is None and r["error"]["type"] == "BadRequest", "malformed line -> BadRequest, id null")
    r = ag.call({"op": "frobnicate"})
    check(r["error"]["type"] == "BadRequest", "unknown op -> BadRequest")

    # Split a request across writes, with a pause in the middle.
    ag.sock.sendall(b'{"id":"split","op":"in')
    time.sleep(0.3)
    ag.sock.sendall(b'voke","function":"hello","event":{"name":"split"}}\n')
    r = ag.recv(30)
    check(r["id"] == "split" and r["result"]["message"] == "hello, split!", "request split across writes")

    # Host disconnect and reconnect on the same QEMU, including a dangling partial line.
    ag.sock.sendall(b'{"id":"dangling","op":"pi')
    time.sleep(0.2)
    ag.sock.close()
    time.sleep(0.5)
    ag = Agent(f"{vm1}/agent.sock")
    t1 = time.monotonic()
    pong = ag.wait_pong(30)
    timings["reconnect (same QEMU) to pong"] = time.monotonic() - t1
    check(pong["op"] == "pong", "reconnect to the same QEMU")

    r = ag.call({"op": "invoke", "function": "hello", "event": {"name": "again"}})
    check(r["ok"] and r["result"]["message"] == "hello, again!", "invoke hello again")
    print("  duration_ms inside handle():", r["duration_ms"])

    print("== snapshot (agent connected)")
    q1 = QMP(f"{vm1}/qmp.sock")
    t1 = time.monotonic()
    q1.cmd("stop")
    q1.cmd("migrate-set-capabilities", capabilities=[{"capability": "x-ignore-shared", "state": True}])
    q1.cmd("migrate", uri=f"exec:cat > {T}/state")
    q1.wait_migration()
    timings["snapshot (stop to migration completed)"] = time.monotonic() - t1
    q1.cmd("quit")
    p1.wait(timeout=30)
    ag.sock.close()
    print(f"  state file {os.path.getsize(f'{T}/state')} bytes")

    print("== restore x2 from the same snapshot")
    restored = []
    for i in (1, 2):
        vm = f"{T}/restore{i}"
        t1 = time.monotonic()
        p = qemu(vm, META["cmdline"] + " thaw.function=hello", f"{vm1}/mem", "off", incoming=True)
        q = QMP(f"{vm}/qmp.sock")
        t_qmp = time.monotonic()
        # Nothing may write guest RAM before the incoming state is loaded (e.g.
        # ROM or kernel images copied in at reset): it would clobber the snapshot.
        check(private_dirty_kb(p.pid, f"{vm1}/mem") == 0, f"restore{i}: guest RAM untouched before incoming")
        q.cmd("migrate-set-capabilities", capabilities=[{"capability": "x-ignore-shared", "state": True}])
        q.cmd("migrate-incoming", uri=f"exec:cat {T}/state")
        q.wait_migration()
        q.cmd("cont")
        t_cont = time.monotonic()
        a = Agent(f"{vm}/agent.sock")
        pong = a.wait_pong(60)
        t_pong = time.monotonic()
        timings[f"restore{i}: QEMU start to QMP ready"] = t_qmp - t1
        timings[f"restore{i}: QEMU start to cont"] = t_cont - t1
        timings[f"restore{i}: cont to first pong"] = t_pong - t_cont
        check(pong["op"] == "pong", f"restore{i}: pong on the new agent socket")
        restored.append((p, q, a))
    for i, (_, _, a) in enumerate(restored, 1):
        t1 = time.monotonic()
        r = a.call({"op": "invoke", "function": "hello", "event": {"name": f"restored{i}"}})
        timings[f"restore{i}: invoke round trip"] = time.monotonic() - t1
        check(r["ok"] and r["result"]["message"] == f"hello, restored{i}!", f"restore{i}: invoke hello")
    for p, q, a in restored:
        q.cmd("quit")
        p.wait(timeout=30)

    print("== boot fail")
    vm3 = f"{T}/vm3"
    p3 = qemu(vm3, META["cmdline"] + " thaw.function=fail", f"{vm3}/mem", "on")
    ag = Agent(f"{vm3}/agent.sock")
    ag.wait_pong()
    r = ag.call({"op": "invoke", "function": "fail", "event": {"x": 1}})
    print("  fail:", json.dumps(r)[:400])
    e = r.get("error") or {}
    check(not r["ok"] and e.get("type") == "ValueError" and e.get("message") == "boom: {'x': 1}",
          "handler exception -> structured ValueError")
    check("Traceback" in e.get("traceback", "") and "handler.py" in e["traceback"], "traceback included")
    check(isinstance(r.get("duration_ms"), float), "duration_ms present")
    r = ag.call({"op": "ping"})
    check(r["op"] == "pong", "agent alive after the error")
    QMP(f"{vm3}/qmp.sock").cmd("quit")
    p3.wait(timeout=30)

    print("== guest console (hello VM)")
    print("  " + agent_log(vm1).strip().replace("\n", "\n  "))
    print("== timings")
    for k, v in timings.items():
        print(f"  {k:45s} {v * 1000:9.1f} ms")
    print("SMOKE TEST PASSED")
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
EOF
