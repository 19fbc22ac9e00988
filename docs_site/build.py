"""Build the course site: the committed notebooks, with their saved outputs (never executed), into static HTML.

    python docs_site/build.py [--out _docs] [--work _proc/site]     # build (offline)
    python docs_site/build.py --digest                               # print the hash of everything a build reads

Steps: stage each notebook of `nbs/` (nbdev's `#|` directives applied: `hide` cells dropped, `echo: false` /
`output: false` honoured, `export` cells tagged), build the landing page from `nbs/index.ipynb` plus the README's
site commands and measured-speed section, write the API reference from the package's source (docstrings read with
`ast`, nothing imported), vendor MathJax from `docs_site/node_modules`, and run Sphinx (myst-nb, execution off, furo).
"""
import argparse, ast, fnmatch, hashlib, inspect, json, re, shutil, subprocess, sys, time
from pathlib import Path

SITE = Path(__file__).resolve().parent
ROOT = SITE.parent
NBS, LIB, README = ROOT / "nbs", ROOT / "mamba3_lite", ROOT / "README.md"
MATHJAX = SITE / "node_modules" / "mathjax" / "es5"
MATHJAX_PARTS = ["tex-chtml.js", "input/tex/extensions", "output/chtml/fonts/woff-v2"]
PARTS = {"00": "Foundations", "01": "The scan", "02": "The scan", "03": "The model", "04": "The model",
         "05": "Triton kernels", "06": "Data", "07": "Training", "08": "Training", "09": "The paper's Mamba-3",
         "10": "Experiments"}
SITE_FILES = ["build.py", "conf.py", "site_ext.py", "package-lock.json", "_static/site.css", "_static/favicon.svg"]
HIDE, NO_INPUT, NO_OUTPUT = {"hide", "include"}, {"echo", "hide_input"}, {"output", "hide_output"}
EXPORT = {"export", "exports", "exporti"}


def fail(msg: str):
    sys.exit(f"docs_site/build.py: {msg}")


def chapters() -> list[Path]:
    "The chapter notebooks in course order (file-name order); index.ipynb is the landing page, not a chapter."
    return sorted(p for p in NBS.glob("*.ipynb") if p.name != "index.ipynb")


