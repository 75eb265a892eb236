"""Pooled medians (p10-p90) of `thaw bench restore` runs, per build:
python3 summarize.py [DIR]. DIR holds <build>-<round>/restore/restore.jsonl
(base: the daemon and agent before the plain-line restore; new: after)."""
import collections, glob, json, os, re, statistics as st, sys
D = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
def q(xs, p):
    xs = sorted(xs); i = (len(xs) - 1) * p; lo = int(i); hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (i - lo)
cells = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sorted(glob.glob(f"{D}/*-*/restore/restore.jsonl")):
    build = re.sub(r"-\d+$", "", os.path.basename(os.path.dirname(os.path.dirname(f))))
    for line in open(f):
        s = json.loads(line)
        c = cells[(s["strategy"], s["pool"], s["concurrency"], build)]
        for k in ("setup_ms", "resume_ms", "invoke_ms", "total_ms", "qemu_cpu_ms", "daemon_cpu_ms"):
            c[k].append(s[k])
        c["cpu_total_ms"].append(s["qemu_cpu_ms"] + s["daemon_cpu_ms"])
        c["resume_plus_invoke_ms"].append(s["resume_ms"] + s["invoke_ms"])
        if s["pool"] == "hit":
            c["standby_cpu_ms"].append(s["standby_cpu_ms"])
cols = ("setup_ms", "resume_ms", "invoke_ms", "resume_plus_invoke_ms", "total_ms", "qemu_cpu_ms", "daemon_cpu_ms", "cpu_total_ms", "standby_cpu_ms")
print("| strategy | pool | N | build | n | " + " | ".join(c.removesuffix("_ms") for c in cols) + " |")
print("|---|---|---:|---|---:|" + "---:|" * len(cols))
for key in sorted(cells, key=lambda k: (k[1] == "hit", k[0] != "vanilla", k[2], k[3])):
    c = cells[key]
    vals = [f"{st.median(c[k]):.1f} ({q(c[k], .1):.0f}–{q(c[k], .9):.0f})" if c[k] else "–" for k in cols]
    print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {len(c['total_ms'])} | " + " | ".join(vals) + " |")
