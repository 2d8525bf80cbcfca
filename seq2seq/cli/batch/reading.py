"""Step 1 of a batch job: input lines as bytes -> checked `Segment`s, one line at a time.

Lines are decoded one by one, so an invalid line is reported on its own and never poisons
its neighbours. Bad lines (invalid UTF-8 or JSON, and texts that break the service's input
rules of `seq2seq.core.inputs`: empty, overlong, control characters, lone surrogates) become
segments with an `error`; they never stop the job. A blank line (nothing but whitespace) is
neither: it is kept quietly as an empty translation, as the service's .txt route,
LibreTranslate and DeepL keep the blank lines of a text file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from seq2seq.core.inputs import SURROGATES, printable, text_problem

INPUT_FORMATS = ("text", "tsv", "jsonl")
MAX_CHARS = 10_000  # longer lines are errors (--max-chars)


@dataclass
class Segment:
    """One input line, decoded and checked."""

    line: int  # 1-based line number in the input
    id: str | int | None  # JSONL `id`, else None
    source: str  # the text to translate (undecodable bytes and lone surrogates
    # shown as U+FFFD when bad, so the error record can be written)
    error: str | None = None  # why it will not be translated
    blank: bool = False  # nothing but whitespace: kept as an empty translation, not an error


def strip_line_ending(raw: bytes, line: int) -> bytes:
    """Drop the newline (LF or CRLF) and, on the first line, a UTF-8 byte order mark."""
    raw = raw[:-1] if raw.endswith(b"\n") else raw
    raw = raw[:-1] if raw.endswith(b"\r") else raw
    if line == 1 and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    return raw


def decode_line(raw: bytes, line: int, input_format: str = "text", max_chars: int = MAX_CHARS) -> Segment:
    """One raw input line (with or without its newline) -> a `Segment`, never raising.

    A line of nothing but whitespace is blank in every format. tsv: the first column is the
    source (a test split's `source<TAB>target` works as is). jsonl: an object with a string
    `text` and an optional `id` (string or integer).
    """
    raw = strip_line_ending(raw, line)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return Segment(line, None, raw.decode("utf-8", errors="replace"), f"invalid UTF-8 at byte {error.start}")
    if not text.strip():
        return Segment(line, None, text, blank=True)
    ident: str | int | None = None
    if input_format == "tsv":
        text = text.split("\t", 1)[0]
    elif input_format == "jsonl":
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            return Segment(line, None, text, f"invalid JSON: {error.msg} at column {error.colno}")
        if not isinstance(value, dict) or not isinstance(value.get("text"), str):
            return Segment(line, None, text, 'a JSONL line must be an object with a string "text"')
        ident, text = value.get("id"), value["text"]
        if ident is not None and (isinstance(ident, bool) or not isinstance(ident, (str, int))):
            return Segment(line, None, printable(text), '"id" must be a string or an integer')
        if isinstance(ident, str) and SURROGATES.search(ident):
            return Segment(line, None, printable(text), '"id" holds a lone surrogate (not valid Unicode)')
    elif input_format != "text":
        raise ValueError(f"unknown input format {input_format!r}: choose one of {', '.join(INPUT_FORMATS)}")
    problem = text_problem(text, max_chars)  # the service's rules, the same messages
    return Segment(line, ident, text if problem is None else printable(text), problem)


def read_segments(
    stream: BinaryIO, input_format: str = "text", max_chars: int = MAX_CHARS, first_line: int = 1
) -> Iterator[Segment]:
    """Decode `stream` line by line, lazily; a final line without newline counts."""
    for line, raw in enumerate(stream, start=first_line):
        yield decode_line(raw, line, input_format, max_chars)
