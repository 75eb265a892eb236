"""matmul (FaaSnap Table 2): multiply two random n x n matrices with numpy.

Event: {"n": 256, "seed": 1}. thaw's sizes are scaled down from the paper's
because guests run under TCG here (see docs/benchmarks.md)."""
import numpy as np


def handle(event):
    event = event if isinstance(event, dict) else {}
    n = int(event.get("n", 256))
    rng = np.random.default_rng(int(event.get("seed", 1)))
    a = rng.random((n, n))
    b = rng.random((n, n))
    c = a @ b
    return {"n": n, "trace": float(np.trace(c)), "sum": float(c.sum())}
