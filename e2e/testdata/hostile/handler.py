"""Test function that misbehaves the way hostile guest code would: it floods
the console and eats memory (e2e confinement tests)."""
import os


def handle(event):
    op = (event or {}).get("op")
    if op == "console":
        # Straight to the serial port, past the kernel's console log level.
        chunk = (b"x" * 1023) + b"\n"
        n = int(event["kib"])
        with open("/dev/ttyS0", "wb", buffering=0) as tty:
            for _ in range(n):
                tty.write(chunk)
            tty.write(b"LAST-LINE-OF-THE-FLOOD\n")
        return {"kib": n}
    if op == "eat":
        blobs = [bytearray(os.urandom(1 << 20)) for _ in range(int(event["mib"]))]
        return {"mib": len(blobs)}
    return {"ok": True}
