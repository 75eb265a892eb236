"""Medians (p10-p90) per build over interleaved rounds of TestResumeBreakdown:
python3 summarize.py [DIR]. DIR holds <build>-<round>/resume.jsonl."""
import collections, glob, json, os, re, statistics as st, sys
D = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
def q(xs, p):
    xs = sorted(xs); i = (len(xs) - 1) * p; lo = int(i); hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (i - lo)
builds = collections.defaultdict(lambda: collections.defaultdict(list))
rounds = collections.defaultdict(list)
for f in sorted(glob.glob(f"{D}/*-*/resume.jsonl")):
    build = re.sub(r"-\d+$", "", os.path.basename(os.path.dirname(f)))
    c = builds[build]
    rm = []
    for line in open(f):
        d = json.loads(line)
        if d["kind"] == "cold":
            r = d["sample"]["restore"]; s = r.get("agent_steps", {})
            c["setup_ms"].append(r["setup_ms"]); c["cont_ms"].append(r["cont_ms"])
            c["resume_ms"].append(r["resume_ms"]); rm.append(r["resume_ms"])
            c["host_share"].append(r["resume_ms"] - r["agent_wait_ms"])
            if s:
                c["before_read"].append(r["agent_wait_ms"] - s["total"] - s["read"])
            for k, x in s.items():
                c["guest." + k].append(x)
            c["invoke_ms"].append(d["sample"]["invoke_ms"])
            # The first invocation runs the JSON paths a leaner restore no longer
            # runs first, so resume and invoke are compared together too.
            c["resume_plus_invoke"].append(r["resume_ms"] + d["sample"]["invoke_ms"])
        elif d["kind"] == "warm_restore_steps":
            c["warm.guest.total"].append(d["sample"]["total"])
        else:
            c["warm.pause_resume_call"].append(d["sample"]["resume_call_ms"])
    rounds[build].append(st.median(rm))
for build, c in builds.items():
    print(f"{build}: {len(c['resume_ms'])} cold starts, {len(rounds[build])} rounds; "
          f"round medians of resume_ms: {' '.join(f'{x:.1f}' for x in rounds[build])}")
    for k, xs in sorted(c.items()):
        print(f"  {k:24s} {st.median(xs):7.2f} ({q(xs, .1):.2f}-{q(xs, .9):.2f})")
