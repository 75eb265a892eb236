# Sleeps for event["seconds"]: exercises the daemon's invocation timeouts.
import time


def handle(event):
    seconds = float(event["seconds"])
    time.sleep(seconds)
    return {"slept": seconds}
