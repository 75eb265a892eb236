"""compression (FaaSnap Table 2): compress a file.

Input (Redis): the file's bytes.
Event:
  {"key": "thaw:compression", "redis": {"host": "10.0.2.2", "port": 6379},
   "algo": "zlib", "level": 6}
      fetch the file from Redis and compress it; algo "zlib" (default, level
      0-9, default 6) or "lzma" (level = preset 0-9, default 1);
  {"size": 1048576, "seed": 1, "algo": ..., "level": ...}
      no "key": compress `size` bytes of deterministic text-like data
      generated inline (inputs.make_input; 1 MiB is the default).
Returns: {"input": "redis"|"inline", "input_bytes", "input_crc32", "algo",
"level", "out_bytes", "ratio", "out_crc32", "input_ms", "compute_ms"}.
"""
import lzma
import time
import zlib

import thaw_redis
from inputs import DEFAULTS, make_input


def handle(event):
    event = event if isinstance(event, dict) else {}
    algo = event.get("algo", "zlib")
    if algo not in ("zlib", "lzma"):
        raise ValueError(f'unknown algo {algo!r}: use "zlib" or "lzma"')
    level = int(event.get("level", 6 if algo == "zlib" else 1))
    source, data, input_ms = thaw_redis.fetch_input(event, make_input, DEFAULTS)
    t1 = time.perf_counter()
    if algo == "zlib":
        out = zlib.compress(data, level)
    else:
        out = lzma.compress(data, format=lzma.FORMAT_XZ, preset=level)
    t2 = time.perf_counter()
    return thaw_redis.result(source, data, input_ms, t1, t2,
                             algo=algo, level=level, out_bytes=len(out),
                             ratio=round(len(data) / max(1, len(out)), 4), out_crc32=zlib.crc32(out))