def digest() -> str:
    "sha256 over every file a build reads, so a test can tell whether `_docs/` is a build of this tree."
    h = hashlib.sha256()
    files = sorted(NBS.glob("*.ipynb")) + sorted(LIB.rglob("*.py")) + [README] + [SITE / f for f in SITE_FILES]
    for p in files:
        if p.exists() and "__pycache__" not in p.parts:
            h.update(str(p.relative_to(ROOT)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


# ---- notebooks -----------------------------------------------------------------------------------------------
def split_directives(src: str) -> tuple[dict, str]:
    "nbdev/Quarto `#|` lines at the top of a cell -> ({name: value}, the rest of the source)."
    lines, dirs = src.splitlines(keepends=True), {}
    while lines and (m := re.match(r"\s*#\|\s*(.*?)\s*$", lines[0])):
        lines.pop(0)
        text = m.group(1)
        if q := re.match(r"([\w-]+):\s*(.*)$", text): dirs[q.group(1).replace("-", "_")] = q.group(2).strip().lower()
        elif text: dirs[text.split()[0].replace("-", "_")] = " ".join(text.split()[1:])
    return dirs, "".join(lines).strip("\n")


def is_false(v: str) -> bool: return v in ("false", "no", "0")


def stage_cell(cell: dict):
    "One cell as the site shows it, or None when it is hidden. Code cells get myst-nb tags for their directives."
    src = "".join(cell.get("source", ""))
    out = {k: v for k, v in cell.items() if k not in ("source", "attachments")}
    out["metadata"] = {}
    if cell["cell_type"] != "code":
        out["source"] = src
        return out
    dirs, code = split_directives(src)
    tags = []
    for k, v in dirs.items():
        if k in HIDE and (k == "hide" or is_false(v)): return None
        if k in NO_INPUT and (k == "hide_input" or is_false(v)): tags.append("remove-input")
        if k in NO_OUTPUT and (k == "hide_output" or is_false(v)): tags.append("remove-output")
        if k in EXPORT: tags.append("export")
        if k == "code_fold" and not is_false(v): tags.append("hide-input")   # Quarto's folded code: a toggle
    if not code.strip() and not cell.get("outputs"): return None          # e.g. the `#| default_exp` cell
    out["source"], out["metadata"] = code, ({"tags": tags} if tags else {})
    return out


def default_exp(nb: dict) -> str | None:
    for c in nb["cells"]:
        if c["cell_type"] == "code":
            dirs, _ = split_directives("".join(c["source"]))
            if "default_exp" in dirs: return dirs["default_exp"]
    return None


def module_file(exp: str) -> str:
    "nbdev's default_exp ('ssd.chunk', 'data.__main__', '__init__', 'ssd') -> the file it writes."
    parts = [p for p in exp.split(".") if p and p != "__init__"]
    path = LIB.joinpath(*parts) if parts else LIB
    return str(((path / "__init__.py") if path.is_dir() or not parts else path.with_suffix(".py")).relative_to(ROOT))


def title_of(nb: dict, fallback: str) -> str:
    for c in nb["cells"]:
        if c["cell_type"] == "markdown" and (m := re.match(r"#\s+(.+)", "".join(c["source"]).strip())):
            return m.group(1).strip()
    return fallback


def md(src: str, cid: str) -> dict: return {"cell_type": "markdown", "id": cid, "metadata": {}, "source": src}


def stage_notebook(path: Path, targets: dict) -> tuple[dict, dict]:
    "A chapter, staged: directives applied, a source line under the title, a label before each public name's cell."
    nb = json.loads(path.read_text(encoding="utf-8"))
    exp = default_exp(nb)
    info = {"notebook": f"nbs/{path.name}", "title": title_of(nb, path.stem),
            "module": ("mamba3_lite." + exp.removesuffix("__init__")).rstrip(".") if exp else None,
            "file": module_file(exp) if exp else None}
    cells, noted = [], False
    for c in nb["cells"]:
        for name in targets.get((path.name, c.get("id")), []): cells.append(md(f"(def-{name})=\n", f"site-def-{name}"))
        staged = stage_cell(c)
        if staged is None: continue
        cells.append(staged)
        if not noted and c["cell_type"] == "markdown":             # under the title and its one-line summary
            noted = True
            what = (f'exports <code>{info["module"]}</code> (<code>{info["file"]}</code>); cells marked '
                    '<span class="export-word">exported</span> are that module, the rest are its checks and figures'
                    if exp else "exports nothing")
            cells.append(md(f'<p class="chapter-source">Notebook <code>{info["notebook"]}</code> · {what}.</p>\n', "site-source"))
    meta = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python", "pygments_lexer": "ipython3"}}
    return {"cells": cells, "metadata": meta, "nbformat": 4, "nbformat_minor": 5}, info


# ---- API reference, from the package's source (nothing is imported) ------------------------------------------
CELL_MARK = re.compile(r"# %% (\S+\.ipynb) #(\w+)")


def public_names() -> dict[str, str]:
    "name -> defining module, from `__all__` and the `_PUBLIC` map of mamba3_lite/__init__.py (index.ipynb)."
    vals = {n.targets[0].id: n.value for n in ast.parse((LIB / "__init__.py").read_text(encoding="utf-8")).body
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)}
    if "__all__" not in vals or "_PUBLIC" not in vals: fail("mamba3_lite/__init__.py has no __all__ or _PUBLIC")
    names, where = ast.literal_eval(vals["__all__"]), ast.literal_eval(vals["_PUBLIC"])
    if missing := [n for n in names if n not in where]: fail(f"__all__ names without a module in _PUBLIC: {missing}")
    return {n: where[n] for n in names}


def module_source(mod: str) -> Path:
    p = ROOT.joinpath(*mod.split("."))
    return p / "__init__.py" if p.is_dir() else p.with_suffix(".py")


def is_patch(node) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "patch" for d in getattr(node, "decorator_list", []))


