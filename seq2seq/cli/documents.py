"""`crossalign translate -i report.docx -o report.en.docx`: a whole document translated,
its markup and layout kept (seq2seq/documents/files.py: docx, odt, pptx, html, xliff, srt, md).

The format comes from the input's extension, or `--format`. Every segment (a paragraph, a
cue, a table cell) is translated whole with its word alignment in the same pass, and its
inline formatting placed on the translation by that alignment. `--alignment` writes a
JSONL sidecar beside the output (`OUTPUT.alignment.jsonl`): per segment its index, plain
source, plain translation and word links (Pharaoh `i-j`). A segment that fails keeps its
source text and the run exits 3; a file that does not parse as its format exits 1.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

from seq2seq.cli import UsageError, batch, translate_args
from seq2seq.core.config import DecodeConfig
from seq2seq.documents.files import DocumentError, format_of, read_document, translate_document, translated_name
from seq2seq.documents.translate import Translate, Translation, sentence_translator

log = logging.getLogger("crossalign.translate")
SEGMENTS_PER_CALL = 64  # segments translated together: the progress bar's step
SAMPLE_SEGMENTS = 64  # the segments `--source auto` reads


def sidecar_path(output: Path) -> Path:
    return output.with_name(output.name + ".alignment.jsonl")


def chunked(translate: Translate, progress: tqdm, size: int = SEGMENTS_PER_CALL) -> Translate:
    """`translate` over `size` segments at a time, the progress bar moved after each; a call
    that fails is retried segment by segment, so only the guilty segment fails."""

    def run(texts: list[str]) -> list[Translation | Exception]:
        out: list[Translation | Exception] = []
        for start in range(0, len(texts), size):
            part = texts[start : start + size]
            try:
                out += translate(part)
            except Exception:  # noqa: BLE001 - retried one by one below; the segment at fault gets the error
                for text in part:
                    try:
                        out += translate([text])
                    except Exception as error:  # noqa: BLE001 - this segment keeps its source
                        out.append(error)
            progress.update(len(part))
        return out

    return run


def translate_document_file(
    args: argparse.Namespace,
    prepare: Callable[[Callable[[], list[str]]], DecodeConfig],
    spec: Callable[[argparse.Namespace, DecodeConfig], batch.EngineSpec],
) -> int:
    """The document job of `crossalign translate`; returns its exit status. `prepare(sample)`
    chooses the model (`--source auto` reads `sample()`, the document's first segments) and
    returns the decoding in force; `spec` is what loads the model and its channel."""
    if args.input is None or args.output is None or args.text:
        raise UsageError("a document is translated from -i FILE into -o FILE: give both")
    try:
        file_format = format_of(args.input.name, args.format)
        data = args.input.read_bytes()
    except FileNotFoundError as error:
        raise UsageError(f"cannot read the input: {error.strerror}: {args.input}; give -i FILE") from None
    except (OSError, DocumentError) as error:
        log.error("cannot read %s: %s", args.input, error)
        return batch.EXIT_FATAL
    try:
        document = read_document(data, file_format)
    except DocumentError as error:
        log.error("cannot read %s: %s", args.input, error)
        return batch.EXIT_FATAL
    decode = prepare(lambda: [segment.text for segment in document.segments[:SAMPLE_SEGMENTS]])
    try:
        translator = batch.SentenceTranslator.load(spec(args, decode)).translator
    except Exception as error:  # noqa: BLE001 - a broken model is a clean fatal error
        log.error("cannot load the model: %s", error)
        return batch.EXIT_FATAL
    log.info("decoding: %s", translate_args.decoding_text(decode))
    started = time.monotonic()
    todo = sum(1 for segment in document.segments if any(c.isalnum() for c in segment.text))
    with tqdm(total=todo, unit="segment", file=sys.stderr, disable=not sys.stderr.isatty()) as progress:
        translate = chunked(sentence_translator(translator, decode), progress)
        result = translate_document(document, translate, translator.config.target_lang)
    args.output.write_bytes(result.data)
    if args.alignment:
        with open(sidecar_path(args.output), "w", encoding="utf-8") as sidecar:
            for record in result.alignments:
                sidecar.write(json.dumps(record, ensure_ascii=False) + "\n")
    report = result.report
    log.info(
        "%s: %d of %d segments translated in %.1f s, %d tags (%d approximated); written to %s (offered by the "
        "service as %s)",
        file_format.name,
        report.translated,
        report.segments,
        time.monotonic() - started,
        report.tags,
        report.approximated,
        args.output,
        translated_name(args.input.name, translator.config.target_lang, file_format),
    )
    for kind, count in sorted(result.notes.items()):
        log.info("kept as they were: %d %s", count, kind)
    for failure in report.failed[:10]:
        log.warning("%s", failure)
    return batch.EXIT_SOME_FAILED if report.failed else batch.EXIT_OK
