"""Batch translation of whole files: the job behind `crossalign translate`.

The pipeline, one line of input = one record of output:

1. Lines are read as bytes and decoded one by one, so an invalid line is reported on its
   own and never poisons its neighbours. Bad lines (empty, overlong, invalid UTF-8 or
   JSON, control characters) become error records; they never stop the job.
2. Lines longer than `split_tokens` source pieces are split into sentences; each sentence
   is translated on its own and the results are joined, alignment offsets shifted back
   into the whole line (a sentence-level model translates a paragraph badly).
3. A window of lines is sorted by length and cut into batches bounded by sentences and by
   padded source tokens, so short lines are not padded to the length of long ones.
4. Batches go to the one `Translator` interface, in this process or in worker processes
   that each load their own session; results come back in any order.
5. Records are written strictly in input order, a run of complete records per write, then
   flushed and fsynced. A crash can therefore only leave a partial *last* record, which
   `--resume` truncates before skipping the lines already done.

Torch-free: the torch backend is imported only by `load_translator` when asked for.
"""

from __future__ import annotations

import json
import logging
import math
import multiprocessing
import os
import re
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol, TextIO


from data.tokenizer import Tokenizer
from seq2seq.alignment import Alignment, concat
from seq2seq.config import DecodeConfig
from seq2seq.loading import load_translator
from seq2seq.segment import split_sentences
from seq2seq.translator import TranslationResult, Translator

log = logging.getLogger("crossalign.translate")

INPUT_FORMATS = ("text", "tsv", "jsonl")
OUTPUT_FORMATS = ("text", "tsv", "jsonl")
HEATMAP_FORMATS = ("png", "svg")

# Exit statuses of `crossalign translate` (documented in its --help).
EXIT_OK = 0              # every line translated
EXIT_FATAL = 1           # nothing usable: model missing, unreadable input, output mismatch
EXIT_USAGE = 2           # bad arguments (argparse uses 2 as well)
EXIT_SOME_FAILED = 3     # the job finished, but some lines carry an error instead of a translation
EXIT_INTERRUPTED = 130   # Ctrl-C / SIGTERM: what was written is complete; rerun with --resume

# C0 and C1 control characters except TAB, which text input may contain as whitespace.
# LF never reaches here (it ends the line); a trailing CR (CRLF files) is removed first.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


# --------------------------------------------------------------------------- reading


@dataclass
class Segment:
    """One input line, decoded and checked."""

    line: int                         # 1-based line number in the input
    id: str | int | None              # JSONL `id`, else None
    source: str                       # the text to translate ("" or U+FFFD-replaced when bad)
    error: str | None = None          # why it will not be translated


def line_problem(text: str, max_chars: int) -> str | None:
    """Why `text` cannot be translated, or None if it can."""
    if not text.strip():
        return "empty line"
    if len(text) > max_chars:
        return f"line too long: {len(text)} characters (limit {max_chars}, see --max-chars)"
    bad = CONTROL_CHARACTERS.search(text)
    if bad:
        return f"control character U+{ord(bad.group()):04X} at column {bad.start() + 1}"
    return None


def strip_line_ending(raw: bytes, line: int) -> bytes:
    """Drop the newline (LF or CRLF) and, on the first line, a UTF-8 byte order mark."""
    raw = raw[:-1] if raw.endswith(b"\n") else raw
    raw = raw[:-1] if raw.endswith(b"\r") else raw
    if line == 1 and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    return raw


def decode_line(raw: bytes, line: int, input_format: str = "text", max_chars: int = 10_000) -> Segment:
    """One raw input line (with or without its newline) -> a `Segment`, never raising.

    tsv: the first column is the source (a test split's `source<TAB>target` works as is).
    jsonl: an object with a string `text` and an optional `id` (string or integer).
    """
    raw = strip_line_ending(raw, line)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return Segment(line, None, raw.decode("utf-8", errors="replace"), f"invalid UTF-8 at byte {error.start}")
    ident: str | int | None = None
    if input_format == "tsv":
        text = text.split("\t", 1)[0]
    elif input_format == "jsonl":
        if not text.strip():
            return Segment(line, None, "", "empty line")
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            return Segment(line, None, text, f"invalid JSON: {error.msg} at column {error.colno}")
        if not isinstance(value, dict) or not isinstance(value.get("text"), str):
            return Segment(line, None, text, 'a JSONL line must be an object with a string "text"')
        ident = value.get("id")
        if ident is not None and (isinstance(ident, bool) or not isinstance(ident, (str, int))):
            return Segment(line, None, value["text"], '"id" must be a string or an integer')
        text = value["text"]
    elif input_format != "text":
        raise ValueError(f"unknown input format {input_format!r}: choose one of {', '.join(INPUT_FORMATS)}")
    return Segment(line, ident, text, line_problem(text, max_chars))


