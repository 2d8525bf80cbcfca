"""`crossalign align`: word alignments of given translation pairs (forced alignment).

Input: one `source<TAB>target` pair per line (further tab-separated fields, such as the
links column of a gold file or the kind column of a prepared split, are ignored). The
target is teacher-forced through the decoder and the cross-attention is read with the
one rule of `seq2seq.core.alignment` (see `seq2seq.decoding.forced`). Output, one per input line and in
input order:

- `--format pharaoh`: the hard word links `i-j` (i = source word, j = target word of
  `seq2seq.core.alignment.words()`), ready for `crossalign eval --gold FILE --hyp FILE`;
  a line that could not be aligned is an empty line, and its error goes to stderr;
- `--format jsonl`: `{"line", "source", "target", "source_words", "target_words",
  "word_alignment", "matrix", "layer", "heads", "step_shift", "quality", "case_restored"}` (+
  `subword_alignment` with `--level subword`; `quality` is the block of seq2seq/analysis/quality.py
  with the model's thresholds); a bad line is `{"line", "source", "target", "error"}`;
- `--format untranslated`: the source words the given translation left out (flagged
  untranslated), as `index:word` separated by spaces; an empty line when none (or when the
  line could not be aligned, its error going to stderr);
- `--format marked` (with `--markup`): the translation with the source's inline markup
  placed on it by the alignment (seq2seq/documents/markup.py); an empty line for a bad line.

`--markup html|xml`: the source side carries inline markup (HTML, or XML such as XLIFF's
`<g>`/`<x/>`), read as one segment; its plain text is aligned, word indices are those of
the plain text, and JSONL records get `marked_translation`. A source that does not parse
is a bad line.

Bad lines (no tab, invalid UTF-8, a side that breaks the service's input rules of
`seq2seq.core.inputs` -- empty, over --max-chars, control characters --, too long for the
model, or one that fails inside the model) never stop the job; each becomes an error
record and the exit status is then 3. Torch-free with `--backend onnx`.

    crossalign align --model models/de-en -i pairs.tsv -o pairs.pharaoh
    crossalign align --model work/release/final --backend torch --format jsonl --layer 1 --heads 2 < pairs.tsv
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TextIO

from seq2seq.analysis.quality import DEFAULT_QUALITY_MODE, QUALITY_MODES
from seq2seq.cli import UsageError
from seq2seq.cli.batch import EXIT_OK, EXIT_SOME_FAILED
from seq2seq.cli.batch.reading import MAX_CHARS, strip_line_ending
from seq2seq.cli.models import check_model_dir
from seq2seq.core.config import AlignmentError, AlignmentOptions, DecodeConfig
from seq2seq.core.inputs import text_problem
from seq2seq.decoding.forced import align_given
from seq2seq.decoding.translator import Translator
from seq2seq.documents.inline import INLINE_FORMATS, InlineText, read_inline
from seq2seq.documents.markup import Marked, transfer
from seq2seq.documents.translate import has_words
from seq2seq.loading import BACKENDS, DEFAULT_BACKEND, load_translator

log = logging.getLogger("crossalign.align")
FORMATS = ("pharaoh", "jsonl", "untranslated", "marked")


@dataclass
class PairLine:
    line: int  # 1-based
    source: str
    target: str
    error: str | None = None


def decode_pair(raw: bytes, line: int, max_chars: int = MAX_CHARS) -> PairLine:
    """One raw input line -> a `PairLine`, never raising."""
    raw = strip_line_ending(raw, line)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        fields = raw.decode("utf-8", errors="replace").split("\t")
        return PairLine(line, fields[0], fields[1] if len(fields) > 1 else "", f"invalid UTF-8 at byte {error.start}")
    fields = text.split("\t")
    if len(fields) < 2:
        return PairLine(line, text, "", "expected source<TAB>target")
    source, target = fields[0], fields[1]
    for side, value in (("source", source), ("target", target)):
        problem = text_problem(value, max_chars)  # the service's input rules
        if problem:
            return PairLine(line, source, target, f"{side}: {problem}")
    return PairLine(line, source, target)


def read_pair_lines(stream: BinaryIO, max_chars: int = MAX_CHARS) -> Iterator[PairLine]:
    for number, raw in enumerate(stream, start=1):
        yield decode_pair(raw, number, max_chars)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = __doc__
    parser.add_argument(
        "--model", type=Path, required=True, help="model directory (bundle, or training output with --backend torch)"
    )
    parser.add_argument("-i", "--input", type=Path, help="source<TAB>target lines (default: stdin)")
    parser.add_argument("-o", "--output", type=Path, help="output file (default: stdout)")
    parser.add_argument("--format", choices=FORMATS, default="pharaoh")
    parser.add_argument("--backend", choices=BACKENDS, default=DEFAULT_BACKEND)
    add_alignment_source_arguments(parser)
    parser.add_argument(
        "--level",
        choices=("word", "subword"),
        default=AlignmentOptions.level,
        help="subword: also write the subword map in JSONL records",
    )
    parser.add_argument(
        "--markup",
        choices=INLINE_FORMATS,
        help="the source carries inline markup: align its plain text and place the markup on the translation",
    )
    parser.add_argument("--batch-lines", type=int, default=256, help="lines read and aligned together")
    parser.add_argument("--max-chars", type=int, default=MAX_CHARS, help="longer sides are error records")
    parser.add_argument("--threads", type=int, default=0, help="inference threads (0: the backend's default)")
    add_quality_argument(parser, DEFAULT_QUALITY_MODE)
    parser.add_argument(
        "--restore-case",
        action=argparse.BooleanOptionalAction,
        default=DecodeConfig.restore_case,
        help="read a shouted side (all caps, or shouted words) with its case restored, as translation "
        "does; records say `case_restored`; --no-restore-case: read both sides as given",
    )


def add_quality_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup, default: str) -> None:
    """--quality: which untranslated detector flags the quality blocks. Shared by `align` and `translate`."""
    parser.add_argument(
        "--quality",
        choices=QUALITY_MODES,
        default=default,
        help="how the `untranslated` flags are found: thorough = the model's detector with source "
        "occlusion (one more teacher-forced row per source word: align ~5.5x, translation with "
        "alignment ~2.7x the time), fast = its attention-only detector (no extra cost; more false "
        "flags: the shipped model's F1 on planted omissions ~65 instead of ~71); each quality block "
        f"names it in `untranslated_by` (default {default})",
    )


def add_alignment_source_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """--layer, --heads, --step-shift: which cross-attention to read (None = the model's own
    choice, applied by `AlignmentOptions.resolve`). Shared by `align` and `eval --gold`."""
    parser.add_argument("--layer", type=int, default=None, help="decoder layer (default: the model's alignment layer)")
    parser.add_argument(
        "--heads",
        type=int,
        nargs="*",
        default=None,
        help="heads to average (default: the model's alignment heads; none given = all)",
    )
    parser.add_argument(
        "--step-shift",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="read the map where the target token is the decoder input (Chen et al. 2020); default: the model's",
    )


def alignment_options(args: argparse.Namespace, level: str) -> AlignmentOptions:
    """The options of `add_alignment_source_arguments`' flags, at `level` (each command names its own flag)."""
    return AlignmentOptions(level, args.layer, None if args.heads is None else tuple(args.heads), args.step_shift)


