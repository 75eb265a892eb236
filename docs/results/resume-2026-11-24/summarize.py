"""Medians (p10-p90) per agent build over the rounds: python3 summarize.py [DIR]."""
import collections, glob, json, statistics as st, sys
D = sys.argv[1] if len(sys.argv) > 1 else "."
def q(xs, p):
    xs = sorted(xs); i = (len(xs) - 1) * p; lo = int(i); hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (i - lo)
for v in ("instr", "cut", "final"):
    c = collections.defaultdict(list)
    for f in sorted(glob.glob(f"{D}/r2-{v}-*.jsonl")):
        for line in open(f):
            d = json.loads(line)
            if d["kind"] == "cold":
                r = d["sample"]["restore"]; s = r["agent_steps"]
                c["setup_ms"].append(r["setup_ms"]); c["cont_ms"].append(r["cont_ms"])
                c["resume_ms"].append(r["resume_ms"]); c["host_share"].append(r["resume_ms"] - r["agent_wait_ms"])
                c["before_read"].append(r["agent_wait_ms"] - s["total"] - s["read"])
                for k, x in s.items():
                    c["guest." + k].append(x)
            elif d["kind"] == "warm_restore_steps":
                c["warm.guest.total"].append(d["sample"]["total"])
            else:
                c["warm.pause_resume_call"].append(d["sample"]["resume_call_ms"])
    print(f"{v}: {len(c['resume_ms'])} cold starts")
    for k, xs in c.items():
        print(f"  {k:24s} {st.median(xs):7.2f} ({q(xs, .1):.2f}-{q(xs, .9):.2f})")
