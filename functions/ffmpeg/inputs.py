"""Deterministic input of the ffmpeg function: a short Motion-JPEG AVI made
with PIL and the standard library (no ffmpeg needed to make it)."""
import io
import random
import struct

from PIL import Image, ImageDraw

DEFAULTS = {"frames": 30, "width": 320, "height": 240, "fps": 15, "seed": 1}


def _chunk(fourcc, data):
    return fourcc + struct.pack("<I", len(data)) + data + (b"\0" if len(data) % 2 else b"")


def _list(kind, *chunks):
    return _chunk(b"LIST", kind + b"".join(chunks))


def avi_mjpeg(jpegs, width, height, fps):
    """An AVI file (RIFF, one MJPEG video stream, idx1 index) of the JPEG frames."""
    n, biggest = len(jpegs), max(len(j) for j in jpegs)
    avih = struct.pack("<14I", 1_000_000 // fps, biggest * fps, 0, 0x10, n, 0, 1, biggest,
                       width, height, 0, 0, 0, 0)
    strh = struct.pack("<4s4sIHHIIIIIIiIhhhh", b"vids", b"MJPG", 0, 0, 0, 0, 1, fps, 0, n,
                       biggest, -1, 0, 0, 0, width, height)
    strf = struct.pack("<IiiHH4sIiiII", 40, width, height, 1, 24, b"MJPG", width * height * 3, 0, 0, 0, 0)
    frames, index, offset = [], [], 4  # idx1 offsets count from the "movi" fourcc
    for j in jpegs:
        chunk = _chunk(b"00dc", j)
        index.append(struct.pack("<4sIII", b"00dc", 0x10, offset, len(j)))
        frames.append(chunk)
        offset += len(chunk)
    body = b"AVI " + _list(b"hdrl", _chunk(b"avih", avih), _list(b"strl", _chunk(b"strh", strh), _chunk(b"strf", strf))) \
        + _list(b"movi", *frames) + _chunk(b"idx1", b"".join(index))
    return _chunk(b"RIFF", body)


def make_input(frames=DEFAULTS["frames"], width=DEFAULTS["width"], height=DEFAULTS["height"],
               fps=DEFAULTS["fps"], seed=DEFAULTS["seed"]):
    """`frames` frames of coloured shapes moving over a gradient, as an MJPEG AVI."""
    rnd = random.Random(seed)
    shapes = [(rnd.randrange(width), rnd.randrange(height), rnd.randrange(-6, 7), rnd.randrange(-6, 7),
               rnd.randrange(8, max(9, min(width, height) // 3)),
               (rnd.randrange(256), rnd.randrange(256), rnd.randrange(256))) for _ in range(12)]
    background = Image.linear_gradient("L").resize((width, height)).convert("RGB")
    jpegs = []
    for i in range(frames):
        img = background.copy()
        draw = ImageDraw.Draw(img)
        for x, y, dx, dy, r, color in shapes:
            cx, cy = (x + dx * i) % width, (y + dy * i) % height
            draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=color)
        draw.text((4, 4), f"thaw {i:03d}", fill=(255, 255, 255))
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=85)
        jpegs.append(buf.getvalue())
    return avi_mjpeg(jpegs, width, height, fps)
