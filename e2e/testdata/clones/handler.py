"""Test function for distinct clones and their clocks (e2e/clones_test.go)."""
import os
import random
import secrets
import ssl
import tempfile
import time
import uuid

token = None  # drawn in on_restore from a generator this function owns

# OpenSSL's generator and tempfile's name sequence, used before the snapshot:
# both keep state in the process that every clone would otherwise share.
ssl.RAND_bytes(8)
next(tempfile._get_candidate_names())

# Read before the snapshot, as anything in the guest may have: the kernel
# makes boot_id once, at its first read, and clones then share it.
with open("/proc/sys/kernel/random/boot_id") as f:
    BOOT_ID_AT_IMPORT = f.read().strip()


def on_restore():
    global token
    own = random.Random()  # seeded from os.urandom, now, in this clone
    token = "%016x" % own.getrandbits(64)


def kernel_log(pattern):
    """Lines of the kernel log containing pattern (/dev/kmsg, non-blocking)."""
    out = []
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                rec = os.read(fd, 8192).decode(errors="replace")
            except BlockingIOError:
                break
            except OSError:  # EPIPE: records overwritten while reading
                continue
            if pattern in rec:
                out.append(rec.split(";", 1)[-1].strip())
    finally:
        os.close(fd)
    return out


def handle(event):
    if (event or {}).get("op") == "vmgenid":
        drv = "/sys/bus/acpi/drivers/vmgenid"
        return {"bound": sorted(d for d in os.listdir(drv) if ":" in d) if os.path.isdir(drv) else [],
                "forks": kernel_log("virtual machine fork")}
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot_id = f.read().strip()
    return {"urandom": os.urandom(8).hex(), "uuid4": str(uuid.uuid4()), "random": random.random(),
            "token_hex": secrets.token_hex(8), "on_restore": token,
            "ssl_rand": ssl.RAND_bytes(8).hex(), "tempname": next(tempfile._get_candidate_names()), "time": time.time(), "boot_id": boot_id,
            "boot_id_at_import": BOOT_ID_AT_IMPORT}
