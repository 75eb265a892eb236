"""Uses its dependency layer: Chameleon (pure Python) and igraph (a C
extension), a pyaes that shadows the guest image's own, and a module a .pth
file of the layer puts on sys.path."""
import sys

import chameleon
import igraph
import pyaes
import thaw_pth_probe

TEMPLATE = chameleon.PageTemplate("<ul><li tal:repeat='v top'>${v}</li></ul>")


def mount_of(path):
    with open("/proc/mounts") as f:
        for line in f:
            dev, where, fstype, opts = line.split()[:4]
            if where == path:
                return [dev, fstype] + sorted(opts.split(","))
    return []


def handle(event):
    g = igraph.Graph.Ring(event.get("n", 10))
    ranks = g.pagerank()
    top = sorted(range(g.vcount()), key=ranks.__getitem__)[:3]
    return {
        "html": TEMPLATE(top=top),
        "rank_sum": round(sum(ranks), 6),
        "igraph": igraph.__version__,
        "pyaes": [pyaes.VERSION, pyaes.__file__],
        "pth": thaw_pth_probe.WHERE,
        "path": sys.path[:3],
        "mount": mount_of("/deps"),
    }
