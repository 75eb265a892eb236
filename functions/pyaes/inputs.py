"""Deterministic input of the pyaes function (standard library only)."""
import random
import string

DEFAULTS = {"size": 8192, "seed": 1}


def make_input(size=DEFAULTS["size"], seed=DEFAULTS["seed"]):
    """`size` bytes of random printable ASCII (the message to encrypt)."""
    rnd = random.Random(seed)
    alphabet = (string.ascii_letters + string.digits + " .,").encode()
    return bytes(rnd.choice(alphabet) for _ in range(size))
