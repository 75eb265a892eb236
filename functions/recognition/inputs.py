"""Deterministic input of the recognition function: a JPEG made with PIL."""
import io
import random

from PIL import Image, ImageDraw

DEFAULTS = {"size": 224, "seed": 1}


def make_input(size=DEFAULTS["size"], seed=DEFAULTS["seed"]):
    """A size x size JPEG of random shapes on a coloured background."""
    rnd = random.Random(seed)
    img = Image.new("RGB", (size, size), tuple(rnd.randrange(256) for _ in range(3)))
    draw = ImageDraw.Draw(img)
    for _ in range(40):
        x0, y0 = rnd.randrange(size), rnd.randrange(size)
        r = rnd.randrange(4, size // 4 + 5)
        color = tuple(rnd.randrange(256) for _ in range(3))
        if rnd.random() < 0.5:
            draw.ellipse([x0 - r, y0 - r, x0 + r, y0 + r], fill=color)
        else:
            draw.rectangle([x0 - r, y0 - r // 2, x0 + r, y0 + r // 2], fill=color)
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90)
    return buf.getvalue()
