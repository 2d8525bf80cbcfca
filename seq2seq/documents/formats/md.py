"""Markdown (markdown-it-py): paragraphs, headings, list items and table cells, replaced in
their lines; emphasis and links carried, code spans kept as written, code blocks and HTML
blocks untouched; a front matter block's reader-visible values translated."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from seq2seq.documents import html as html_format
from seq2seq.documents.formats.limits import Limits, Tally, decode_text, line_count
from seq2seq.documents.markup import Marked, MarkupBuilder, Placed
from seq2seq.documents.translate import has_words


@dataclass
class MarkdownDocument:
    """Markdown: each inline run of a paragraph, heading, list item or table cell is a
    segment, replaced in place in the source lines; code, HTML blocks and the rest untouched.
    A front matter block (YAML `---`, TOML `+++`) is not Markdown: only the values of its
    reader-visible keys (title, description, ...) are segments, written back quoted as needed."""

    lines: list[str]
    found: list[tuple[int, int, list[tuple[int, int, int]]]]  # (first line, last line, content spans)
    pages: list[list[html_format.Part]]
    segments: list[Marked] = field(default_factory=list)
    notes: Counter = field(default_factory=Counter)
    quoting: dict[int, str] = field(default_factory=dict)  # page -> how a front matter value is quoted

    def __post_init__(self) -> None:
        self.segments = [html_format.segments(parts)[0].marked for parts in self.pages]

    def write(self, placed: list[Placed | None], language: str = "") -> bytes:
        lines = list(self.lines)
        edits: dict[int, list[tuple[int, int, str]]] = {}
        dropped: set[int] = set()
        for page, ((_, _, spans), parts, translation) in enumerate(zip(self.found, self.pages, placed)):
            if translation is None:
                continue
            if page in self.quoting:
                text = quote_front_matter(translation.text, self.quoting[page])
                edits.setdefault(spans[0][0], []).append((spans[0][1], spans[0][2], text))
                continue
            text = html_format.render(translation, html_format.segments(parts)[0].verbatim, escape=escape_markdown)
            for number, (line, start, end) in enumerate(spans):
                edits.setdefault(line, []).append((start, end, text if number == 0 else ""))
                if number and not (lines[line][:start] + lines[line][end:]).strip(" >\t\n"):
                    dropped.add(line)  # a continuation line left with nothing but its indentation
        for line, changes in edits.items():
            for start, end, text in sorted(changes, reverse=True):
                lines[line] = lines[line][:start] + text + lines[line][end:]
        return "".join(line for number, line in enumerate(lines) if number not in dropped).encode()


# Front matter keys whose values a reader sees (Jekyll, Hugo, MkDocs, Pandoc); other keys
# (dates, slugs, layouts, tags) are data and stay as written.
FRONT_MATTER_KEYS = ("title", "subtitle", "description", "summary", "excerpt", "abstract", "caption", "linktitle")
_FRONT_MATTER_VALUE = re.compile(
    rf"^[ \t]*(?:{'|'.join(FRONT_MATTER_KEYS)})[ \t]*(?P<sep>[:=])[ \t]*(?P<value>\S(?:.*\S)?)[ \t]*$",
    re.IGNORECASE,
)
_FRONT_MATTER_KEY = re.compile(r"^[\w-]+[ \t]*(?::(?:[ \t]|$)|=)")
# A plain YAML scalar must be quoted when it holds these (or starts with an indicator).
_YAML_NEEDS_QUOTES = re.compile(r"^[-?:,\[\]{}#&*!|>'\"%@`]|: | #|:$")


def front_matter_end(lines: list[str]) -> int:
    """Number of lines of the front matter at the top of a Markdown file (0: none)."""
    if not lines or lines[0].rstrip("\r\n") not in ("---", "+++"):
        return 0
    closers = ("---", "...") if lines[0].startswith("-") else ("+++",)
    for number in range(1, len(lines)):
        if lines[number].rstrip("\r\n").rstrip() in closers:
            # Front matter starts at once and holds keys; else these are thematic breaks.
            keyed = any(_FRONT_MATTER_KEY.match(line) for line in lines[1:number])
            return number + 1 if keyed and lines[1].strip() else 0
    return 0  # no closing line: a thematic break, not front matter


def front_matter_value(line: str, toml: bool) -> tuple[int, int, str] | None:
    """(start, end, quoting) of a translatable value on a front matter line, or None.

    quoting: '"' or "'" for a quoted value (the span is inside the quotes), "plain" for an
    unquoted YAML scalar; block scalars (`|`, `>`), lists, and values with escapes are left."""
    match = _FRONT_MATTER_VALUE.match(line.rstrip("\r\n"))
    if match is None or (match["sep"] == "=") != toml:
        return None
    value, start = match["value"], match.start("value")
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        inner = value[1:-1]
        if "\\" in inner or (value[0] == '"' and '"' in inner):
            return None
        return start + 1, start + len(value) - 1, value[0]
    if toml or value[0] in "|>[{&*!\"'" or " #" in value:
        return None
    return start, start + len(value), "plain"


def quote_front_matter(text: str, quoting: str) -> str:
    """A translated value written back so the front matter still parses as before."""
    text = " ".join(text.split())
    if quoting == "'":
        return text.replace("'", "''")
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')  # as a double-quoted string
    if quoting == '"':
        return escaped
    return f'"{escaped}"' if _YAML_NEEDS_QUOTES.search(text) else text


# The characters every inline mark of Markdown needs one of (emphasis, code, links, images,
# inline HTML, autolinks): a file's count of them bounds the inline tokens markdown-it makes.
MARKS = "*_`[<"


def escape_markdown(text: str) -> str:
    return re.sub(r"([\\`*_\[\]<>])", r"\\\1", text)


def _markdown_segment(children: list) -> list[html_format.Part]:
    """An inline token's children as a one-segment page of `Element`s written as Markdown."""
    builder = MarkupBuilder()
    stack: list[int] = []
    verbatim: set[int] = set()
    for child in children:
        kind = child.type
        if kind == "text":
            builder.text(child.content)
        elif kind == "softbreak":
            builder.text(" ")
        elif kind == "hardbreak":
            builder.empty(html_format.Element("<br>"), "\n")
        elif kind.endswith("_open") and kind != "link_open":
            stack.append(builder.open(html_format.Element(child.markup, child.markup)))
        elif kind == "link_open" and child.markup == "autolink":
            stack.append(builder.open(html_format.Element("<", ">")))
            verbatim.add(stack[-1])
        elif kind == "link_open":
            href, title = child.attrs.get("href", ""), child.attrs.get("title")
            end = f"]({href}" + (f' "{title}"' if title else "") + ")"
            stack.append(builder.open(html_format.Element("[", end)))
        elif kind.endswith("_close") and stack:
            builder.close(stack.pop())
        elif kind == "code_inline":
            handle = builder.open(html_format.Element(child.markup, child.markup, child.content))
            builder.text(child.content)
            builder.close(handle)
            verbatim.add(handle)
        else:  # an image, inline HTML: kept as written
            raw = child.content if kind == "html_inline" else _image(child)
            builder.empty(html_format.Element(raw))
    return [html_format.Segment(builder.build(), "", verbatim)]


