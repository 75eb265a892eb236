"""Deterministic input of the json function (standard library only, so the
host can generate the same bytes to store in Redis)."""
import json
import random

DEFAULTS = {"records": 3000, "seed": 1}

_SYL = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "shi", "en", "da", "po", "qui", "ar", "zel"]


def _word(rnd, lo=2, hi=4):
    return "".join(rnd.choice(_SYL) for _ in range(rnd.randint(lo, hi)))


def make_input(records=DEFAULTS["records"], seed=DEFAULTS["seed"]):
    """A JSON array of `records` user-like records (~330 bytes each)."""
    rnd = random.Random(seed)
    docs = []
    for i in range(records):
        name = _word(rnd).capitalize() + " " + _word(rnd).capitalize()
        docs.append({
            "id": i,
            "uuid": "%032x" % rnd.getrandbits(128),
            "name": name,
            "email": name.lower().replace(" ", ".") + "@example.org",
            "active": rnd.random() < 0.7,
            "score": round(rnd.uniform(0, 100), 4),
            "tags": [_word(rnd, 1, 3) for _ in range(rnd.randint(1, 5))],
            "address": {"city": _word(rnd).capitalize(), "zip": "%05d" % rnd.randrange(100000),
                        "geo": [round(rnd.uniform(-90, 90), 6), round(rnd.uniform(-180, 180), 6)]},
            "history": [rnd.randrange(1000) for _ in range(rnd.randint(0, 8))],
            "note": None if rnd.random() < 0.5 else _word(rnd, 5, 12),
        })
    return json.dumps(docs, separators=(",", ":")).encode()
