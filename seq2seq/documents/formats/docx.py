"""Word documents (python-docx): every paragraph of the body, tables, headers, footers,
footnotes, endnotes, comments and text boxes; the runs' formatting, hyperlinks as markup,
fields, tabs and drawings kept where they stood (`seq2seq.documents.office`)."""

from __future__ import annotations

import io

from seq2seq.documents.formats.limits import Limits, Tally, check_zip, library_error
from seq2seq.documents.office import WORD, OfficeDocument, read_paragraph

WORD_PARTS = frozenset(
    "application/vnd.openxmlformats-officedocument.wordprocessingml." + kind
    for kind in ("document.main+xml", "header+xml", "footer+xml", "footnotes+xml", "endnotes+xml", "comments+xml")
)


def read_docx(data: bytes, limits: Limits) -> OfficeDocument:
    tally = Tally(limits, "DOCX")
    checked = check_zip(data, "docx", limits, tally)
    import docx  # python-docx (MIT)
    from docx.opc.part import PartFactory, XmlPart

    # Footnotes and endnotes are plain parts to python-docx: read them as XML parts too (its
    # documented way to add a part type).
    for kind in ("footnotes+xml", "endnotes+xml"):
        PartFactory.part_type_for["application/vnd.openxmlformats-officedocument.wordprocessingml." + kind] = XmlPart
    try:  # the archive as checked, never the upload: python-docx reads through zipfile itself
        document = docx.Document(io.BytesIO(checked.rebuilt()))
    except Exception as error:  # noqa: BLE001 - whatever the library raises, the file is not a DOCX
        raise library_error("docx", error) from None
    paragraphs = [
        read_paragraph(element, WORD, tally)
        for part in document.part.package.iter_parts()
        if part.content_type in WORD_PARTS and isinstance(part, XmlPart)
        for element in part.element.iter(WORD.tag("p"))
    ]
    return OfficeDocument(document, paragraphs)
