"""Markdown to the HTML subset Qt's rich-text labels render, block by block, for a growing answer.

An answer streams in for seconds to minutes and is repainted about 15 times a second.
Rendering all of it each time costs O(length) per update and O(length²) per answer
(scripts/measure_rendering.py, one run: an update near token 4,000 took 16x one near the
start, 11.4 ms, and the whole-text parses set off 80-100 ms garbage collections; block by
block, updates stay at 0.6-0.8 ms and the worst 20 ms-timer delay of a 4,000-token answer
was 2.9 ms against 94 ms).  So :class:`MarkdownStream` splits the text into top-level
markdown blocks (markdown-it's block tokens and their line ranges):

* a block is *finished* once a later block has begun on a complete line; it is rendered
  once, here, and never again;
* the rest, the *tail*, is parsed and rendered again on each update; its size is that of
  the block being written, not of the answer.

The decision uses complete lines only: a partial last line may still turn into a
paragraph's continuation ("#" becoming "#hashtag", "***" becoming "***bold***").
Reference-style link definitions are off: a definition in a finished block could not
reach a later one, and streamed text must render as the same text rendered at once.

Code blocks are highlighted with Pygments (inline styles, colours from the theme, made
readable on the code background); the tail's code only while it is short enough to lex
within a frame.  :class:`TintStream` is the same stream with the text that came from
accepted draft tokens tinted on top: each block's HTML is the plain view's, and the tint
wraps its text runs (never its tags) by aligning the visible characters with the source's.
:class:`RunStream` does the same for plain text in runs (the reasoning), split at blank lines.
"""

from __future__ import annotations

import html
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from markdown_it import MarkdownIt
from markdown_it.token import Token
from pygments.lexer import Lexer
from pygments.lexers import get_lexer_by_name
from pygments.token import _TokenType
from pygments.util import ClassNotFound

from .theme import Theme, TokenStyle, current, token_styles

# Pygments lexes Python at ~1.6 µs a character on this machine (2,172 characters: 3.4 ms): a
# growing code block is highlighted while it is this short, then plain until it is finished.
TAIL_HIGHLIGHT_CHARS = 2000
# a finished block longer than this is shown plain: lexing it would hold the GUI thread for 0.15 s+
MAX_HIGHLIGHT_CHARS = 100_000
# plain text with no blank line for this long is split at its last line break instead
PLAIN_TAIL_CHARS = 2000
MONO = "'DejaVu Sans Mono','Menlo','Consolas',monospace"
_NEWLINE = re.compile(r"\r\n?|\n")
EXTRA = "sc-extra"  # the class of a div whose text is not from the markdown source (a code block's Copy line)
CODE_OPEN = "<table width='100%' cellspacing=0 cellpadding=0>"  # how a code block's HTML begins
COPY_OPEN = f"<div align='right' class='{EXTRA}'>"  # ... and its Copy line


@dataclass(frozen=True, slots=True)
class Block:
    """One rendered block: its HTML and the code of each code block in it, for the copy links."""

    html: str
    codes: tuple[str, ...] = ()
    start: int = 0  # where its markdown source begins in the text (MarkdownStream's blocks)
    end: int = 0  # ... and ends


@dataclass(frozen=True, slots=True)
class Update:
    """What changed: ``reset`` drops every block shown (the text was replaced, not extended), then
    ``finished`` are appended for good, and ``tail`` (None: nothing) replaces the growing rest."""

    reset: bool
    finished: tuple[Block, ...]
    tail: Block | None


# -- highlighting ---------------------------------------------------------------------------------

