#!/usr/bin/env python3
"""Count repeated code in the tree, leaving out Go import blocks.

The `duplicates` command reads the lines of a Go `import (...)` block as code, so
two files that import the same six packages make a pair. This script counts the
pairs three ways:

  all                 the command run on the tree as it is;
  outside imports     the same tree with the lines of every Go import block
                      blanked (line numbers kept), so a pair made only of
                      imports is gone and every other pair is unchanged;
  outside imports and --exclude'd folders
                      the blanked tree without the files under each excluded
                      folder (a pair with a side there is gone).

The command lists at most 200 rows, so counts come from its header line; the
listed rows are also checked against the import blocks of the real files and a
row whose two sides lie inside import blocks is dropped and counted.

Usage: scripts/dups.py [--exclude internal/daemon/ --exclude cmd/thaw/]
                       [--rows] [--most N] [--seconds N]
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

HEADER = re.compile(r"^(\d+) pairs of places|^no duplicates")
ROW = re.compile(r"^D\d+ (\S+):(\d+)-(\d+) ~ (\S+):(\d+)-(\d+)")


def import_lines(text):
    """Return the set of 1-based line numbers inside Go import blocks."""
    inside, lines = False, set()
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not inside and re.match(r"^import\s*\($", s):
            inside = True
        if inside:
            lines.add(n)
            if s == ")":
                inside = False
    return lines


def blank_imports(text):
    """Blank the lines of Go import blocks, keeping the line count."""
    drop = import_lines(text)
    out = [("" if n in drop else line) for n, line in enumerate(text.split("\n"), 1)]
    return "\n".join(out)


def tree_files(repo):
    """Files git tracks plus untracked ones it does not ignore."""
    out = subprocess.run(
        ["git", "-C", repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True, capture_output=True).stdout.decode()
    return sorted({p for p in out.split("\0") if p})


def copy_tree(repo, dest, excluded):
    """Copy the tree to dest with Go import blocks blanked, skipping excluded folders."""
    for rel in tree_files(repo):
        if any(rel.startswith(prefix) for prefix in excluded):
            continue
        src = os.path.join(repo, rel)
        if os.path.islink(src) or not os.path.isfile(src):
            continue
        dst = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if rel.endswith(".go"):
            with open(src, encoding="utf-8", errors="surrogateescape") as f:
                text = f.read()
            with open(dst, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(blank_imports(text))
        else:
            shutil.copyfile(src, dst)


def run_duplicates(repo, most, seconds):
    """Run the command on repo; return (pair count, rows, other lines)."""
    out = subprocess.run(
        ["duplicates", "--repo", repo, "--most", str(most), "--seconds", str(seconds)],
        check=True, capture_output=True, text=True, cwd=repo).stdout
    count, rows, notes = None, [], []
    for line in out.splitlines():
        head = HEADER.match(line)
        if head and count is None:
            count = int(head.group(1)) if head.group(1) else 0
        elif ROW.match(line):
            rows.append(line)
        elif line.startswith(("incomplete:", "left out:")):
            notes.append(line)
    if count is None:
        raise SystemExit("dups: no header line in the output of duplicates:\n" + out)
    return count, rows, notes


def side_in_imports(repo, path, first, last, cache):
    """Whether lines first..last of path all lie inside its Go import blocks."""
    if not path.endswith(".go"):
        return False
    if path not in cache:
        try:
            with open(os.path.join(repo, path), encoding="utf-8", errors="replace") as f:
                cache[path] = import_lines(f.read())
        except OSError:
            cache[path] = set()
    return all(n in cache[path] for n in range(first, last + 1))


def import_only(repo, rows):
    """The rows both of whose sides lie inside Go import blocks."""
    cache, hits = {}, []
    for row in rows:
        m = ROW.match(row)
        a = side_in_imports(repo, m.group(1), int(m.group(2)), int(m.group(3)), cache)
        b = side_in_imports(repo, m.group(4), int(m.group(5)), int(m.group(6)), cache)
        if a and b:
            hits.append(row)
    return hits


def counted(repo, excluded, args):
    """Blank imports in a copy of the tree (minus excluded) and run the command there."""
    with tempfile.TemporaryDirectory(prefix="dups-") as tmp:
        copy_tree(repo, tmp, excluded)
        return run_duplicates(tmp, args.most, args.seconds)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", default=".")
    ap.add_argument("--exclude", action="append", default=[],
                    help="folder (path prefix) to leave out of the third count")
    ap.add_argument("--rows", action="store_true", help="print the rows of the last count")
    ap.add_argument("--most", type=int, default=200)
    ap.add_argument("--seconds", type=int, default=120)
    args = ap.parse_args()
    repo = subprocess.run(["git", "-C", args.repo, "rev-parse", "--show-toplevel"],
                          check=True, capture_output=True, text=True).stdout.strip()

    total, rows, notes = run_duplicates(repo, args.most, args.seconds)
    dropped = import_only(repo, rows)
    print(f"all pairs: {total} ({len(rows)} listed, {len(dropped)} of those inside import blocks)")
    outside, rows, notes = counted(repo, [], args)
    left = import_only(repo, rows)
    print(f"outside import blocks: {outside} ({len(left)} listed rows still inside import blocks)")
    if args.exclude:
        outside, rows, notes = counted(repo, args.exclude, args)
        print(f"outside import blocks and {', '.join(args.exclude)}: {outside}")
    for line in notes:
        print(line)
    if args.rows:
        for row in rows:
            print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
