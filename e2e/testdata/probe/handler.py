"""Test function for thaw's end-to-end tests: one VM serves every case."""
import os
import socket
import time

calls = 0


def handle(event):
    global calls
    calls += 1
    op = (event or {}).get("op", "hello")
    if op == "hello":
        return {"message": "hello, %s!" % event.get("name", "world")}
    if op == "raise":
        raise ValueError("boom: %s" % event.get("why", "asked to"))
    if op == "sleep":
        time.sleep(float(event["seconds"]))
        return {"slept": event["seconds"]}
    if op == "clock":
        # The guest's view of time: its kernel command line, its TSC
        # frequency as /proc/cpuinfo says, and a sleep timed by its clock.
        mhz = [float(l.split(":")[1]) for l in open("/proc/cpuinfo") if l.startswith("cpu MHz")]
        t0 = time.monotonic()
        time.sleep(float(event.get("seconds", 1)))
        return {"cmdline": open("/proc/cmdline").read().strip(), "mhz": mhz[0], "slept_s": time.monotonic() - t0}
    if op == "count":
        return {"calls": calls, "pid": os.getpid()}
    if op == "write":
        # Touch guest memory so restored clones diverge from the snapshot.
        blob = bytearray(os.urandom(1 << 20)) * int(event.get("mib", 8))
        return {"bytes": len(blob)}
    if op == "tcp":
        # Reach a host service through the guest network (QEMU user
        # networking: the host is 10.0.2.2).
        with socket.create_connection(("10.0.2.2", int(event["port"])), timeout=10) as s:
            s.sendall(b"ping\n")
            return {"reply": s.makefile().readline().strip()}
    if op == "try":
        # Try a TCP connection anywhere; report what happened, never raise.
        t0 = time.monotonic()
        try:
            with socket.create_connection((event["host"], int(event["port"])), timeout=float(event.get("timeout", 3))) as s:
                s.sendall(event.get("send", "ping\n").encode())
                s.shutdown(socket.SHUT_WR)
                reply = b""
                while True:
                    b = s.recv(65536)
                    if not b:
                        break
                    reply += b
                return {"connected": True, "reply": reply.decode(errors="replace"), "ms": (time.monotonic() - t0) * 1000}
        except OSError as e:
            return {"connected": False, "error": "%s: %s" % (type(e).__name__, e), "ms": (time.monotonic() - t0) * 1000}
    raise KeyError(op)