@cache
def _lexer(name: str) -> Lexer | None:
    try:
        return get_lexer_by_name(name, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return None


def _style(ttype: _TokenType, styles: dict[_TokenType, TokenStyle]) -> TokenStyle:
    while ttype not in styles and ttype.parent is not None:
        ttype = ttype.parent
    return styles[ttype]


def highlight(code: str, lang: str, theme: Theme, limit: int = MAX_HIGHLIGHT_CHARS) -> str:
    """``code`` as HTML spans for Qt rich text; plain (escaped) for no language, an unknown one, or
    a block over ``limit`` characters.

    No guessing for a block without a language: guess_lexer took 210 ms on its first call (it
    loads every lexer) and named a Python class "Django/Jinja".
    """
    lexer = _lexer(lang.lower()) if lang and len(code) <= limit else None
    if lexer is None:
        return html.escape(code, quote=False)
    styles = token_styles(theme.pygments_style, theme.code_bg, theme.code_text)
    plain = TokenStyle(theme.code_text, False, False)
    parts: list[str] = []
    for ttype, value in lexer.get_tokens(code):
        text = html.escape(value, quote=False)
        style = _style(ttype, styles)
        if value.isspace() or style == plain:
            parts.append(text)
        else:
            parts.append(f"<span style='{style.css()}'>{text}</span>")
    return "".join(parts)


# -- markdown ---------------------------------------------------------------------------------------

def _fence(_renderer, tokens: list[Token], idx: int, _options, env: dict) -> str:
    """A fenced or indented code block: highlighted on the code background, a copy link below."""
    token = tokens[idx]
    theme: Theme = env["theme"]
    code = token.content
    env["codes"].append(code)
    info = token.info.strip().split(maxsplit=1)
    lang = info[0] if info else ""
    body = highlight(code, lang, theme, env["limit"])
    head = f"<span style='color:{theme.muted}'>{html.escape(lang)}</span> " if lang else ""
    return (f"{CODE_OPEN}<tr><td style=\"background:{theme.code_bg}; "
            f"color:{theme.code_text}; padding:6px; border:1px solid {theme.code_border};\">"
            f"<pre style=\"margin:0; font-family:{MONO}\">{body}</pre></td></tr></table>"
            f"{COPY_OPEN}{head}<a href='copy:{len(env['codes']) - 1}' style='color:{theme.link}'>Copy</a>"
            "</div>")


def split_code_block(block_html: str) -> tuple[str, str] | None:
    """A block that is one code block, as (its code, its Copy line): the message shows the code
    scrolling sideways on its own and the Copy line under it in view (:mod:`.block_view`).  None for
    any other block (a code block inside a list or a quote stays with its block)."""
    if not block_html.startswith(CODE_OPEN):
        return None
    at = block_html.find(COPY_OPEN)
    if at < 0 or block_html.count("<pre", 0, at) != 1 or block_html.find(COPY_OPEN, at + 1) >= 0:
        return None
    code, copy = block_html[:at], block_html[at:]
    if not copy.rstrip().endswith("</div>"):
        return None
    return code, copy


def _table(_renderer, _tokens: list[Token], _idx: int, _options, env: dict) -> str:
    """Tables with cell borders in the code border's colour (Qt draws none by default)."""
    return (f"<table cellspacing=0 cellpadding=4 border=1 style=\"border-collapse:collapse; "
            f"border-color:{env['theme'].code_border}; border-style:solid;\">\n")


def _link_open(renderer, tokens: list[Token], idx: int, options, env: dict) -> str:
    """Links in the theme's colour, in the HTML: a label keeps the palette it laid its text out with."""
    tokens[idx].attrSet("style", f"color:{env['theme'].link}")
    return renderer.renderToken(tokens, idx, options, env)


def _make_markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "breaks": True}).enable("table").disable("reference")
    md.add_render_rule("fence", _fence)
    md.add_render_rule("code_block", _fence)
    md.add_render_rule("table_open", _table)
    md.add_render_rule("link_open", _link_open)
    return md


_md = _make_markdown()


def _render(tokens: list[Token], theme: Theme, limit: int, start: int = 0, end: int = 0) -> Block:
    env: dict = {"codes": [], "theme": theme, "limit": limit}
    return Block(_md.renderer.render(tokens, _md.options, env), tuple(env["codes"]), start, end)


def _line_offset(text: str, line: int) -> int:
    """Where line ``line`` (0-based, any of \\r\\n, \\r, \\n ends a line) begins in ``text``."""
    if line == 0:
        return 0
    for n, m in enumerate(_NEWLINE.finditer(text), 1):
        if n == line:
            return m.end()
    return len(text)


