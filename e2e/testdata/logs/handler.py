"""Test function for function logs: writes through every path a handler
has to stdout and stderr, and a kernel message."""
import os
import subprocess
import sys


def handle(event):
    tag = event.get("tag", "")
    print("print to stdout", tag)
    print("print to stderr", tag, file=sys.stderr)
    os.write(1, ("fd 1 directly %s\n" % tag).encode())
    subprocess.run(["/bin/sh", "-c", "echo subprocess stdout %s; echo subprocess stderr %s >&2" % (tag, tag)], check=True)
    if event.get("kernel"):
        with open("/dev/kmsg", "w") as k:
            k.write("<4>thaw-e2e kernel message %s\n" % tag)
    n = event.get("bytes", 0)
    for i in range(n // 100):
        print("%099d" % i)
    print("last line", tag, flush=True)
    return {"tag": tag}