def read_segments(stream: BinaryIO, input_format: str = "text", max_chars: int = 10_000,
                  first_line: int = 1) -> Iterator[Segment]:
    """Decode `stream` line by line, lazily; a final line without newline counts."""
    for line, raw in enumerate(stream, start=first_line):
        yield decode_line(raw, line, input_format, max_chars)


# --------------------------------------------------------------------------- translating


@dataclass(frozen=True)
class EngineSpec:
    """Everything a worker process needs to build its own Translator (picklable)."""

    model: Path
    backend: str = "onnx"
    threads: int = 0                           # 0 = the library default
    # `decode.alignment` None = no alignment (and no attention kept)
    decode: DecodeConfig = DecodeConfig(return_attention=False)


@dataclass
class UnitResult:
    """The translation of one sentence (or unsplit line)."""

    text: str
    score: float
    target_length: int                          # target pieces, EOS excluded
    alignment: Alignment | None = None
    error: str | None = None


class SentenceTranslator:
    """A `Translator` plus the decode and alignment settings of a job; runs in any process."""

    def __init__(self, translator: Translator, decode: DecodeConfig):
        self.translator, self.decode = translator, decode

    @classmethod
    def load(cls, spec: EngineSpec) -> "SentenceTranslator":
        translator = load_translator(spec.model, spec.backend, spec.threads)
        return cls(translator, spec.decode)

    def run(self, texts: list[str]) -> list[UnitResult]:
        """Translate `texts` (results in order); a failure is confined to its own sentence."""
        try:
            results = self.translator.translate_batch(texts, self.decode)
        except Exception:  # noqa: BLE001 - retry one by one to find the sentence at fault
            log.debug("batch of %d failed; retrying one by one", len(texts), exc_info=True)
            return [self._run_one(text) for text in texts]
        return [self._unit(result) for result in results]

    def _run_one(self, text: str) -> UnitResult:
        try:
            return self._unit(self.translator.translate_batch([text], self.decode)[0])
        except Exception as error:  # noqa: BLE001 - reported in the record, the job goes on
            return UnitResult("", math.nan, 0, error=f"translation failed: {type(error).__name__}: {error}")

    @staticmethod
    def _unit(result: TranslationResult) -> UnitResult:
        alignment = None if result.alignment is None else result.alignment.requested
        return UnitResult(result.text, float(result.score), len(result.target_ids), alignment)


class Engine(Protocol):
    capacity: int                              # batches worth having in flight at once

    def submit(self, texts: list[str]) -> Future: ...

    def close(self, cancel: bool = False) -> None: ...


class InlineEngine:
    """Translate in this process, synchronously."""

    capacity = 1

    def __init__(self, worker: SentenceTranslator):
        self.worker = worker

    def submit(self, texts: list[str]) -> Future:
        future: Future = Future()
        future.set_result(self.worker.run(texts))
        return future

    def close(self, cancel: bool = False) -> None:
        pass


_WORKER: SentenceTranslator | None = None     # the session of a worker process


def _init_worker(spec: EngineSpec) -> None:
    global _WORKER
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C reaches the whole group; the parent stops us
    _watch_parent(os.getppid())
    _WORKER = SentenceTranslator.load(spec)


def _watch_parent(parent: int, interval: float = 1.0) -> None:
    """Exit when the parent is gone: a SIGKILLed job must not leave its workers behind
    (the pool's queues never wake a worker whose parent died; it would wait forever)."""
    import threading
    import time

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _run_in_worker(texts: list[str]) -> list[UnitResult]:
    assert _WORKER is not None, "worker process was not initialised"
    return _WORKER.run(texts)


