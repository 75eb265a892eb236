"""Runs the agent's restore handling again inside a clone that has already
been renewed (TestResumeBreakdown): the same Python code on code paths QEMU
has already translated, for comparison with the restore's first run."""
import json
import os
import time

import __main__ as agent  # the guest agent runs as __main__ in this process


def handle(event):
    a = agent.Agent(agent.Function("resumeprobe"), None)  # no module: no hook
    steps = []
    for _ in range(int(event.get("reps", 3))):
        line = b"restore 1 %d %s" % (time.clock_gettime_ns(time.CLOCK_REALTIME), os.urandom(64).hex().encode())
        steps.append(json.loads(a.restore_line(line))["steps"])
    return steps
