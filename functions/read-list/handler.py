"""read-list (FaaSnap Table 2): read every element of a large Python list.

The list is built when the handler is imported, i.e. at VM boot, before the
snapshot is taken: a cold invocation then reads memory that comes back from
the snapshot. It holds N = 2,000,000 distinct int objects (~80 MB of guest
memory: 16 MB of pointers and 64 MB of ints), scaled down from the paper for
TCG guests; give the function at least 256 MiB of memory.

Input: none from Redis (the data is the list itself).
Event: {"passes": 1}  (optional: how many times to walk the whole list)
Returns: {"elements": N, "passes": 1, "sum": <sum of the elements>, "compute_ms": ...}
"""
import time

N = 2_000_000
DATA = [i * 3 + 1 for i in range(N)]


def handle(event):
    event = event if isinstance(event, dict) else {}
    passes = max(1, int(event.get("passes", 1)))
    t0 = time.perf_counter()
    total = 0
    for _ in range(passes):
        for x in DATA:  # one bytecode-level read of every element, in order
            total += x
    return {"elements": len(DATA), "passes": passes, "sum": total,
            "compute_ms": round((time.perf_counter() - t0) * 1000, 3)}
