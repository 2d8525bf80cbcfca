"""`crossalign export`: checkpoint -> verified ONNX release bundle (see export/exporter.py).

The command lives beside what it runs: the library (`seq2seq/`) never imports `export/`;
`crossalign` finds this module by name (`seq2seq/cli/__init__.py`, `COMMANDS`).

    crossalign export runs/final --out models/de-en                    # fp32 graphs
    crossalign export runs/final --out models/de-en --graphs int8 fp32 # both, int8 the default
    crossalign export models/de-en --in-place --graphs int8 fp32       # add fp32 graphs to a bundle

Prints `{"bundle", "precision", "parity"}` as JSON once the bundle is in place.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from export.calibrate import Calibration, read_calibration_sentences
from export.exporter import DEFAULT_OPSET, ExportError, export_model, portable_path
from export.parity import ParityError
from export.regraph import regraph_bundle
from seq2seq.runtime.bundle import PRECISIONS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "checkpoint_dir",
        type=Path,
        help="directory with config.json, model.pt (and spm.model); with --in-place, a bundle",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("models/de-en"), help="bundle directory (default models/de-en)"
    )
    parser.add_argument(
        "--tokenizer", type=Path, default=None, help="SentencePiece model (default CHECKPOINT_DIR/spm.model)"
    )
    parser.add_argument(
        "--graphs",
        nargs="+",
        choices=PRECISIONS,
        default=["fp32"],
        metavar="PRECISION",
        help="graph precisions the bundle carries, the first is the one a runtime loads by "
        f"default ({', '.join(PRECISIONS)}; default fp32); int8 graphs are the fp32 "
        "ones with their MatMul weights dynamically quantized",
    )
    parser.add_argument("--int8", action="store_true", help="the same as --graphs int8 fp32")
    parser.add_argument(
        "--in-place",
        action="store_true",
        help="CHECKPOINT_DIR is a bundle: rebuild its graphs from its own model.pt so that it "
        "carries exactly --graphs (everything else in it stays; --out is not used)",
    )
    parser.add_argument(
        "--data-manifest",
        type=Path,
        default=None,
        help="manifest.json of the data directory: provenance and license go into the bundle",
    )
    parser.add_argument("--opset", type=int, default=DEFAULT_OPSET, help=f"ONNX opset (default {DEFAULT_OPSET})")
    parser.add_argument("--force", action="store_true", help="replace an existing bundle in --out")
    parser.add_argument(
        "--calibration",
        type=Path,
        default=None,
        help="German sentences the int8 graphs' activation scales are calibrated on, one per line "
        "(TSV: first column; the first 128 are used; default: the parity sentences). Fixed scales "
        "make an int8 translation the same alone or in any batch (export/calibrate.py)",
    )
    parser.add_argument(
        "--parity-file",
        type=Path,
        default=None,
        help="German sentences for the parity check, one per line (TSV: first column)",
    )


def main(args: argparse.Namespace) -> int:
    """Export, or end in one line naming the fix: exit status 2 for what the user can change
    (the checkpoint, --out, a file a flag names), 1 for graphs that fail their parity check.
    (This layer is below `seq2seq.cli`'s UsageError, so it ends so itself.)"""
    try:
        return export(args)
    except (ExportError, UsageProblem) as error:
        print(f"crossalign export: error: {one_line(error)}", file=sys.stderr)
        return 2
    except ParityError as error:
        print(f"crossalign export: error: {one_line(error)}", file=sys.stderr)
        return 1


class UsageProblem(ValueError):
    """A file a flag names that cannot be read."""


def one_line(error: Exception) -> str:
    """An error's message on one line: ExportError's list of problems joined by `; `."""
    return "; ".join(part.strip(" -") for part in str(error).splitlines() if part.strip(" -")).replace(":;", ":")


def read_sentences(path: Path, flag: str) -> list[str]:
    """The first column of `path`'s non-empty lines; UsageProblem naming `flag` if it does not read."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise UsageProblem(f"cannot read {flag} {path}: {getattr(error, 'strerror', None) or error}") from None
    return [line.split("\t")[0] for line in lines if line.strip()]


def export(args: argparse.Namespace) -> int:
    sentences = None
    if args.parity_file is not None:
        sentences = read_sentences(args.parity_file, "--parity-file")[:32]
    precisions = ("int8", "fp32") if args.int8 else tuple(args.graphs)
    calibration = None
    if args.calibration is not None:
        read_sentences(args.calibration, "--calibration")  # a missing file named before any export starts
        calibration = Calibration(tuple(read_calibration_sentences(args.calibration)), portable_path(args.calibration))
    if args.in_place:
        result = regraph_bundle(args.checkpoint_dir, precisions, args.opset, sentences, calibration)
    else:
        result = export_model(
            args.checkpoint_dir,
            args.out,
            precisions,
            tokenizer=args.tokenizer,
            data_manifest=args.data_manifest,
            opset=args.opset,
            force=args.force,
            parity_sentences=sentences,
            calibration=calibration,
        )
    print(json.dumps({"bundle": str(result.out_dir), "precision": result.precision, "parity": result.parity}, indent=2))
    return 0
