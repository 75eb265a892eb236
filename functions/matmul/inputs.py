"""Deterministic input of the matmul function (numpy)."""
import io

import numpy as np

DEFAULTS = {"n": 256, "seed": 1}


def make_matrices(n=DEFAULTS["n"], seed=DEFAULTS["seed"]):
    """The two n x n float64 matrices the function multiplies by default."""
    rng = np.random.default_rng(seed)
    a = rng.random((n, n))
    b = rng.random((n, n))
    return a, b


def make_input(n=DEFAULTS["n"], seed=DEFAULTS["seed"]):
    """The same two matrices as one .npy array of shape (2, n, n)."""
    buf = io.BytesIO()
    np.save(buf, np.stack(make_matrices(n, seed)), allow_pickle=False)
    return buf.getvalue()
