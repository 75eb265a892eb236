"""Boots each bundled function in a real QEMU VM (TCG) and invokes it, with its
input from a Redis server on the host and with the inline fallback.

Run through guest/smoke-functions.sh (it builds the image and installs what the
host needs). Needs Debian's /usr/bin/python3 with python3-numpy and python3-pil:
the inputs are made on the host by each function's inputs.py, with the same
library versions as the guest, so an input stored in Redis is byte-for-byte the
one the function generates inline, and both invocations must give the same
result.

For every function: boot (kernel cmdline from image.json + thaw.function=NAME,
the function disk made with mkfs.ext4 -d), wait for the agent, invoke with the
inline default event twice, then (functions with an inputs.py) with
{"key": ..., "redis": {"port": P}} twice and once with a missing key, check the
results, and print the guest time (duration_ms: inside handle()) of each.
"""
import argparse
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "guest", "lib"))
import thaw_redis  # noqa: E402  (the guest's client, also used on the host)
from smoke_vm import Agent, qemu_argv  # noqa: E402  (guest/, this script's directory)

ALL = ["hello", "read-list", "mmap", "image", "json", "pyaes", "chameleon", "matmul",
       "compression", "pagerank", "ffmpeg", "recognition"]
TIMING_FIELDS = {"input", "input_ms", "compute_ms"}


