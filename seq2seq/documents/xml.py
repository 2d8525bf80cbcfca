"""XML elements as segments with inline markup (lxml): the `xml` text format, XLIFF and ODT.

`read_element(element, rules)` reads one segment element (an XLIFF `<source>`, an ODT
`<text:p>`): its text and tails are the plain text, its child elements the tags. `rules`
says, by local name, which children are *opaque* (kept whole and anchored where they
stood: XLIFF's native-code `<ph>`, `<bpt>`, `<ept>`, `<it>`; an ODT footnote or frame),
which stand for a character of the text (ODT's `<text:tab/>` a space, `<text:line-break/>`
a line break), which only encode spaces (ODT's `<text:s/>`: read as a space and not kept,
the translation has its own), and which are containers (`<g>`, `<mrk>`, `<text:span>`, `<text:a>`: the
inline markup carried onto the translation). Whitespace runs read as one space.

`write_element(element, placed)` replaces the element's content with the placed
translation: containers are written again (tag and attributes; properties children such
as DOCX's are not involved here), opaque children and stand-ins are moved back in whole
(so a footnote whose own paragraphs were translated keeps them), comments too.

`parse_xml(data)` is the one parser: entities are not expanded (a document declaring any
is refused), no DTD or network is loaded, and huge trees are refused (lxml's limits).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from lxml import etree

from seq2seq.documents.formats.limits import Tally
from seq2seq.documents.markup import Marked, MarkupBuilder, Placed

SPACES = re.compile(r"[ \t\n\r\f]+")
XLIFF_CODES = frozenset({"ph", "bpt", "ept", "it"})  # native code inside a segment: never translated


class XMLInputError(ValueError):
    """The bytes are not well-formed XML, or declare entities (refused: entity expansion)."""


def parse_xml(data: bytes) -> etree._ElementTree:
    """Parse `data` safely (module doc); raises XMLInputError naming the problem."""
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False)
    try:
        tree = etree.ElementTree(etree.fromstring(data, parser))
    except etree.XMLSyntaxError as error:
        raise XMLInputError(f"not well-formed XML: {error}") from None
    dtd = tree.docinfo.internalDTD
    if dtd is not None and any(True for _ in dtd.iterentities()):
        raise XMLInputError("XML entity declarations are not accepted")
    return tree


def local(node: etree._Element) -> str:
    """An element's local name ("" for comments and processing instructions)."""
    return etree.QName(node).localname if isinstance(node.tag, str) else ""


@dataclass(frozen=True)
class Rules:
    """How a format's child elements are read, by local name (module doc)."""

    opaque: frozenset[str] = XLIFF_CODES
    stand_ins: dict[str, str] = field(default_factory=dict)  # element -> the text it stands for
    spaces: frozenset[str] = frozenset()  # elements that only encode spaces: read as spaces, not kept
    all_opaque_but: frozenset[str] | None = None  # when set: only these are containers

    def is_opaque(self, name: str) -> bool:
        if name in self.opaque:
            return True
        return self.all_opaque_but is not None and name not in self.all_opaque_but


def read_element(element: etree._Element, rules: Rules = Rules(), tally: Tally | None = None) -> Marked:
    """The segment `element` holds: its plain text and its children as tags (module doc),
    counted in `tally` (a segment and its tags)."""
    builder = MarkupBuilder(tally)
    space = [True]  # the text so far ends in a space: whitespace runs read as one

    def text(value: str | None) -> None:
        if not value:
            return
        plain = SPACES.sub(" ", value)
        if space[0]:
            plain = plain.lstrip(" ")
        if plain:
            builder.text(plain)
            space[0] = plain.endswith(" ")

    def walk(node: etree._Element) -> None:
        text(node.text)
        for child in node:
            name = local(child)
            if name in rules.spaces:
                text(" ")
            elif not isinstance(child.tag, str) or rules.is_opaque(name) or name in rules.stand_ins:
                stand_in = rules.stand_ins.get(name, "")
                builder.empty(child, "" if stand_in == " " and space[0] else stand_in)
                space[0] = space[0] or stand_in.isspace() if stand_in else space[0]
            else:
                handle = builder.open(child)
                walk(child)
                builder.close(handle)
            text(child.tail)

    walk(element)
    return builder.build()


def write_element(element: etree._Element, placed: Placed, clean: Callable[[str], str] = lambda text: text) -> None:
    """Replace `element`'s content with `placed` (read from it by `read_element`). `clean`
    edits the text written (a format that takes no line breaks in text)."""
    for child in list(element):
        element.remove(child)
    element.text = None
    stack = [element]

    def add_text(value: str) -> None:
        parent = stack[-1]
        if len(parent):
            parent[-1].tail = (parent[-1].tail or "") + value
        else:
            parent.text = (parent.text or "") + value

    for kind, value in placed.events():
        if kind == "text":
            add_text(clean(value))
        elif kind == "open":
            source = placed.tags[value].data
            stack.append(etree.SubElement(stack[-1], source.tag, attrib=dict(source.attrib)))
        elif kind == "close":
            stack.pop()
        else:  # an opaque child, a stand-in or an element without content: moved back whole
            child = placed.tags[value].data
            child.tail = None
            stack[-1].append(child)


def fragment(markup: str) -> etree._Element:
    """An XML fragment (text with inline elements, no root) inside a root element; raises
    XMLInputError if it is not well-formed."""
    wrapped = f"<crossalign-fragment>{markup}</crossalign-fragment>".encode()
    return parse_xml(wrapped).getroot()


def fragment_text(root: etree._Element) -> str:
    """The content of a `fragment` root as markup again (the root's own tags left out)."""
    escaped = etree.tostring(root, encoding="unicode", with_tail=False)
    return escaped[escaped.index(">") + 1 : escaped.rindex("<")] if len(root) or root.text else ""