class MarkdownStream:
    """A growing markdown text as finished blocks (each rendered once) and the tail."""

    def __init__(self, theme: Theme | None = None) -> None:
        self.theme = theme or current()
        self._start = 0  # where the tail begins in the text: a line start
        self._done = ""  # the text before it, to tell an extension from a replacement
        self._decided = -1  # the end of the complete lines the last split looked at
        self.renders = 0  # blocks rendered, finished and tail (tests count them)

    def update(self, text: str, final: bool = False) -> Update:
        """The blocks to add and the tail to show for ``text``; ``final``: the text is whole (its
        last line is complete, and the tail's code is highlighted whatever its length)."""
        reset = not text.startswith(self._done)
        if reset:
            self._start, self._done, self._decided = 0, "", -1
        finished = self._split(text, final)
        rest = text[self._start:]
        tail = None
        if rest.strip():
            tail = _render(_md.parse(rest), self.theme, MAX_HIGHLIGHT_CHARS if final else TAIL_HIGHLIGHT_CHARS,
                           self._start, len(text))
            self.renders += 1
        return Update(reset, finished, tail)

    def _split(self, text: str, final: bool) -> tuple[Block, ...]:
        """Render, once, the blocks that a later block has closed; move the tail's start past them."""
        rest = text[self._start:]
        cut = len(rest) if final else max(rest.rfind("\n"), rest.rfind("\r")) + 1
        if cut == 0 or self._start + cut == self._decided:
            return ()  # no new complete line since the last split
        self._decided = self._start + cut
        tokens = _md.parse(rest[:cut])
        starts = [i for i, t in enumerate(tokens) if t.level == 0 and t.nesting >= 0]
        if len(starts) < 2:
            return ()
        at = [self._start + _line_offset(rest, m[0] if (m := tokens[i].map) else 0) for i in starts]
        blocks = tuple(_render(tokens[a:b], self.theme, MAX_HIGHLIGHT_CHARS, at[n], at[n + 1])
                       for n, (a, b) in enumerate(itertools.pairwise(starts)))
        self.renders += len(blocks)
        self._start = at[-1]
        self._done = text[:self._start]
        return blocks


def render_blocks(text: str, theme: Theme | None = None) -> list[Block]:
    """A whole text's blocks, split as a stream would split it."""
    u = MarkdownStream(theme).update(text, final=True)
    return [*u.finished, *([u.tail] if u.tail else [])]


def render(text: str, theme: Theme | None = None) -> tuple[str, list[str]]:
    """HTML for ``text`` and the code blocks in it (in order), for the copy links."""
    blocks = render_blocks(text, theme)
    return "".join(b.html for b in blocks), [c for b in blocks for c in b.codes]


# -- the draft tint on top of the markdown ----------------------------------------------------------

_TAG = re.compile(r"(<[^>]*>)")
ALIGN_WINDOW = 256  # source characters searched for a visible one (markdown syntax between two is short)


def marked_spans(runs: Sequence[tuple[str, bool]]) -> list[tuple[int, int]]:
    """The (start, end) character ranges of the marked runs in their joined text, adjacent ones merged."""
    out: list[tuple[int, int]] = []
    at = 0
    for text, marked in runs:
        if marked and text:
            if out and out[-1][1] == at:
                out[-1] = (out[-1][0], at + len(text))
            else:
                out.append((at, at + len(text)))
        at += len(text)
    return out


def tint_html(block_html: str, source: str, marked: Sequence[bool], mark_css: str) -> str:
    """``block_html`` (rendered from ``source``) with the text of its marked source characters in
    spans styled ``mark_css``.

    Only text between tags is wrapped, so every tag, code block, highlight and link stays as it
    is.  Each visible character is matched to the next source character that is the same (markdown
    hides only syntax: ``#``, ``*``, fences, indentation); one with no match (an entity the source
    spelled out) takes the tint of where the match stands.  A code block's Copy line is not from
    the source and is never tinted.
    """
    out: list[str] = []
    j = 0  # the next source character to match
    extra = 0  # inside the text of a div that is not from the source
    n = len(source)

    def tinted(i: int) -> bool:
        return 0 <= i < n and marked[i]

    for part in _TAG.split(block_html):
        if not part:
            continue
        if part.startswith("<"):
            if extra:
                extra += part.startswith("<div")
                extra -= part.startswith("</div")
            elif part.startswith("<div") and EXTRA in part:
                extra = 1
            out.append(part)
            continue
        if extra:
            out.append(part)
            continue
        text = html.unescape(part)
        flags = []
        for c in text:
            if c.isspace():
                if j < n and source[j].isspace():
                    # a line break is never wrapped: one at the end of a <pre> in a span is laid out as a line more
                    flags.append(tinted(j) and c not in "\r\n")
                    j += 1
                else:
                    flags.append(tinted(j - 1) and tinted(j) and c not in "\r\n")
                continue
            at = source.find(c, j, j + ALIGN_WINDOW)
            if at >= 0:
                j = at + 1
                flags.append(tinted(at))
            else:
                flags.append(tinted(j))
        k = 0
        for mark, group in itertools.groupby(flags):
            size = len(list(group))
            chunk = html.escape(text[k:k + size], quote=False)
            out.append(f"<span style='{mark_css}'>{chunk}</span>" if mark else chunk)
            k += size
    return "".join(out)


