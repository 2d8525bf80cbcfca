"""Batch translation of whole files: the job behind `crossalign translate`.

The pipeline, one line of input = one record of output, one module per step:

1. `reading`: lines are read as bytes and decoded one by one into `Segment`s; bad lines
   (invalid UTF-8 or JSON, and texts that break `seq2seq.core.inputs`, the service's rules)
   become error records and never stop the job.
2. `job`: every line is split into its sentences (as the service splits a text), each
   translated on its own and joined back by the one text pipeline (seq2seq.decoding.texts),
   alignment offsets shifted into the whole line.
3. `job`: a window of lines (at most `flush_lines`, and about `flush_seconds` of work) is
   sorted by length and cut into batches bounded by sentences and by padded source tokens.
4. `engines`: batches go to the one `Translator` interface, in this process or in worker
   processes that each load their own session; results come back in any order.
5. `writing`: records are joined and written strictly in input order, a run of complete
   records per write, then flushed and fsynced. A crash can therefore only leave a
   partial *last* record, which `--resume` truncates before skipping the lines done.

Torch-free: the torch backend is imported only by `load_translator` when asked for.
The names below are the job's public surface, so callers write `batch.run_job`.
"""

from __future__ import annotations

from seq2seq.cli import EXIT_USAGE
from seq2seq.cli.batch.engines import (
    WORKER_MIN_LINES,
    Engine,
    EngineSpec,
    FailedSentence,
    InlineEngine,
    ProcessEngine,
    SentenceTranslator,
    UnitResult,
    worker_threads,
)
from seq2seq.cli.batch.job import JobOptions, JobSummary, RecordSink, _Unit, plan_batches, run_job, run_windows
from seq2seq.cli.batch.reading import (
    INPUT_FORMATS,
    MAX_CHARS,
    Segment,
    decode_line,
    read_segments,
    strip_line_ending,
)
from seq2seq.cli.batch.writing import (
    HEATMAP_FORMATS,
    OUTPUT_FORMATS,
    LineResult,
    RecordWriter,
    format_record,
    join_line,
    prepare_resume,
)

# Exit statuses of `crossalign translate` (documented in its --help).
EXIT_OK = 0  # every line translated
EXIT_FATAL = 1  # nothing usable: a model that does not load, a worker that died, output mismatch
# EXIT_USAGE (2, as argparse's): bad arguments, or a model or file they name missing -- every command's.
EXIT_SOME_FAILED = 3  # the job finished, but some lines carry an error instead of a translation
EXIT_INTERRUPTED = 130  # Ctrl-C / SIGTERM: what was written is complete; rerun with --resume

__all__ = [
    "EXIT_FATAL",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_SOME_FAILED",
    "EXIT_USAGE",
    "HEATMAP_FORMATS",
    "INPUT_FORMATS",
    "MAX_CHARS",
    "OUTPUT_FORMATS",
    "Engine",
    "EngineSpec",
    "FailedSentence",
    "InlineEngine",
    "JobOptions",
    "JobSummary",
    "LineResult",
    "ProcessEngine",
    "RecordSink",
    "RecordWriter",
    "Segment",
    "SentenceTranslator",
    "UnitResult",
    "WORKER_MIN_LINES",
    "_Unit",
    "decode_line",
    "format_record",
    "join_line",
    "plan_batches",
    "prepare_resume",
    "read_segments",
    "run_job",
    "run_windows",
    "strip_line_ending",
    "worker_threads",
]
