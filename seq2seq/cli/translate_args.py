"""`crossalign translate`'s arguments: the flags, in groups, the epilog and their checks.

The run itself is seq2seq.cli.translate; the job (decoding, batching, writing) is
seq2seq.cli.batch.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from seq2seq.cli import batch
from seq2seq.cli.align import add_alignment_source_arguments, add_quality_argument
from seq2seq.cli.cluster import options as cluster
from seq2seq.cli.models import add_model_arguments, add_rerank_arguments
from seq2seq.core.config import MAX_TERM_BONUS, SEARCH_FIELDS, AlignmentOptions, DecodeConfig
from seq2seq.core.hints import term_problem
from seq2seq.documents.files import FORMATS
from seq2seq.loading import BACKENDS
from seq2seq.runtime.bundle import PRECISIONS
from seq2seq.runtime.models import MODELS_ENV

log = logging.getLogger("crossalign.translate")
DOCUMENT_FORMATS = tuple(name for name in FORMATS if name != "txt")  # a .txt file is a line job

EPILOG = f"""\
examples:
  crossalign translate "Das Haus ist klein." "Wo ist der Bahnhof?"   each argument one line
  crossalign translate -i in.de -o out.en                           a file, one line per line
  crossalign translate --source auto --target de -i in.txt          the direction by language
  crossalign translate -i report.docx -o report.en.docx             a document, formatting kept

documents: -i report.docx -o report.en.docx translates a whole file: DOCX, ODT, PPTX, HTML,
  XLIFF, SRT or Markdown (the format from the extension, or --format), each paragraph or cue
  one segment, its inline formatting placed on the translation by the word alignment; with
  --alignment a JSONL sidecar FILE.alignment.jsonl holds every segment's word links.

model: -m DIR, or the bundle of --source/--target (auto: detected from the input) among the
  bundles of --models DIR, ${MODELS_ENV}, ./models when it holds a bundle, or the models
  shipped beside the package, in that order; German -> English unless told otherwise.