class ProcessEngine:
    """`workers` processes, each loading its own session once (spawned, not forked: a fork
    would copy onnxruntime/torch thread pools mid-flight)."""

    def __init__(self, spec: EngineSpec, workers: int):
        self.capacity = 2 * workers            # one running and one queued per worker
        self.pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_init_worker, initargs=(spec,))
        # Start every worker now and wait until each has loaded its model: a broken model
        # fails here, before any line is read, and timings do not include the loading.
        # (The pool spawns a process per submit while none is idle, so `workers` no-op
        # tasks start all of them.)
        try:
            for future in [self.pool.submit(os.getpid) for _ in range(workers)]:
                future.result()
        except BaseException:
            self.pool.shutdown(wait=False, cancel_futures=True)
            raise

    def submit(self, texts: list[str]) -> Future:
        return self.pool.submit(_run_in_worker, texts)

    def close(self, cancel: bool = False) -> None:
        if cancel:
            # Do not wait for queued batches; running ones end with their processes.
            for process in list(getattr(self.pool, "_processes", {}).values()):
                process.terminate()
        self.pool.shutdown(wait=not cancel, cancel_futures=cancel)


def worker_threads(threads: int, workers: int) -> int:
    """Inference threads per worker: given, or the cores shared out (never oversubscribed)."""
    if threads or workers <= 1:
        return threads
    return max(1, (os.cpu_count() or 1) // workers)


# --------------------------------------------------------------------------- joining


@dataclass
class LineResult:
    """A segment with its joined translation, ready to be written."""

    segment: Segment
    text: str = ""
    score: float | None = None
    alignment: Alignment | None = None
    sentences: list[tuple[int, int]] | None = None     # spans, when the line was split
    error: str | None = None


def join_line(segment: Segment, spans: list[tuple[int, int]], results: list[UnitResult]) -> LineResult:
    """Join the sentence translations of one line (a single span = an unsplit line)."""
    failed = [r.error for r in results if r.error]
    if failed:
        return LineResult(segment, error=failed[0])
    text, parts, previous_end = "", [], None
    for (start, end), result in zip(spans, results):
        # Sentences are joined by the spacing between them in the input, as the service does.
        if text and result.text:
            text += segment.source[previous_end:start] or " "
        previous_end = end
        if result.alignment is not None:
            parts.append((result.alignment, start, len(text)))
        text += result.text
    # The line's score: the sentences' length-normalised scores weighted by their lengths
    # (+1 for EOS), i.e. what one long hypothesis would average to.
    weights = [r.target_length + 1 for r in results]
    score = sum(r.score * w for r, w in zip(results, weights)) / sum(weights)
    alignment = None
    if parts:
        alignment = parts[0][0] if len(parts) == 1 and spans[0][0] == 0 else concat(parts)
    return LineResult(segment, text, score, alignment, spans if len(spans) > 1 else None)


# --------------------------------------------------------------------------- writing


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
    from seq2seq.records import AlignmentMap, TokenSpan, TranslationRecord  # pydantic only for jsonl

    record = TranslationRecord(
        line=segment.line, id=segment.id, source=segment.source, text=result.text,
        score=None if result.score is None else round(result.score, 4),
        alignment=None if result.alignment is None else AlignmentMap.from_alignment(result.alignment),
        sentences=None if result.sentences is None else [
            TokenSpan(text=segment.source[s:e], start=s, end=e) for s, e in result.sentences],
        error=result.error)
    return record.model_dump_json(exclude_none=True) + "\n"


class RecordWriter:
    """Writes runs of complete records; each run is flushed and, for files, fsynced."""

    def __init__(self, output: Path | None, output_format: str, append: bool = False):
        self.output_format = output_format
        self.path = output
        self.stream: TextIO = (open(output, "a" if append else "w", encoding="utf-8", newline="")
                               if output else sys.stdout)

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


def write_heatmap(directory: Path, segment: Segment, alignment: Alignment, fmt: str) -> None:
    from seq2seq.heatmap import render_heatmap  # matplotlib only when heatmaps are asked for

    path = directory / heatmap_name(segment, fmt)
    partial = path.with_name(path.name + ".part")
    partial.write_bytes(render_heatmap(alignment, fmt))
    partial.replace(path)             # a crash never leaves a half-written image under the real name


# --------------------------------------------------------------------------- the job


@dataclass(frozen=True)
class JobOptions:
    output_format: str = "text"
    batch_size: int = 32                  # sentences per batch
    max_tokens: int = 2048                # padded source pieces per batch (longest x sentences)
    split_tokens: int = 100               # lines longer than this (in pieces) are split into sentences
    window: int = 0                       # lines sorted together for bucketing; 0 = 16 batches' worth
    heatmaps: Path | None = None
    heatmap_format: str = "png"
    max_warnings: int = 20                # per-line warnings on stderr before going quiet


@dataclass
class JobSummary:
    lines: int = 0                        # records written by this run
    failed: int = 0                       # of which errors
    failed_lines: list[int] = field(default_factory=list)


@dataclass
class _Pending:
    segment: Segment
    spans: list[tuple[int, int]]
    results: list[UnitResult | None]
    missing: int


@dataclass
class _Unit:
    line: int
    index: int                            # sentence index within its line
    text: str
    length: int                           # source pieces


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


def run_job(segments: Iterable[Segment], engine: Engine, tokenizer: Tokenizer, writer: RecordWriter,
            options: JobOptions, progress=None, max_source_tokens: int = 250) -> JobSummary:
    """Translate `segments` through `engine`, writing one record per segment in order."""
    summary = JobSummary()
    split_above = min(options.split_tokens, max_source_tokens - 1)
    window_size = options.window or 16 * options.batch_size
    pending: dict[int, _Pending] = {}
    order: deque[int] = deque()
    in_flight: deque[tuple[Future, list[_Unit]]] = deque()
    warned = 0

    def batches() -> Iterator[list[_Unit]]:
        window: list[Segment] = []
        for segment in segments:
            window.append(segment)
            if len(window) >= window_size:
                yield from plan_window(window)
                window = []
        if window:
            yield from plan_window(window)

    def plan_window(window: list[Segment]) -> list[list[_Unit]]:
        units = []
        for segment in window:
            order.append(segment.line)
            if segment.error:
                pending[segment.line] = _Pending(segment, [], [], 0)
                continue
            length = len(tokenizer.encode(segment.source))
            spans = split_sentences(segment.source) if length > split_above else []
            if len(spans) <= 1:
                spans, texts, lengths = [(0, len(segment.source))], [segment.source], [length]
            else:
                texts = [segment.source[s:e] for s, e in spans]
                lengths = [len(ids) for ids in tokenizer.encode_batch(texts)]
            pending[segment.line] = _Pending(segment, spans, [None] * len(spans), len(spans))
            units += [_Unit(segment.line, i, t, n) for i, (t, n) in enumerate(zip(texts, lengths))]
        return plan_batches(units, options.batch_size, options.max_tokens)

    def write_ready() -> None:
        nonlocal warned
        records = []
        while order and pending[order[0]].missing == 0:
            item = pending.pop(order.popleft())
            segment = item.segment
            if segment.error:
                result = LineResult(segment, error=segment.error)
            else:
                result = join_line(segment, item.spans, item.results)  # type: ignore[arg-type]
            if result.error:
                summary.failed += 1
                summary.failed_lines.append(segment.line)
                if warned < options.max_warnings:
                    log.warning("line %d: %s", segment.line, result.error)
                    warned += 1
                    if warned == options.max_warnings:
                        log.warning("further bad lines are not reported here; see the output records")
            elif options.heatmaps is not None and result.alignment is not None:
                write_heatmap(options.heatmaps, segment, result.alignment, options.heatmap_format)
            records.append(format_record(result, options.output_format))
        writer.write(records)
        summary.lines += len(records)
        if progress is not None and records:
            progress.update(len(records))

    planned = batches()
    exhausted = False
    while True:
        while not exhausted and len(in_flight) < engine.capacity:
            batch = next(planned, None)
            if batch is None:
                exhausted = True
            else:
                in_flight.append((engine.submit([u.text for u in batch]), batch))
        write_ready()                         # lines that need no translation (bad lines)
        if not in_flight:
            if exhausted:
                break
            continue
        future, batch = in_flight.popleft()
        for unit, unit_result in zip(batch, future.result()):
            item = pending[unit.line]
            item.results[unit.index] = unit_result
            item.missing -= 1
        write_ready()
    return summary
