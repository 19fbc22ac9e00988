"""The course site in a real browser: every page of a fresh build opened in headless Chromium over a local server.

Checks: chapters in course order with previous/next links and a sidebar; no console error, no failed request, no
request beyond the local server; math typeset by the vendored MathJax (no raw TeX left in the text); every image
loaded, one per PNG output of the notebooks; every internal link (and its #fragment) resolves; code highlighted,
exported cells marked, `#|` directives gone; the interactive figures redraw when a slider moves; the API reference
covers `mamba3_lite.__all__`. Three screenshots are written under the test's tmp dir.

Needs the `docs` extra (`pip install -e ".[docs]"`), `npm ci --prefix docs_site` (MathJax) and Debian's chromium.
Locally a missing piece skips the module with the reason; under CI (CI=true) it is a failure.
Uses `_docs/` when its `.site-digest` matches the tree (a build by the README's site command), else builds into tmp;
SITE_DIR=path tests a given build as it is (that is how the failure demonstrations in docs_site/README.md were run).
"""
import functools, http.server, importlib.util, json, os, re, shutil, subprocess, sys, threading
from pathlib import Path
from urllib.parse import urlsplit, unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "docs_site" / "build.py"
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _require(ok: bool, why: str):
    if ok: return
    if os.environ.get("CI", "").lower() in ("1", "true"): raise RuntimeError(f"CI must run the site test: {why}")
    pytest.skip(why, allow_module_level=True)


_spec = importlib.util.spec_from_file_location("site_build", BUILD)
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)


def _importable(mod: str) -> bool: return importlib.util.find_spec(mod) is not None


_require(all(map(_importable, ("playwright", "sphinx", "myst_nb", "furo"))),
         "the docs extra is not installed: pip install -e \".[docs]\"")
_require((build.MATHJAX / "tex-chtml.js").exists() or bool(os.environ.get("SITE_DIR")),
         "MathJax is not installed: npm ci --prefix docs_site")
_require(CHROMIUM.exists(), f"Chromium not found at {CHROMIUM}: apt-get install -y chromium")
from playwright.sync_api import sync_playwright  # noqa: E402


# ---- fixtures: a fresh build, a local server, the browser, one visit to every page -----------------------------
@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    if os.environ.get("SITE_DIR"): return Path(os.environ["SITE_DIR"]).resolve()
    docs, digest = ROOT / "_docs", build.digest()
    if (docs / ".site-digest").is_file() and (docs / ".site-digest").read_text().strip() == digest: return docs
    tmp = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, str(BUILD), "--out", str(tmp / "_docs"), "--work", str(tmp / "work")], check=True)
    return tmp / "_docs"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args): pass


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):           # a page closed mid-transfer is not a site problem
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)): super().handle_error(request, client_address)


@pytest.fixture(scope="module")
def base(site):
    srv = _Server(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_port}/"
    srv.shutdown(); srv.server_close()


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        # Playwright adds --headless and a fresh, temporary --user-data-dir itself
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        yield b
        b.close()


PAGE_FACTS = r"""() => {
  const art = document.querySelector("article") || document.body, clone = art.cloneNode(true);
  clone.querySelectorAll("pre, code, script, style, mjx-container, textarea, .highlight").forEach(e => e.remove());
  const text = clone.textContent, raw = [];
  for (const m of text.matchAll(/\$\$|\\\(|\\\)|\\\[|\\\]|\\begin\{|\$[^$\s][^$\n]*\$/g))
    raw.push(text.slice(Math.max(0, m.index - 25), m.index + 25).replace(/\s+/g, " "));
  const math = [...document.querySelectorAll(".math")];
  return {
    math: math.length, typeset: math.filter(e => e.querySelector("mjx-container")).length,
    merror: (() => { try { return [...MathJax.startup.document.math].filter(m => m.root && m.root.toString().includes("merror"))
                                 .map(m => m.math); } catch (e) { return []; } })(), raw,
    images: [...document.images].map(i => ({src: i.currentSrc || i.src, ok: i.complete && i.naturalWidth > 0,
                                             output: !!i.closest(".cell_output")})),
    links: [...document.querySelectorAll("a[href]")].map(a => a.href),
    ids: [...document.querySelectorAll("[id]")].map(e => e.id).concat([...document.querySelectorAll("a[name]")].map(a => a.name)),
    cells: document.querySelectorAll(".cell_input").length,
    highlighted: document.querySelectorAll(".cell_input .highlight span[class]").length,
    directives: [...document.querySelectorAll(".cell_input pre")].filter(p => /^\s*#\|/m.test(p.textContent)).length,
    badges: document.querySelectorAll(".cell.tag_export .export-badge").length,
    next: document.querySelector("a.next-page")?.href ?? null, prev: document.querySelector("a.prev-page")?.href ?? null,
    sidebar: [...document.querySelectorAll(".sidebar-tree a.reference")].map(a => a.href),
    title: document.title,
  };
}"""


