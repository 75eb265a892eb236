# Module-level state survives between calls in one VM, but every VM restored from
# the same snapshot starts from the snapshot's value: tests that VMs are independent.
import os

count = 0


def handle(event):
    global count
    count += 1
    return {"count": count, "pid": os.getpid()}
