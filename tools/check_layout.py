"""Fail when the package stops being a house a reader can walk.

Checks, over `mamba3_lite/` and `nbs/`:
1. sizes: a module (`_modidx.py` aside) has at most 400 lines; a notebook code cell at most 60 lines, or 90 when the
   cell holds one `@triton.jit` kernel;
2. direction: a module imports only modules whose notebooks come before its own in course order (file-name order;
   `index.ipynb`, which owns `__init__.py`, comes last). Imports inside functions count too. Not seen: modules named
   by string for `importlib` — the SSD registry (02a) and the package's lazy public names (index) do that on purpose;
3. privacy: no module imports a `_private` name from another module of the package.
Run: `python tools/check_layout.py` (exit 1 on any breach).
"""
import ast, json, re, sys
from pathlib import Path

MODULE_LINES, CELL_LINES, KERNEL_CELL_LINES = 400, 60, 90
ROOT = Path(__file__).resolve().parents[1]
LIB, NBS = ROOT / "mamba3_lite", ROOT / "nbs"


def module_breaches() -> list[str]:
    out = []
    for p in sorted(LIB.rglob("*.py")):
        if p.name == "_modidx.py" or "__pycache__" in p.parts: continue
        n = len(p.read_text(encoding="utf-8").splitlines())
        if n > MODULE_LINES: out.append(f"{p.relative_to(ROOT)}: {n} lines > {MODULE_LINES}")
    return out


def cell_breaches() -> list[str]:
    out = []
    for nb in sorted(NBS.glob("*.ipynb")):
        for i, c in enumerate(json.loads(nb.read_text(encoding="utf-8"))["cells"]):
            if c["cell_type"] != "code": continue
            src = "".join(c["source"])
            n, limit = len(src.splitlines()), KERNEL_CELL_LINES if src.count("@triton.jit") == 1 else CELL_LINES
            if n > limit: out.append(f"{nb.relative_to(ROOT)} cell {i} ({src.splitlines()[0][:40]!r}): {n} lines > {limit}")
    return out


def owners() -> dict[str, int]:
    "module name (mamba3_lite.x.y) -> position of its notebook in course order."
    order = sorted(NBS.glob("*.ipynb"), key=lambda p: (p.name == "index.ipynb", p.name))
    out = {}
    for pos, nb in enumerate(order):
        for c in json.loads(nb.read_text(encoding="utf-8"))["cells"]:
            m = re.match(r"#\|\s*default_exp\s+(\S+)", "".join(c["source"]))
            if m and c["cell_type"] == "code":
                out["mamba3_lite." + m.group(1).removesuffix(".__init__").removesuffix("__init__").rstrip(".")] = pos
    out["mamba3_lite"] = out.pop("mamba3_lite.", len(order))
    return out


def module_name(p: Path) -> str:
    parts = list(p.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__": parts.pop()
    return ".".join(parts)


def imports(p: Path, name: str):
    "(imported module, imported names) for every import of the package inside module `name`."
    pkg = name if p.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = pkg.rsplit(".", node.level - 1)[0] if node.level > 1 else pkg
            mod = (base + ("." + node.module if node.module else "")) if node.level else node.module
            if mod and mod.split(".")[0] == "mamba3_lite": yield mod, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "mamba3_lite": yield a.name, []


def import_breaches() -> list[str]:
    pos, out = owners(), []
    for p in sorted(LIB.rglob("*.py")):
        if p.name == "_modidx.py" or "__pycache__" in p.parts: continue
        name = module_name(p)
        if p.name == "__init__.py" and not p.read_text(encoding="utf-8").strip(): continue   # nbdev's empty package marker
        if name not in pos: out.append(f"{name}: no notebook owns it (hand-written or stale?)"); continue
        for mod, names in imports(p, name):
            # `from P import n` imports the module P.n when there is one, else the name n of module P
            targets = [f"{mod}.{n}" for n in names if f"{mod}.{n}" in pos] or ([mod] if mod in pos else [])
            if not targets: out.append(f"{name} imports {mod}, which no notebook owns")
            for target in targets:
                if target != name and pos[target] > pos[name] and name != "mamba3_lite":
                    out.append(f"{name} imports {target}, a later chapter")
            for n in names:
                if n.startswith("_") and not n.startswith("__"): out.append(f"{name} imports the private name {mod}.{n}")
    return out


if __name__ == "__main__":
    bad = module_breaches() + cell_breaches() + import_breaches()
    for line in bad: print(f"layout: {line}")
    print(f"check_layout: {'FAIL' if bad else 'ok'} ({len(bad)} breach(es))")
    sys.exit(1 if bad else 0)