def write_records(
    lines: list[PairLine], translator: Translator, options: AlignmentOptions, args: argparse.Namespace, out: TextIO
) -> int:
    """Align one chunk of lines and write its records in order; returns the number of failures."""
    inline = {id(p): read_marked_source(p, args.markup) for p in lines} if args.markup else {}
    good = [p for p in lines if p.error is None]
    plain = [inline[id(p)].marked.text if args.markup else p.source for p in good]
    aligned = iter(
        align_given(translator, list(zip(plain, [p.target for p in good])), options, restore_case=args.restore_case)
    )
    failures = 0
    for pair in lines:
        result = AlignmentError(pair.error) if pair.error else next(aligned)
        if isinstance(result, AlignmentError):
            failures += 1
            print(f"line {pair.line}: {result}", file=sys.stderr)
            if args.format != "jsonl":
                out.write("\n")
            else:
                out.write(
                    json.dumps(
                        {"line": pair.line, "source": pair.source, "target": pair.target, "error": str(result)},
                        ensure_ascii=False,
                    )
                    + "\n"
                )
            continue
        marked = None
        if args.markup:
            source = inline[id(pair)]
            marked = source.write(transfer(source.marked, pair.target, result.word))
        if args.format == "pharaoh":
            out.write(result.word.pharaoh + "\n")
        elif args.format == "marked":
            out.write((marked if marked is not None else pair.target).replace("\n", " ") + "\n")
        elif args.format == "untranslated":
            words = result.word.source_tokens
            out.write(" ".join(f"{i}:{words[i].text}" for i in result.quality.untranslated) + "\n")
        else:
            record = {"line": pair.line, **result.to_record()}
            if marked is not None:
                record["marked_translation"] = marked
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    out.flush()
    return failures


def read_marked_source(pair: PairLine, kind: str) -> InlineText:
    """The line's source as one marked segment; a source that does not parse, or has no words
    outside its markup, makes the line bad (its `error`)."""
    try:
        inline = read_inline(pair.source, kind)
    except ValueError as error:
        pair.error = pair.error or f"source: {error}"
        return InlineText(Marked(pair.source), lambda placed: pair.source)
    if not has_words(inline.marked.text):
        pair.error = pair.error or "source: no words outside its markup"
    return inline


def main(args: argparse.Namespace) -> int:
    if args.format == "marked" and not args.markup:
        raise UsageError("--format marked needs --markup html or xml")
    if args.input and not args.input.is_file():
        raise UsageError(f"no such file: {args.input}; give -i FILE")
    translator = load_translator(
        check_model_dir(args.model, "--model"), args.backend, args.threads, quality_mode=args.quality
    )
    try:
        options = alignment_options(args, args.level).resolve(translator.config)
    except AlignmentError as error:
        raise UsageError(str(error)) from None
    # Closed in the finally below (stdin and stdout stay open).
    source = open(args.input, "rb") if args.input else sys.stdin.buffer  # noqa: SIM115
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout  # noqa: SIM115
    total = failures = 0
    try:
        chunk: list[PairLine] = []
        for pair in read_pair_lines(source, args.max_chars):
            chunk.append(pair)
            if len(chunk) >= args.batch_lines:
                failures += write_records(chunk, translator, options, args, out)
                total, chunk = total + len(chunk), []
        if chunk:
            failures += write_records(chunk, translator, options, args, out)
            total += len(chunk)
    finally:
        if args.input:
            source.close()
        if args.output:
            out.close()
    log.info("aligned %d of %d lines", total - failures, total)
    return EXIT_SOME_FAILED if failures else EXIT_OK
