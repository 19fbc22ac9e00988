"""Sphinx extension of the course site: exported cells carry a badge naming the module they go to."""
import html
from docutils import nodes


def mark_exports(app, doctree):
    info = app.config.site_chapters.get(app.env.docname)
    if not info or not info.get("file"): return
    badge = (f'<div class="export-badge" title="nbdev writes this cell into {html.escape(info["file"])}">'
             f'exported to <code>{html.escape(info["file"])}</code></div>')
    for node in doctree.findall(nodes.container):
        if "tag_export" in node.get("classes", []): node.insert(0, nodes.raw("", badge, format="html"))


def setup(app):
    app.add_config_value("site_chapters", {}, "env")
    app.connect("doctree-read", mark_exports)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
