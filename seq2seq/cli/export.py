"""`crossalign export`: checkpoint -> verified ONNX release bundle (see export/exporter.py).

Prints `{"bundle", "precision", "parity"}` as JSON once the bundle is in place.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from export.exporter import DEFAULT_OPSET, export_model


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint_dir", type=Path, help="directory with config.json, model.pt (and spm.model)")
    parser.add_argument("--out", type=Path, default=Path("models/de-en"),
                        help="bundle directory (default models/de-en)")
    parser.add_argument("--tokenizer", type=Path, default=None,
                        help="SentencePiece model (default CHECKPOINT_DIR/spm.model)")
    parser.add_argument("--int8", action="store_true",
                        help="also write int8 graphs (dynamic quantization) and make them the default")
    parser.add_argument("--data-manifest", type=Path, default=None,
                        help="manifest.json of the data directory: provenance and license go into the bundle")
    parser.add_argument("--opset", type=int, default=DEFAULT_OPSET, help=f"ONNX opset (default {DEFAULT_OPSET})")
    parser.add_argument("--force", action="store_true", help="replace an existing bundle in --out")
    parser.add_argument("--parity-file", type=Path, default=None,
                        help="German sentences for the parity check, one per line (TSV: first column)")


def main(args: argparse.Namespace) -> int:
    sentences = None
    if args.parity_file is not None:
        lines = Path(args.parity_file).read_text(encoding="utf-8").splitlines()
        sentences = [line.split("\t")[0] for line in lines if line.strip()][:32]
    result = export_model(args.checkpoint_dir, args.out, int8=args.int8, tokenizer=args.tokenizer,
                          data_manifest=args.data_manifest, opset=args.opset, force=args.force,
                          parity_sentences=sentences)
    print(json.dumps({"bundle": str(result.out_dir), "precision": result.precision, "parity": result.parity}, indent=2))
    return 0