def definitions(path: Path):
    "Top-level defs of a module (inside `if`/`try` too) -> (node, (notebook, cell id)); @patch methods by class."
    text = path.read_text(encoding="utf-8")
    marks = [(i + 1, Path(m.group(1)).name, m.group(2)) for i, l in enumerate(text.splitlines()) if (m := CELL_MARK.match(l))]
    defs, patched = {}, {}
    def visit(body):
        for node in body:
            if isinstance(node, (ast.If, ast.Try)):
                visit(node.body); visit(node.orelse)
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                cell = next(((nb, cid) for line, nb, cid in reversed(marks) if line < start), (None, None))
                if is_patch(node) and node.args.args and isinstance(node.args.args[0].annotation, ast.Name):
                    patched.setdefault(node.args.args[0].annotation.id, []).append(node)
                else: defs.setdefault(node.name, (node, cell))
    visit(ast.parse(text).body)
    return defs, patched, text.splitlines()


def wrap(head: str, parts: list[str], tail: str, width: int = 100) -> str:
    "`head(p1, p2, ...)tail`, broken after commas into lines of at most `width` characters."
    lines, cur = [], head + "("
    for i, p in enumerate(parts):
        piece = p + (", " if i < len(parts) - 1 else "")
        if len(cur) + len(piece.rstrip()) > width and cur.strip(): lines.append(cur.rstrip()); cur = "    "
        cur += piece
    return "\n".join(lines + [cur + ")" + tail])


def signature(fn: ast.FunctionDef, name: str | None = None, drop_self: bool = False) -> str:
    a = fn.args
    pos = a.posonlyargs + a.args
    defaults = [None] * (len(pos) - len(a.defaults)) + a.defaults
    parts = [ast.unparse(p) + (f"={ast.unparse(d)}" if d is not None and not p.annotation else
                               f" = {ast.unparse(d)}" if d is not None else "") for p, d in zip(pos, defaults)]
    if a.posonlyargs: parts.insert(len(a.posonlyargs), "/")
    if a.vararg: parts.append("*" + ast.unparse(a.vararg))
    elif a.kwonlyargs: parts.append("*")
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        parts.append(ast.unparse(p) + ("" if d is None else (f" = {ast.unparse(d)}" if p.annotation else f"={ast.unparse(d)}")))
    if a.kwarg: parts.append("**" + ast.unparse(a.kwarg))
    if drop_self and parts and parts[0].split(":")[0] in ("self", "cls"): parts = parts[1:]
    ret = f" -> {ast.unparse(fn.returns)}" if fn.returns else ""
    return wrap(name or f"def {fn.name}", parts, ret)


def class_signature(cls: ast.ClassDef, lines: list[str]) -> str:
    decos = [ast.unparse(d) for d in cls.decorator_list]
    bases = ", ".join(ast.unparse(b) for b in cls.bases)
    head = "".join(f"@{d}\n" for d in decos) + f"class {cls.name}" + (f"({bases})" if bases else "") + ":"
    if any(d.split("(")[0].endswith("dataclass") for d in decos):        # the fields, as written (comments too)
        fields = [ln for n in cls.body if isinstance(n, ast.AnnAssign) for ln in lines[n.lineno - 1:n.end_lineno]]
        return head + "\n" + "\n".join(fields)
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    return head + ("\n" + signature(init, f"    {cls.name}", drop_self=True).replace("\n", "\n    ") if init else "")


def methods(cls: ast.ClassDef, patched: list) -> list:
    body = [n for n in cls.body if isinstance(n, ast.FunctionDef)]
    return [n for n in body + patched if not n.name.startswith("_") or n.name == "__call__"]


def api_page(infos: dict) -> tuple[str, dict]:
    "The API reference (MyST markdown) and {(notebook, cell id): [names]} for the labels it links to."
    out = ["# API reference", "",
           "The public names of `mamba3_lite` (its `__all__`), each imported on first use from the module of the "
           "chapter that derives it. Signatures and docstrings are read from the package's source; each entry links "
           "to the cell of the chapter that defines it.", ""]
    targets, modules = {}, {}
    for name, mod in public_names().items():
        path = module_source(mod)
        if not path.exists(): fail(f"{name}: module {mod} has no file {path.relative_to(ROOT)}")
        defs, patched, lines = modules.setdefault(mod, definitions(path))
        if name not in defs: fail(f"{name}: not defined at the top of {path.relative_to(ROOT)}")
        node, (nb, cid) = defs[name]
        if nb is None or not (NBS / nb).exists(): fail(f"{name}: no '# %% nbs/...ipynb #id' cell marker in {path.name}")
        targets.setdefault((nb, cid), []).append(name)
        sig = class_signature(node, lines) if isinstance(node, ast.ClassDef) else signature(node)
        doc = ast.get_docstring(node) or ""
        info = infos.get(nb, {"title": nb})
        out += [f"## `{name}`", "", "```python", sig, "```", "", doc, "",
                f"*Defined in* {{ref}}`{info['title']} <def-{name}>` · module `{mod}` · `nbs/{nb}`", ""]
        if isinstance(node, ast.ClassDef):
            for m in methods(node, patched.get(name, [])):
                out += ["```python", signature(m, f"{name}.{m.name}", drop_self=True), "```", "",
                        ast.get_docstring(m) or "", ""]
    return "\n".join(out), targets


