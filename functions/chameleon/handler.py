"""chameleon (FaaSnap Table 2): render an HTML table with the Chameleon template engine.

The page template (TAL/ZPT; Chameleon 4.6 from PyPI, which requirements.txt puts in
the function's dependency layer) is parsed and compiled to Python when the handler
is imported, before the snapshot (a warm-up render forces Chameleon's lazy
compilation); the invocation renders it.

Input (Redis): JSON {"title": str, "header": [str], "rows": [[cell, ...], ...]}.
Event:
  {"key": "thaw:chameleon", "redis": {"host": "10.0.2.2", "port": 6379}}
      fetch the table from Redis;
  {"rows": 300, "cols": 10, "seed": 1}
      no "key": generate a deterministic table of that size inline
      (inputs.make_input; 300 x 10 is the default).
Returns: {"input": "redis"|"inline", "input_bytes", "input_crc32", "rows",
"cols", "html_bytes", "html_crc32", "input_ms", "compute_ms"}.
"""
import json
import time
import zlib

from chameleon import PageTemplate

import thaw_redis
from inputs import DEFAULTS, make_input

TEMPLATE = PageTemplate("""\
<!DOCTYPE html>
<html xmlns:tal="http://xml.zope.org/namespaces/tal">
<head><title>${title}</title></head>
<body>
<h1>${title}</h1>
<table class="data">
  <thead><tr><th>#</th><th tal:repeat="h header">${h}</th></tr></thead>
  <tbody>
    <tr tal:repeat="row rows" class="${'odd' if repeat.row.odd else 'even'}">
      <td class="index">${repeat.row.number}</td>
      <td tal:repeat="cell row" class="col-${repeat.cell.index}"
          tal:attributes="data-kind python: type(cell).__name__">${cell}</td>
    </tr>
  </tbody>
</table>
<p>${len(rows)} rows</p>
</body>
</html>
""")
TEMPLATE(title="warm-up", header=["a"], rows=[[1]])  # compile now, before the snapshot


def handle(event):
    event = event if isinstance(event, dict) else {}
    source, data, input_ms = thaw_redis.fetch_input(event, make_input, DEFAULTS)
    t1 = time.perf_counter()
    doc = json.loads(data)
    rows = doc["rows"]
    html = TEMPLATE(title=doc.get("title", ""), header=doc.get("header", []), rows=rows).encode()
    t2 = time.perf_counter()
    return thaw_redis.result(source, data, input_ms, t1, t2,
                             rows=len(rows), cols=max((len(r) for r in rows), default=0),
                             html_bytes=len(html), html_crc32=zlib.crc32(html))
