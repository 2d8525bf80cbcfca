"""Whole files as segments with their inline markup, read and written within limits.

Each format reads a file's bytes into a `Document` -- its segments (`Marked`), what it
kept as it was without translating (`notes`), and how to write the file back with the
placed translations -- and `translate_file` runs one through a `Translate`:

- txt: each line with words; no markup.
- html, htm: blocks (`seq2seq.documents.html`); inline elements carried.
- docx (python-docx): every paragraph of the body, tables, headers, footers, footnotes,
  endnotes, comments and text boxes; the runs' formatting, hyperlinks as markup, fields,
  tabs and drawings kept where they stood (`seq2seq.documents.office`).
- pptx (python-pptx): every paragraph of every slide's shapes and tables, and its notes;
  the runs' formatting (hyperlinks are run properties there).
- odt (lxml on the ODF XML): `text:p` and `text:h` of content.xml and styles.xml (headers,
  footers), footnotes and frames included; `text:span` and `text:a` carried, fields kept.
- xlf, xliff: XLIFF 1.2 `trans-unit` sources, written to their `target` (state
  needs-review-translation); `<g>`, `<x/>`, `<bx/>`, `<ex/>` carried, `<ph>`, `<bpt>`,
  `<ept>`, `<it>` kept whole.
- srt: each cue's text (numbers and timings untouched), `<i>`, `<b>`, `<font>` carried.
- md (markdown-it-py): paragraphs, headings, list items and table cells, replaced in their
  lines; emphasis and links carried, code spans kept as written, code blocks and HTML
  blocks untouched.

A document is an attack surface: ZIP formats (docx, pptx, odt) are checked before any
parser sees them -- entries, total uncompressed size and compression ratio (zip bombs),
and path names (absolute, `..`, drive letters) -- XML is parsed with entities off
(`seq2seq.documents.xml.parse_xml`; python-docx and python-pptx parse with
`resolve_entities=False`), and a file that does not parse as its format says raises
`DocumentError` naming the format; one over a limit raises `DocumentTooLarge`. Nothing is
written to disk: files are read and written in memory.
"""

from __future__ import annotations

import copy
import io
import re
import zipfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Protocol

from lxml import etree

from seq2seq.core.alignment import to_pharaoh
from seq2seq.documents import html as html_format
from seq2seq.documents.markup import Marked, MarkupBuilder, Placed
from seq2seq.documents.office import DRAWING, WORD, Opaque, Paragraph, read_paragraph, write_paragraph
from seq2seq.documents.translate import PlacementReport, Translate, Translation, has_words, place_segments
from seq2seq.documents.xml import Rules, XMLInputError, local, parse_xml, read_element, write_element


class DocumentError(ValueError):
    """The file does not parse as its format says (the service answers 400, naming the format)."""


class DocumentTooLarge(DocumentError):
    """The file is over a limit: bytes, uncompressed size, ratio, characters (413)."""


@dataclass(frozen=True)
class Limits:
    """What a document may hold before it is parsed or translated."""

    max_unzipped_bytes: int = 200 << 20  # all entries of a ZIP format, uncompressed
    max_ratio: float = 200.0  # uncompressed / compressed, per entry: beyond it a zip bomb
    max_entries: int = 5000
    max_characters: int = 0  # characters of the segments to translate (0: no limit)


class Document(Protocol):
    """A file read as segments (see the module doc)."""

    segments: list[Marked]
    notes: Counter  # what the file holds that was kept as it was, untranslated: kind -> count

    def write(self, placed: list[Placed | None], language: str = "") -> bytes:
        """The file with the placed translations, in `language` (where the format records one)."""
        ...


# --------------------------------------------------------------------------- limits


