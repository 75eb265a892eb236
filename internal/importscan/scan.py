"""Module-level calls a snapshot freezes, in the Python files at the top of a
function's directory (argv[1]): a JSON list of {file, line, call, kind}. The
code is parsed with ast, never run. Function and lambda bodies are skipped
(they run later); decorators, default values and class bodies run at import
and are read."""
import ast
import json
import os
import sys

MAX_FILES, MAX_BYTES = 200, 1 << 20

# Calls by their full dotted name (through the module's imports), or by a
# prefix ending in ".", and what they do at import.
RULES = {
    "random.": "random", "numpy.random.": "random", "secrets.": "random", "os.urandom": "random",
    "os.getrandom": "random", "uuid.uuid1": "random", "uuid.uuid4": "random",
    "time.time": "time", "time.time_ns": "time", "time.localtime": "time", "time.gmtime": "time",
    "time.ctime": "time", "time.asctime": "time", "time.strftime": "time",
    "datetime.datetime.now": "time", "datetime.datetime.utcnow": "time", "datetime.datetime.today": "time",
    "datetime.date.today": "time",
    "socket.socket": "network", "socket.create_connection": "network", "socket.getaddrinfo": "network",
    "http.client.HTTPConnection": "network", "http.client.HTTPSConnection": "network",
    "urllib.request.urlopen": "network", "requests.": "network", "httpx.": "network",
    "redis.Redis": "network", "redis.StrictRedis": "network", "redis.from_url": "network",
    "psycopg.connect": "network", "psycopg2.connect": "network", "pymysql.connect": "network",
    "pymongo.MongoClient": "network", "boto3.client": "network", "boto3.resource": "network",
    "smtplib.SMTP": "network", "ftplib.FTP": "network",
}


def kind_of(name):
    for rule, kind in RULES.items():
        if name == rule or (rule.endswith(".") and name.startswith(rule)):
            return kind
    return None


def dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


class ImportTime(ast.NodeVisitor):
    """Visits what runs when the module is imported."""

    def __init__(self, path):
        self.path, self.aliases, self.found = path, {}, []

    def visit_Import(self, node):
        for a in node.names:
            if a.asname:
                self.aliases[a.asname] = a.name
            else:  # "import os.path" binds "os"
                top = a.name.split(".")[0]
                self.aliases[top] = top

    def visit_ImportFrom(self, node):
        if node.module and not node.level:
            for a in node.names:
                self.aliases[a.asname or a.name] = node.module + "." + a.name

    def visit_FunctionDef(self, node):  # the body runs later; these run now
        for n in node.decorator_list + node.args.defaults + [d for d in node.args.kw_defaults if d]:
            self.visit(n)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        for n in node.args.defaults + [d for d in node.args.kw_defaults if d]:
            self.visit(n)

    def visit_Call(self, node):
        name = dotted(node.func)
        if name:
            head, _, rest = name.partition(".")
            full = self.aliases.get(head, head) + ("." + rest if rest else "")
            kind = kind_of(full) if head in self.aliases else None
            if kind:
                self.found.append({"file": self.path, "line": node.lineno, "call": full, "kind": kind})
        self.generic_visit(node)


def main(root):
    found = []
    names = sorted(n for n in os.listdir(root) if n.endswith(".py"))[:MAX_FILES]
    for name in names:
        path = os.path.join(root, name)
        if not os.path.isfile(path) or os.path.getsize(path) > MAX_BYTES:
            continue
        try:
            with open(path, "rb") as f:
                tree = ast.parse(f.read(), filename=name)
        except (SyntaxError, ValueError, OSError):
            continue
        v = ImportTime(name)
        v.visit(tree)
        found += v.found
    json.dump(found, sys.stdout)


main(sys.argv[1])