class TintStream:
    """A growing markdown text rendered as :class:`MarkdownStream` renders it (the same blocks, code
    blocks and highlighting), with the runs marked as accepted draft text tinted on top."""

    def __init__(self, theme: Theme | None = None, mark_css: str = "") -> None:
        self.mark_css = mark_css
        self._stream = MarkdownStream(theme)

    def update(self, text: str, runs: Sequence[tuple[str, bool]], final: bool = False) -> Update:
        """``runs``: ``text`` in runs of (text, marked); their joined text is ``text``."""
        u = self._stream.update(text, final)
        spans = marked_spans(runs)
        return Update(u.reset, tuple(self._tint(b, text, spans) for b in u.finished),
                      self._tint(u.tail, text, spans) if u.tail is not None else None)

    def _tint(self, block: Block, text: str, spans: list[tuple[int, int]]) -> Block:
        source = text[block.start:block.end]
        marked = [False] * len(source)
        for a, b in spans:
            a, b = max(a, block.start), min(b, block.end)
            for i in range(a - block.start, b - block.start):
                marked[i] = True
        if not any(marked):
            return block
        return Block(tint_html(block.html, source, marked, self.mark_css), block.codes, block.start, block.end)


# -- plain text in runs ---------------------------------------------------------------------------

def plain_html(runs: Sequence[tuple[str, bool]], mark_css: str) -> str:
    """Runs of plain text as HTML, the marked ones in a span styled ``mark_css``."""
    out = []
    for text, marked in runs:
        t = html.escape(text, quote=False).replace("\r\n", "\n").replace("\n", "<br>")
        out.append(f"<span style='{mark_css}'>{t}</span>" if marked and t else t)
    return "".join(out)


class RunStream:
    """Plain text in runs of (text, marked) that only grow (runs appended, the last one extended):
    paragraphs, split at blank lines, render once; the last one on each update."""

    def __init__(self, mark_css: str = "") -> None:
        self.mark_css = mark_css
        self._runs: Sequence[tuple[str, bool]] | None = None
        self._i = 0  # the tail begins in run _i ...
        self._off = 0  # ... at this character
        self._head = ""  # runs[_i][:_off] when the tail's start was set

    def update(self, runs: Sequence[tuple[str, bool]]) -> Update:
        """``runs``: the same list object while it grows; another object starts again."""
        reset = (runs is not self._runs or len(runs) < self._i
                 or (self._i < len(runs) and not runs[self._i][0].startswith(self._head)))
        if reset:
            self._runs, self._i, self._off, self._head = runs, 0, 0, ""
        tail = [(t[self._off:] if k == self._i else t, m) for k, (t, m) in enumerate(runs[self._i:], self._i)]
        text = "".join(t for t, _ in tail)
        blank = text.rfind("\n\n")
        cut = blank + 2 if blank >= 0 else 0
        if not cut and len(text) > PLAIN_TAIL_CHARS:
            cut = text.rfind("\n") + 1
        finished: tuple[Block, ...] = ()
        if cut > 0:
            done, tail = _split_runs(tail, cut)
            finished = (Block(plain_html(_strip_end(done), self.mark_css)),)
            self._advance(runs, cut)
        shown = _strip_start(tail)
        return Update(reset, finished, Block(plain_html(shown, self.mark_css)) if shown else None)

    def _advance(self, runs: Sequence[tuple[str, bool]], n: int) -> None:
        while n > 0 and self._i < len(runs):
            left = len(runs[self._i][0]) - self._off
            if n < left:
                self._off += n
                break
            n -= left
            self._i, self._off = self._i + 1, 0
        self._head = runs[self._i][0][:self._off] if self._i < len(runs) else ""


def _split_runs(runs: list[tuple[str, bool]], n: int) -> tuple[list[tuple[str, bool]], list[tuple[str, bool]]]:
    """The first ``n`` characters of ``runs``, and the rest."""
    head: list[tuple[str, bool]] = []
    for k, (t, m) in enumerate(runs):
        if n <= len(t):
            head.append((t[:n], m))
            return head, [(t[n:], m), *runs[k + 1:]]
        head.append((t, m))
        n -= len(t)
    return head, []


def _strip_end(runs: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """Without the line breaks that end the runs (the gap between blocks is the layout's)."""
    out = list(runs)
    while out and not out[-1][0].rstrip("\r\n"):
        out.pop()
    if out:
        out[-1] = (out[-1][0].rstrip("\r\n"), out[-1][1])
    return out


def _strip_start(runs: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    out = [(t, m) for t, m in runs if t]
    while out and not out[0][0].lstrip("\r\n"):
        out.pop(0)
    if out:
        out[0] = (out[0][0].lstrip("\r\n"), out[0][1])
    return out