def check_zip(data: bytes, kind: str, limits: Limits) -> zipfile.ZipFile:
    """The ZIP archive of a docx/pptx/odt, checked before any parser reads it (module doc)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        entries = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as error:
        raise DocumentError(f"not a valid {kind.upper()} file (not a ZIP archive: {error})") from None
    if len(entries) > limits.max_entries:
        raise DocumentTooLarge(f"the {kind.upper()} file has {len(entries)} entries (at most {limits.max_entries})")
    total = 0
    for entry in entries:
        name = entry.filename
        path = PurePosixPath(name)
        if name.startswith(("/", "\\")) or "\\" in name or ".." in path.parts or re.match(r"^[A-Za-z]:", name):
            raise DocumentError(f"not a valid {kind.upper()} file: unsafe path name in the archive: {name[:80]!r}")
        total += entry.file_size
        if entry.file_size > 1 << 16 and entry.file_size > limits.max_ratio * max(1, entry.compress_size):
            raise DocumentTooLarge(
                f"the {kind.upper()} file's entry {name[:80]!r} expands "
                f"{entry.file_size / max(1, entry.compress_size):.0f} times (at most {limits.max_ratio:g}): "
                "refused as a zip bomb"
            )
    if total > limits.max_unzipped_bytes:
        raise DocumentTooLarge(
            f"the {kind.upper()} file expands to {total} bytes (at most {limits.max_unzipped_bytes})"
        )
    return archive


def decode_text(data: bytes, kind: str) -> str:
    """UTF-8 text (a byte order mark is dropped); DocumentError otherwise."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise DocumentError(f"not a valid {kind} file: not UTF-8 text (byte {error.start})") from None


# --------------------------------------------------------------------------- plain text


@dataclass
class TextDocument:
    """A text file: each line with words is a segment; line endings kept."""

    lines: list[str]
    segments: list[Marked] = field(default_factory=list)
    notes: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.segments = [Marked(line.rstrip("\r\n")) for line in self.lines]

    def write(self, placed: list[Placed | None], language: str = "") -> bytes:
        out = []
        for line, translation in zip(self.lines, placed):
            ending = line[len(line.rstrip("\r\n")) :]
            out.append((line.rstrip("\r\n") if translation is None else translation.text) + ending)
        return "".join(out).encode()


def read_text(data: bytes, limits: Limits) -> TextDocument:
    return TextDocument(decode_text(data, "TXT").splitlines(keepends=True))


# --------------------------------------------------------------------------- HTML


@dataclass
class HtmlDocument:
    parts: list[html_format.Part]
    segments: list[Marked] = field(default_factory=list)
    notes: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.segments = [segment.marked for segment in html_format.segments(self.parts)]

    def write(self, placed: list[Placed | None], language: str = "") -> bytes:
        return html_format.write_html(self.parts, placed).encode()


def read_page(data: bytes, limits: Limits) -> HtmlDocument:
    return HtmlDocument(html_format.read_html(decode_text(data, "HTML")))


# --------------------------------------------------------------------------- SRT

TIMING = re.compile(r"^\d{1,2}:\d{2}:\d{2}[,.]\d{1,3} --> \d{1,2}:\d{2}:\d{2}[,.]\d{1,3}")


@dataclass
class SubtitleDocument:
    """Cues: their number and timing lines untouched, their text one segment (its lines
    joined; the translation is broken into as many lines, at the spaces nearest to even)."""

    cues: list[tuple[list[str], list[str], str]]  # head lines, text lines, the blank lines after
    segments: list[Marked] = field(default_factory=list)
    notes: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.pages = [html_format.read_html(" ".join(text), blocks=False) for _, text, _ in self.cues]
        self.segments = [
            (html_format.segments(parts) or [html_format.Segment(Marked(""), "")])[0].marked for parts in self.pages
        ]

    def write(self, placed: list[Placed | None], language: str = "") -> bytes:
        out = []
        for (head, text, gap), parts, translation in zip(self.cues, self.pages, placed):
            lines = (
                text if translation is None else break_lines(html_format.write_html(parts, [translation]), len(text))
            )
            out.append("".join(head) + "\n".join(lines) + ("\n" if lines else "") + gap)
        return "".join(out).encode()