input: one segment per line, UTF-8, read as bytes and decoded line by line; each text
  argument is a line of its own.
  text   the whole line is the source
  tsv    the first column is the source (e.g. a test split's source<TAB>target)
  jsonl  {{"id": ..., "text": ...}} per line; the id names the record and the heatmap
  A blank line (nothing but spaces) is kept quietly: an empty translation, not a failure.

output: exactly one record per input line, in input order.
  text   the translation (an empty line for a blank line, and for a bad line, with a
         warning on stderr)
  tsv    id-or-line, source, translation, score, Pharaoh links (with --alignment), error
  jsonl  seq2seq.decoding.records.TranslationRecord: line, id, source, text, score, and with
         --alignment the tokens, soft matrix and Pharaoh links (the HTTP API's schema);
         a bad line has "error" instead of a translation

bad lines (invalid UTF-8 or JSON, and what the service refuses: a JSONL text that is empty,
longer than --max-chars, control characters other than TAB, lone surrogates such as "\\ud800")
become error records and never stop the job; a batch that fails inside the model is
retried line by line, so only the guilty line fails. Every line is split into its
sentences, as the service splits a text; they are translated and joined, alignment offsets
refer to the original line, and the line's score is its sentences' weighted by their length.

progress: records are written (flushed and fsynced) as soon as every line before them is
done: at least every --flush-lines lines (default {batch.JobOptions.flush_lines}) and about every
--flush-seconds (default {batch.JobOptions.flush_seconds:g}), so a kill loses little (with --workers, also
the batches in flight).

workers: --workers N starts N processes only for an input of at least --workers-min-lines
lines (default {batch.WORKER_MIN_LINES}, where they began to pay for their start-up in
bench/batch.py); a smaller input is translated in this process, and the log says so.

glossary: each glossary term a translation did not use is a warning on stderr, one line
per term (at most {batch.JobOptions.max_warnings}, then a count at the end).

resume: with -o FILE --resume, a run that was interrupted (Ctrl-C, kill, crash) goes on
where it stopped: complete records are kept, a partial last record is removed, and that
many input lines are skipped. The options that decide what a record holds (model, input,
formats, beam, alignment, ...) are kept beside the output in FILE.job.json while the job
is unfinished; a resume with different ones is refused, naming them.

decoding: left unset, --beam-size, --length-penalty, --coverage-penalty and
--no-repeat-ngram-size are the model's own, those its figures were measured with (its
bundle.json `decoding`; DecodeConfig's for a model without one), and the run logs them.
With --resume they are the resumed job's own (a job started before the repetition guard
goes on without it).

exit status:
  {batch.EXIT_OK}    every line translated (blank lines kept as they are)
  {batch.EXIT_FATAL}    fatal error (a model that does not load, output longer than the input)
  {batch.EXIT_USAGE}    bad arguments, or a model, input or file they name missing: one line says the fix
  {batch.EXIT_SOME_FAILED}    finished, but some lines failed (their records carry "error")
  {batch.EXIT_INTERRUPTED}  interrupted; the output holds only complete records, rerun with --resume
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    add_io_arguments(parser)
    add_engine_arguments(parser)
    add_decoding_arguments(parser)  # unset: the bundle's, or a resumed job's own (translate.fill_unset_options)
    parser.add_argument(
        "--early-exit",
        action=argparse.BooleanOptionalAction,
        default=DecodeConfig.early_exit,
        help="stop each sentence's beam search as soon as its best continuation ends it, instead of "
        "waiting for beam-size finished hypotheses: faster, shorter and less accurate (shipped "
        "model, valid: 1.13-1.23x as fast at beam 4, BLEU 12.06 -> 11.71; default: off)",
    )
    add_rerank_arguments(parser.add_argument_group("reranking the n-best"), batch_default=True)
    add_job_arguments(parser)
    add_alignment_arguments(parser.add_argument_group("alignment"))
    cluster.add_cluster_arguments(parser)


def add_io_arguments(parser: argparse.ArgumentParser) -> None:
    """What to translate and where the records go: text or files, formats, --resume."""
    parser.add_argument(
        "text", nargs="*", help="texts to translate, each argument one line (default: the lines of --input or stdin)"
    )
    add_model_arguments(parser)  # -m, --models, --source, --target
    parser.add_argument(
        "-i",
        "--input",
        type=Path,
        help="input file, one segment per line (default stdin), or a document (.docx, .odt, .pptx, .html, .xlf, "
        ".srt, .md) translated whole into -o",
    )
    parser.add_argument("-o", "--output", type=Path, help="output file (default stdout)")
    parser.add_argument("--input-format", choices=batch.INPUT_FORMATS, default="text", help="(default text)")
    parser.add_argument(
        "-f",
        "--format",
        choices=batch.OUTPUT_FORMATS + DOCUMENT_FORMATS,
        default=batch.JobOptions.output_format,
        help=f"output format of a line job (default {batch.JobOptions.output_format}), or a document format: "
        f"{', '.join(DOCUMENT_FORMATS)} translate the file -i whole into -o, markup and layout kept (an input "
        "with such an extension is a document unless --format tsv or jsonl is given; .txt stays a line job)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="with -o: keep the complete records of an interrupted run and translate the rest",
    )


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """Which inference backend and graphs run the model."""
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default=batch.EngineSpec.backend,
        help=f"inference backend (default {batch.EngineSpec.backend})",
    )
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default=batch.EngineSpec.precision,
        help="onnx graphs to run (default: the bundle's, named in its bundle.json)",
    )


