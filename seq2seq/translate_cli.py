"""`crossalign translate`: one line in, one line out, in order."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from tqdm import tqdm

from seq2seq.config import DecodeConfig
from seq2seq.loading import BACKENDS, load_translator

log = logging.getLogger("crossalign.translate")
DEFAULT_MODEL = Path("models/de-en")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("text", nargs="*", help="text to translate (default: read lines from --input or stdin)")
    parser.add_argument("-m", "--model", type=Path, default=DEFAULT_MODEL, help=f"model directory (default {DEFAULT_MODEL})")
    parser.add_argument("-i", "--input", type=Path, help="input file, one segment per line (default stdin)")
    parser.add_argument("-o", "--output", type=Path, help="output file (default stdout)")
    parser.add_argument("--backend", choices=BACKENDS, default="onnx", help="inference backend (default onnx)")
    parser.add_argument("--beam-size", type=int, default=DecodeConfig.beam_size, help=f"(default {DecodeConfig.beam_size})")
    parser.add_argument("--length-penalty", type=float, default=DecodeConfig.length_penalty)
    parser.add_argument("--batch-size", type=int, default=32, help="sentences per batch (default 32)")
    parser.add_argument("--threads", type=int, default=0, help="inference threads (0 = library default)")


def read_lines(args: argparse.Namespace) -> list[str]:
    if args.text:
        return [" ".join(args.text)]
    raw = args.input.read_bytes() if args.input else sys.stdin.buffer.read()
    return raw.decode("utf-8", errors="replace").splitlines()


def main(args: argparse.Namespace) -> int:
    translator = load_translator(args.model, args.backend, args.threads)
    config = DecodeConfig(beam_size=args.beam_size, length_penalty=args.length_penalty, return_attention=False)
    lines = read_lines(args)
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    progress = tqdm(total=len(lines), unit="line", disable=not sys.stderr.isatty() or len(lines) < 2, file=sys.stderr)
    try:
        for start in range(0, len(lines), args.batch_size):
            chunk = lines[start:start + args.batch_size]
            # Empty lines stay empty lines: the output keeps one line per input line.
            texts = [line.strip() for line in chunk]
            nonempty = [t for t in texts if t]
            results = iter(translator.translate_batch(nonempty, config)) if nonempty else iter(())
            for text in texts:
                out.write((next(results).text if text else "") + "\n")
            out.flush()
            progress.update(len(chunk))
    finally:
        progress.close()
        if args.output:
            out.close()
    return 0
