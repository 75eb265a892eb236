"""A function whose on_restore hook fails (e2e/clones_test.go)."""


def on_restore():
    raise RuntimeError("cannot reconnect")


def handle(event):
    return "unreachable after a failed on_restore"