def add_decoding_arguments(parser: argparse.ArgumentParser) -> None:
    """Beam search settings: they decide the translations (`translate` and `eval` take them).

    Each defaults to None, unset: the model's own then applies (`Translator.decode_defaults`,
    from its bundle.json), so a flag given overrides it and only then."""
    parser.add_argument("--beam-size", type=int, help=f"beam width ({bundle_default('beam_size')})")
    parser.add_argument("--length-penalty", type=float, help=f"GNMT alpha ({bundle_default('length_penalty')})")
    parser.add_argument(
        "--coverage-penalty", type=float, help=f"GNMT beta, 0 = off ({bundle_default('coverage_penalty')})"
    )
    parser.add_argument(
        "--no-repeat-ngram-size",
        type=ngram_size,
        metavar="N",
        help="no translation repeats an n-gram of target pieces it already holds, 0 = off "
        f"({bundle_default('no_repeat_ngram_size')})",
    )
    parser.add_argument(
        "--dictionary-hints",
        action=argparse.BooleanOptionalAction,
        help="show rare source words to the model with their dictionary translation, for a model trained with "
        f"hints ({bundle_default('dictionary_hints')})",
    )
    parser.add_argument(
        "--hint-max-count",
        type=ngram_size,
        metavar="N",
        help=f"a word is rare when the training sentences held it at most N times ({bundle_default('hint_max_count')})",
    )
    parser.add_argument(
        "--term-bonus",
        type=term_bonus,
        metavar="B",
        help="added to a translation's score per piece of a glossary term it writes, so the search tries the "
        f"terms; 0 = off ({bundle_default('term_bonus')})",
    )
    parser.add_argument(
        "--glossary",
        type=read_glossary,
        metavar="FILE.tsv",
        default=(),
        help="your terms, one `source term<TAB>target term` per line: matched in inflected forms and shown to "
        "the model (a model trained with hints); each translation's quality says whether it used them",
    )
    parser.add_argument(
        "--glossary-strict",
        action="store_true",
        help="the glossary as a requirement: a translation that ends before writing every term pays for each, "
        "so more terms reach the output, at some cost to the sentence around them",
    )
    parser.add_argument(
        "--restore-case",
        action=argparse.BooleanOptionalAction,
        default=DecodeConfig.restore_case,
        help="read a shouted (all-caps) line with its case restored and translate it in capitals; "
        "--no-restore-case: the model reads every line as given",
    )


def term_bonus(text: str) -> float:
    value = float(text)
    if not 0 <= value <= MAX_TERM_BONUS:
        raise argparse.ArgumentTypeError(f"must be between 0 and {MAX_TERM_BONUS}, not {text}")
    return value


def bundle_default(name: str) -> str:
    """A decoding flag's default, as --help says it."""
    return f"default: the bundle's, else {getattr(DecodeConfig, name)}"


def asked_decoding(args: argparse.Namespace) -> dict[str, Any]:
    """The search settings given on the command line (None = unset: the model's own), for
    `DecodeConfig.override` over `Translator.decode_defaults`."""
    asked = {name: getattr(args, name) for name in SEARCH_FIELDS}
    return asked | {"glossary": args.glossary or None, "glossary_strict": args.glossary_strict or None}


def decoding_text(decode: DecodeConfig) -> str:
    """The decoding in force as the log shows it: the search settings, early exit, reranking."""
    text = decode.settings_text() + (" early_exit" if decode.early_exit else "")
    rerank = decode.rerank
    if rerank is not None:
        text += f" rerank={rerank.mode} rerank_candidates={rerank.candidates}"
        text += f" channel_weight={rerank.channel_weight}" if rerank.uses_channel else ""
    return text


def read_glossary(path: str) -> tuple[tuple[str, str], ...]:
    """--glossary FILE.tsv: (source term, target term) pairs; refused when parsing (exit status
    2) naming the line that is not two non-empty fields."""
    entries = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise argparse.ArgumentTypeError(f"{path}: {error}") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = [field.strip() for field in line.split("\t")]
        if len(fields) != 2 or not all(fields):
            raise argparse.ArgumentTypeError(f"{path}:{number}: expected `source term<TAB>target term`")
        problem = next(filter(None, map(term_problem, fields)), None)
        if problem:
            raise argparse.ArgumentTypeError(f"{path}:{number}: a term holds a {problem}: terms are plain text")
        entries.append((fields[0], fields[1]))
    return tuple(entries)


