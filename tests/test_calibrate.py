"""int8 graphs with calibrated activation scales (export/calibrate.py): a sentence's
log-probs do not depend on what else is in its batch, as they do with dynamic per-tensor
scales; and the graph rewrite leaves no dynamic quantization behind."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from toy import SENTENCES

from export.calibrate import DEFAULT_SOURCE, Calibration, read_calibration_sentences
from export.exporter import export_model
from export.quantize import quantize_graphs
from seq2seq.decoding.search import pad_batch
from seq2seq.runtime.bundle import load_bundle_manifest
from seq2seq.runtime.onnx_backend import OnnxBackend


@pytest.fixture(scope="module")
def int8_bundle(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("calibrated") / "de-en"
    export_model(tiny_checkpoint, out, ("int8", "fp32"), parity_sentences=list(SENTENCES))
    return out


def teacher_forced_log_probs(backend: OnnxBackend, sources: list[list[int]], targets: list[list[int]]) -> np.ndarray:
    src_ids, src_mask = pad_batch(sources, backend.pad_id)
    tgt_ids, _ = pad_batch(targets, backend.pad_id)
    return backend.teacher_force(src_ids, src_mask, tgt_ids).log_probs


def first_row_alone_and_in_a_batch(backend: OnnxBackend) -> tuple[np.ndarray, np.ndarray]:
    """Sentence 0's teacher-forced log-probs alone, and beside a longer sentence with other
    activations (so the batch's activation range differs)."""
    sentence, other = [5, 6, 7, 8, 3], [9, 10, 11, 12, 13, 14, 15, 16, 3]
    target, other_target = [5, 6, 7], [20, 21, 22, 23, 24, 25]
    alone = teacher_forced_log_probs(backend, [sentence], [target])[0]
    batched = teacher_forced_log_probs(backend, [sentence, other], [target, other_target])[0, : len(alone)]
    return alone, batched


def test_calibrated_int8_rows_do_not_depend_on_their_batch(int8_bundle: Path, tmp_path: Path) -> None:
    bundle = load_bundle_manifest(int8_bundle)
    calibrated = OnnxBackend.from_bundle(bundle, "int8", threads=1)
    alone, batched = first_row_alone_and_in_a_batch(calibrated)
    assert np.array_equal(alone, batched)
    # The dynamic graphs, whose scale is computed over the whole batch, do depend on it:
    # the reason for calibrating.
    files = quantize_graphs(int8_bundle, tmp_path)
    dynamic = OnnxBackend(tmp_path / files["encoder"], tmp_path / files["decoder_step"], bundle.model_config, 1, "int8")
    alone, batched = first_row_alone_and_in_a_batch(dynamic)
    assert not np.array_equal(alone, batched)


def test_the_calibrated_graphs_quantize_with_constants_and_fused_kernels(int8_bundle: Path) -> None:
    record = load_bundle_manifest(int8_bundle).manifest["int8_calibration"]
    assert record["sentences"] == len(SENTENCES) and record["source"] == DEFAULT_SOURCE
    for role in ("encoder", "decoder_step"):
        graph = onnx.load(str(int8_bundle / f"{role}.int8.onnx")).graph
        ops = [node.op_type for node in graph.node]
        assert "DynamicQuantizeLinear" not in ops and "MatMulInteger" not in ops
        assert ops.count("QuantizeLinear") == record[role]["activations_fixed"] > 0
        assert ops.count("MatMulIntegerToFloat") == record[role]["matmuls_fused"] > 0
        assert record[role]["runs"] > 0
        constants = {tensor.name for tensor in graph.initializer}
        for node in graph.node:
            if node.op_type == "QuantizeLinear":
                assert node.input[1] in constants and node.input[2] in constants


def test_calibration_sentences_are_read_from_text_or_tsv(tmp_path: Path) -> None:
    path = tmp_path / "calibration.tsv"
    path.write_text("Das Haus ist klein.\tThe house is small.\n\nGuten Morgen!\n" * 100, encoding="utf-8")
    sentences = read_calibration_sentences(path)
    assert len(sentences) == 128 and sentences[:2] == ["Das Haus ist klein.", "Guten Morgen!"]
    assert Calibration(tuple(sentences), "x").record()["sentences"] == 128
