"""PowerPoint presentations (python-pptx): every paragraph of every slide's shapes and
tables, and its notes; the runs' formatting (hyperlinks are run properties there)."""

from __future__ import annotations

import io

from seq2seq.documents.formats.limits import Limits, Tally, check_zip, library_error
from seq2seq.documents.office import DRAWING, OfficeDocument, read_paragraph


def read_pptx(data: bytes, limits: Limits) -> OfficeDocument:
    tally = Tally(limits, "PPTX")
    checked = check_zip(data, "pptx", limits, tally)
    import pptx  # python-pptx (MIT)

    try:  # the archive as checked, never the upload: python-pptx reads through zipfile itself
        presentation = pptx.Presentation(io.BytesIO(checked.rebuilt()))
        slides = list(presentation.slides)
    except Exception as error:  # noqa: BLE001 - whatever the library raises, the file is not a PPTX
        raise library_error("pptx", error) from None
    elements = []
    for slide in slides:
        elements.append(slide.element)
        if slide.has_notes_slide:
            elements.append(slide.notes_slide.element)
    paragraphs = [read_paragraph(p, DRAWING, tally) for element in elements for p in element.iter(DRAWING.tag("p"))]
    return OfficeDocument(presentation, paragraphs)
