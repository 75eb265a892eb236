"""matmul (FaaSnap Table 2): multiply two n x n matrices with numpy.

Input (Redis): a .npy file (numpy.save, no pickles) holding a float array of
shape (2, n, n): the two matrices.
Event:
  {"key": "thaw:matmul", "redis": {"host": "10.0.2.2", "port": 6379}}
      fetch the matrices from Redis;
  {"n": 256, "seed": 1}
      no "key" (the default): two random n x n matrices generated inside the
      invocation from the seed. thaw's sizes are scaled down from the paper's
      because guests run under TCG here (see docs/benchmarks.md).
Returns: {"n", "trace", "sum" (of the product), "input": "redis"|"inline"}.
"""
import io

import numpy as np

import thaw_redis
from inputs import make_matrices


def handle(event):
    event = event if isinstance(event, dict) else {}
    if thaw_redis.wants_fetch(event):
        source = "redis"
        ab = np.load(io.BytesIO(thaw_redis.fetch(event)), allow_pickle=False)
        if ab.ndim != 3 or ab.shape[0] != 2 or ab.shape[1] != ab.shape[2]:
            raise ValueError(f"expected a (2, n, n) array, got shape {ab.shape}")
        a, b = ab
    else:
        source = "inline"
        a, b = make_matrices(int(event.get("n", 256)), int(event.get("seed", 1)))
    n = a.shape[0]
    c = a @ b
    return {"n": n, "trace": float(np.trace(c)), "sum": float(c.sum()), "input": source}
