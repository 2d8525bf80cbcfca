"""Documents made in the tests, in every file format, with inline markup mid-sentence (bold,
italic, underline, colour, hyperlinks), a table, a header, a footnote-like extra part, and
their readers' views for the checks: each one's segments and marked spans as its own
library (python-docx, python-pptx, odfdo, lxml, markdown-it-py) sees them."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

# Toy sentences (tests/toy.py): the tiny model translates them word by word.
BOLD = ("der Hund ist ", "klein", " .")
ITALIC = ("die Katze war ", "sehr alt", " .")
LINK = ("das ", "Haus", " ist rot .", "https://example.org/haus")
PLAIN = ["der Baum war groß hier .", "das Kind ist auch schnell ."]


def plain(parts: tuple[str, ...]) -> str:
    return "".join(parts[:3])


def make_docx() -> bytes:
    import docx
    from docx.opc.constants import RELATIONSHIP_TYPE
    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn
    from docx.shared import RGBColor

    document = docx.Document()
    document.add_heading(PLAIN[0], 1)
    paragraph = document.add_paragraph(BOLD[0])
    paragraph.add_run(BOLD[1]).bold = True
    paragraph.add_run(BOLD[2])
    paragraph = document.add_paragraph(ITALIC[0])
    run = paragraph.add_run(ITALIC[1])
    run.italic, run.underline, run.font.color.rgb = True, True, RGBColor(0xC0, 0, 0)
    paragraph.add_run(ITALIC[2])
    paragraph = document.add_paragraph(LINK[0])
    link = OxmlElement("w:hyperlink")
    link.set(qn("r:id"), paragraph.part.relate_to(LINK[3], RELATIONSHIP_TYPE.HYPERLINK, is_external=True))
    run = OxmlElement("w:r")
    text = OxmlElement("w:t")
    text.text = LINK[1]
    run.append(text)
    link.append(run)
    paragraph._p.append(link)
    paragraph.add_run(LINK[2])
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = PLAIN[1], "42"
    document.sections[0].header.paragraphs[0].text = PLAIN[0]
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def docx_view(data: bytes) -> dict:
    """Paragraph texts (body, table cells, header), formatted runs and hyperlinks, by python-docx."""
    import docx

    document = docx.Document(io.BytesIO(data))
    body = [p.text for p in document.paragraphs]
    cells = [cell.text for row in document.tables[0].rows for cell in row.cells]
    runs = [(r.text, bool(r.bold), bool(r.italic), bool(r.underline)) for p in document.paragraphs for r in p.runs]
    links = [(h.address, h.text) for p in document.paragraphs for h in p.hyperlinks]
    header = [p.text for p in document.sections[0].header.paragraphs]
    return {"body": body, "cells": cells, "runs": runs, "links": links, "header": header}


def make_pptx() -> bytes:
    import pptx
    from pptx.util import Inches

    presentation = pptx.Presentation()
    for parts, mark in ((BOLD, "bold"), (ITALIC, "italic"), (LINK, "link")):
        slide = presentation.slides.add_slide(presentation.slide_layouts[5])
        slide.shapes.title.text = PLAIN[0]
        frame = slide.shapes.add_textbox(Inches(1), Inches(2), Inches(6), Inches(1)).text_frame
        paragraph = frame.paragraphs[0]
        for index, text in enumerate(parts[:3]):
            run = paragraph.add_run()
            run.text = text
            if index == 1 and mark == "bold":
                run.font.bold = True
            elif index == 1 and mark == "italic":
                run.font.italic = True
            elif index == 1:
                run.hyperlink.address = parts[3]
        slide.notes_slide.notes_text_frame.text = PLAIN[1]
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def pptx_view(data: bytes) -> dict:
    import pptx

    presentation = pptx.Presentation(io.BytesIO(data))
    texts, runs, links, notes = [], [], [], []
    for slide in presentation.slides:
        for shape in slide.shapes:
            if shape.has_text_frame:
                for paragraph in shape.text_frame.paragraphs:
                    texts.append("".join(r.text for r in paragraph.runs))
                    runs += [(r.text, bool(r.font.bold), bool(r.font.italic)) for r in paragraph.runs]
                    links += [(r.hyperlink.address, r.text) for r in paragraph.runs if r.hyperlink.address]
        notes.append(slide.notes_slide.notes_text_frame.text)
    return {"slides": len(presentation.slides), "texts": texts, "runs": runs, "links": links, "notes": notes}


def make_odt(path: Path) -> bytes:
    from odfdo import Document, Element, Header, Link, Paragraph

    document = Document("text")
    body = document.body
    body.clear()
    body.append(Header(1, PLAIN[0]))
    paragraph = Paragraph(BOLD[0])
    paragraph.append(Element.from_tag(f'<text:span text:style-name="Strong_20_Emphasis">{BOLD[1]}</text:span>'))
    paragraph.append(BOLD[2])
    body.append(paragraph)
    paragraph = Paragraph(ITALIC[0])
    paragraph.append(Element.from_tag(f'<text:span text:style-name="Emphasis">{ITALIC[1]}</text:span>'))
    paragraph.append(ITALIC[2])
    body.append(paragraph)
    paragraph = Paragraph(LINK[0])
    paragraph.append(Link(LINK[3], text=LINK[1]))
    paragraph.append(LINK[2])
    body.append(paragraph)
    document.save(path)
    return path.read_bytes()


def odt_view(path: Path) -> dict:
    """Paragraphs and headings (text by lxml over odfdo's tree), spans and links, by odfdo."""
    from odfdo import Document

    document = Document(path)
    body = document.body
    text = lambda element: odf_text(element._Element__element)  # noqa: E731 - odfdo wraps lxml
    return {
        "paragraphs": [text(p) for p in body.paragraphs],
        "headers": [text(h) for h in body.headers],
        "spans": [(s.style, text(s)) for s in body.get_spans()],
        "links": [(link.get_attribute("xlink:href"), text(link)) for link in body.get_links()],
    }


def odf_text(element) -> str:
    """The text of an ODF element as it shows: `text:s` is c spaces (odfdo writes spaces so)."""
    out = [element.text or ""]
    for child in element:
        name = child.tag.rpartition("}")[2] if isinstance(child.tag, str) else ""
        if name == "s":
            out.append(" " * int(child.get("{urn:oasis:names:tc:opendocument:xmlns:text:1.0}c", "1")))
        elif name == "tab":
            out.append("\t")
        else:
            out.append(odf_text(child))
        out.append(child.tail or "")
    return "".join(out)


HTML_PAGE = (
    "<!DOCTYPE html><html><head><title>{0}</title><style>p > b {{ color: red }}</style></head><body>"
    '<p>{1}<b>{2}</b>{3}<img src="baum.png" alt="{11}"></p><p>{4}<i>{5}</i>{6}</p><p>{7}<a href="{10}">{8}</a>{9}</p>'
    "<script>if (a < b) {{ x = '</p>'; }}</script><pre>der Hund</pre></body></html>"
).format(PLAIN[0], *BOLD, *ITALIC, *LINK, PLAIN[1])

SRT = (
    f"1\n00:00:01,000 --> 00:00:02,500\n{BOLD[0]}<b>{BOLD[1]}</b>{BOLD[2]}\n\n"
    f"2\n00:00:03,000 --> 00:00:04,000\n{ITALIC[0].strip()}\n<i>{ITALIC[1]}</i>{ITALIC[2]}\n\n"
    f"3\n00:00:05,000 --> 00:00:06,000\n{PLAIN[0]}\n"
)

MARKDOWN = (
    f"# {PLAIN[0]}\n\n{BOLD[0]}**{BOLD[1]}**{BOLD[2]}\n\n- {ITALIC[0]}*{ITALIC[1]}*{ITALIC[2]}\n"
    f"- {LINK[0]}[{LINK[1]}]({LINK[3]}){LINK[2]}\n\n"
    "```python\nder Hund ist klein .\n```\n\n"
    f"| {PLAIN[1]} | `der Hund` |\n|---|---|\n| {PLAIN[0]} | 42 |\n"
)

XLIFF = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">'
    '<file source-language="de" datatype="plaintext" original="x"><body>'
    f'<trans-unit id="1"><source>{BOLD[0]}<g id="b">{BOLD[1]}</g>{BOLD[2]}</source></trans-unit>'
    f'<trans-unit id="2"><source>{ITALIC[0]}<x id="br"/>{ITALIC[1]}{ITALIC[2]}</source>'
    "<target>alt</target></trans-unit>"
    f'<trans-unit id="3" translate="no"><source>{PLAIN[0]}</source></trans-unit>'
    "</body></file></xliff>"
)