# ---- the landing page ------------------------------------------------------------------------------------------
def readme_block(marker: str) -> str | None:
    "The text between `<!-- marker -->` and `<!-- /marker -->` in README.md, or None."
    m = re.search(rf"<!-- {marker} -->\n(.*?)<!-- /{marker} -->", README.read_text(encoding="utf-8"), re.S)
    return m.group(1).strip() if m else None


def readme_section(heading: str) -> str:
    "A `## heading...` section of README.md, up to the next `## `."
    m = re.search(rf"^## {re.escape(heading)}.*?(?=^## |\Z)", README.read_text(encoding="utf-8"), re.S | re.M)
    if not m: fail(f"README.md has no '## {heading}' section (the landing page shows it)")
    return m.group(0).strip()


SITE_COMMANDS = """```bash
pip install -e ".[docs]" && npm ci --prefix docs_site && python docs_site/build.py
python -m http.server --directory _docs 8000      # then open http://localhost:8000
```"""


def linkify(table: str, stems: list[str]) -> str:
    "`00_foundations` (or a pattern like `05[a-e]*_triton_*`) in the chapter table -> links to the chapter pages."
    def sub(m):
        hits = [s for s in stems if fnmatch.fnmatch(s, m.group(1))]
        if not hits: return m.group(0)
        if len(hits) == 1: return f"[`{hits[0]}`]({hits[0]}.ipynb)"
        nums = [s.split("_")[0] for s in hits]
        label = lambda n, s: f"{n} ({s.rsplit('_', 1)[-1]})" if nums.count(n) > 1 else n   # 05c (scan), 05c (walk)
        return " · ".join(f"[{label(n, s)}]({s}.ipynb)" for n, s in zip(nums, hits))
    return re.sub(r"`([0-9][0-9a-z*\[\]-]*_[\w*]*)`", sub, table)


def toctrees(infos: dict) -> str:
    "Hidden toctrees, one per part of the course: they make the sidebar and the previous/next links."
    groups = []
    for nb in infos:
        part = PARTS.get(nb[:2], "More chapters")
        if not groups or groups[-1][0] != part: groups.append((part, []))
        groups[-1][1].append(nb.removesuffix(".ipynb"))
    groups.append(("Reference", ["api"]))
    return "\n".join(f"```{{toctree}}\n:hidden:\n:caption: {part}\n\n" + "\n".join(docs) + "\n```\n" for part, docs in groups)


def landing(infos: dict, targets: dict) -> dict:
    "index.ipynb, plus: chapter links in its table, the site commands, README's measured speed, the toctrees."
    nb, _ = stage_notebook(NBS / "index.ipynb", targets)
    stems = [n.removesuffix(".ipynb") for n in infos]
    site = md("## This course as a website\n\nBuilt offline from the committed notebooks and their saved outputs "
              "(nothing is executed); the second command serves it:\n\n" + (readme_block("site-command") or SITE_COMMANDS)
              + "\n\nTwo figures are interactive and run in the page itself: the "
              "[eigenvalue explorer](00_foundations.ipynb#an-interactive-eigenvalue-explorer) of chapter 00 and the "
              "[chunked block matrix](02_chunkwise.ipynb#the-block-matrix-interactively) of chapter 02. "
              "The [API reference](api.md) lists the public names.\n", "site-commands")
    speed = md(readme_section("Measured speed") + '\n\n<p class="chapter-source">This section is README.md\'s, '
               "copied at build time.</p>\n", "site-speed")
    cells, placed = [], set()
    for c in nb["cells"]:
        src = c["source"] if c["cell_type"] == "markdown" else ""
        if re.search(r"^## The chapters", src, re.M): c["source"] = linkify(src, stems)
        cells.append(c)
        for key, extra in (("Two commands", site), ("The chapters", speed)):
            if re.search(rf"^## {key}", src, re.M): cells.append(extra); placed.add(key)
    if placed != {"Two commands", "The chapters"}:
        fail("nbs/index.ipynb lacks a '## Two commands' or '## The chapters' section (the landing page builds on them)")
    cells.append(md(toctrees(infos), "site-toc"))
    nb["cells"] = cells
    return nb


