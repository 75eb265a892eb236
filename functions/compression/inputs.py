"""Deterministic input of the compression function (standard library only)."""
import random

DEFAULTS = {"size": 1 << 20, "seed": 1}


def make_input(size=DEFAULTS["size"], seed=DEFAULTS["seed"]):
    """`size` bytes of text-like data (lines of words from a random vocabulary,
    with numbers): compresses about 3x with zlib, like log or text files."""
    rnd = random.Random(seed)
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    vocab = ["".join(rnd.choice(letters[:rnd.randint(8, 26)]) for _ in range(rnd.randint(2, 10)))
             for _ in range(2000)]
    out, n = [], 0
    while n < size:
        words = rnd.choices(vocab, k=rnd.randint(4, 14))
        line = "%08d %s %d\n" % (len(out), " ".join(words), rnd.randrange(100000))
        out.append(line)
        n += len(line)
    return "".join(out).encode()[:size]