def break_lines(marked: str, count: int) -> list[str]:
    """`marked` (text with inline tags) in `count` lines, broken at spaces outside tags, each
    line near an even share of the visible characters."""
    if count <= 1:
        return [marked]
    spaces, visible, inside = [], 0, False
    for index, character in enumerate(marked):
        inside = (inside or character == "<") and character != ">"
        if not inside and character != ">":
            visible += 1
            if character == " ":
                spaces.append((index, visible))
    lines, start = [], 0
    for k in range(1, count):
        wanted = visible * k / count
        candidates = [(abs(v - wanted), i) for i, v in spaces if i > start]
        if not candidates:
            break
        cut = min(candidates)[1]
        lines.append(marked[start:cut])
        start = cut + 1
    return lines + [marked[start:]]


def read_subtitles(data: bytes, limits: Limits) -> SubtitleDocument:
    lines = decode_text(data, "SRT").replace("\r\n", "\n").split("\n")
    cues, index = [], 0
    while index < len(lines):
        if not lines[index].strip():
            index += 1
            continue
        if not lines[index].strip().isdigit() or index + 1 >= len(lines) or not TIMING.match(lines[index + 1]):
            raise DocumentError(f"not a valid SRT file: line {index + 1} is not a cue number followed by its timing")
        head = [lines[index] + "\n", lines[index + 1] + "\n"]
        index += 2
        text = []
        while index < len(lines) and lines[index].strip():
            text.append(lines[index])
            index += 1
        gap = ""
        while index < len(lines) and not lines[index].strip():
            gap += "\n"
            index += 1
        cues.append((head, text, gap if index < len(lines) else ""))
    if not cues:
        raise DocumentError("not a valid SRT file: no cues")
    return SubtitleDocument(cues)


# --------------------------------------------------------------------------- Markdown


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
        pages.append(_markdown_segment(token.children or []))
    document = MarkdownDocument(lines, found, pages, quoting=quoting)
    document.notes = notes
    return document


# --------------------------------------------------------------------------- XLIFF 1.2


@dataclass
class XliffDocument:
    tree: etree._ElementTree
    targets: list[etree._Element]
    segments: list[Marked] = field(default_factory=list)
    notes: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.segments = [read_element(target) for target in self.targets]

    def write(self, placed: list[Placed | None], language: str = "") -> bytes:
        for target, translation in zip(self.targets, placed):
            if translation is not None:
                write_element(target, translation)
                target.set("state", "needs-review-translation")  # machine translated: a person reviews
                if language:
                    target.set("{http://www.w3.org/XML/1998/namespace}lang", language)
        if language:
            for file in self.tree.getroot().iter("{*}file"):
                file.set("target-language", language)
        return etree.tostring(self.tree, xml_declaration=True, encoding="UTF-8")


def read_xliff(data: bytes, limits: Limits) -> XliffDocument:
    try:
        tree = parse_xml(data)
    except XMLInputError as error:
        raise DocumentError(f"not a valid XLIFF file: {error}") from None
    root = tree.getroot()
    if local(root) != "xliff" or not root.get("version", "").startswith("1."):
        raise DocumentError('not a valid XLIFF file: the root is not <xliff version="1.x">')
    namespace = etree.QName(root).namespace
    targets = []
    for unit in root.iter(f"{{{namespace}}}trans-unit" if namespace else "trans-unit"):
        source = next((child for child in unit if local(child) == "source"), None)
        if source is None or unit.get("translate") == "no":
            continue
        old = next((child for child in unit if local(child) == "target"), None)
        target = etree.Element(source.tag.replace("source", "target"), attrib=dict(source.attrib))
        target.text = source.text
        for child in source:
            target.append(copy.deepcopy(child))  # a copy, tail included
        target.tail = source.tail
        if old is not None:
            unit.replace(old, target)
        else:
            source.addnext(target)
        targets.append(target)
    return XliffDocument(tree, targets)


# --------------------------------------------------------------------------- ODT

