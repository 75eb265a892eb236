# Always fails: exercises the agent's error path (structured error with traceback).
def handle(event):
    raise ValueError("boom: " + str(event))
