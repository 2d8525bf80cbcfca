"""PowerPoint presentations (python-pptx): every paragraph of every slide's shapes and
tables, and its notes; the runs' formatting (hyperlinks are run properties there)."""

from __future__ import annotations

import io

from seq2seq.documents.formats.limits import DocumentError, Limits, check_zip
from seq2seq.documents.office import DRAWING, OfficeDocument, read_paragraph


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