TEXT_NS = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
ODF_RULES = Rules(
    opaque=frozenset(),
    stand_ins={"tab": " ", "line-break": "\n", "soft-page-break": ""},
    spaces=frozenset({"s"}),
    all_opaque_but=frozenset({"span", "a", "meta"}),
)
# Opaque ODF elements whose own paragraphs are translated (or which hold no text).
ODF_PASSED = frozenset(
    """note frame annotation annotation-end bookmark bookmark-start bookmark-end reference-mark reference-mark-start
    reference-mark-end s tab line-break soft-page-break change-start change-end change toc-mark
    alphabetical-index-mark""".split()  # noqa: SIM905
)


@dataclass
class OdtDocument:
    archive: zipfile.ZipFile
    trees: dict[str, etree._ElementTree]
    paragraphs: list[etree._Element]
    segments: list[Marked] = field(default_factory=list)
    notes: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.segments = [read_element(paragraph, ODF_RULES) for paragraph in self.paragraphs]
        for segment in self.segments:
            for tag in segment.tags:
                if tag.empty and isinstance(tag.data.tag, str) and local(tag.data) not in ODF_PASSED:
                    self.notes[f"text:{local(tag.data)} elements"] += 1

    def write(self, placed: list[Placed | None], language: str = "") -> bytes:
        for paragraph, translation in zip(self.paragraphs, placed):
            if translation is not None:
                write_element(paragraph, translation, clean=lambda text: text.replace("\n", " "))
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as written:
            for entry in self.archive.infolist():  # mimetype first and stored, as ODF requires
                if entry.filename in self.trees:
                    data = etree.tostring(self.trees[entry.filename], xml_declaration=True, encoding="UTF-8")
                else:
                    data = self.archive.read(entry)
                written.writestr(entry, data, compress_type=entry.compress_type)
        return out.getvalue()


def read_odt(data: bytes, limits: Limits) -> OdtDocument:
    archive = check_zip(data, "odt", limits)
    names = set(archive.namelist())
    if (
        "content.xml" not in names or archive.read("mimetype") != b"application/vnd.oasis.opendocument.text"
        if "mimetype" in names
        else True
    ):
        raise DocumentError("not a valid ODT file: no content.xml, or its mimetype is not an OpenDocument text")
    trees = {}
    for name in ("content.xml", "styles.xml"):
        if name in names:
            try:
                trees[name] = parse_xml(archive.read(name))
            except XMLInputError as error:
                raise DocumentError(f"not a valid ODT file: {name}: {error}") from None
    paragraphs = [
        element for tree in trees.values() for element in tree.getroot().iter(f"{{{TEXT_NS}}}p", f"{{{TEXT_NS}}}h")
    ]
    return OdtDocument(archive, trees, paragraphs)


# --------------------------------------------------------------------------- DOCX and PPTX


@dataclass
class OfficeDocument:
    """A DOCX or PPTX: its package (python-docx / python-pptx) and its paragraphs."""

    package: object  # docx.Document or pptx.Presentation: what `save` writes
    paragraphs: list[Paragraph]
    segments: list[Marked] = field(default_factory=list)
    notes: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.segments = [paragraph.marked for paragraph in self.paragraphs]
        for paragraph in self.paragraphs:
            for tag in paragraph.marked.tags:
                if isinstance(tag.data, Opaque):
                    self.notes.update(_kept(element) for element in tag.data.elements[:1])
        self.notes.pop("", None)

    def write(self, placed: list[Placed | None], language: str = "") -> bytes:
        for paragraph, translation in zip(self.paragraphs, placed):
            if translation is not None:
                write_paragraph(paragraph, translation)
        out = io.BytesIO()
        self.package.save(out)
        return stable_zip(out.getvalue())


FIXED_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest time a ZIP entry can hold


