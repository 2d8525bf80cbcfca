"""SubRip subtitles: each cue's text (numbers and timings untouched); `<i>`, `<b>`,
`<font>` carried."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from seq2seq.documents import html as html_format
from seq2seq.documents.formats.limits import DocumentError, Limits, Tally, decode_text
from seq2seq.documents.markup import Marked, Placed

TIMING = re.compile(r"^\d{1,2}:\d{2}:\d{2}[,.]\d{1,3} --> \d{1,2}:\d{2}:\d{2}[,.]\d{1,3}")


@dataclass
class SubtitleDocument:
    """Cues: their number and timing lines untouched, their text one segment (its lines
    joined; the translation is broken into as many lines, at the spaces nearest to even)."""

    cues: list[tuple[list[str], list[str], str]]  # head lines, text lines, the blank lines after
    pages: list[list[html_format.Part]]  # each cue's text read as one segment
    segments: list[Marked] = field(default_factory=list)
    notes: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.segments = [
            (html_format.segments(parts) or [html_format.Segment(Marked(""), "")])[0].marked for parts in self.pages
        ]

    def write(self, placed: list[Placed | None], language: str = "") -> bytes:
        out = []
        for (head, text, gap), parts, translation in zip(self.cues, self.pages, placed):
            lines = (
                text if translation is None else break_lines(html_format.write_html(parts, [translation]), len(text))
            )
            out.append("".join(head) + "\n".join(lines) + ("\n" if lines else "") + gap)
        return "".join(out).encode()


def break_lines(marked: str, count: int) -> list[str]:
    """`marked` (text with inline tags) in `count` lines, broken at spaces outside tags, each
    line near an even share of the visible characters."""
    if count <= 1:
        return [marked]
    spaces, visible, inside = [], 0, False
    for index, character in enumerate(marked):
        inside = (inside or character == "<") and character != ">"
        if not inside and character != ">":
            visible += 1
            if character == " ":
                spaces.append((index, visible))
    lines, start = [], 0
    for k in range(1, count):
        wanted = visible * k / count
        candidates = [(abs(v - wanted), i) for i, v in spaces if i > start]
        if not candidates:
            break
        cut = min(candidates)[1]
        lines.append(marked[start:cut])
        start = cut + 1
    return lines + [marked[start:]]


def read_subtitles(data: bytes, limits: Limits) -> SubtitleDocument:
    text = decode_text(data, "SRT").replace("\r\n", "\n")
    tally = Tally(limits, "SRT")
    tally.add("lines", text.count("\n") + 1)  # counted before the text is cut into them
    lines = text.split("\n")
    cues, index = [], 0
    while index < len(lines):
        if not lines[index].strip():
            index += 1
            continue
        if not lines[index].strip().isdigit() or index + 1 >= len(lines) or not TIMING.match(lines[index + 1]):
            raise DocumentError(f"not a valid SRT file: line {index + 1} is not a cue number followed by its timing")
        head = [lines[index] + "\n", lines[index + 1] + "\n"]
        index += 2
        text = []
        while index < len(lines) and lines[index].strip():
            text.append(lines[index])
            index += 1
        gap = ""
        while index < len(lines) and not lines[index].strip():
            gap += "\n"
            index += 1
        cues.append((head, text, gap if index < len(lines) else ""))
    if not cues:
        raise DocumentError("not a valid SRT file: no cues")
    pages = [html_format.read_html(" ".join(text), blocks=False, tally=tally) for _, text, _ in cues]
    return SubtitleDocument(cues, pages)