def ngram_size(text: str) -> int:
    """--no-repeat-ngram-size: an integer >= 0, refused when parsing (exit status 2)."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 (0 = off), not {value}")
    return value


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    """Batching, flushing, workers and the limits on a line."""
    parser.add_argument(
        "--batch-size",
        type=int,
        default=batch.JobOptions.batch_size,
        help=f"sentences per batch (default {batch.JobOptions.batch_size})",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=batch.JobOptions.max_tokens,
        help=f"padded source pieces per batch (default {batch.JobOptions.max_tokens})",
    )
    parser.add_argument(
        "--flush-lines",
        "--window",
        type=int,
        default=batch.JobOptions.flush_lines,
        help="records are written at least every this many lines translated: lines are sorted by "
        f"length within windows of at most this many (default {batch.JobOptions.flush_lines})",
    )
    parser.add_argument(
        "--flush-seconds",
        type=float,
        default=batch.JobOptions.flush_seconds,
        help="... and about every this many seconds: windows shrink to what the measured rate "
        f"translates in that time (default {batch.JobOptions.flush_seconds:g})",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes, each with its own session; order is kept (default 1). They start only for "
        "an input of at least --workers-min-lines lines: their start-up costs more than they save on less",
    )
    parser.add_argument(
        "--workers-min-lines",
        type=int,
        default=batch.WORKER_MIN_LINES,
        metavar="N",
        help=f"lines an input needs for --workers to start them (default {batch.WORKER_MIN_LINES}, the break-even "
        "measured by bench/batch.py; 0: always)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=batch.EngineSpec.threads,
        help="inference threads per worker (0 = the cores, at most 4; with --workers, the cores shared out)",
    )
    parser.add_argument(
        "--streams",
        type=int,
        default=batch.EngineSpec.streams,
        help="sub-batches of a batch searched at once, sharing a worker's threads "
        "(0 = two once a worker has two threads; 1 = search each batch whole)",
    )
    parser.add_argument(
        "--max-chars", type=int, default=batch.MAX_CHARS, help=f"longer lines are errors (default {batch.MAX_CHARS})"
    )
    # Lines were split above this many pieces; every line is split now. Hidden, it keeps old scripts working.
    parser.add_argument(
        "--split-tokens",
        action=DeprecatedAlias,
        retired="every line is split into its sentences, as the service splits a text",
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )


def add_alignment_arguments(group: argparse._ArgumentGroup) -> None:
    """The alignment group: maps or links per record, their source, and heatmaps."""
    group.add_argument(
        "--alignment", action="store_true", help="add the alignment map (jsonl) or Pharaoh links (tsv) to each record"
    )
    group.add_argument(
        "--alignment-level",
        choices=("word", "subword"),
        default=AlignmentOptions.level,
        help=f"(default {AlignmentOptions.level})",
    )
    add_alignment_source_arguments(group)  # --layer, --heads, --step-shift, as `align` and `eval --gold`
    # The spellings before the flags were shared; hidden, they keep old scripts working.
    group.add_argument(
        "--alignment-layer",
        dest="layer",
        type=int,
        action=DeprecatedAlias,
        new="--layer",
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )
    group.add_argument(
        "--alignment-heads",
        dest="heads",
        type=int,
        nargs="+",
        action=DeprecatedAlias,
        new="--heads",
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )
    add_quality_argument(group, batch.EngineSpec.quality_mode)  # jsonl records' quality blocks
    group.add_argument(
        "--heatmaps", type=Path, metavar="DIR", help="write one heatmap per line into DIR, named by line number or id"
    )
    group.add_argument(
        "--heatmap-format",
        choices=batch.HEATMAP_FORMATS,
        default=batch.JobOptions.heatmap_format,
        help=f"(default {batch.JobOptions.heatmap_format})",
    )


class DeprecatedAlias(argparse.Action):
    """An old spelling of the flag `new`: stores what it would store, and says so in a warning.
    Without `new`, a flag that no longer applies (`retired` says why): its value is dropped."""

    def __init__(self, option_strings: list[str], dest: str, new: str = "", retired: str = "", **kwargs: Any):
        super().__init__(option_strings, dest, **kwargs)
        self.new, self.retired = new, retired

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        if not self.new:
            log.warning("%s no longer applies: %s", option_string, self.retired)
            return
        log.warning("%s is deprecated: use %s", option_string, self.new)
        setattr(namespace, self.dest, values)


def problems(args: argparse.Namespace) -> list[str]:
    problems = []
    if args.resume and not args.output:
        problems.append("--resume needs -o/--output FILE")
    if args.text and args.input:
        problems.append("give text arguments or --input, not both")
    if args.output and not args.output.parent.is_dir():
        problems.append(f"-o {args.output}: there is no directory {args.output.parent}; create it, or give another")
    for name in ("beam_size", "batch_size", "max_tokens", "workers", "max_chars", "flush_lines"):
        if getattr(args, name) is not None and getattr(args, name) < 1:  # an unset beam: the model's
            problems.append(f"--{name.replace('_', '-')} must be at least 1")
    if args.threads < 0:
        problems.append("--threads must not be negative")
    if args.workers_min_lines < 0:
        problems.append("--workers-min-lines must not be negative")
    if args.streams < 0:
        problems.append("--streams must not be negative")
    if not args.flush_seconds > 0:
        problems.append("--flush-seconds must be positive")
    return problems + cluster.problems(args)
