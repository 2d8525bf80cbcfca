"""Torch-free documents: inline markup carried by the word alignment, and file formats.

`markup` puts a segment's inline tags on its translation (the rule); `html` and `xml` read
and write marked text; `files` reads and writes whole documents (HTML, DOCX, ODT, PPTX,
XLIFF, SRT, Markdown, text) as segments with their markup, within limits, through the
table of formats over one module per format (`formats/`); `translate`
runs a document's segments through a translator in one pass with their word alignments.
Imports `core`, `analysis` and `decoding` (the translator and teacher forcing).
"""
