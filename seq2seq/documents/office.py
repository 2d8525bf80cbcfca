"""Word and PowerPoint paragraphs as segments: the runs' formatting is the inline markup.

In WordprocessingML (`w:p`) and DrawingML (`a:p`) a paragraph is a row of runs, each with
its properties (`rPr`: bold, italic, underline, colour, font, a PowerPoint hyperlink) and
its text. The paragraph is the segment; its markup is read as:

- the **base** formatting: the run properties that hold the most characters (what most of
  the paragraph looks like) are no tag: text in them is plain;
- every other formatting, over consecutive runs that share it, is a tag (`Format`);
- containers around runs (Word's `w:hyperlink`, `w:ins`, `w:smartTag`, `w:customXml`) are
  tags (`Container`) holding format tags, as in the source;
- a tab or line break inside a run (`RunItem`), and everything a run or a paragraph holds
  that is not text -- a field (`w:fldChar` ... `w:fldChar`, `w:fldSimple`, `a:fld`), a
  drawing or text box, a footnote reference, a bookmark, a comment mark, an equation -- is
  an empty element (`Opaque`), moved back whole where it stood: a text box's own paragraphs
  are segments of their own. Spelling marks (`w:proofErr`) and rendering hints
  (`w:lastRenderedPageBreak`) describe the source text and are left out.

Run properties are compared without their language and proofing attributes (`lang`,
`dirty`, `err`, `w:lang`, `w:noProof`): runs that differ only there are one formatting.
`write_paragraph` writes the placed translation as new runs: each piece of text in the
innermost format tag over it (else the base), containers written again around them.
`OfficeDocument` is a DOCX or PPTX read as these paragraphs (the formats' readers:
`seq2seq.documents.formats.docx`, `.pptx`), written back with stable ZIP entry times.
"""

from __future__ import annotations

import copy
import io
import zipfile
from collections import Counter
from dataclasses import dataclass, field

from lxml import etree

from seq2seq.documents.formats.limits import Tally
from seq2seq.documents.markup import Marked, MarkupBuilder, Placed
from seq2seq.documents.xml import local

WORD_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
DRAWING_NS = "http://schemas.openxmlformats.org/drawingml/2006/main"
XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"


@dataclass(frozen=True)
class Scheme:
    """The names of one markup language's paragraph parts."""

    ns: str
    containers: frozenset[str]  # elements around runs carried as tags
    tail: frozenset[str]  # paragraph children kept last (DrawingML's end-of-paragraph properties)
    breaks: dict  # paragraph- or run-level element -> the text it stands for
    dropped: frozenset[str]  # children that describe the source text: left out
    preserve_space: bool  # text elements carry xml:space="preserve"

    def tag(self, name: str) -> str:
        return f"{{{self.ns}}}{name}"


WORD = Scheme(
    WORD_NS,
    frozenset({"hyperlink", "ins", "smartTag", "customXml"}),
    frozenset(),
    {"tab": " ", "br": "\n", "cr": "\n", "ptab": " "},
    frozenset({"proofErr", "lastRenderedPageBreak"}),
    True,
)
DRAWING = Scheme(DRAWING_NS, frozenset(), frozenset({"endParaRPr"}), {"br": "\n"}, frozenset(), False)
# Attributes and children of run properties that say nothing about the look.
UNSEEN_ATTRIBUTES = frozenset({"lang", "altLang", "dirty", "err", "noProof", "smtClean", "bmk"})
UNSEEN_CHILDREN = frozenset({"lang", "noProof", "rtl", "specVanish"})
RUN_CONTENT = frozenset({"rPr", "t", "noBreakHyphen", "softHyphen"})


@dataclass
class Format:
    """A formatting other than the base: the run properties to write its text with."""

    properties: etree._Element | None


@dataclass
class Container:
    """An element around runs (a Word hyperlink): written again with its attributes."""

    element: etree._Element


@dataclass
class RunItem:
    """A tab or line break inside a run, written back in a run of its own properties."""

    properties: etree._Element | None
    element: etree._Element


@dataclass
class Opaque:
    """Elements moved back whole (a field's runs, a drawing's run, a bookmark)."""

    elements: list[etree._Element]


def properties_key(properties: etree._Element | None) -> str:
    """Run properties as a comparable string, without what does not show (module doc)."""
    if properties is None:
        return ""
    seen = copy.deepcopy(properties)
    for element in seen.iter():
        for name in list(element.attrib):
            if etree.QName(name).localname in UNSEEN_ATTRIBUTES:
                del element.attrib[name]
    for child in list(seen):
        if local(child) in UNSEEN_CHILDREN:
            seen.remove(child)
    if not len(seen) and not seen.attrib:
        return ""
    return etree.tostring(seen, method="c14n").decode()


@dataclass
class Paragraph:
    """A paragraph read as a segment, and what writing it back needs."""

    element: etree._Element
    scheme: Scheme
    marked: Marked
    base: etree._Element | None  # the base run properties


