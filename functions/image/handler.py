"""image (FaaSnap Table 2): rotate a JPEG with PIL and re-encode it.

Input (Redis): the JPEG (any image PIL decodes) bytes.
Event:
  {"key": "thaw:image", "redis": {"host": "10.0.2.2", "port": 6379}, "angle": 90}
      fetch the image from Redis (host defaults to 10.0.2.2, port to 6379);
  {"size": 512, "seed": 1, "angle": 90}
      no "key" (the default): the JPEG is generated deterministically from the
      seed inside the invocation (inputs.make_jpeg; no data is downloaded).
Returns: {"in_bytes", "out_bytes", "sha256" (of the rotated JPEG, 16 hex
digits), "input": "redis"|"inline"}.
"""
import hashlib
import io

from PIL import Image

import thaw_redis
from inputs import DEFAULTS, make_jpeg


def handle(event):
    event = event if isinstance(event, dict) else {}
    source, data, _ = thaw_redis.fetch_input(event, make_jpeg, DEFAULTS)
    img = Image.open(io.BytesIO(data))
    out = io.BytesIO()
    img.rotate(int(event.get("angle", 90)), expand=True).save(out, "JPEG", quality=90)
    return {"in_bytes": len(data), "out_bytes": out.tell(),
            "sha256": hashlib.sha256(out.getvalue()).hexdigest()[:16], "input": source}
