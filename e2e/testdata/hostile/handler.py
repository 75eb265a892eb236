"""Test function that misbehaves the way hostile guest code would: it floods
the console, eats memory and ends its own VM (e2e confinement and VM end
reason tests)."""
import os


def handle(event):
    event = event or {}
    if "loglevel" in event:
        # What the guest kernel prints on the console (the image boots quiet).
        with open("/proc/sys/kernel/printk", "w") as f:
            f.write(str(int(event["loglevel"])))
    op = event.get("op")
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
    if op == "eat-child":
        # A child process eats: the guest kernel's OOM killer kills it (not
        # the agent, PID 1, which it never picks) and the VM lives on.
        pid = os.fork()
        if pid == 0:
            blobs = []
            while True:
                blobs.append(bytearray(os.urandom(1 << 20)))
        _, status = os.waitpid(pid, 0)
        return {"signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0}
    if op == "sleep":
        import time
        time.sleep(float(event["s"]))
        return {"slept": event["s"]}
    if op == "exit":
        # The agent (PID 1) exits: the guest kernel panics.
        os._exit(int(event.get("code", 3)))
    if op == "fatal":
        # The agent's own way out, as when it cannot go on.
        import __main__
        __main__.power_off(str(event.get("reason", "hostile function asked")))
    return {"ok": True}
