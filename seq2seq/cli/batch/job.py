"""Steps 2, 3 and 5 of a batch job, tied together: split, bucket, translate, write in order.

Every line is split into its sentences, as the service splits a text (seq2seq.decoding.texts:
one split policy); each sentence is translated on its own and the results are joined,
alignment offsets shifted back into the whole line (a sentence-level model translates a
paragraph badly). A window of lines is
sorted by length and cut into batches bounded by sentences and by padded source tokens, so
short lines are not padded to the length of long ones. Results are written strictly in
input order as soon as every line before them is complete; the window is bounded in lines
and in seconds of work (`JobOptions.flush_lines`, `flush_seconds`), so a kill loses little.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from data.tokenizer import Tokenizer
from seq2seq.cli.batch.engines import Engine, UnitResult
from seq2seq.cli.batch.reading import Segment
from seq2seq.cli.batch.writing import LineResult, format_record, join_line, write_heatmap
from seq2seq.decoding.texts import sentence_spans

log = logging.getLogger("crossalign.translate")


@dataclass(frozen=True)
class JobOptions:
    output_format: str = "text"
    batch_size: int = 32  # sentences per batch
    max_tokens: int = 2048  # padded source pieces per batch (longest x sentences)
    # A kill loses at most the lines translated since the last write. Records are written
    # as soon as every line before them is done, and lines are sorted by length only within
    # a window, so a window bounds that loss: at most `flush_lines` lines, and no more than
    # the measured rate translates in `flush_seconds` (the first window is one batch).
    flush_lines: int = 128  # lines per window at most (4 batches' worth)
    flush_seconds: float = 10.0  # the window shrinks to about this much work
    heatmaps: Path | None = None
    heatmap_format: str = "png"
    max_warnings: int = 20  # per-line warnings on stderr before going quiet


@dataclass
class JobSummary:
    lines: int = 0  # records written by this run
    failed: int = 0  # of which errors
    blank: int = 0  # and blank lines, kept as empty translations
    failed_lines: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # why each of `failed_lines` failed
    unused_terms: int = 0  # glossary terms a translation did not use (each a warning)


class Progress(Protocol):
    def update(self, n: int) -> object: ...


class RecordSink(Protocol):
    """Where a job's runs of complete records go: a `RecordWriter` (a file or stdout), or the
    cluster mode's list that an actor sends back (seq2seq/cli/cluster)."""

    def write(self, records: list[str]) -> None: ...


@dataclass
class _Pending:
    """A line waiting for its sentences (none for a bad line)."""

    segment: Segment
    spans: list[tuple[int, int]]
    results: list[UnitResult | None]
    missing: int


@dataclass
class _Unit:
    line: int
    index: int  # sentence index within its line
    text: str
    length: int  # source pieces


def plan_batches(units: list[_Unit], batch_size: int, max_tokens: int) -> list[list[_Unit]]:
    """Sort by length and cut: at most `batch_size` sentences and `max_tokens` padded pieces
    (longest + EOS, times sentences) per batch; a single overlong sentence is its own batch."""
    batches: list[list[_Unit]] = []
    current: list[_Unit] = []
    for unit in sorted(units, key=lambda u: u.length):
        if current and (len(current) >= batch_size or (unit.length + 1) * (len(current) + 1) > max_tokens):
            batches.append(current)
            current = []
        current.append(unit)
    if current:
        batches.append(current)
    return batches


