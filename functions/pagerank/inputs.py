"""Deterministic input of the pagerank function (standard library only)."""
import array
import random
import sys

DEFAULTS = {"vertices": 20000, "m": 5, "seed": 1}


def make_input(vertices=DEFAULTS["vertices"], m=DEFAULTS["m"], seed=DEFAULTS["seed"]):
    """Edge list of a Barabasi-Albert graph (each new vertex links to m distinct
    earlier vertices, chosen in proportion to their degree), as little-endian
    uint32 pairs (source, target): 8 bytes per edge."""
    if vertices <= m or m < 1:
        raise ValueError("need vertices > m >= 1")
    rnd = random.Random(seed)
    edges = array.array("I")
    ends = []  # every edge end so far: choosing from it is preferential attachment
    for v in range(m, vertices):
        chosen = set()
        while len(chosen) < m:
            chosen.add(rnd.choice(ends) if ends else rnd.randrange(v))
        for t in sorted(chosen):
            edges.extend((v, t))
            ends.extend((v, t))
    if sys.byteorder == "big":
        edges.byteswap()
    return edges.tobytes()