def _field_end(runs: list[etree._Element], start: int, scheme: Scheme) -> int:
    """The index after the run that ends the complex field begun at `runs[start]`."""
    depth = 0
    for index in range(start, len(runs)):
        for mark in runs[index].iter(scheme.tag("fldChar")):
            kind = mark.get(scheme.tag("fldCharType"))
            depth += 1 if kind == "begin" else -1 if kind == "end" else 0
        if depth <= 0:
            return index + 1
    return len(runs)


def _text_runs(paragraph: etree._Element, scheme: Scheme) -> list[etree._Element]:
    return [run for run in paragraph.iter(scheme.tag("r")) if run.find(scheme.tag("t")) is not None]


def read_paragraph(paragraph: etree._Element, scheme: Scheme, tally: Tally | None = None) -> Paragraph:
    """The paragraph's segment (module doc), counted in `tally` (a segment and its tags)."""
    weight: Counter = Counter()
    found: dict[str, etree._Element | None] = {}
    for run in _text_runs(paragraph, scheme):
        key = properties_key(run.find(scheme.tag("rPr")))
        weight[key] += sum(len(t.text or "") for t in run.iter(scheme.tag("t")))
        found.setdefault(key, run.find(scheme.tag("rPr")))
    base_key = weight.most_common(1)[0][0] if weight else ""
    builder = MarkupBuilder(tally)
    current: list = [None, None]  # the open format tag's handle and key

    def close_format() -> None:
        if current[0] is not None:
            builder.close(current[0])
        current[0] = current[1] = None

    def run_format(properties: etree._Element | None) -> None:
        key = properties_key(properties)
        if key == current[1] or (current[0] is None and key == base_key):
            return
        close_format()
        if key != base_key:
            current[0], current[1] = builder.open(Format(properties)), key

    def walk(parent: etree._Element) -> None:
        children = list(parent)
        index = 0
        while index < len(children):
            child = children[index]
            name = local(child)
            index += 1
            if name == "pPr" or name in scheme.tail or name in scheme.dropped:
                continue
            if name == "r" and child.find(f".//{scheme.tag('fldChar')}") is not None:
                end = _field_end(children, index - 1, scheme)
                builder.empty(Opaque(children[index - 1 : end]))
                index = end
            elif name == "r" and all(local(c) in RUN_CONTENT or local(c) in scheme.breaks for c in child):
                properties = child.find(scheme.tag("rPr"))
                run_format(properties)
                for item in child:
                    item_name = local(item)
                    if item_name == "t":
                        builder.text(item.text or "")
                    elif item_name == "noBreakHyphen":
                        builder.text("-")
                    elif item_name in scheme.breaks:
                        builder.empty(RunItem(properties, item), scheme.breaks[item_name])
            elif name in scheme.containers:
                close_format()
                handle = builder.open(Container(child))
                walk(child)
                close_format()
                builder.close(handle)
            elif name in scheme.breaks:  # DrawingML's a:br: a paragraph-level line break
                builder.empty(Opaque([child]), scheme.breaks[name])
            elif name not in scheme.dropped:
                builder.empty(Opaque([child]))

    walk(paragraph)
    close_format()
    return Paragraph(paragraph, scheme, builder.build(), found.get(base_key))


def _run(scheme: Scheme, properties: etree._Element | None) -> etree._Element:
    run = etree.Element(scheme.tag("r"))
    if properties is not None:
        run.append(copy.deepcopy(properties))
    return run


def write_paragraph(paragraph: Paragraph, placed: Placed) -> None:
    """Replace the paragraph's runs with the placed translation (module doc)."""
    scheme, element = paragraph.scheme, paragraph.element
    kept_first = [c for c in element if local(c) == "pPr"]
    kept_last = [c for c in element if local(c) in scheme.tail]
    for child in list(element):
        element.remove(child)
    element.extend(kept_first)
    stack: list[etree._Element] = [element]
    formats: list[Format] = []

    for kind, value in placed.events():
        data = placed.tags[value].data if kind != "text" else None
        if kind == "text":
            run = _run(scheme, formats[-1].properties if formats else paragraph.base)
            text = etree.SubElement(run, scheme.tag("t"))
            text.text = value.replace("\n", " ")
            if scheme.preserve_space:
                text.set(XML_SPACE, "preserve")
            stack[-1].append(run)
        elif kind == "open" and isinstance(data, Format):
            formats.append(data)
        elif kind == "open":
            source = data.element
            opened = etree.SubElement(stack[-1], source.tag, attrib=dict(source.attrib))
            opened.extend(copy.deepcopy(c) for c in source if local(c).endswith("Pr"))
            stack.append(opened)
        elif kind == "close" and isinstance(data, Format):
            formats.remove(data)
        elif kind == "close":
            stack.pop()
        elif isinstance(data, RunItem):
            run = _run(scheme, data.properties)
            run.append(data.element)
            stack[-1].append(run)
        elif isinstance(data, Opaque):
            stack[-1].extend(data.elements)
        elif isinstance(data, Container):  # a container that held no words: kept, empty
            source = data.element
            stack[-1].append(etree.Element(source.tag, attrib=dict(source.attrib)))
    element.extend(kept_last)


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
