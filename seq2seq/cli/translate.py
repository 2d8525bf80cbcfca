"""`crossalign translate`: whole files in, one record per line out, in input order.

The run's plumbing (input, output, resume, progress, workers); the arguments are
seq2seq.cli.translate_args, and the job itself -- decoding lines, batching, joining,
writing -- is seq2seq.cli.batch.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import logging
import re
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from data.files import BUNDLE_FILE, CONFIG_FILE, TOKENIZER_FILE
from data.tokenizer import Tokenizer
from seq2seq.analysis.quality import DEFAULT_QUALITY_MODE
from seq2seq.cli import UsageError, batch, translate_args
from seq2seq.cli.align import alignment_options
from seq2seq.cli.documents import translate_document_file
from seq2seq.cli.models import channel_model, choose_model, rerank_options, resolve_auto_rerank
from seq2seq.cli.translate_args import add_arguments  # noqa: F401 - `crossalign` calls translate.add_arguments
from seq2seq.core.config import SEARCH_FIELDS, AlignmentError, AlignmentOptions, DecodeConfig, ModelConfig, load_config
from seq2seq.documents.files import DocumentError, format_of
from seq2seq.runtime.bundle import BundleError, decode_defaults

log = logging.getLogger("crossalign.translate")


def job_options(args: argparse.Namespace) -> dict:
    """What decides the content of the records: a resumed run must use the same."""
    bundle = args.model / BUNDLE_FILE
    return {
        "model": str(args.model.resolve()),
        "model_sha256": hashlib.sha256(bundle.read_bytes()).hexdigest() if bundle.is_file() else None,
        "input": str(args.input.resolve()) if args.input else None,
        **{
            name: getattr(args, name)
            for name in (
                "input_format",
                "format",
                *SEARCH_FIELDS,
                "glossary",
                "glossary_strict",
                "restore_case",
                "early_exit",
                "max_chars",
                "alignment",
                "alignment_level",
                "step_shift",
                "quality",
                "heatmap_format",
            )
        },
        # Every line split into sentences (a job file of a run that split above --split-tokens
        # records that instead, so its resume is refused rather than mixing two rules).
        "split": "sentences",
        # Named as before the flags became --layer/--heads, so a job started then resumes now.
        "alignment_layer": args.layer,
        "alignment_heads": args.heads,
        "heatmaps": str(args.heatmaps) if args.heatmaps else None,
        "rerank": rerank_record(args),
    }


def rerank_record(args: argparse.Namespace) -> dict | None:
    """The reranking a job's records were chosen by (None: the search's own best)."""
    rerank = rerank_options(args)
    if rerank is None:
        return None
    channel = str(args.channel_model.resolve()) if rerank.uses_channel and args.channel_model else None
    return {
        "mode": rerank.mode,
        "candidates": rerank.candidates,
        "channel_weight": rerank.channel_weight if rerank.uses_channel else None,
        "channel_model": channel,
    }


# Options a job file written before them lacks: what those runs did (they resume with it).
OPTIONS_ADDED_SINCE = {
    "quality": DEFAULT_QUALITY_MODE,
    "no_repeat_ngram_size": 0,
    "restore_case": False,
    "early_exit": False,
    "dictionary_hints": False,
    "hint_max_count": 2,
    "glossary": [],
    "term_bonus": 0.0,
    "glossary_strict": False,
    "rerank": None,
}


def job_file(output: Path) -> Path:
    return output.with_name(output.name + ".job.json")


def first_run_options(args: argparse.Namespace) -> dict | None:
    """The options recorded by the run that `args` resumes; None without a record."""
    path = job_file(args.output)
    if not path.is_file():
        return None
    return OPTIONS_ADDED_SINCE | json.loads(path.read_text())


def fill_unset_options(args: argparse.Namespace, models: Path | None = None) -> None:
    """Give each decoding option left unset (None) its value: with --resume, the first run's,
    which its job file records (a job goes on as it ran, even where the model's defaults or
    DecodeConfig's changed since: one started before the repetition guard resumes without
    it), else the model's own (its bundle.json `decoding`), so repeating a command resumes
    it; `--rerank auto` likewise, else by the reverse model in `models` (default: the model's
    folder's parent; `resolve_auto_rerank`). Raises BundleError for an unreadable bundle.json
    or a bad `decoding` section."""
    before: dict = {}
    if args.resume and args.output:
        with contextlib.suppress(OSError, ValueError):  # an unreadable record: the resume reports it
            before = first_run_options(args) or {}
    defaults = decode_defaults(args.model).search_settings
    for name in SEARCH_FIELDS:
        if getattr(args, name) is None:
            setattr(args, name, before.get(name, defaults[name]))
    resolve_auto_rerank(args, models, before)


def check_resume_options(args: argparse.Namespace) -> list[str]:
    """Differences between this run's options and those of the run it resumes."""
    before = first_run_options(args)
    if before is None:
        if args.output.exists():
            log.warning("%s: no record of the first run's options; assuming they are the same", job_file(args.output))
        return []
    now = json.loads(json.dumps(job_options(args)))
    return [
        f"{name}: {before.get(name)!r} in the first run, {now.get(name)!r} now"
        for name in sorted(set(before) | set(now))
        if before.get(name) != now.get(name)
    ]


def _count_lines(path: Path) -> int:
    lines, last = 0, b"\n"
    with open(path, "rb") as stream:
        while chunk := stream.read(1 << 20):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    return lines + (last != b"\n")


def _skip(source: _Input, args: argparse.Namespace) -> None:
    """Skip the `source.done` lines a resumed run already wrote, counting how many of them
    failed and were blank.

    Their failures are re-derived by checking them again (cheap, no translation), so the
    summary and exit status cover the whole file, not just this run's part.
    """
    for line in range(1, source.done + 1):
        raw = source.stream.readline()
        if not raw:
            raise ValueError(
                f"{args.output} has {source.done} records but the input has only {line - 1} lines; "
                "it is not the output of this input"
            )
        segment = batch.decode_line(raw, line, args.input_format, args.max_chars)
        source.failed_before += segment.error is not None
        source.blank_before += segment.blank


def main(args: argparse.Namespace) -> int:
    # SIGTERM (kill) ends the run like Ctrl-C: workers stopped, summary printed. The
    # records already written are complete either way, which is what --resume relies on.
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return _run(args)
    except KeyboardInterrupt:  # before the job started (loading the model)
        log.warning("interrupted")
        return batch.EXIT_INTERRUPTED
    except _Stop as stop:
        log.error("%s", stop)
        return stop.status
    finally:
        signal.signal(signal.SIGTERM, previous)


class _Stop(Exception):
    """Ends a run before its job starts: the message is logged as an error, `status` returned."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class _ReadAhead:
    """A binary stream of lines whose first lines can be looked at before the job reads them
    (a sample for `--source auto`, a count for the workers' rule); they are read in order."""

    def __init__(self, stream: BinaryIO):
        self.stream, self.head, self.ended = stream, deque[bytes](), False

    def ahead(self, count: int) -> list[bytes]:
        """The next `count` lines (fewer at the end), left to be read."""
        while len(self.head) < count and not self.ended:
            line = self.stream.readline()
            self.ended = not line
            if line:
                self.head.append(line)
        return list(self.head)[:count]

    def readline(self) -> bytes:
        return self.head.popleft() if self.head else self.stream.readline()

    def __iter__(self) -> Iterator[bytes]:
        while line := self.readline():
            yield line

    def close(self) -> None:
        if self.stream is not sys.stdin.buffer:
            self.stream.close()


@dataclass
class _Input:
    """The input stream, positioned after the lines a resumed run already wrote."""

    stream: _ReadAhead
    total: int | None  # lines in all, for the progress bar (None: stdin)
    done: int = 0  # records already in the output (--resume)
    failed_before: int = 0  # of which errors
    blank_before: int = 0  # and blank lines

    def sample(self, args: argparse.Namespace) -> list[str]:
        """Texts of the first lines, what `--source auto` detects the language of."""
        raw = self.stream.ahead(SAMPLE_LINES)
        lines = [batch.decode_line(r, n, args.input_format, args.max_chars) for n, r in enumerate(raw, start=1)]
        return [line.source for line in lines if not line.error and not line.blank]

    def lines_left(self, enough: int) -> int:
        """Lines still to translate, counted up to `enough` on stdin."""
        if self.total is not None:
            return self.total - self.done
        return len(self.stream.ahead(enough))


SAMPLE_LINES = 64  # the lines `--source auto` reads: some 2,000 characters, what the detector takes


def _run(args: argparse.Namespace) -> int:
    args.format = document_format(args) or args.format
    problems = translate_args.problems(args)
    if problems:
        raise UsageError("; ".join(problems))
    if args.ray is not None:
        return _run_cluster(args)
    if args.format in translate_args.DOCUMENT_FORMATS:
        return translate_document_file(args, lambda sample: _prepare(args, sample), engine_spec)
    source = _open_input(args)
    try:
        return _run_lines(args, source)
    finally:
        source.stream.close()


def _run_cluster(args: argparse.Namespace) -> int:
    """The cluster mode (Ray Data, seq2seq.cli.cluster): Ray is imported only here."""
    try:
        from seq2seq.cli.cluster import run as cluster
    except ImportError as error:
        raise UsageError(
            f"--ray needs Ray Data ({error}): pip install 'crossalign[cluster]', or run ./install.sh"
        ) from error
    decode = _prepare(args, lambda: cluster.sample(args, SAMPLE_LINES))
    if decode.alignment is not None:
        _check_alignment(args, decode.alignment)
    return cluster.main(args, engine_spec(args, decode), job_options(args))


def _run_lines(args: argparse.Namespace, source: _Input) -> int:
    """The line job: the model chosen, the job resumed, the engine started, the lines translated."""
    if args.alignment and args.format == "text":
        log.warning("--alignment shows in --format jsonl (maps) or tsv (links), not in text output")
    decode = _prepare(args, lambda: source.sample(args))
    if decode.alignment is not None:
        _check_alignment(args, decode.alignment)
    if args.resume:
        _resume(args, source)
    engine, tokenizer, max_source = _start_engine(args, decode, source)
    log.info("decoding: %s", translate_args.decoding_text(decode))
    if args.heatmaps is not None:
        args.heatmaps.mkdir(parents=True, exist_ok=True)
    options = batch.JobOptions(
        output_format=args.format,
        batch_size=args.batch_size,
        max_tokens=args.max_tokens,
        flush_lines=args.flush_lines,
        flush_seconds=args.flush_seconds,
        heatmaps=args.heatmaps,
        heatmap_format=args.heatmap_format,
    )
    return _translate(args, engine, tokenizer, max_source, source, options)


def _prepare(args: argparse.Namespace, sample: Callable[[], list[str]]) -> DecodeConfig:
    """Choose the model (and the channel a reranking reads) and fill the decoding left unset
    with its own; the decoding in force. UsageError names a flag to fix, _Stop a model that
    does not load."""
    args.model, models = choose_model(args, sample)
    try:
        fill_unset_options(args, models)
    except BundleError as error:
        raise _Stop(batch.EXIT_FATAL, f"cannot load the model: {error}") from error
    args.channel_model = channel_model(rerank_options(args), args.channel_model, args.model, models)
    return _decode_config(args)


def document_format(args: argparse.Namespace) -> str | None:
    """The document format of this run: --format, or the input's extension (not .txt) when
    --format is left at the line job's default."""
    if args.format in translate_args.DOCUMENT_FORMATS:
        return args.format
    if args.format == batch.JobOptions.output_format and args.input is not None:
        with contextlib.suppress(DocumentError):
            name = format_of(args.input.name).name
            return name if name in translate_args.DOCUMENT_FORMATS else None
    return None


def _decode_config(args: argparse.Namespace) -> DecodeConfig:
    want_alignment = args.alignment or args.heatmaps is not None
    alignment = alignment_options(args, args.alignment_level) if want_alignment else None
    # Every search setting is set by now (fill_unset_options): a flag, the resumed job's or the
    # model's own (`decode_defaults`, what its Translator's `decode_defaults` are, ensembles too).
    return DecodeConfig(
        restore_case=args.restore_case,
        early_exit=args.early_exit,
        return_attention=want_alignment,
        alignment=alignment,
        rerank=rerank_options(args),
    ).override(**translate_args.asked_decoding(args))


def _start_engine(
    args: argparse.Namespace, decode: DecodeConfig, source: _Input
) -> tuple[batch.Engine, Tokenizer, int]:
    """The engine, the tokenizer to bucket with and the model's source limit in pieces. Workers
    start only for an input of at least --workers-min-lines lines still to translate."""
    workers = args.workers
    if workers > 1:
        left = source.lines_left(args.workers_min_lines)
        if left < args.workers_min_lines:
            log.info(
                "%d lines to translate: fewer than --workers-min-lines %d, so in this process, not %d workers "
                "(their start-up would cost more than they save)",
                left,
                args.workers_min_lines,
                workers,
            )
            workers = 1
    spec = engine_spec(args, decode, workers)
    try:
        if workers == 1:
            worker = batch.SentenceTranslator.load(spec)
            return batch.InlineEngine(worker), worker.translator.tokenizer, worker.translator.max_source_tokens
        # The workers load the model; this process only needs the tokenizer to bucket.
        tokenizer = Tokenizer(args.model / TOKENIZER_FILE)
        log.info("starting %d worker processes", workers)
        return batch.ProcessEngine(spec, workers), tokenizer, 250
    except Exception as error:  # noqa: BLE001 - a broken model is a clean fatal error
        raise _Stop(batch.EXIT_FATAL, f"cannot load the model: {error}") from error


def engine_spec(args: argparse.Namespace, decode: DecodeConfig, workers: int = 1) -> batch.EngineSpec:
    """What each process running the model loads: the model, its channel, the decoding."""
    return batch.EngineSpec(
        args.model,
        args.backend,
        batch.worker_threads(args.threads, workers),
        args.precision,
        decode,
        args.quality,
        args.streams,
        args.channel_model,
    )


def _check_alignment(args: argparse.Namespace, alignment: AlignmentOptions) -> None:
    try:  # once, here, rather than as an error on every line
        alignment.resolve(load_config(ModelConfig, args.model / CONFIG_FILE))
    except AlignmentError as error:
        raise UsageError(str(error)) from error


def _open_input(args: argparse.Namespace) -> _Input:
    """Text arguments (each a line: a line break inside one is a space), -i FILE, or stdin."""
    if args.text:
        lines = [re.sub(r"\r\n|\r|\n", " ", text) for text in args.text]
        return _Input(_ReadAhead(io.BytesIO("".join(f"{line}\n" for line in lines).encode("utf-8"))), len(lines))
    if args.input:
        try:
            return _Input(_ReadAhead(open(args.input, "rb")), _count_lines(args.input))  # noqa: SIM115 - _run closes it
        except OSError as error:
            raise UsageError(f"cannot read the input: {error.strerror}: {args.input}; give -i FILE") from error
    return _Input(_ReadAhead(sys.stdin.buffer), None)


def _resume(args: argparse.Namespace, source: _Input) -> None:
    """Check the first run's options, truncate a partial record and skip the lines done."""
    try:
        differences = check_resume_options(args)
        if differences:
            raise UsageError(
                f"cannot resume {args.output} with other options ({'; '.join(differences)}); rerun with "
                f"the first run's options, or delete {job_file(args.output)} to start over"
            )
        source.done = batch.prepare_resume(args.output)
        _skip(source, args)
    except (OSError, ValueError) as error:
        raise _Stop(batch.EXIT_FATAL, f"cannot resume: {error}") from error
    if source.done:
        log.info("resuming %s after %d complete records", args.output, source.done)


def _translate(
    args: argparse.Namespace,
    engine: batch.Engine,
    tokenizer: Tokenizer,
    max_source: int,
    source: _Input,
    options: batch.JobOptions,
) -> int:
    """Run the job with a progress bar; the engine, writer and input are closed on every path."""
    if args.output:
        job_file(args.output).write_text(json.dumps(job_options(args), indent=1) + "\n")
    writer = batch.RecordWriter(args.output, args.format, append=args.resume)
    progress = tqdm(
        total=source.total,
        initial=source.done,
        unit="line",
        file=sys.stderr,
        dynamic_ncols=True,
        disable=not sys.stderr.isatty() or source.total == 1,
    )
    started = time.monotonic()
    summary = batch.JobSummary()
    interrupted = False
    try:
        with logging_redirect_tqdm():
            segments = batch.read_segments(source.stream, args.input_format, args.max_chars, first_line=source.done + 1)
            summary = batch.run_job(segments, engine, tokenizer, writer, options, progress, max_source)
    except KeyboardInterrupt:
        interrupted = True
    except Exception as error:  # noqa: BLE001 - e.g. a worker process died
        log.error("the job stopped: %s: %s", type(error).__name__, error)
        engine.close(cancel=True)
        progress.close()
        writer.close()
        return batch.EXIT_FATAL
    engine.close(cancel=interrupted)
    progress.close()
    writer.close()
    if interrupted:
        written = _written_since(args, source.done)
        log.warning(
            "interrupted after %d lines%s",
            written,
            f"; rerun with --resume -o {args.output} to continue" if args.output else "",
        )
        return batch.EXIT_INTERRUPTED
    return _finish(args, summary, source, time.monotonic() - started)


def _finish(args: argparse.Namespace, summary: batch.JobSummary, source: _Input, elapsed: float) -> int:
    """Log the summary of a finished job and return its exit status."""
    if args.output:
        job_file(args.output).unlink(missing_ok=True)  # finished: nothing left to resume
    written = source.done + summary.lines
    failed = source.failed_before + summary.failed
    blank = source.blank_before + summary.blank
    rate = summary.lines / elapsed if elapsed > 0 else 0.0
    counts = [f"{written - failed - blank} translated"]
    counts += [f"{blank} blank"] if blank else []
    counts += [f"{failed} failed"] if failed else []
    counts += [f"{summary.lines} this run"] if source.done else []
    log.info("%d lines (%s) in %.1f s, %.1f lines/s", written, ", ".join(counts), elapsed, rate)
    if summary.unused_terms:
        log.warning("%d glossary terms not used in the translations", summary.unused_terms)
    if failed:
        shown = ", ".join(map(str, summary.failed_lines[:10])) + (" ..." if len(summary.failed_lines) > 10 else "")
        log.warning("%d of %d lines failed%s", failed, written, f" (lines {shown})" if shown else "")
        return batch.EXIT_SOME_FAILED
    return batch.EXIT_OK


def _written_since(args: argparse.Namespace, done: int) -> int:
    """Records in the output after an interruption (run_job never returned its summary)."""
    if args.output and args.output.exists():
        return batch.prepare_resume(args.output)
    return done


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