# ---- build ---------------------------------------------------------------------------------------------------
def write_if_changed(path: Path, text: str):
    if not path.exists() or path.read_text(encoding="utf-8") != text: path.write_text(text, encoding="utf-8")


def stage(work: Path) -> dict:
    "Write the Sphinx project into `work`; returns {docname: chapter info} for the Sphinx extension."
    if not (MATHJAX / "tex-chtml.js").exists(): fail("MathJax is missing: run `npm ci --prefix docs_site` first")
    work.mkdir(parents=True, exist_ok=True)
    infos = {p.name: stage_notebook(p, {})[1] for p in chapters()}
    api, targets = api_page(infos)
    wanted = {"index.ipynb", "api.md", "conf.py", "site_ext.py", "site_chapters.json", "_static"}
    for p in chapters():
        nb, _ = stage_notebook(p, targets)
        write_if_changed(work / p.name, json.dumps(nb, indent=1, ensure_ascii=False))
        wanted.add(p.name)
    write_if_changed(work / "index.ipynb", json.dumps(landing(infos, targets), indent=1, ensure_ascii=False))
    write_if_changed(work / "api.md", api)
    for f in ("conf.py", "site_ext.py"): write_if_changed(work / f, (SITE / f).read_text(encoding="utf-8"))
    chapter_info = {k.removesuffix(".ipynb"): v for k, v in infos.items()}
    write_if_changed(work / "site_chapters.json", json.dumps(chapter_info, indent=1))
    static = work / "_static"
    static.mkdir(exist_ok=True)
    for f in ("site.css", "favicon.svg"): shutil.copy2(SITE / "_static" / f, static / f)
    for part in MATHJAX_PARTS:
        src, dst = MATHJAX / part, static / "mathjax" / part
        if dst.exists(): continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst)
    for p in work.iterdir():                     # a chapter that was renamed or removed leaves no stale page
        if p.name not in wanted and not p.name.startswith("."): (shutil.rmtree if p.is_dir() else Path.unlink)(p)
    return chapter_info


def build(out: Path, work: Path) -> float:
    t0, stamp = time.time(), digest()
    if out.exists() and any(out.iterdir()) and not (out / ".site-digest").exists():
        fail(f"{out} exists and is not a site this script built; pass another --out or remove it yourself")
    for mod in ("sphinx", "myst_nb", "furo"):
        try: __import__(mod)
        except ImportError: fail(f"{mod} is not installed: pip install -e \".[docs]\"")
    stage(work)
    if out.exists(): shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / ".site-digest").write_text("incomplete\n")          # marks the folder as this script's, even half built
    html = work.parent / (work.name + "-html")    # myst-nb writes a jupyter_execute/ beside Sphinx's outdir: keep it in _proc/
    shutil.rmtree(html, ignore_errors=True)
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-W", "--keep-going", "-j", "auto",
           "-d", str(work / ".doctrees"), str(work), str(html)]
    if subprocess.run(cmd, cwd=ROOT).returncode: fail("sphinx-build failed (messages above)")
    for item in html.iterdir(): shutil.move(str(item), str(out / item.name))
    html.rmdir()
    (out / ".site-digest").write_text(stamp + "\n")
    return time.time() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "_docs", help="the site (default: _docs/, git-ignored)")
    ap.add_argument("--work", type=Path, default=ROOT / "_proc" / "site", help="staged sources (default: _proc/site/)")
    ap.add_argument("--digest", action="store_true", help="print the hash of the build's inputs and exit")
    args = ap.parse_args(argv)
    if args.digest: return print(digest())
    secs = build(args.out.resolve(), args.work.resolve())
    pages = len(list(args.out.glob("*.html")))
    print(f"built {pages} pages into {args.out} in {secs:.1f} s; serve: python -m http.server --directory {args.out} 8000")


if __name__ == "__main__":
    main()
