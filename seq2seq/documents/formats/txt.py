"""Plain text: each line with words is a segment; no markup."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from seq2seq.documents.formats.limits import Limits, Tally, decode_text, line_count
from seq2seq.documents.markup import Marked, Placed


@dataclass
class TextDocument:
    """A text file: each line with words is a segment; line endings kept."""

    lines: list[str]
    segments: list[Marked] = field(default_factory=list)
    notes: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.segments = [Marked(line.rstrip("\r\n")) for line in self.lines]

    def write(self, placed: list[Placed | None], language: str = "") -> bytes:
        out = []
        for line, translation in zip(self.lines, placed):
            ending = line[len(line.rstrip("\r\n")) :]
            out.append((line.rstrip("\r\n") if translation is None else translation.text) + ending)
        return "".join(out).encode()


def read_text(data: bytes, limits: Limits) -> TextDocument:
    text = decode_text(data, "TXT")
    tally = Tally(limits, "TXT")
    lines = line_count(text)  # counted before the text is cut into them
    tally.add("lines", lines)
    tally.add("segments", lines)  # each line is one
    return TextDocument(text.splitlines(keepends=True))
