"""XLIFF 1.2: `trans-unit` sources, written to their `target` (state
needs-review-translation); `<g>`, `<x/>`, `<bx/>`, `<ex/>` carried, `<ph>`, `<bpt>`,
`<ept>`, `<it>` kept whole."""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass, field

from lxml import etree

from seq2seq.documents.formats.limits import DocumentError, Limits, Tally
from seq2seq.documents.markup import Marked, Placed
from seq2seq.documents.xml import XMLInputError, local, parse_xml, read_element, write_element


@dataclass
class XliffDocument:
    tree: etree._ElementTree
    targets: list[etree._Element]
    segments: list[Marked] = field(default_factory=list)
    notes: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.segments = [read_element(target) for target in self.targets]  # counted as their sources were

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
    tally = Tally(limits, "XLIFF")
    tally.add("xml_tags", data.count(b"<"))  # before lxml builds a node for each
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
        tally.add("segments")
        tally.add("tags", sum(1 for _ in source.iterdescendants()))  # before any is copied
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
