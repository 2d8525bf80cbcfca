"""OpenDocument text (lxml on the ODF XML): `text:p` and `text:h` of content.xml and
styles.xml (headers, footers), footnotes and frames included; `text:span` and `text:a`
carried, fields kept."""

from __future__ import annotations

import io
import zipfile
from collections import Counter
from dataclasses import dataclass, field

from lxml import etree

from seq2seq.documents.formats.limits import CheckedZip, DocumentError, Limits, Tally, check_zip
from seq2seq.documents.markup import Marked, Placed
from seq2seq.documents.xml import Rules, XMLInputError, local, parse_xml, read_element, write_element

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
    archive: CheckedZip
    trees: dict[str, etree._ElementTree]
    paragraphs: list[etree._Element]
    segments: list[Marked]  # each paragraph's
    notes: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
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
    tally = Tally(limits, "ODT")
    archive = check_zip(data, "odt", limits, tally)
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
    return OdtDocument(archive, trees, paragraphs, [read_element(p, ODF_RULES, tally) for p in paragraphs])
