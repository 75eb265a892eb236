"""mmap (FaaSnap Table 2): allocate an anonymous memory region and write all of it.

The region is a fresh private anonymous mapping, so every page is first
touched during the invocation (guest page faults), then unmapped again.

Input: none from Redis (the function only allocates).
Event: {"mib": 64, "mode": "fill"}
  mib   size of the region in MiB (default 64, scaled down from the paper for TCG)
  mode  "fill": write every byte (1 MiB memcpy at a time, the default);
        "page": write one byte per 4 KiB page (page faults only)
Returns: {"mib": 64, "mode": "fill", "pages": 16384, "checksum": <crc32 of one
byte per page, read back>, "compute_ms": ...}
"""
import mmap
import time
import zlib

PAGE = mmap.PAGESIZE
CHUNK = bytes(range(256)) * 4096  # 1 MiB pattern


def handle(event):
    event = event if isinstance(event, dict) else {}
    mib = int(event.get("mib", 64))
    mode = event.get("mode", "fill")
    if mib <= 0 or mode not in ("fill", "page"):
        raise ValueError('event needs "mib" > 0 and "mode" "fill" or "page"')
    size = mib << 20
    t0 = time.perf_counter()
    region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        if mode == "fill":
            for off in range(0, size, len(CHUNK)):
                region[off:off + len(CHUNK)] = CHUNK
        else:
            for off in range(0, size, PAGE):
                region[off] = (off // PAGE) & 0xFF
        checksum = zlib.crc32(region[::PAGE])
    finally:
        region.close()
    return {"mib": mib, "mode": mode, "pages": size // PAGE, "checksum": checksum,
            "compute_ms": round((time.perf_counter() - t0) * 1000, 3)}
