"""HTML as segments with inline markup: read with the standard library's HTML tokenizer.

`read_html(markup)` cuts a page or a fragment into raw parts that pass through as written
and segments (`Marked`) to translate:

- block elements (`p`, `li`, `td`, `h1`..., `div`, `title`) and `br` delimit segments;
- inline elements (`b`, `i`, `em`, `strong`, `a`, `span`, ...) are the segment's tags, their
  start tags kept byte for byte (attributes included, `title="a>b"` too);
- `script`, `style`, `pre`, `textarea` (and `svg`, `math`, `template`) pass through with
  their contents, as do comments, doctypes and processing instructions; a comment left
  open at the end is a comment to the end, as browsers read it;
- inline `code`, `kbd`, `samp` and `var` are carried as elements whose content is kept as
  written: the model reads the sentence with it, and the target words it lands on are
  replaced by the original content;
- text is unescaped for the model and whitespace runs read as one space (HTML renders
  them so); a translation is always written escaped, quotes included;
- the text of the attributes a reader sees (`alt`, `title`, `placeholder`, `aria-label`, a
  button's `value`; quoted values with a word in them, on an element without
  `translate="no"`) is a segment of its own: in place, between the tag's other bytes, for a
  tag outside the segments (a block's, an image between blocks); for a tag inside a segment,
  an `attribute` segment just before that segment, whose translation `write_html` writes
  into the tag.

With `blocks=False` (a single segment: `/v1/align`'s marked text) every element is inline and
attributes are kept as written.
`render(placed)` writes a placed translation; `write_html(parts, placed)` the whole page.
A segment without a letter or digit, or not translated, is written back as it was.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from html.parser import HTMLParser

from seq2seq.documents.markup import Marked, MarkupBuilder, Placed

BLOCKS = frozenset(
    """address article aside blockquote body br caption center dd details dialog dir div dl dt fieldset figcaption
    figure footer form frameset h1 h2 h3 h4 h5 h6 head header hgroup hr html legend li main menu nav noscript ol
    optgroup option p section select summary table tbody td tfoot th thead title tr ul""".split()  # noqa: SIM905
)
RAW_BLOCKS = frozenset(["script", "style", "pre", "textarea", "template", "svg", "math", "iframe", "object"])
VERBATIM = frozenset(["code", "kbd", "samp", "var"])
VOID = frozenset(
    ["area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"]
)
SPACES = re.compile(r"[ \t\n\r\f]+")
TRANSLATED_ATTRIBUTES = frozenset(["alt", "title", "placeholder", "aria-label"])
# One attribute of a start tag (after its name): the name, then a quoted or bare value or none.
ATTRIBUTE = re.compile(r"""([^\s"'<>/=]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+)))?""")


@dataclass
class Element:
    """An HTML element as written: its start tag, its end tag ("" if never closed), and for
    an element kept as written (`code`, a comment, a stray end tag) its content."""

    start: str
    end: str = ""
    content: str | None = None
    # The translated attributes of `start`: (start, end) of each value in it, and its segment.
    attributes: list[tuple[int, int, Segment]] = field(default_factory=list)

    def whole(self, start: str | None = None) -> str:
        return (self.start if start is None else start) + (self.content or "") + self.end

    def start_with(self, written: dict[int, str]) -> str:
        """`start` with each translated attribute's value as `written` (by id of its segment)."""
        out = self.start
        for begin, end, segment in reversed(self.attributes):
            out = out[:begin] + written.get(id(segment), segment.raw) + out[end:]
        return out


@dataclass
class Segment:
    """A segment of a page: its marked text and the markup it was read from."""

    marked: Marked
    raw: str
    verbatim: set[int] = field(default_factory=set)  # tags whose content is kept as written
    # An attribute value of a tag inside the next segment that is not one: written in that tag.
    attribute: bool = False
    # (offset in `raw`, element) of its tags with translated attributes.
    elements: list[tuple[int, Element]] = field(default_factory=list)


Part = str | Segment


class _Tokens(HTMLParser):
    """(kind, tag name, start offset) of every token: the raw text of a token is the input
    between its start and the next token's, so nothing is re-serialised."""

    def __init__(self, markup: str):
        super().__init__(convert_charrefs=False)
        self.markup = markup
        self.lines = [0]
        for line in markup.splitlines(keepends=True):
            self.lines.append(self.lines[-1] + len(line))
        self.found: list[tuple[str, str, int]] = []

    def _at(self, kind: str, name: str = "") -> None:
        line, column = self.getpos()
        self.found.append((kind, name, self.lines[line - 1] + column))

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self._at("start", tag)

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        self._at("empty", tag)

    def handle_endtag(self, tag: str) -> None:
        self._at("end", tag)

    def handle_data(self, data: str) -> None:
        self._at("text")

    def handle_entityref(self, name: str) -> None:
        self._at("text")

    def handle_charref(self, name: str) -> None:
        self._at("text")

    def handle_comment(self, data: str) -> None:
        self._at("other")

    def handle_decl(self, decl: str) -> None:
        self._at("other")

    def handle_pi(self, data: str) -> None:
        self._at("other")

    def unknown_decl(self, data: str) -> None:
        self._at("other")


def tokens(markup: str) -> list[tuple[str, str, str]]:
    """(kind, tag name, raw text) of every token of `markup`, which they cover exactly.
    kind: start, end, empty (`<br/>`), text, other (comment, doctype, processing instruction)."""
    body, tail = markup, ""
    unclosed = markup.rfind("<!--")
    if unclosed >= 0 and markup.find("-->", unclosed + 4) < 0:
        body, tail = markup[:unclosed], markup[unclosed:]  # a comment to the end, as browsers read it
    parser = _Tokens(body)
    parser.feed(body)
    parser.close()
    found = parser.found
    out = []
    for index, (kind, name, start) in enumerate(found):
        end = found[index + 1][2] if index + 1 < len(found) else len(body)
        if end > start:
            out.append((kind, name, body[start:end]))
    if tail:
        out.append(("other", "", tail))
    return out


class _Reader:
    def __init__(self, blocks: bool, attributes: bool):
        self.blocks = blocks
        self.translate_attributes = attributes
        self.parts: list[Part] = []
        self.builder: MarkupBuilder | None = None
        self.raw: list[str] = []
        self.open: list[tuple[str, int, Element]] = []  # inline elements open in this segment
        self.verbatim: set[int] = set()
        self.space = False  # the segment's text so far ends in a space (runs read as one)
        self.attributes: list[Segment] = []  # the attribute segments of this segment's tags
        self.elements: list[tuple[int, Element]] = []

    def segment(self) -> MarkupBuilder:
        if self.builder is None:
            self.builder, self.raw, self.open, self.verbatim, self.space = MarkupBuilder(), [], [], set(), False
            self.attributes, self.elements = [], []
        return self.builder

    def flush(self) -> None:
        if self.builder is not None:
            self.parts.extend(self.attributes)
            self.parts.append(Segment(self.builder.build(), "".join(self.raw), self.verbatim, elements=self.elements))
            self.builder = None

    def passthrough(self, raw: str) -> None:
        self.flush()
        self.parts.append(raw)

    def passthrough_tag(self, raw: str) -> None:
        """A tag outside the segments: its translated attributes become segments in place."""
        self.flush()
        at = 0
        for begin, end, segment in attribute_segments(raw) if self.translate_attributes else []:
            self.parts.extend([raw[at:begin], segment])
            at = end
        self.parts.append(raw[at:])

    def attach(self, element: Element) -> Element:
        """An element of the segment: its translated attributes as `attribute` segments, and
        where it starts in the segment's raw text (call before adding its raw text)."""
        if self.translate_attributes:
            element.attributes = [
                (begin, end, replace(segment, attribute=True))
                for begin, end, segment in attribute_segments(element.start)
            ]
        if element.attributes:
            self.attributes.extend(segment for _, _, segment in element.attributes)
            self.elements.append((sum(len(raw) for raw in self.raw), element))
        return element

    def text(self, raw: str) -> None:
        if self.builder is None and not raw.strip():
            self.parts.append(raw)
            return
        builder = self.segment()
        plain = SPACES.sub(" ", html.unescape(raw))
        if self.space:
            plain = plain.lstrip(" ")
        if plain:
            builder.text(plain)
            self.space = plain.endswith(" ")
        self.raw.append(raw)

    def element(self, element: Element, raw: str, stand_in: str = "") -> None:
        """An element without translatable content, inside the segment (or between them);
        `stand_in`: the text it stands for (a line break)."""
        if self.builder is None and not self.blocks:
            self.segment()
        if self.builder is None:
            if element.start == raw:
                self.passthrough_tag(raw)
            else:
                self.parts.append(raw)
            return
        self.builder.empty(self.attach(element), "" if self.space else stand_in)
        self.space = bool(stand_in)  # a space after an image is kept; after a line break it is one
        self.raw.append(raw)

    def start(self, name: str, raw: str) -> None:
        if name in VOID or (self.blocks and name in BLOCKS):
            self.empty(name, raw)
            return
        builder = self.segment()
        handle = builder.open(self.attach(Element(raw)))
        self.open.append((name, handle, builder.tags[handle].data))
        self.raw.append(raw)

    def empty(self, name: str, raw: str) -> None:
        if self.blocks and name in BLOCKS:
            self.passthrough_tag(raw)
        else:
            self.element(Element(raw), raw, "\n" if name == "br" else "")

    def end(self, name: str, raw: str) -> None:
        if self.blocks and name in BLOCKS:
            self.passthrough(raw)
            return
        for position in range(len(self.open) - 1, -1, -1):
            if self.open[position][0] == name:
                _, handle, element = self.open.pop(position)
                element.end = raw
                assert self.builder is not None
                self.builder.close(handle)
                self.raw.append(raw)
                return
        self.element(Element(raw), raw)  # an end tag whose start is not in this segment

    def verbatim_element(self, start: str, content: str, end: str) -> None:
        builder = self.segment()
        handle = builder.open(self.attach(Element(start, end, content)))
        text = SPACES.sub(" ", html.unescape(re.sub(r"<[^>]*>", "", content)))
        builder.text(text)
        builder.close(handle)
        if text:
            self.verbatim.add(handle)
            self.space = text.endswith(" ")
        self.raw.append(start + content + end)


def _until_end(found: list[tuple[str, str, str]], index: int, name: str) -> int:
    """The index of the end tag that closes the element started at `index` (nested alike counted)."""
    depth = 0
    for position in range(index, len(found)):
        kind, tag, _ = found[position]
        if tag == name and kind == "start":
            depth += 1
        elif tag == name and kind == "end":
            depth -= 1
            if depth == 0:
                return position
    return len(found)


def attribute_segments(tag: str) -> list[tuple[int, int, Segment]]:
    """The translated attributes of a start tag (module doc): (start, end) of each value in
    `tag` and its segment (the value unescaped, whitespace runs as one space)."""
    name = re.match(r"<([A-Za-z][^\s/>]*)", tag)  # a start tag: not a comment, end tag or declaration
    if name is None:
        return []
    attributes = []  # (name, value or None, quoted value's span or None)
    for match in ATTRIBUTE.finditer(tag, name.end()):
        quoted = 2 if match.group(2) is not None else 3 if match.group(3) is not None else 0
        value = match.group(quoted) if quoted else match.group(4)
        attributes.append((match.group(1).lower(), value, match.span(quoted) if quoted else None))
    values = {key: (value or "").strip().lower() for key, value, _ in attributes}
    if values.get("translate") == "no":
        return []
    # A button's label is its value.
    button = name.group(1).lower() == "input" and values.get("type") in ("submit", "button", "reset")
    found = []
    for key, value, span in attributes:
        if span is None or not (key in TRANSLATED_ATTRIBUTES or (button and key == "value")):
            continue
        text = SPACES.sub(" ", html.unescape(value))
        if any(character.isalnum() for character in text):
            found.append((span[0], span[1], Segment(Marked(text), value)))
    return found


def read_html(markup: str, blocks: bool = True, attributes: bool | None = None) -> list[Part]:
    """`markup` as raw parts and segments, in order (module doc); their concatenation, with
    every segment as its `raw` and the `attribute` segments left out, is `markup` exactly.
    `attributes`: whether attribute values are segments too (default: with `blocks`)."""
    found = tokens(markup)
    reader = _Reader(blocks, blocks if attributes is None else attributes)
    index = 0
    while index < len(found):
        kind, name, raw = found[index]
        if kind == "start" and (name in RAW_BLOCKS or name in VERBATIM):
            stop = _until_end(found, index, name)
            content = "".join(r for _, _, r in found[index + 1 : stop])
            end = found[stop][2] if stop < len(found) else ""
            if name in VERBATIM:
                reader.verbatim_element(raw, content, end)
            elif blocks:
                reader.passthrough_tag(raw)
                reader.passthrough(content + end)
            else:
                reader.element(Element(raw, end, content), raw + content + end)
            index = stop + 1
            continue
        if kind == "text":
            reader.text(raw)
        elif kind == "start":
            reader.start(name, raw)
        elif kind == "empty":
            reader.empty(name, raw)
        elif kind == "end":
            reader.end(name, raw)
        else:
            reader.element(Element(raw), raw)
        index += 1
    reader.flush()
    return reader.parts


def escape_html(text: str) -> str:
    return html.escape(text, quote=True)


def render(
    placed: Placed,
    verbatim: set[int] = frozenset(),
    escape: Callable[[str], str] = escape_html,
    starts: dict[int, str] | None = None,
) -> str:
    """A placed translation as markup: the source's tags as written (`Element`s), the text
    escaped (HTML by default; Markdown writes its own). A tag in `verbatim` is written with
    its original content in place of the target text it covers. `starts`: start tags written
    otherwise (their attributes translated), by id of the element."""
    starts = starts or {}
    out: list[str] = []
    written: set[int] = set()
    inside: list[int] = []
    for kind, value in placed.events():
        element: Element = placed.tags[value].data if kind != "text" else None
        if kind == "text":
            if not any(index in verbatim for index in inside):
                out.append(escape(value))
        elif kind == "open":
            inside.append(value)
            if value in verbatim:
                if value not in written:
                    out.append(element.whole(starts.get(id(element))))
                    written.add(value)
            else:
                out.append(starts.get(id(element), element.start))
        elif kind == "close":
            inside.remove(value)
            if value not in verbatim:
                out.append(element.end)
        elif value not in written:
            out.append(element.whole(starts.get(id(element))))
            written.add(value)
    return "".join(out)


def segments(parts: list[Part]) -> list[Segment]:
    return [part for part in parts if isinstance(part, Segment)]


def write_html(parts: list[Part], placed: list[Placed | None]) -> str:
    """The page with each segment's placed translation (`placed`, one per segment of
    `parts`, in order); a segment without one (None) is written as it was."""
    out, found = [], iter(placed)
    written: dict[int, str] = {}  # the attribute segments' values, by id
    for part in parts:
        if isinstance(part, str):
            out.append(part)
            continue
        translation = next(found)
        if part.attribute:
            written[id(part)] = part.raw if translation is None else render(translation, part.verbatim)
            continue
        starts = {id(element): element.start_with(written) for _, element in part.elements}
        if translation is not None:
            out.append(render(translation, part.verbatim, starts=starts))
            continue
        raw = part.raw  # untranslated (an image alone in a paragraph): its tags' attributes may be
        for offset, element in reversed(part.elements):
            raw = raw[:offset] + starts[id(element)] + raw[offset + len(element.start) :]
        out.append(raw)
    return "".join(out)