def zip_with(entries: dict[str, bytes], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return out.getvalue()


def showcase_docx() -> bytes:
    """A page of everyday German for the shipped model (bench/documents.py renders its
    translation): a heading, formatting and a link mid-sentence, a table, a header."""
    import docx
    from docx.shared import Pt, RGBColor

    document = docx.Document()
    document.sections[0].header.paragraphs[0].text = "Mein Wochenbericht"
    document.add_heading("Ein kleines Haus am See", 1)
    for parts in (
        ("Das ist ein ", "kleines", " Haus."),
        ("Ich habe ", "keine Zeit", "."),
        ("Wir haben gestern im ", "Garten", " gegessen."),
        ("Der Zug fährt um ", "halb acht", " ab."),
    ):
        paragraph = document.add_paragraph(parts[0])
        run = paragraph.add_run(parts[1])
        run.bold = True
        run.font.color.rgb = RGBColor(0xC0, 0x1F, 0x1F)
        paragraph.add_run(parts[2])
    paragraph = document.add_paragraph("Meine Schwester wohnt seit drei Jahren in ")
    paragraph.add_run("Hamburg").italic = True
    paragraph.add_run(". Die Kinder spielen draußen im Schnee.")
    document.add_heading("Termine", 2)
    table = document.add_table(rows=3, cols=2)
    table.style = "Table Grid"
    for row, (when, what) in enumerate(
        (
            ("Montag", "Ich rufe dich morgen früh an."),
            ("Dienstag", "Der Server antwortet nicht."),
            ("Freitag", "Das Restaurant an der Ecke hat sonntags geschlossen."),
        )  # fmt: skip
    ):
        table.cell(row, 0).text, table.cell(row, 1).text = when, what
    paragraph = document.add_paragraph("Bitte ")
    run = paragraph.add_run("vergiss nicht")
    run.underline, run.font.size = True, Pt(13)
    paragraph.add_run(", den Müll rauszubringen!")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()
