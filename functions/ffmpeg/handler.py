"""ffmpeg (FaaSnap Table 2): apply a grayscale filter to a short video.

Runs the ffmpeg binary (/usr/local/bin/ffmpeg: a static ffmpeg 7.0.2 in the
image) as a subprocess: the input video is written to /tmp (tmpfs), decoded,
filtered to grayscale (format=gray) and re-encoded as MPEG-4 part 2 in AVI,
single-threaded and bit-exact, so the output is deterministic. The handler
runs `ffmpeg -version` when imported, so a missing binary fails the import and
the binary's pages are in the guest page cache before the snapshot.

Input (Redis): a video file in any container/codec ffmpeg reads (the host
helper stores an MJPEG AVI, inputs.make_input).
Event:
  {"key": "thaw:ffmpeg", "redis": {"host": "10.0.2.2", "port": 6379}}
      fetch the video from Redis;
  {"frames": 30, "width": 320, "height": 240, "fps": 15, "seed": 1}
      no "key": generate a deterministic MJPEG AVI inline (2 s of 320x240 at
      15 fps by default).
Returns: {"input": "redis"|"inline", "input_bytes", "input_crc32", "frames",
"out_bytes", "out_crc32", "input_ms", "compute_ms"}.
"""
import os
import subprocess
import tempfile
import time
import zlib

import thaw_redis
from inputs import DEFAULTS, make_input

FFMPEG = "/usr/local/bin/ffmpeg" if os.path.exists("/usr/local/bin/ffmpeg") else "ffmpeg"
VERSION = subprocess.run([FFMPEG, "-hide_banner", "-version"], check=True, capture_output=True,
                         text=True, timeout=60).stdout.split("\n", 1)[0]


def grayscale(video):
    """(output AVI bytes, frames encoded)"""
    with tempfile.TemporaryDirectory(prefix="thaw-ffmpeg-") as tmp:
        src, dst = os.path.join(tmp, "in"), os.path.join(tmp, "out.avi")
        with open(src, "wb") as f:
            f.write(video)
        r = subprocess.run(
            [FFMPEG, "-nostdin", "-hide_banner", "-loglevel", "error", "-threads", "1",
             "-i", src, "-vf", "format=gray", "-c:v", "mpeg4", "-q:v", "5", "-threads", "1",
             "-an", "-fflags", "+bitexact", "-flags:v", "+bitexact", "-f", "avi",
             "-progress", "pipe:1", "-y", dst],
            capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(f"ffmpeg exited with {r.returncode}: {r.stderr.strip()[-2000:]}")
        frames = [int(line[6:]) for line in r.stdout.splitlines() if line.startswith("frame=")]
        with open(dst, "rb") as f:
            return f.read(), (frames[-1] if frames else None)


def handle(event):
    event = event if isinstance(event, dict) else {}
    source, data, input_ms = thaw_redis.fetch_input(event, make_input, DEFAULTS)
    t1 = time.perf_counter()
    out, frames = grayscale(data)
    t2 = time.perf_counter()
    return thaw_redis.result(source, data, input_ms, t1, t2,
                             frames=frames, out_bytes=len(out), out_crc32=zlib.crc32(out))
