"""json (FaaSnap Table 2): deserialize a JSON document and serialize it again.

Input (Redis): the JSON text (UTF-8 bytes), e.g. an array of records.
Event:
  {"key": "thaw:json", "redis": {"host": "10.0.2.2", "port": 6379}}
      fetch the document from Redis (host defaults to 10.0.2.2, port to 6379);
  {"records": 3000, "seed": 1}
      no "key": generate a deterministic array of that many records inline
      (inputs.make_input; 3000 records are ~1 MB, the default).
Returns: {"input": "redis"|"inline", "input_bytes", "input_crc32", "items"
(top-level length), "out_bytes", "out_crc32", "input_ms", "compute_ms"}.
"""
import json
import time
import zlib

import thaw_redis
from inputs import DEFAULTS, make_input


def handle(event):
    event = event if isinstance(event, dict) else {}
    source, data, input_ms = thaw_redis.fetch_input(event, make_input, DEFAULTS)
    t1 = time.perf_counter()
    doc = json.loads(data)
    out = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    t2 = time.perf_counter()
    return thaw_redis.result(source, data, input_ms, t1, t2,
                             items=len(doc) if isinstance(doc, (list, dict)) else 1,
                             out_bytes=len(out), out_crc32=zlib.crc32(out))
