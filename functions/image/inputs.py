"""Deterministic input of the image function: a JPEG made with PIL."""
import io
import random

from PIL import Image, ImageDraw

DEFAULTS = {"size": 512, "seed": 1}


def make_jpeg(size=DEFAULTS["size"], seed=DEFAULTS["seed"]):
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


make_input = make_jpeg
