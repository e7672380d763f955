"""Markdown to the HTML subset Qt's rich-text labels render, with copy links under code blocks."""

from __future__ import annotations

import html

from markdown_it import MarkdownIt

_md = MarkdownIt("commonmark", {"html": False, "breaks": True}).enable("table")

CODE_STYLE = ("background:#f4f4f4; color:#1e1e1e; font-family:'DejaVu Sans Mono',monospace; "
              "padding:6px; border:1px solid #ddd;")


def render(text: str) -> tuple[str, list[str]]:
    """HTML for ``text`` and the code blocks in it (in order), for the copy buttons."""
    tokens = _md.parse(text)
    codes: list[str] = []

    def fence(_renderer, tokens, idx, options, env):  # bound to the renderer by add_render_rule
        code = tokens[idx].content
        codes.append(code)
        lang = html.escape(tokens[idx].info.strip())
        head = f"<span style='color:#888'>{lang}</span> " if lang else ""
        return (f"<table width='100%' cellspacing=0 cellpadding=0><tr><td style=\"{CODE_STYLE}\">"
                f"<pre style='margin:0'>{html.escape(code)}</pre></td></tr></table>"
                f"<div align='right'>{head}<a href='copy:{len(codes) - 1}'>Copy</a></div>")

    _md.add_render_rule("fence", fence)
    _md.add_render_rule("code_block", fence)
    body = _md.renderer.render(tokens, _md.options, {})
    return body, codes
