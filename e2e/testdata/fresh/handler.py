"""Test function for ready clones (e2e/ready_test.go): each request reports
what earlier requests would have left (a marker file, a global) and draws
random values; then it leaves both behind."""
import os
import ssl
import uuid

MARKER = "/tmp/thaw-fresh-marker"
served = 0  # requests this process answered before


def handle(event):
    global served
    out = {"marker": os.path.exists(MARKER), "served": served, "urandom": os.urandom(8).hex(),
           "uuid4": str(uuid.uuid4()), "ssl_rand": ssl.RAND_bytes(8).hex()}
    served += 1
    with open(MARKER, "w") as f:
        f.write("request %d was here\n" % served)
    return out
