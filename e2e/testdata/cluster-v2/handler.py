"""Second version of the cluster tests' function: other code under the same
name, so a node holding the first version can be seen to replace it."""


def handle(event):
    return {"id": event["id"], "version": 2}