class _Job:
    """The state of one run: lines waiting for sentences, in input order, and the summary."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        writer: RecordSink,
        options: JobOptions,
        progress: Progress | None,
        max_source_tokens: int,
    ):
        self.tokenizer, self.writer, self.options, self.progress = tokenizer, writer, options, progress
        # The translator reads at most this many pieces of a sentence (EOS included): batches are planned so.
        self.max_source_tokens = max_source_tokens
        self.pending: dict[int, _Pending] = {}
        self.order: deque[int] = deque()  # line numbers not yet written, in input order
        self.summary = JobSummary()
        self.warned = 0  # bad lines reported on stderr
        self.warned_terms = 0  # unused glossary terms reported on stderr
        self.done = 0  # lines ready to write: bad ones, and those whose every
        # sentence is back (written or not)
        self.started = time.monotonic()

    def batches(self, segments: Iterable[Segment]) -> Iterator[list[_Unit]]:
        """Windows of lines, each split into sentences and cut into batches (lazily)."""
        window: list[Segment] = []
        for segment in segments:
            window.append(segment)
            if len(window) >= self.window_size():
                yield from self.plan_window(window)
                window = []
        if window:
            yield from self.plan_window(window)

    def window_size(self) -> int:
        """Lines to sort together now: `flush_lines` at most, and what the rate measured so far
        translates in `flush_seconds` (one batch before anything was measured)."""
        limit = self.options.flush_lines
        elapsed = time.monotonic() - self.started
        if not self.summary.lines or elapsed <= 0:
            return min(limit, self.options.batch_size)
        return max(1, min(limit, round(self.summary.lines / elapsed * self.options.flush_seconds)))

    def plan_window(self, window: list[Segment]) -> list[list[_Unit]]:
        units: list[_Unit] = []
        for segment in window:
            self.order.append(segment.line)
            units += self.sentences(segment)
        return plan_batches(units, self.options.batch_size, self.options.max_tokens)

    def sentences(self, segment: Segment) -> list[_Unit]:
        """Register `segment` as pending and return its sentences to translate (none if bad or blank)."""
        if segment.error or segment.blank:
            self.pending[segment.line] = _Pending(segment, [], [], 0)
            self.done += 1
            return []
        spans = sentence_spans(segment.source)  # a checked line is never blank: one sentence at least
        texts = [segment.source[s:e] for s, e in spans]
        lengths = [min(len(ids), self.max_source_tokens - 1) for ids in self.tokenizer.encode_batch(texts)]
        self.pending[segment.line] = _Pending(segment, spans, [None] * len(spans), len(spans))
        return [_Unit(segment.line, i, t, n) for i, (t, n) in enumerate(zip(texts, lengths))]

    def receive(self, batch: list[_Unit], results: list[UnitResult]) -> None:
        for unit, unit_result in zip(batch, results):
            item = self.pending[unit.line]
            item.results[unit.index] = unit_result
            item.missing -= 1
            self.done += item.missing == 0

    def write_ready(self) -> None:
        """Write every complete line at the head of the input order, as one run of records."""
        records = []
        while self.order and self.pending[self.order[0]].missing == 0:
            item = self.pending.pop(self.order.popleft())
            segment = item.segment
            if segment.error or segment.blank:
                result = LineResult(segment, error=segment.error)
                self.summary.blank += segment.blank
            else:
                result = join_line(segment, item.spans, item.results)  # type: ignore[arg-type]
            if result.error:
                self.report_failure(segment.line, result.error)
            self.report_unused_terms(result)
            if self.options.heatmaps is not None and result.alignment is not None:
                write_heatmap(
                    self.options.heatmaps, segment, result.alignment, self.options.heatmap_format, result.quality
                )
            records.append(format_record(result, self.options.output_format))
        self.writer.write(records)
        self.summary.lines += len(records)
        if self.progress is not None and records:
            self.progress.update(len(records))

    def report_failure(self, line: int, error: str) -> None:
        self.summary.failed += 1
        self.summary.failed_lines.append(line)
        self.summary.errors.append(error)
        if self.warned < self.options.max_warnings:
            log.warning("line %d: %s", line, error)
            self.warned += 1
            if self.warned == self.options.max_warnings:
                log.warning("further bad lines are not reported here; see the output records")

    def report_unused_terms(self, result: LineResult) -> None:
        """A warning per glossary term of the line that its translation did not use."""
        for term in result.terms:
            if term.origin != "glossary" or term.used:
                continue
            self.summary.unused_terms += 1
            if self.warned_terms < self.options.max_warnings:
                log.warning(
                    'line %d: glossary term "%s" -> "%s" not used in the translation',
                    result.segment.line,
                    term.source,
                    term.term,
                )
                self.warned_terms += 1
                if self.warned_terms == self.options.max_warnings:
                    log.warning("further unused glossary terms are not reported here; the summary counts them")


def run_job(
    segments: Iterable[Segment],
    engine: Engine,
    tokenizer: Tokenizer,
    writer: RecordSink,
    options: JobOptions,
    progress: Progress | None = None,
    max_source_tokens: int = 250,
) -> JobSummary:
    """Translate `segments` through `engine`, writing one record per segment in order.

    Up to `engine.capacity` batches are in flight; the oldest is awaited first, so records
    leave in input order while the workers stay busy.
    """
    job = _Job(tokenizer, writer, options, progress, max_source_tokens)
    return _drive(job, job.batches(segments), engine)


def run_windows(
    windows: Iterable[list[Segment]],
    engine: Engine,
    tokenizer: Tokenizer,
    writer: RecordSink,
    options: JobOptions,
    max_source_tokens: int = 250,
) -> JobSummary:
    """`run_job` over windows the caller cut, each sorted and batched as `run_job` does its
    own: the cluster mode cuts a file into windows ahead (seq2seq/cli/cluster), so that
    whichever actor translates a window batches it as this process would."""
    job = _Job(tokenizer, writer, options, None, max_source_tokens)
    return _drive(job, (batch for window in windows for batch in job.plan_window(window)), engine)


def _drive(job: _Job, planned: Iterator[list[_Unit]], engine: Engine) -> JobSummary:
    """Keep `engine.capacity` batches of `planned` in flight and write what is complete."""
    in_flight: deque[tuple[Future, list[_Unit]]] = deque()
    exhausted = False
    while True:
        while not exhausted and len(in_flight) < engine.capacity:
            batch = next(planned, None)
            if batch is None:
                exhausted = True
            else:
                in_flight.append((engine.submit([u.text for u in batch]), batch))
        job.write_ready()  # lines that need no translation (bad lines)
        if not in_flight:
            if exhausted:
                break
            continue
        future, batch = in_flight.popleft()
        job.receive(batch, future.result())
        job.write_ready()
        log.debug("%d lines done, %d written", job.done, job.summary.lines)
    return job.summary
