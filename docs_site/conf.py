# Sphinx configuration of the course site. docs_site/build.py copies this file next to the staged notebooks.
import json, sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))                          # site_ext.py, staged beside this file

project = "mamba3_lite"
author = "mamba3_lite developers"
copyright = "2026 onwards, mamba3_lite developers"
html_title = "mamba3_lite · the course"
extensions = ["myst_nb", "site_ext"]
exclude_patterns = [".doctrees", "_static"]

# The notebooks are shown as committed: saved outputs, never executed.
nb_execution_mode = "off"
nb_render_markdown_format = "myst"                     # Markdown outputs (tables) may carry math too
nb_merge_streams = True
nb_output_stderr = "show"
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
myst_dmath_double_inline = True
suppress_warnings = ["myst.header"]                  # nbdev chapters go from the H1 title straight to H3

# Math: MathJax 3 from docs_site/node_modules, copied into _static/mathjax (no CDN).
mathjax_path = "mathjax/tex-chtml.js"
mathjax3_config = {"loader": {"load": []}, "options": {"enableMenu": False}}

html_theme = "furo"
html_static_path = ["_static"]
html_css_files = ["site.css"]
html_favicon = "_static/favicon.svg"                 # else the browser asks for /favicon.ico and gets a 404
html_copy_source = False
html_show_sourcelink = False
html_theme_options = {"navigation_with_keys": True}
pygments_style = "default"

site_chapters = json.loads((HERE / "site_chapters.json").read_text(encoding="utf-8"))
