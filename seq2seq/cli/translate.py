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
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from data.files import BUNDLE_FILE, CONFIG_FILE, TOKENIZER_FILE
from data.tokenizer import Tokenizer
from seq2seq.analysis.quality import DEFAULT_QUALITY_MODE
from seq2seq.cli import batch, translate_args
from seq2seq.cli.align import alignment_options
from seq2seq.cli.documents import translate_document_file
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
}


def job_file(output: Path) -> Path:
    return output.with_name(output.name + ".job.json")


def first_run_options(args: argparse.Namespace) -> dict | None:
    """The options recorded by the run that `args` resumes; None without a record."""
    path = job_file(args.output)
    if not path.is_file():
        return None
    return OPTIONS_ADDED_SINCE | json.loads(path.read_text())


def fill_unset_options(args: argparse.Namespace) -> None:
    """Give each decoding option left unset (None) its value: with --resume, the first run's,
    which its job file records (a job goes on as it ran, even where the model's defaults or
    DecodeConfig's changed since: one started before the repetition guard resumes without
    it), else the model's own (its bundle.json `decoding`), so repeating a command resumes
    it. Raises BundleError for an unreadable bundle.json or a bad `decoding` section."""
    before: dict = {}
    if args.resume and args.output:
        with contextlib.suppress(OSError, ValueError):  # an unreadable record: the resume reports it
            before = first_run_options(args) or {}
    defaults = decode_defaults(args.model).search_settings
    for name in SEARCH_FIELDS:
        if getattr(args, name) is None:
            setattr(args, name, before.get(name, defaults[name]))


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


def _skip(stream: BinaryIO, count: int, args: argparse.Namespace) -> int:
    """Skip the `count` lines a resumed run already wrote; returns how many of them failed.

    Their failures are re-derived by checking them again (cheap, no translation), so the
    summary and exit status cover the whole file, not just this run's part.
    """
    failed = 0
    for line in range(1, count + 1):
        raw = stream.readline()
        if not raw:
            raise ValueError(
                f"{args.output} has {count} records but the input has only {line - 1} lines; "
                "it is not the output of this input"
            )
        failed += batch.decode_line(raw, line, args.input_format, args.max_chars).error is not None
    return failed


def main(args: argparse.Namespace) -> int:
    # SIGTERM (kill) ends the run like Ctrl-C: workers stopped, summary printed. The
    # records already written are complete either way, which is what --resume relies on.
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return _run(args)
    except KeyboardInterrupt:  # before the job started (loading the model)
        log.warning("interrupted")
        return batch.EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)


class _Stop(Exception):
    """Ends a run before its job starts: the message is logged as an error, `status` returned."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class _Input:
    """The input stream, positioned after the lines a resumed run already wrote."""

    stream: BinaryIO
    total: int | None  # lines in all, for the progress bar (None: stdin)
    done: int = 0  # records already in the output (--resume)
    failed_before: int = 0  # of which errors


def _run(args: argparse.Namespace) -> int:
    args.format = document_format(args) or args.format
    try:
        fill_unset_options(args)
    except BundleError as error:
        log.error("cannot load the model: %s", error)
        return batch.EXIT_FATAL
    problems = translate_args.problems(args)
    if problems:
        for problem in problems:
            log.error("%s", problem)
        return batch.EXIT_USAGE
    if args.ray is not None:  # the cluster mode (Ray Data): Ray is imported only here
        from seq2seq.cli.cluster import run as cluster

        return cluster.main(args, _decode_config(args), job_options(args))
    if args.format in translate_args.DOCUMENT_FORMATS:
        return translate_document_file(args, _decode_config(args))
    if args.alignment and args.format == "text":
        log.warning("--alignment shows in --format jsonl (maps) or tsv (links), not in text output")
    decode = _decode_config(args)
    try:
        engine, tokenizer, max_source = _start_engine(args, decode)
    except _Stop as stop:
        log.error("%s", stop)
        return stop.status
    try:
        if decode.alignment is not None:
            _check_alignment(args, decode.alignment)
        source = _open_input(args)
        if args.resume:
            _resume(args, source)
    except _Stop as stop:
        log.error("%s", stop)
        engine.close(cancel=True)
        return stop.status
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
    # Every search setting is set by now (fill_unset_options): a flag, the resumed job's or the model's.
    decode = DecodeConfig(
        restore_case=args.restore_case,
        early_exit=args.early_exit,
        return_attention=want_alignment,
        alignment=alignment,
    ).override(**translate_args.asked_decoding(args))
    log.info("decoding: %s%s", decode.settings_text(), " early_exit" if decode.early_exit else "")
    return decode


def _start_engine(args: argparse.Namespace, decode: DecodeConfig) -> tuple[batch.Engine, Tokenizer, int]:
    """The engine, the tokenizer to bucket with and the model's source limit in pieces."""
    spec = batch.EngineSpec(
        args.model,
        args.backend,
        batch.worker_threads(args.threads, args.workers),
        args.precision,
        decode,
        args.quality,
        args.streams,
    )
    try:
        if args.workers == 1:
            worker = batch.SentenceTranslator.load(spec)
            return batch.InlineEngine(worker), worker.translator.tokenizer, worker.translator.max_source_tokens
        # The workers load the model; this process only needs the tokenizer to bucket.
        if not args.model.is_dir():
            raise FileNotFoundError(f"{args.model}: no such model directory")
        tokenizer = Tokenizer(args.model / TOKENIZER_FILE)
        return batch.ProcessEngine(spec, args.workers), tokenizer, 250
    except Exception as error:  # noqa: BLE001 - a missing or broken model is a clean fatal error
        raise _Stop(batch.EXIT_FATAL, f"cannot load the model: {error}") from error


def _check_alignment(args: argparse.Namespace, alignment: AlignmentOptions) -> None:
    try:  # once, here, rather than as an error on every line
        alignment.resolve(load_config(ModelConfig, args.model / CONFIG_FILE))
    except AlignmentError as error:
        raise _Stop(batch.EXIT_USAGE, str(error)) from error


def _open_input(args: argparse.Namespace) -> _Input:
    if args.text:
        return _Input(io.BytesIO(" ".join(args.text).encode("utf-8")), 1)
    if args.input:
        try:
            return _Input(open(args.input, "rb"), _count_lines(args.input))
        except OSError as error:
            raise _Stop(batch.EXIT_FATAL, f"cannot read the input: {error}") from error
    return _Input(sys.stdin.buffer, None)


def _resume(args: argparse.Namespace, source: _Input) -> None:
    """Check the first run's options, truncate a partial record and skip the lines done."""
    try:
        differences = check_resume_options(args)
        if differences:
            raise _Stop(
                batch.EXIT_USAGE,
                f"cannot resume {args.output} with other options ({'; '.join(differences)}); rerun with "
                f"the first run's options, or delete {job_file(args.output)} to start over",
            )
        source.done = batch.prepare_resume(args.output)
        source.failed_before = _skip(source.stream, source.done, args)
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
    if source.stream is not sys.stdin.buffer:
        source.stream.close()
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
    rate = summary.lines / elapsed if elapsed > 0 else 0.0
    log.info(
        "%d lines (%d translated now, %d failed) in %.1f s, %.1f lines/s", written, summary.lines, failed, elapsed, rate
    )
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
