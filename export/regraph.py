"""`crossalign export DIR --in-place --graphs ...`: give an existing bundle the graphs of
the precisions asked for, rebuilt from its own model.pt (how an int8-only release gets
its fp32 graphs back)."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

from export.calibrate import DEFAULT_SOURCE, Calibration
from export.exporter import (
    DEFAULT_OPSET,
    ExportError,
    ExportResult,
    build_graphs,
    load_checkpoint,
)
from export.parity import PARITY_SENTENCES, run_parity_checks
from export.precisions import keep_graphs, precision_problems
from seq2seq.runtime.bundle import load_bundle_manifest, replace_graphs, write_manifest
from seq2seq.runtime.onnx_backend import decoder_graph_io, encoder_io

log = logging.getLogger("crossalign.export")


def regraph_bundle(
    bundle_dir: Path,
    precisions: tuple[str, ...],
    opset: int = DEFAULT_OPSET,
    parity_sentences: list[str] | None = None,
    calibration: Calibration | None = None,
) -> ExportResult:
    """Give an existing bundle exactly the graphs of `precisions` (the first its default),
    rebuilt from its own model.pt, in place (`crossalign export DIR --in-place --graphs ...`).

    How a bundle shipped with one precision gets the other: the graphs are exported from the
    bundle's float16 weights, which are the values its graphs were made from, so they come
    out as the same graphs (the same bytes with the same torch and onnx). Everything else in
    the bundle stays: model.pt, tokenizer, quality thresholds, metrics, model card. Graphs
    are written and checked in a staging directory first (fp32 against torch, as in
    `export_model`); then the new graph files are moved in, bundle.json is replaced, and
    graph files no longer listed are removed.
    """
    bundle_dir = Path(bundle_dir)
    problems = precision_problems(precisions) + (
        [f"opset {opset}: need >= 17 (LayerNormalization)"] if opset < 17 else []
    )
    if not problems:
        bundle = load_bundle_manifest(bundle_dir)  # verified: the weights are the shipped ones
        loaded = load_checkpoint(bundle_dir, bundle.tokenizer_path)
        problems = loaded.problems
    if problems:
        raise ExportError(f"cannot rebuild the graphs of {bundle_dir}:\n  - " + "\n  - ".join(problems))
    assert loaded.model is not None
    staging = Path(tempfile.mkdtemp(prefix=f".{bundle_dir.name}.", suffix=".graphs", dir=bundle_dir.parent))
    try:
        if "int8" in precisions:
            calibration = calibration or Calibration(tuple(parity_sentences or PARITY_SENTENCES), DEFAULT_SOURCE)
        int8 = calibration if "int8" in precisions else None
        graphs, calibrated = build_graphs(loaded.model, staging, int8, bundle.tokenizer_path, opset)
        old_graphs = {name for files in bundle.manifest["graphs"].values() for name in files.values()}
        for name in set(bundle.manifest["files"]) - old_graphs:  # a bundle to check: the same other files
            try:
                os.link(bundle_dir / name, staging / name)
            except OSError:  # a file system without hard links
                shutil.copyfile(bundle_dir / name, staging / name)
        manifest = replace_graphs(bundle.manifest, staging, graphs, precisions[0])
        # The graphs of this exporter, whose interface may have changed (export/topk.py, the
        # transposed keys).
        manifest["interface"] = {
            **manifest.get("interface", {}),
            "encoder": encoder_io(),
            "decoder_step": decoder_graph_io(loaded.model.config.decoder_layers),
            "opset": opset,
        }
        manifest.pop("int8_calibration", None)
        if calibrated:
            manifest["int8_calibration"] = calibrated
        write_manifest(staging, manifest)
        parity = run_parity_checks(
            staging, loaded.model, parity_sentences or list(PARITY_SENTENCES), "int8" in precisions
        )
        manifest = keep_graphs(staging, precisions)
        kept = {name for files in manifest["graphs"].values() for name in files.values()}
        for name in kept:
            (staging / name).replace(bundle_dir / name)
        write_manifest(bundle_dir, manifest)
        for name in old_graphs - kept:
            (bundle_dir / name).unlink(missing_ok=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log.info("%s now carries %s graphs (default %s)", bundle_dir, " and ".join(precisions), precisions[0])
    return ExportResult(bundle_dir, precisions[0], parity)