def stable_zip(data: bytes) -> bytes:
    """The archive `data` with every entry's time fixed.

    python-docx and python-pptx stamp every entry with the current time (and so does an
    upload written by them), so the same document translated twice gave different bytes: a
    job's result and the synchronous answer, or two runs of the batch CLI, could not be
    compared or cached. Only the times change.
    """
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as saved, zipfile.ZipFile(out, "w") as written:
        for entry in saved.infolist():
            stamped = zipfile.ZipInfo(entry.filename, date_time=FIXED_ZIP_TIME)
            stamped.compress_type, stamped.external_attr = entry.compress_type, entry.external_attr
            stamped.create_system = entry.create_system
            written.writestr(stamped, saved.read(entry))
    return out.getvalue()


def _kept(element: etree._Element) -> str:
    """What an opaque element kept untranslated, for the notes ("" for what holds no text)."""
    if any(local(e) == "fldChar" for e in element.iter()) or local(element) in ("fldSimple", "fld"):
        return "fields"
    if local(element) in ("oMath", "oMathPara"):
        return "equations"
    if any(local(e) in ("object", "OLEObject") for e in element.iter()):
        return "embedded objects"
    if local(element) == "sdt":
        return "content controls"
    return ""


WORD_PARTS = frozenset(
    "application/vnd.openxmlformats-officedocument.wordprocessingml." + kind
    for kind in ("document.main+xml", "header+xml", "footer+xml", "footnotes+xml", "endnotes+xml", "comments+xml")
)
SLIDE_PARTS = frozenset(
    "application/vnd.openxmlformats-officedocument.presentationml." + kind for kind in ("slide+xml", "notesSlide+xml")
)


def read_docx(data: bytes, limits: Limits) -> OfficeDocument:
    check_zip(data, "docx", limits)
    import docx  # python-docx (MIT)
    from docx.opc.part import PartFactory, XmlPart

    # Footnotes and endnotes are plain parts to python-docx: read them as XML parts too (its
    # documented way to add a part type).
    for kind in ("footnotes+xml", "endnotes+xml"):
        PartFactory.part_type_for["application/vnd.openxmlformats-officedocument.wordprocessingml." + kind] = XmlPart
    try:
        document = docx.Document(io.BytesIO(data))
    except Exception as error:  # noqa: BLE001 - whatever the library raises, the file is not a DOCX
        raise DocumentError(f"not a valid DOCX file: {type(error).__name__}: {error}") from None
    paragraphs = [
        read_paragraph(element, WORD)
        for part in document.part.package.iter_parts()
        if part.content_type in WORD_PARTS and isinstance(part, XmlPart)
        for element in part.element.iter(WORD.tag("p"))
    ]
    return OfficeDocument(document, paragraphs)


def read_pptx(data: bytes, limits: Limits) -> OfficeDocument:
    check_zip(data, "pptx", limits)
    import pptx  # python-pptx (MIT)

    try:
        presentation = pptx.Presentation(io.BytesIO(data))
        slides = list(presentation.slides)
    except Exception as error:  # noqa: BLE001 - whatever the library raises, the file is not a PPTX
        raise DocumentError(f"not a valid PPTX file: {type(error).__name__}: {error}") from None
    elements = []
    for slide in slides:
        elements.append(slide.element)
        if slide.has_notes_slide:
            elements.append(slide.notes_slide.element)
    paragraphs = [read_paragraph(p, DRAWING) for element in elements for p in element.iter(DRAWING.tag("p"))]
    return OfficeDocument(presentation, paragraphs)


# --------------------------------------------------------------------------- the formats


@dataclass(frozen=True)
class FileFormat:
    name: str
    extensions: tuple[str, ...]
    media_type: str
    read: Callable[[bytes, Limits], Document]


