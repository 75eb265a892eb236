"""Test function of the cluster tests: reports every execution to a counter
service on the host (so a test can prove an invocation ran at most once,
whichever node ran it), then sleeps as long as the event asks."""
import socket
import time


def handle(event):
    host, port = event["counter"].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall((event["id"] + "\n").encode())
        s.shutdown(socket.SHUT_WR)
        s.recv(16)  # the counter has recorded it
    time.sleep(float(event.get("seconds", 0)))
    return {"id": event["id"]}
