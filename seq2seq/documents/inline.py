"""One text with inline markup, read as one segment: the `format` of `/v1/translate`,
`/v1/align` and `crossalign align --markup`.

`html`: every element inline (block elements too; `<br>` a line break; the elements whose
content is no markup, `pre`, `title`, `code` and what is marked `translate="no"` kept as
written), read by `seq2seq.documents.html`. `xml`: any element
is inline markup (XLIFF 1.2's `<g>`/`<x/>`; its native-code `<ph>`, `<bpt>`, `<ept>`,
`<it>` kept whole), a fragment without a root, parsed with entities off
(`seq2seq.documents.xml`). Pages with blocks go through `read_html` (each block a segment).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from seq2seq.documents.html import read_html, segments, write_html
from seq2seq.documents.markup import Marked, Placed
from seq2seq.documents.xml import fragment, fragment_text, read_element, write_element

INLINE_FORMATS = ("html", "xml")


@dataclass
class InlineText:
    """A text's plain segment, and how to write a placed translation of it (None: the text as
    it was). `attributes`: with `read_inline(..., attributes=True)`, the HTML attribute values
    a reader sees (alt, title, ...), translated apart from the text; `write`'s second argument
    places them (None: kept as written)."""

    marked: Marked
    write: Callable[..., str]
    attributes: list[Marked] = field(default_factory=list)


def read_inline(text: str, kind: str, attributes: bool = False) -> InlineText:
    """`text` as one segment of `kind` ("html" or "xml"); raises ValueError (XMLInputError)
    for XML that does not parse, naming the problem. `attributes` (html): the attribute values
    a reader sees become `InlineText.attributes` (a translation, not an alignment, wants them)."""
    if kind == "html":
        parts = read_html(text, blocks=False, attributes=attributes)
        found = segments(parts)
        if not found:  # whitespace only
            return InlineText(Marked(text), lambda placed, placed_attributes=None: text)
        main = next(segment for segment in found if not segment.attribute)
        values = [segment.marked for segment in found if segment.attribute]

        def write_page(placed: Placed | None, placed_attributes: list[Placed | None] | None = None) -> str:
            # The attribute segments come before the text's in `parts` (html.py's reader).
            return write_html(parts, list(placed_attributes or [None] * len(values)) + [placed])

        return InlineText(main.marked, write_page, values)
    if kind != "xml":
        raise ValueError(f"markup format must be one of {', '.join(INLINE_FORMATS)}, not {kind!r}")
    root = fragment(text)
    marked = read_element(root)

    def write(placed: Placed | None, placed_attributes: list[Placed | None] | None = None) -> str:
        if placed is None:
            return text
        write_element(root, placed)
        return fragment_text(root)

    return InlineText(marked, write)