FORMATS = {
    f.name: f
    for f in (
        FileFormat("txt", (".txt",), "text/plain; charset=utf-8", read_text),
        FileFormat("html", (".html", ".htm"), "text/html; charset=utf-8", read_page),
        FileFormat(
            "docx",
            (".docx",),
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            read_docx,
        ),
        FileFormat("odt", (".odt",), "application/vnd.oasis.opendocument.text", read_odt),
        FileFormat(
            "pptx",
            (".pptx",),
            "application/vnd.openxmlformats-officedocument.presentationml.presentation",
            read_pptx,
        ),
        FileFormat("xliff", (".xlf", ".xliff"), "application/x-xliff+xml", read_xliff),
        FileFormat("srt", (".srt",), "application/x-subrip; charset=utf-8", read_subtitles),
        FileFormat("md", (".md", ".markdown"), "text/markdown; charset=utf-8", read_markdown),
    )
}
EXTENSIONS = {extension: f for f in FORMATS.values() for extension in f.extensions}


def format_of(name: str, forced: str | None = None) -> FileFormat:
    """The format of a file by its extension (or `forced`, a format name or extension);
    DocumentError naming the supported ones otherwise."""
    wanted = forced or PurePosixPath(name.replace("\\", "/")).suffix
    key = wanted.lower().lstrip(".")
    found = FORMATS.get(key) or EXTENSIONS.get("." + key)
    if found is None:
        supported = ", ".join(sorted(EXTENSIONS))
        raise DocumentError(f"unsupported file format {wanted or '(no extension)'!r}: supported are {supported}")
    return found


def translated_name(name: str, target: str, file_format: FileFormat) -> str:
    """`report.docx` -> `report.en.docx`: the name a translated file is offered under."""
    path = PurePosixPath(name.replace("\\", "/")).name or "document"
    stem, dot, extension = path.rpartition(".")
    if not dot or "." + extension.lower() not in file_format.extensions:
        stem, extension = path, file_format.extensions[0].lstrip(".")
    return f"{stem}.{target}.{extension}"


@dataclass
class TranslatedFile:
    """A translated file, what happened to it, and every segment's alignment (the sidecar)."""

    data: bytes
    report: PlacementReport
    notes: dict[str, int]
    alignments: list[dict]

    @property
    def partial(self) -> bool:
        """Something was kept untranslated: a failed segment, or content the format keeps whole."""
        return bool(self.report.failed or self.notes)


def characters(document: Document) -> int:
    return sum(len(segment.text) for segment in document.segments if has_words(segment.text))


def read_document(data: bytes, file_format: FileFormat, limits: Limits = Limits()) -> Document:
    """Read and check a document: DocumentError if it does not parse as its format, or
    DocumentTooLarge if it is over `limits` (its characters counted before translating)."""
    try:
        document = file_format.read(data, limits)
    except DocumentError:
        raise
    except Exception as error:  # noqa: BLE001 - whatever else a reader meets in the bytes, they are not this format
        raise DocumentError(f"not a valid {file_format.name.upper()} file: {type(error).__name__}: {error}") from None
    count = characters(document)
    if limits.max_characters and count > limits.max_characters:
        raise DocumentTooLarge(
            f"the document has {count} characters of text to translate (at most {limits.max_characters})"
        )
    return document


def translate_document(document: Document, translate: Translate, language: str = "") -> TranslatedFile:
    """Translate a read document's segments (one `translate` call: the caller batches) and
    write it back, in `language` where the format records one; a segment that failed keeps
    its source and is counted in the report."""
    sidecar: list[dict] = []
    texts: list[str] = []

    def recorded(batch: list[str]) -> list[Translation | Exception]:
        results = translate(batch)
        texts.extend(batch)
        for text, result in zip(batch, results):
            if isinstance(result, Exception):
                sidecar.append({"source": text, "error": str(result)})
            else:
                sidecar.append(
                    {"source": text, "translation": result.text, "links": to_pharaoh(result.alignment.links)}
                )
        return results

    report = PlacementReport()
    placed = place_segments(document.segments, recorded, report)
    indexed = [index for index, segment in enumerate(document.segments) if has_words(segment.text)]
    for record, index in zip(sidecar, indexed):
        record["segment"] = index
    return TranslatedFile(document.write(placed, language), report, dict(document.notes), sidecar)