def _open(browser, url: str):
    "A fresh page at `url`, its problems recorded; returns (page, problems). Requests off the server are refused."
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page, problems, local = ctx.new_page(), [], url[: url.index("/", 8) + 1]
    ctx.route("**/*", lambda route: route.continue_() if route.request.url.startswith(local) else
              (problems.append(f"outside request: {route.request.url}"), route.abort()))
    page.on("console", lambda m: m.type == "error" and problems.append(f"console error: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"failed request: {r.url} ({r.failure})"))
    page.on("response", lambda r: r.status >= 400 and problems.append(f"HTTP {r.status}: {r.url}"))
    page.goto(url, wait_until="load")
    page.evaluate("async () => { if (window.MathJax && MathJax.startup) await MathJax.startup.promise; }")
    return page, problems


@pytest.fixture(scope="module")
def visits(site, base, browser) -> dict:
    "page name -> the facts of PAGE_FACTS plus the problems seen while it loaded; every .html page of the site."
    out = {}
    for html in sorted(site.glob("*.html")):
        page, problems = _open(browser, base + html.name)
        out[html.name] = {**page.evaluate(PAGE_FACTS), "problems": problems}
        page.context.close()
    n = lambda key: sum(len(v[key]) if isinstance(v[key], list) else v[key] for v in out.values())
    print(f"\nsite {site}: {len(out)} pages, {n('math')} math ({n('typeset')} typeset), {n('images')} images, "
          f"{n('links')} links, {n('problems')} problems")
    return out


def _stem(url: str) -> str: return Path(urlsplit(url).path).name


# ---- the tests -------------------------------------------------------------------------------------------------
def test_chapters_in_course_order_with_prev_next_and_sidebar(visits):
    order = ["index.html"] + [p.stem + ".html" for p in build.chapters()] + ["api.html"]
    missing = [p for p in order if p not in visits]
    assert not missing, f"pages missing from the build: {missing}"
    chain, page = [], "index.html"
    while page and len(chain) <= len(order):
        chain.append(page)
        page = _stem(visits[page]["next"]) if visits[page]["next"] else None
        if page and page not in visits: pytest.fail(f"next link of {chain[-1]} points at a missing page {page}")
    assert chain == order, f"next links walk {chain}, course order is {order}"
    for a, b in zip(order, order[1:]): assert _stem(visits[b]["prev"]) == a, f"{b}: previous link is not {a}"
    for name in order:
        linked = {_stem(u) for u in visits[name]["sidebar"]}
        assert set(order[1:]) <= linked, f"{name}: sidebar lacks {sorted(set(order[1:]) - linked)}"


def test_no_console_errors_failed_or_outside_requests(visits):
    bad = {name: v["problems"] for name, v in visits.items() if v["problems"]}
    assert not bad, json.dumps(bad, indent=1)


def test_math_is_typeset(visits):
    bad = []
    for name, v in visits.items():
        if v["typeset"] != v["math"]: bad.append(f"{name}: {v['math'] - v['typeset']} of {v['math']} math elements not typeset")
        if v["merror"]: bad.append(f"{name}: TeX that MathJax cannot typeset: {v['merror']}")
        if v["raw"]: bad.append(f"{name}: raw TeX left in the text: {v['raw'][:5]}")
    for name in ["index.html", "00_foundations.html", "02_chunkwise.html", "api.html"]:
        if not visits[name]["math"]: bad.append(f"{name} shows no math at all")
    assert not bad, "\n".join(bad)


def test_every_image_loads_one_per_png_output(visits):
    broken = [(name, i["src"]) for name, v in visits.items() for i in v["images"] if not i["ok"]]
    assert not broken, f"images that did not load: {broken}"
    for nb in build.chapters():
        cells = [build.stage_cell(c) for c in json.loads(nb.read_text(encoding="utf-8"))["cells"]]
        pngs = sum("image/png" in o.get("data", {}) for c in cells if c and "remove-output" not in c["metadata"].get("tags", [])
                   for o in c.get("outputs", []))
        shown = sum(i["output"] for i in visits[nb.stem + ".html"]["images"])
        assert shown == pngs, f"{nb.name}: {pngs} PNG outputs, {shown} images on its page"


def test_internal_links_resolve(visits, site, base):
    checked, bad = set(), []
    for name, v in visits.items():
        for url in v["links"]:
            if not url.startswith(base) or url in checked: continue
            checked.add(url)
            parts = urlsplit(url)
            rel = unquote(parts.path[len(urlsplit(base).path):]) or "index.html"
            target = site / rel / "index.html" if (site / rel).is_dir() else site / rel
            if not target.is_file(): bad.append(f"{name}: {url} (no file)")
            elif parts.fragment and target.name in visits and unquote(parts.fragment) not in visits[target.name]["ids"]:
                bad.append(f"{name}: {url} (no #{parts.fragment} on {target.name})")
    assert not bad, "\n".join(bad[:20])
    assert len(checked) > 50


def test_code_highlighted_exports_marked_directives_gone(visits):
    for nb in build.chapters():
        v = visits[nb.stem + ".html"]
        cells = [build.stage_cell(c) for c in json.loads(nb.read_text(encoding="utf-8"))["cells"]]
        exported = sum("export" in c["metadata"].get("tags", []) for c in cells if c)
        assert v["badges"] == exported, f"{nb.name}: {exported} exported cells, {v['badges']} marked"
        if v["cells"]: assert v["highlighted"] > 0, f"{nb.name}: code is not highlighted"
        assert v["directives"] == 0, f"{nb.name}: {v['directives']} code blocks still show '#|' lines"


def test_directives_applied_when_staging():
    cell = lambda src: {"cell_type": "code", "source": src, "metadata": {}, "outputs": [], "execution_count": 1}
    assert build.stage_cell(cell("#| hide\nsecret = 1")) is None
    assert build.stage_cell(cell("#| include: false\nx")) is None
    assert build.stage_cell(cell("#| default_exp ssd.chunk")) is None
    got = build.stage_cell(cell("#| export\ndef f(): pass"))
    assert got["source"] == "def f(): pass" and got["metadata"]["tags"] == ["export"]
    assert build.stage_cell(cell("#| echo: false\nplot()"))["metadata"]["tags"] == ["remove-input"]
    assert build.stage_cell(cell("#|output: false\nx"))["metadata"]["tags"] == ["remove-output"]
    assert build.stage_cell(cell("#| code-fold: true\nJS = 1"))["metadata"]["tags"] == ["hide-input"]


def test_api_reference_covers_all_public_names(visits):
    import ast
    tree = ast.parse((ROOT / "mamba3_lite" / "__init__.py").read_text(encoding="utf-8"))
    names = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                 and getattr(n.targets[0], "id", None) == "__all__")
    links = {urlsplit(u).fragment: _stem(u) for u in visits["api.html"]["links"]}
    for name in names:
        frag = re.sub(r"[^a-z0-9]+", "-", f"def-{name}".lower())                   # docutils' id of the label
        assert frag in links and links[frag] in visits and links[frag] != "api.html", f"API entry {name}: no link to its chapter"
        assert frag in visits[links[frag]]["ids"], f"{links[frag]} has no anchor for {name}"


def _moves(page, figure: str, slider: str, canvases: list[str]) -> bool:
    "Press Home, then End, on a slider; True when the readout and every canvas changed each time."
    root = page.locator(figure)
    snap = lambda: [root.locator(".readout").inner_text()] + [root.locator(c).evaluate("c => c.toDataURL()") for c in canvases]
    ok = True
    for key in ("Home", "End"):
        before = snap()
        root.locator(slider).focus(); page.keyboard.press(key)
        after = snap()
        ok &= all(a != b for a, b in zip(after, before))
    return ok


def test_interactive_figures_respond(browser, base, tmp_path_factory):
    shots = Path(os.environ.get("SITE_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    page, problems = _open(browser, base + "index.html")
    page.screenshot(path=str(shots / "index.png"))
    page.context.close()
    for url, figure, sliders, canvases in [
            ("00_foundations.html", "#eig-explorer", [".alpha", ".omega"], ["canvas.plane", "canvas.impulse"]),
            ("02_chunkwise.html", "#block-matrix", [".T", ".Q"], ["canvas"])]:
        page, more = _open(browser, base + url)
        problems += more
        assert page.locator(figure).count() == 1, f"{url}: no {figure}"
        page.add_style_tag(content="html { scroll-behavior: auto !important; }")
        page.locator(figure).scroll_into_view_if_needed()
        page.screenshot(path=str(shots / (Path(url).stem + ".png")))
        for s in sliders: assert _moves(page, figure, s, canvases), f"{url}: moving {s} did not redraw {figure}"
        page.context.close()
    print(f"\nscreenshots: {sorted(str(p) for p in shots.glob('*.png'))}")
    assert not problems, problems
