"""image (FaaSnap Table 2): rotate a JPEG with PIL and re-encode it.

Event: {"size": 512, "seed": 1, "angle": 90}. The JPEG is generated
deterministically from the seed (no data is downloaded); issue 4 moves the
inputs to Redis."""
import hashlib
import io
import random

from PIL import Image, ImageDraw


def make_jpeg(size, seed):
    rnd = random.Random(seed)
    img = Image.new("RGB", (size, size), (rnd.randrange(256), rnd.randrange(256), rnd.randrange(256)))
    draw = ImageDraw.Draw(img)
    for _ in range(200):
        x0, y0 = rnd.randrange(size), rnd.randrange(size)
        x1, y1 = x0 + rnd.randrange(size // 4 + 1), y0 + rnd.randrange(size // 4 + 1)
        draw.rectangle([x0, y0, x1, y1], fill=(rnd.randrange(256), rnd.randrange(256), rnd.randrange(256)))
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90)
    return buf.getvalue()


def handle(event):
    event = event if isinstance(event, dict) else {}
    size = int(event.get("size", 512))
    data = make_jpeg(size, int(event.get("seed", 1)))
    img = Image.open(io.BytesIO(data))
    out = io.BytesIO()
    img.rotate(int(event.get("angle", 90)), expand=True).save(out, "JPEG", quality=90)
    return {"in_bytes": len(data), "out_bytes": out.tell(),
            "sha256": hashlib.sha256(out.getvalue()).hexdigest()[:16]}
