#!/usr/bin/env python3
"""The library's shape, as issue 18 and 34 measure it: files over 600 lines, functions
over 100 lines (lambdas counted inside their function), and the lines of the classes
named on the command line. Uses Universal Ctags (Debian's universal-ctags).

    python3 scripts/code_shape.py [Class ...]"""
import pathlib, subprocess, sys

LIBRARY = ["runtime", "ir", "tracer", "passes", "codegen", "api", "python/src"]
root = pathlib.Path(__file__).resolve().parent.parent
files = sorted(p for d in LIBRARY for p in (root / d).rglob("*") if p.suffix in (".cpp", ".hpp"))
out = subprocess.run(["ctags", "--fields=+neK", "--c++-kinds=fcsm", "-o", "-"] + [str(p) for p in files],
                     capture_output=True, text=True, check=True).stdout
long_files = [(len(p.read_text().splitlines()), p.relative_to(root)) for p in files]
print("files over 600 lines:")
for n, p in sorted(long_files, reverse=True):
    if n > 600:
        print(f"  {n:5} {p}")
funcs, classes = [], {}
for line in out.splitlines():
    name, path, *rest = line.split("\t")
    fields = dict(f.split(":", 1) for f in rest if ":" in f and not f.startswith("/^"))
    kind = next((f for f in rest if f in ("function", "class", "struct", "member")), "")
    if "line" not in fields or "end" not in fields:
        continue
    n = int(fields["end"]) - int(fields["line"]) + 1
    rel = pathlib.Path(path).relative_to(root)
    if kind == "function" and not name.startswith("__anon"):
        funcs.append((n, f"{rel}:{fields['line']} {name}"))
    if kind in ("class", "struct"):
        classes[name] = max(classes.get(name, 0), n)
print("functions over 100 lines:")
for n, f in sorted(funcs, reverse=True):
    if n > 100:
        print(f"  {n:5} {f}")
for c in sys.argv[1:]:
    print(f"class {c}: {classes.get(c, 'not found')} lines")
