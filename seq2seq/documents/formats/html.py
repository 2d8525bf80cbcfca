"""HTML pages: blocks as segments, inline elements carried (`seq2seq.documents.html`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from seq2seq.documents import html as html_format
from seq2seq.documents.formats.limits import Limits, Tally, decode_text
from seq2seq.documents.markup import Marked, Placed


@dataclass
class HtmlDocument:
    parts: list[html_format.Part]
    segments: list[Marked] = field(default_factory=list)
    notes: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.segments = [segment.marked for segment in html_format.segments(self.parts)]

    def write(self, placed: list[Placed | None], language: str = "") -> bytes:
        return html_format.write_html(self.parts, placed).encode()


def read_page(data: bytes, limits: Limits) -> HtmlDocument:
    return HtmlDocument(html_format.read_html(decode_text(data, "HTML"), tally=Tally(limits, "HTML")))