def _image(token) -> str:
    title = token.attrs.get("title")
    return f"![{token.content}]({token.attrs.get('src', '')}" + (f' "{title}"' if title else "") + ")"


def read_markdown(data: bytes, limits: Limits) -> MarkdownDocument:
    from markdown_it import MarkdownIt  # the serving path imports it only for Markdown files

    text = decode_text(data, "Markdown")
    tally = Tally(limits, "Markdown")
    tally.add("lines", line_count(text))  # counted before the text is cut into them
    tally.add("tags", sum(text.count(mark) for mark in MARKS))  # and before markdown-it makes a token of each
    lines = text.splitlines(keepends=True)
    found, pages, notes = [], [], Counter()
    quoting: dict[int, str] = {}
    front = front_matter_end(lines)
    toml = bool(front) and lines[0].startswith("+")
    for number in range(1, max(front - 1, 1)):
        spot = front_matter_value(lines[number], toml)
        if spot is None or not has_words(lines[number][spot[0] : spot[1]]):
            continue
        value = lines[number][spot[0] : spot[1]]
        builder = MarkupBuilder()
        builder.text(value.replace("''", "'") if spot[2] == "'" else value)
        quoting[len(pages)] = spot[2]
        tally.add("segments")
        found.append((number, number + 1, [(number, spot[0], spot[1])]))
        pages.append([html_format.Segment(builder.build(), "", set())])
    # The Markdown parser sees the front matter as blank lines, so the line numbers it maps hold.
    parsed = "".join("\n" for _ in lines[:front]) + "".join(lines[front:])
    cursor: dict[int, int] = {}  # per line, where the last content found ends (table cells)
    for token in MarkdownIt("commonmark").enable("table").parse(parsed):
        if token.type == "html_block":
            notes["HTML blocks"] += 1
        if token.type != "inline" or not token.map or not has_words(token.content):
            continue
        spans, line = [], token.map[0]
        for content_line in token.content.split("\n"):
            while line < token.map[1] and lines[line].find(content_line, cursor.get(line, 0)) < 0:
                line += 1
            if line >= token.map[1]:
                spans = []
                break
            start = lines[line].find(content_line, cursor.get(line, 0))
            spans.append((line, start, start + len(content_line)))
            cursor[line] = start + len(content_line)
            line += 1
        if not spans:
            notes["Markdown runs not found in their lines"] += 1
            continue
        found.append((token.map[0], token.map[1], spans))
        tally.add("segments")
        pages.append(_markdown_segment(token.children or []))
    document = MarkdownDocument(lines, found, pages, quoting=quoting)
    document.notes = notes
    return document
