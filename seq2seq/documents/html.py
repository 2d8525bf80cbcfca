"""HTML as segments with inline markup: read with the standard library's HTML tokenizer.

`read_html(markup)` cuts a page or a fragment into raw parts that pass through as written
and segments (`Marked`) to translate. Its tokens are the HTML standard's
(`seq2seq.documents.html_tokens`), so nothing a browser reads as text, or as part of a
comment, an attribute or a raw text element, is ever taken for a tag and moved:

- block elements (`p`, `li`, `td`, `h1`..., `div`, `title`) and `br` delimit segments;
- inline elements (`b`, `i`, `em`, `strong`, `a`, `span`, ...) are the segment's tags, their
  start tags kept byte for byte (attributes included, `title="a>b"` too);
- the elements whose content is not markup (`script`, `style`, `xmp`, `iframe`, `noembed`,
  `noframes`, `noscript`, `textarea`, `plaintext`; `svg` and `math`) and `pre`, `template`
  and `object` are kept whole, as one unit: between segments they pass through, inside one
  (within an inline element, `<b><script>...</script></b>`) they are an element without text,
  placed where the word before them goes; `title` is a segment of its text alone (an inline
  `title`, with `blocks=False`, is kept whole too). Comments, doctypes and processing
  instructions pass through or are placed so; what runs unfinished to the end (an unclosed
  comment, `<plaintext>`) stays at the end;
- inline `code`, `kbd`, `samp` and `var`, and any inline element marked `translate="no"` or
  `class="notranslate"`, are carried as elements whose content is kept as written: the model
  reads the sentence with it, and the target words it lands on are replaced by the original
  content; a block so marked passes through whole;
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

from seq2seq.documents.formats.limits import Tally
from seq2seq.documents.html_tokens import Token, tag_attributes, tokens
from seq2seq.documents.markup import Marked, MarkupBuilder, Placed

BLOCKS = frozenset(
    """address article aside blockquote body br caption center dd details dialog dir div dl dt fieldset figcaption
    figure footer form frameset h1 h2 h3 h4 h5 h6 head header hgroup hr html legend li main menu nav ol optgroup
    option p section select summary table tbody td tfoot th thead title tr ul""".split()  # noqa: SIM905
)
# Elements kept whole with what they hold (besides RAW_TEXT and FOREIGN, whose content is no markup).
KEPT_WHOLE = frozenset(["pre", "template", "object"])
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


class _Reader:
    def __init__(self, blocks: bool, attributes: bool, tally: Tally):
        self.blocks = blocks
        self.translate_attributes = attributes
        self.tally = tally
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
        """End the segment being read (its inline elements end with it)."""
        if self.builder is not None:
            self.tally.add("segments", len(self.attributes) + 1)
            self.parts.extend(self.attributes)
            self.parts.append(Segment(self.builder.build(), "".join(self.raw), self.verbatim, elements=self.elements))
            self.builder, self.open = None, []

    def passthrough(self, raw: str) -> None:
        self.flush()
        self.parts.append(raw)

    def passthrough_tag(self, raw: str) -> None:
        """A tag outside the segments: its translated attributes become segments in place."""
        self.flush()
        at = 0
        for begin, end, segment in attribute_segments(raw) if self.translate_attributes else []:
            self.tally.add("segments")
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
        for position in range(len(self.open) - 1, -1, -1):  # `open` is empty between segments
            if self.open[position][0] == name and self.builder is not None:
                _, handle, element = self.open.pop(position)
                element.end = raw
                self.builder.close(handle)
                self.raw.append(raw)
                return
        self.element(Element(raw), raw)  # an end tag whose start is not in this segment

    def unit(self, start: str, content: str, end: str) -> None:
        """An element kept whole with its content: between segments it passes through, inside
        one (or in a single segment) it is an element without text."""
        if self.blocks and self.builder is None:
            self.passthrough_tag(start)
            self.passthrough(content + end)
        else:
            self.element(Element(start, end, content), start + content + end)

    def verbatim_element(self, start: str, inside: list[Token], end: str) -> None:
        """An element whose content the model reads but which is written back as it was."""
        builder = self.segment()
        content = "".join(raw for _, _, raw in inside)
        handle = builder.open(self.attach(Element(start, end, content)))
        text = SPACES.sub(" ", html.unescape("".join(raw for kind, _, raw in inside if kind == "text")))
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


def kept_as_written(attributes: dict[str, str]) -> bool:
    """An element whose content and attributes are not to be translated: `translate="no"`
    (HTML's own attribute) or `class="notranslate"` (the convention of translation tools)."""
    return (attributes.get("translate") or "").strip().lower() == "no" or "notranslate" in (
        attributes.get("class") or ""
    ).split()


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
    if kept_as_written(values):
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


def read_html(
    markup: str, blocks: bool = True, attributes: bool | None = None, tally: Tally | None = None
) -> list[Part]:
    """`markup` as raw parts and segments, in order (module doc); their concatenation, with
    every segment as its `raw` and the `attribute` segments left out, is `markup` exactly.
    `attributes`: whether attribute values are segments too (default: with `blocks`).
    `tally`: counts tags and segments against a file's limits while reading, refusing past them."""
    tally = tally or Tally.unlimited("HTML")
    found = tokens(markup, tally)
    reader = _Reader(blocks, blocks if attributes is None else attributes, tally)
    index = 0
    while index < len(found):
        kind, name, raw = found[index]
        if kind == "start" and index + 1 < len(found) and found[index + 1][0] == "raw":  # RAW_TEXT, FOREIGN
            content, index = found[index + 1][2], index + 2
            end = found[index][2] if index < len(found) and found[index][:2] == ("end", name) else ""
            index += bool(end)
            if blocks and name == "title":  # a segment of its text alone
                reader.empty(name, raw)
                reader.text(content)
                reader.end(name, end)
            else:
                reader.unit(raw, content, end)
            continue
        marked = kind == "start" and name not in VOID and kept_as_written(tag_attributes(raw))
        if kind == "start" and (name in KEPT_WHOLE or name in VERBATIM or marked):
            stop = _until_end(found, index, name)
            end = found[stop][2] if stop < len(found) else ""
            inside, index = found[index + 1 : stop], stop + 1
            if inside and inside[-1][0] == "tail":  # unfinished to the end: it stays at the end
                reader.passthrough(raw + "".join(r for _, _, r in inside))
            elif blocks and (name in BLOCKS or (name in KEPT_WHOLE and reader.builder is None)):
                (reader.passthrough if marked else reader.passthrough_tag)(raw)  # marked: attributes kept too
                reader.passthrough("".join(r for _, _, r in inside) + end)
            elif name in KEPT_WHOLE:
                reader.unit(raw, "".join(r for _, _, r in inside), end)
            else:
                reader.verbatim_element(raw, inside, end)
            continue
        if kind == "text":
            reader.text(raw)
        elif kind == "start":
            reader.start(name, raw)
        elif kind == "empty":
            reader.empty(name, raw)
        elif kind == "end":
            reader.end(name, raw)
        elif kind == "tail":  # runs unfinished to the end: never moved
            reader.passthrough(raw)
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