def log(msg):
    print(msg, flush=True)


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(workdir):
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", workdir, "--logfile", os.path.join(workdir, "redis.log")],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            with thaw_redis.connect("127.0.0.1", port, timeout=2) as r:
                if r.ping():
                    return proc, port
        except thaw_redis.ConnectError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def load_inputs(name):
    path = os.path.join(ROOT, "functions", name, "inputs.py")
    if not os.path.exists(path):
        return None
    spec = importlib.util.spec_from_file_location(f"inputs_{name.replace('-', '_')}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class VM:
    def __init__(self, img, meta, fn_disk, name, workdir, memory):
        self.dir = os.path.join(workdir, f"vm-{name}")
        os.makedirs(self.dir)
        argv = qemu_argv(img, self.dir, f"{meta['cmdline']} thaw.function={name}", f"{memory}M",
                         f"{self.dir}/mem", fn_disk=fn_disk)
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=open(f"{self.dir}/qemu.log", "wb"), stderr=subprocess.STDOUT)

    def console(self):
        try:
            with open(f"{self.dir}/console.log", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        try:
            os.unlink(f"{self.dir}/mem")  # guest RAM file: up to --memory MiB each
        except OSError:
            pass


def comparable(result):
    return {k: v for k, v in result.items() if k not in TIMING_FIELDS} if isinstance(result, dict) else result


def specific_checks(name, r, mode):
    """Function-specific sanity checks of one result (mode: inline or redis)."""
    if name == "hello":
        check(r == {"message": "hello, thaw!"}, "hello answers")
    elif name == "read-list":
        n = r["elements"]
        check(r["sum"] == r["passes"] * (3 * n * (n - 1) // 2 + n), "read-list sum")
    elif name == "mmap":
        check(r["pages"] == r["mib"] * (1 << 20) // 4096, "mmap page count")
    elif name == "pyaes":
        check(r["roundtrip_ok"] is True, "pyaes round trip")
    elif name == "pagerank":
        check(abs(r["rank_sum"] - 1) < 1e-6 and len(r["top"]) == 5, "pagerank ranks sum to 1")
    elif name == "ffmpeg":
        check(r["frames"] == 30 and r["out_bytes"] > 0, "ffmpeg encoded 30 frames")
    elif name == "recognition":
        check(len(r["top"]) == 3 and 0 < r["top"][0][1] <= 1, "recognition top-3")
    elif name == "compression":
        check(0 < r["out_bytes"] < r["input_bytes"], "compression shrinks the input")
    elif name == "chameleon":
        check(r["html_bytes"] > r["input_bytes"], "chameleon rendered html")
    if name not in ("hello", "read-list", "mmap"):
        check(r.get("input") == mode, f"result says input={mode}")


def invoke_checked(agent, name, event, mode, args):
    """args.reps invocations of function name with event (input mode
    "inline" or "redis"), each checked; returns the answers."""
    answers = []
    for _ in range(args.reps):
        r = agent.invoke(name, event, args.invoke_timeout)
        check(r.get("ok"), f"{mode} invoke failed: {json.dumps(r.get('error'))[:2000]}")
        specific_checks(name, r["result"], mode)
        answers.append(r)
    return answers


def run_function(name, args, img, meta, fn_disk, port, stored, workdir):
    row = {"function": name}
    vm = VM(img, meta, fn_disk, name, workdir, args.memory)
    try:
        agent = Agent(f"{vm.dir}/agent.sock")
        agent.wait_pong(args.boot_timeout)
        row["boot_s"] = round(time.monotonic() - vm.t0, 1)
        m = re.search(rf"function {re.escape(name)} imported in (\d+) ms", vm.console())
        row["import_ms"] = int(m.group(1)) if m else None

        inline_event = {"name": "thaw"} if name == "hello" else {}
        inline = invoke_checked(agent, name, inline_event, "inline", args)
        row["inline_ms"] = [round(r["duration_ms"], 1) for r in inline]
        row["inline_result"] = inline[0]["result"]
        check(all(comparable(r["result"]) == comparable(inline[0]["result"]) for r in inline),
              "inline results are the same every time")

        if name in stored:
            key, data = stored[name]
            event = {"key": key, "redis": {"host": "10.0.2.2", "port": port}}
            redis = invoke_checked(agent, name, event, "redis", args)
            res = redis[0]["result"]
            row["redis_ms"] = [round(r["duration_ms"], 1) for r in redis]
            row["redis_fetch_ms"] = res.get("input_ms")
            row["redis_result"] = res
            if "input_crc32" in res:
                check(res["input_crc32"] == zlib.crc32(data) and res["input_bytes"] == len(data),
                      "the guest got the bytes stored in redis")
            elif "in_bytes" in res:
                check(res["in_bytes"] == len(data), "the guest got the bytes stored in redis")
            check(comparable(res) == comparable(inline[0]["result"]),
                  f"redis result equals the inline one:\n  redis  {res}\n  inline {inline[0]['result']}")
            r = agent.invoke(name, {"key": key + ":missing", "redis": {"port": port}}, args.invoke_timeout)
            check(not r["ok"] and r["error"]["type"] == "MissingKey", f"missing key -> MissingKey, got {r}")
        row["ok"] = True
    except Exception as e:  # noqa: BLE001 -- report and go on with the next function
        row["ok"] = False
        row["error"] = f"{type(e).__name__}: {e}"
        tail = "\n".join(vm.console().strip().splitlines()[-15:])
        row["console_tail"] = tail
    finally:
        vm.stop()
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--image", required=True, help="guest image directory (build-image.sh prints it)")
    ap.add_argument("--memory", type=int, default=512, help="guest memory in MiB (default 512)")
    ap.add_argument("--reps", type=int, default=2, help="invocations per input mode (default 2)")
    ap.add_argument("--boot-timeout", type=float, default=180)
    ap.add_argument("--invoke-timeout", type=float, default=300)
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("functions", nargs="*", help=f"default: {' '.join(ALL)}")
    args = ap.parse_args()
    names = args.functions or ALL
    for n in names:
        if not os.path.isfile(os.path.join(ROOT, "functions", n, "handler.py")):
            sys.exit(f"no such function: functions/{n}/handler.py")
    # A function with a requirements.txt needs its dependency layer, which
    # thawd builds: these boots attach none (thaw bench runs those functions).
    skipped = [n for n in names if os.path.exists(os.path.join(ROOT, "functions", n, "requirements.txt"))]
    if skipped:
        log(f"skipped (their requirements.txt needs thawd's dependency layer): {' '.join(skipped)}")
        names = [n for n in names if n not in skipped]
    with open(os.path.join(args.image, "image.json")) as f:
        meta = json.load(f)

    workdir = tempfile.mkdtemp(prefix="thaw-fnsmoke.")
    log(f"image: {args.image}\nwork dir: {workdir}")
    fn_root = os.path.join(workdir, "fn")
    for n in names:
        shutil.copytree(os.path.join(ROOT, "functions", n), os.path.join(fn_root, n),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    fn_disk = os.path.join(workdir, "fn.ext4")
    subprocess.run(["mkfs.ext4", "-q", "-L", "thawfn", "-d", fn_root, fn_disk, "64M"], check=True)

    redis_proc, port = start_redis(workdir)
    rows = []
    try:
        log(f"redis-server on 127.0.0.1:{port} (10.0.2.2:{port} from the guests)")
        stored = {}
        with thaw_redis.connect("127.0.0.1", port) as r:
            for n in names:
                mod = load_inputs(n)
                if mod is None:
                    continue
                t0 = time.monotonic()
                data = mod.make_input()
                key = f"thaw:input:{n}"
                r.set(key, data)
                check(r.get(key) == data, f"redis round trip of {key}")
                stored[n] = (key, data)
                log(f"  SET {key}: {len(data)} bytes (made in {time.monotonic() - t0:.2f} s)")
        for n in names:
            log(f"== {n}")
            row = run_function(n, args, args.image, meta, fn_disk, port, stored, workdir)
            rows.append(row)
            if row["ok"]:
                log(f"  ok: boot {row['boot_s']} s, import {row['import_ms']} ms, inline {row['inline_ms']} ms"
                    + (f", redis {row['redis_ms']} ms (fetch {row['redis_fetch_ms']} ms)" if "redis_ms" in row else ""))
                log(f"  result: {json.dumps(row.get('redis_result', row['inline_result']))}")
            else:
                log(f"  FAILED: {row['error']}\n  console:\n    " + row["console_tail"].replace("\n", "\n    "))
    finally:
        redis_proc.terminate()
        redis_proc.wait()

    log("\n== guest time inside handle() (duration_ms; 1st and 2nd invocation after boot)")
    log(f"{'function':12s} {'ok':3s} {'boot s':>6s} {'import ms':>9s} {'inline ms':>17s} {'redis ms':>17s} {'fetch ms':>8s}")
    for row in rows:
        fmt = lambda v: "/".join(f"{x:.0f}" for x in v) if v else "-"  # noqa: E731
        log(f"{row['function']:12s} {'yes' if row['ok'] else 'NO':3s} {row.get('boot_s', '-'):>6} "
            f"{str(row.get('import_ms', '-')):>9s} {fmt(row.get('inline_ms')):>17s} "
            f"{fmt(row.get('redis_ms')):>17s} {str(row.get('redis_fetch_ms', '-')):>8s}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"image": args.image, "memory_mib": args.memory, "rows": rows}, f, indent=1)
    failed = [r["function"] for r in rows if not r["ok"]]
    if failed or args.keep:
        log(f"work dir kept: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    if failed:
        log(f"FAILED: {' '.join(failed)}")
        sys.exit(1)
    log(f"FUNCTION SMOKE TEST PASSED ({len(rows)} functions)")


if __name__ == "__main__":
    main()
