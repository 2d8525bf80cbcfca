"""Step 5 of a batch job: sentence results -> one joined record per line, written durably.

A line is a text like any other: its sentences' results are joined by the one text pipeline
(seq2seq.decoding.texts: the joined translation, its block-diagonal map, its quality block
and its score, as the service answers the same text).

Records are written strictly in input order, a run of complete records per write, then
flushed and fsynced. A crash can therefore only leave a partial *last* record, which
`prepare_resume` truncates before `--resume` skips the lines already done.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from seq2seq.analysis.quality import SentenceQuality
from seq2seq.cli.batch.engines import FailedSentence, UnitResult
from seq2seq.cli.batch.reading import Segment
from seq2seq.core.alignment import Alignment
from seq2seq.core.hints import TermOutcome
from seq2seq.decoding.texts import TranslatedText

log = logging.getLogger("crossalign.translate")

OUTPUT_FORMATS = ("text", "tsv", "jsonl")
HEATMAP_FORMATS = ("png", "svg")


@dataclass
class LineResult:
    """A segment with its joined translation, ready to be written."""

    segment: Segment
    text: str = ""
    score: float | None = None
    alignment: Alignment | None = None
    sentences: list[tuple[int, int]] | None = None  # spans, when the line was split
    quality: SentenceQuality | None = None
    error: str | None = None
    case_restored: bool = False  # some sentence of it was shouted (seq2seq.core.casing)
    terms: list[TermOutcome] = field(default_factory=list)  # its hints and whether the translation used each


def join_line(segment: Segment, spans: list[tuple[int, int]], results: list[UnitResult]) -> LineResult:
    """Join the sentence translations of one line (`spans`, its sentences) into its record's
    content; the first failed sentence fails the line."""
    failed = [r.error for r in results if isinstance(r, FailedSentence)]
    if failed:
        return LineResult(segment, error=failed[0])
    translated = TranslatedText.joined(segment.source, spans, [r for r in results if not isinstance(r, FailedSentence)])
    return LineResult(
        segment,
        translated.text,
        translated.score,
        translated.alignment(),
        spans if len(spans) > 1 else None,
        quality=translated.quality(),
        case_restored=translated.case_restored,
        terms=translated.terms,
    )


def _one_line(text: str) -> str:
    """A field that cannot break the one-record-per-line framing."""
    return text.replace("\r", " ").replace("\n", " ").replace("\t", " ")


def format_record(result: LineResult, output_format: str) -> str:
    """One output record, newline included."""
    segment = result.segment
    if output_format == "text":
        return _one_line(result.text) + "\n"
    if output_format == "tsv":
        ident = segment.line if segment.id is None else segment.id
        score = "" if result.score is None else f"{result.score:.4f}"
        links = result.alignment.pharaoh if result.alignment is not None else ""
        fields = [str(ident), segment.source, result.text, score, links, result.error or ""]
        return "\t".join(_one_line(f) for f in fields) + "\n"
    from seq2seq.decoding.records import AlignmentMap, Quality, TokenSpan, TranslationRecord  # pydantic only for jsonl

    record = TranslationRecord(
        line=segment.line,
        id=segment.id,
        source=segment.source,
        text=result.text,
        score=None if result.score is None else round(result.score, 4),
        case_restored=result.case_restored,
        alignment=None if result.alignment is None else AlignmentMap.from_alignment(result.alignment),
        quality=None if result.quality is None else Quality.from_quality(result.quality),
        sentences=None
        if result.sentences is None
        else [TokenSpan(text=segment.source[s:e], start=s, end=e) for s, e in result.sentences],
        error=result.error,
    )
    return record.model_dump_json(exclude_none=True) + "\n"


class RecordWriter:
    """Writes runs of complete records; each run is flushed and, for files, fsynced."""

    def __init__(self, output: Path | None, output_format: str, append: bool = False):
        self.output_format = output_format
        self.path = output
        # Kept open across writes and closed by close() (stdout stays open).
        self.stream: TextIO = (
            open(output, "a" if append else "w", encoding="utf-8", newline="")  # noqa: SIM115
            if output
            else sys.stdout
        )

    def write(self, records: list[str]) -> None:
        if not records:
            return
        self.stream.write("".join(records))
        self.stream.flush()
        if self.path is not None:
            os.fsync(self.stream.fileno())

    def close(self) -> None:
        if self.path is not None:
            self.stream.close()


def prepare_resume(path: Path) -> int:
    """Complete records already in `path`; a partial trailing record is truncated away."""
    if not path.exists():
        return 0
    complete, last_newline, position = 0, -1, 0
    with open(path, "rb") as stream:
        while chunk := stream.read(1 << 20):
            complete += chunk.count(b"\n")
            index = chunk.rfind(b"\n")
            if index >= 0:
                last_newline = position + index
            position += len(chunk)
    if last_newline + 1 < position:
        log.warning("%s: removing a partial last record (%d bytes)", path, position - last_newline - 1)
        os.truncate(path, last_newline + 1)
    return complete


def heatmap_name(segment: Segment, fmt: str) -> str:
    """`000042.png` by line number, or the JSONL id made filename-safe."""
    if segment.id is None:
        return f"{segment.line:06d}.{fmt}"
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", str(segment.id)).lstrip(".") or f"{segment.line:06d}"
    return f"{safe}.{fmt}"


def write_heatmap(
    directory: Path, segment: Segment, alignment: Alignment, fmt: str, quality: SentenceQuality | None = None
) -> None:
    from seq2seq.analysis.heatmap import render_heatmap  # matplotlib only when heatmaps are asked for

    path = directory / heatmap_name(segment, fmt)
    partial = path.with_name(path.name + ".part")
    # The flags index words: a subword map is drawn without them.
    marked = quality is not None and alignment.level == "word"
    partial.write_bytes(
        render_heatmap(
            alignment,
            fmt,
            untranslated=quality.untranslated if marked else (),
            ungrounded=quality.ungrounded if marked else (),
        )
    )
    partial.replace(path)  # a crash never leaves a half-written image under the real name
