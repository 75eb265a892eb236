"""Deterministic input of the chameleon function (standard library only)."""
import json
import random

DEFAULTS = {"rows": 300, "cols": 10, "seed": 1}


def make_input(rows=DEFAULTS["rows"], cols=DEFAULTS["cols"], seed=DEFAULTS["seed"]):
    """JSON {"title", "header": [cols names], "rows": [[cells]]}; cells are ints,
    floats or short strings (some with characters that need HTML escaping)."""
    rnd = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "<tag>", "a&b", "\"quoted\"", "zeta", "eta", "theta"]
    table = []
    for r in range(rows):
        row = []
        for c in range(cols):
            kind = (r + c) % 3
            if kind == 0:
                row.append(rnd.randrange(1_000_000))
            elif kind == 1:
                row.append(round(rnd.uniform(-1000, 1000), 3))
            else:
                row.append(rnd.choice(words) + "-" + str(rnd.randrange(100)))
        table.append(row)
    doc = {"title": f"thaw table {rows}x{cols} (seed {seed})",
           "header": [f"col{c}" for c in range(cols)], "rows": table}
    return json.dumps(doc, separators=(",", ":")).encode()
