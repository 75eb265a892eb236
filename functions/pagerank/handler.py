"""pagerank (FaaSnap Table 2): PageRank of a graph with igraph.

igraph (1.0 from PyPI, which requirements.txt puts in the function's dependency
layer) builds an undirected graph from the edge list and runs PageRank (PRPACK,
damping 0.85).

Input (Redis): the edge list as little-endian uint32 pairs (source, target),
8 bytes per edge; vertices are 0..max id.
Event:
  {"key": "thaw:pagerank", "redis": {"host": "10.0.2.2", "port": 6379}}
      fetch the edge list from Redis;
  {"vertices": 20000, "m": 5, "seed": 1}
      no "key": generate a deterministic Barabasi-Albert graph inline
      (inputs.make_input; 20,000 vertices and ~100,000 edges by default).
Returns: {"input": "redis"|"inline", "input_bytes", "input_crc32", "vertices",
"edges", "top": [[vertex, rank], ...] (5 highest, ranks rounded to 1e-9),
"rank_sum", "input_ms", "compute_ms"}.
"""
import array
import sys
import time

import igraph

import thaw_redis
from inputs import DEFAULTS, make_input


def handle(event):
    event = event if isinstance(event, dict) else {}
    source, data, input_ms = thaw_redis.fetch_input(event, make_input, DEFAULTS)
    t1 = time.perf_counter()
    if len(data) % 8:
        raise ValueError(f"edge list of {len(data)} bytes is not a sequence of uint32 pairs")
    ids = array.array("I")
    ids.frombytes(data)
    if sys.byteorder == "big":
        ids.byteswap()
    n = max(ids) + 1 if ids else 0
    graph = igraph.Graph(n=n, edges=list(zip(ids[0::2], ids[1::2])), directed=False)
    ranks = graph.pagerank(damping=0.85)
    top = sorted(range(n), key=ranks.__getitem__, reverse=True)[:5]
    t2 = time.perf_counter()
    return thaw_redis.result(source, data, input_ms, t1, t2,
                             vertices=graph.vcount(), edges=graph.ecount(),
                             top=[[v, round(ranks[v], 9)] for v in top], rank_sum=round(sum(ranks), 6))
