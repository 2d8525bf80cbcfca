"""The exported graphs' layout for speed: keys transposed, so every attention score is a
plain MatMul, and the fp32 graphs' bias Adds fused into Gemms (export/gemm.py)
(docs/performance.md, lever 22); one cross K/V per sentence, read once for all its beams
(lever 23). None changes a result; bundles exported before them still run."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from toy import SENTENCES

from data.tokenizer import EOS_ID, PAD_ID
from export.exporter import export_graphs
from export.gemm import fuse_bias_gemms
from seq2seq.core.config import DecodeConfig
from seq2seq.decoding.search import pad_batch
from seq2seq.loading import load_translator
from seq2seq.runtime.bundle import BundleError, load_bundle_manifest
from seq2seq.runtime.onnx_backend import OnnxBackend
from seq2seq.training.model import load_model, scaled_dot_product


def linear_graph(bias_is_constant: bool = True) -> onnx.ModelProto:
    """x (N, T, 3) -> x @ Wᵀ + b (N, T, 2), as torch exports nn.Linear; `tokens` (N, T)
    gives the leading dims. Without `bias_is_constant` the Add reads a second input."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((2, 3)).astype(np.float32), "weight")
    bias = numpy_helper.from_array(rng.standard_normal(2).astype(np.float32), "bias")
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", "new", 3]),
        helper.make_tensor_value_info("tokens", TensorProto.INT64, ["rows", "new"]),
    ]
    if not bias_is_constant:
        inputs.append(helper.make_tensor_value_info("bias", TensorProto.FLOAT, [2]))
    nodes = [
        helper.make_node("Transpose", ["weight"], ["weight_t"], perm=[1, 0]),
        helper.make_node("MatMul", ["x", "weight_t"], ["product"], name="linear"),
        helper.make_node("Add", ["bias", "product"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "linear",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", "new", 2])],
        [weight, bias] if bias_is_constant else [weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def run(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(["y"], {i.name: feed[i.name] for i in session.get_inputs()})[0]


def test_a_linear_layer_becomes_one_gemm_with_the_same_output() -> None:
    model = linear_graph()
    x = np.random.default_rng(1).standard_normal((4, 5, 3)).astype(np.float32)
    feed = {"x": x, "tokens": np.zeros((4, 5), dtype=np.int64)}
    before = run(model, feed)
    assert fuse_bias_gemms(model, "tokens") == 1
    ops = [node.op_type for node in model.graph.node]
    assert ops.count("Gemm") == 1 and "MatMul" not in ops and "Add" not in ops and "Transpose" not in ops
    after = run(model, feed)
    assert after.shape == (4, 5, 2)
    np.testing.assert_allclose(after, before, rtol=0, atol=1e-6)


def test_an_add_of_two_activations_is_left_alone() -> None:
    model = linear_graph(bias_is_constant=False)
    assert fuse_bias_gemms(model, "tokens") == 0
    assert [node.op_type for node in model.graph.node] == ["Transpose", "MatMul", "Add"]


def test_the_fp32_graphs_run_every_linear_layer_as_a_gemm_and_int8_keeps_its_matmuls(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    from export.exporter import export_model

    bundle = export_model(tiny_checkpoint, tmp_path / "bundle", precisions=("fp32", "int8")).out_dir
    config = load_bundle_manifest(bundle).model_config
    per_decoder_layer = 8  # self q, k, v, o; cross q, o; feed-forward up, down
    expected = {
        "encoder.onnx": 6 * config.encoder_layers + 2 * config.decoder_layers,  # + the cross K/V
        "decoder_step.onnx": per_decoder_layer * config.decoder_layers,
    }
    for name, gemms in expected.items():
        ops = [node.op_type for node in onnx.load(str(bundle / name)).graph.node]
        assert ops.count("Gemm") == gemms, name
        int8_ops = [node.op_type for node in onnx.load(str(bundle / name.replace(".onnx", ".int8.onnx"))).graph.node]
        output_projection = int(name == "decoder_step.onnx")  # the tied embedding: no bias, so no Gemm
        assert "Gemm" not in int8_ops and int8_ops.count("MatMulIntegerToFloat") == gemms + output_projection


def swap_last_axes(value: onnx.ValueInfoProto) -> list[int]:
    """Swap the declared last two dims of a graph input or output; returns that permutation."""
    dims = value.type.tensor_type.shape.dim
    last, before = onnx.TensorShapeProto.Dimension(), onnx.TensorShapeProto.Dimension()
    last.CopyFrom(dims[-1]), before.CopyFrom(dims[-2])
    dims[-2].CopyFrom(last), dims[-1].CopyFrom(before)
    return list(range(len(dims) - 2)) + [len(dims) - 1, len(dims) - 2]


def as_keys_in_rows(model: onnx.ModelProto, inputs: list[str], outputs: list[str]) -> None:
    """Give a graph the layout of bundles exported before lever 22: each named input and
    output (keys) as (.., length, Dh), transposed on the way in and out."""
    graph = model.graph
    for value in graph.input:
        if value.name in inputs:
            inner = f"{value.name}.transposed"
            for node in graph.node:
                node.input[:] = [inner if name == value.name else name for name in node.input]
            graph.node.insert(0, helper.make_node("Transpose", [value.name], [inner], perm=swap_last_axes(value)))
    for value in graph.output:
        if value.name in outputs:
            inner = f"{value.name}.transposed"
            for node in graph.node:
                node.output[:] = [inner if name == value.name else name for name in node.output]
            graph.node.append(helper.make_node("Transpose", [inner], [value.name], perm=swap_last_axes(value)))


@pytest.fixture(scope="module")
def keys_in_rows_bundle(tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny bundle with graphs in the layout of bundles exported before lever 22."""
    old = tmp_path_factory.mktemp("keys_in_rows") / "de-en"
    shutil.copytree(tiny_bundle, old)
    layers = load_bundle_manifest(tiny_bundle).model_config.decoder_layers
    encoder = onnx.load(str(old / "encoder.onnx"))
    as_keys_in_rows(encoder, [], ["cross_k"])
    onnx.save(encoder, str(old / "encoder.onnx"))
    decoder = onnx.load(str(old / "decoder_step.onnx"))
    keys = [f"{prefix}_{layer}" for prefix in ("cross_k", "past_k") for layer in range(layers)]
    as_keys_in_rows(decoder, keys, [f"new_past_k_{layer}" for layer in range(layers)])
    onnx.save(decoder, str(old / "decoder_step.onnx"))
    return old


def test_a_bundle_with_keys_in_rows_still_translates_the_same(tiny_bundle: Path, keys_in_rows_bundle: Path) -> None:
    new = load_translator(tiny_bundle, threads=1, streams=1, verify=False)
    old = load_translator(keys_in_rows_bundle, threads=1, streams=1, verify=False)
    assert isinstance(new.backend, OnnxBackend) and new.backend.keys_transposed
    assert isinstance(old.backend, OnnxBackend) and not old.backend.keys_transposed
    for config in (DecodeConfig(beam_size=1), DecodeConfig(beam_size=4, n_best=2)):
        expected, found = new.translate_batch(SENTENCES, config), old.translate_batch(SENTENCES, config)
        assert [r.target_ids for r in found] == [r.target_ids for r in expected]
        for a, b in zip(found, expected):
            np.testing.assert_allclose(a.attention, b.attention, rtol=0, atol=1e-5)
    # The explorer's maps: one teacher-forced pass over whole targets.
    results = new.translate_batch(SENTENCES)
    src_ids, src_mask = pad_batch([r.source_ids + [EOS_ID] for r in results], PAD_ID)
    tgt_ids, _ = pad_batch([r.target_ids for r in results], PAD_ID)
    maps_new = new.backend.teacher_force(src_ids, src_mask, tgt_ids)
    maps_old = old.backend.teacher_force(src_ids, src_mask, tgt_ids)
    for name in ("log_probs", "cross", "encoder_self", "decoder_self"):
        np.testing.assert_allclose(getattr(maps_old, name), getattr(maps_new, name), rtol=0, atol=1e-5, err_msg=name)


def test_graphs_that_disagree_on_the_keys_layout_are_refused(tiny_bundle: Path, keys_in_rows_bundle: Path) -> None:
    config = load_bundle_manifest(tiny_bundle).model_config
    with pytest.raises(BundleError, match="disagree on the keys' layout; re-export"):
        OnnxBackend(keys_in_rows_bundle / "encoder.onnx", tiny_bundle / "decoder_step.onnx", config, threads=1)


def test_beams_reading_their_sentences_one_cross_kv_attend_as_with_a_copy_each() -> None:
    """`seq2seq.training.model._grouped_by_source`: q of B·G rows (G consecutive rows per sentence)
    against one K/V per sentence gives, row for row, what each row gets from its own copy."""
    import torch

    generator = torch.Generator().manual_seed(0)
    sentences, beams, heads, new, source, head_dim = 3, 4, 2, 2, 5, 8
    q = torch.randn(sentences * beams, heads, new, head_dim, generator=generator)
    k, v = (torch.randn(sentences, heads, source, head_dim, generator=generator) for _ in range(2))
    allowed = torch.ones(sentences, 1, 1, source, dtype=torch.bool)
    allowed[1, ..., -2:] = False  # the second sentence is shorter
    out, weights = scaled_dot_product(q, k, v, allowed, need_weights=True)
    copies = [x.repeat_interleave(beams, dim=0) for x in (k, v, allowed)]
    expected_out, expected_weights = scaled_dot_product(q, *copies, need_weights=True)
    torch.testing.assert_close(out, expected_out)
    torch.testing.assert_close(weights, expected_weights)
    assert torch.all(weights[beams : 2 * beams, ..., -2:] == 0)
    fused, none = scaled_dot_product(q, k, v, allowed, need_weights=False)
    assert none is None
    torch.testing.assert_close(fused, expected_out)


@pytest.fixture(scope="module")
def cross_per_row_bundle(tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny bundle with the fp32 graphs of bundles exported before lever 23: the decoder
    step reads one cross K/V and source mask per row."""
    old = tmp_path_factory.mktemp("cross_per_row") / "de-en"
    shutil.copytree(tiny_bundle, old)
    export_graphs(load_model(tiny_bundle).float(), old, cross_per_sentence=False)
    return old


def test_a_bundle_with_one_cross_kv_per_row_still_translates_the_same(
    tiny_bundle: Path, cross_per_row_bundle: Path
) -> None:
    new = load_translator(tiny_bundle, threads=1, streams=1, verify=False)
    old = load_translator(cross_per_row_bundle, threads=1, streams=1, verify=False)
    assert isinstance(new.backend, OnnxBackend) and new.backend.cross_per_sentence
    assert isinstance(old.backend, OnnxBackend) and not old.backend.cross_per_sentence
    graph_inputs = {i.name: i for i in onnx.load(str(cross_per_row_bundle / "decoder_step.onnx")).graph.input}
    assert graph_inputs["cross_v_0"].type.tensor_type.shape.dim[0].dim_param == "rows"
    for config in (DecodeConfig(beam_size=1), DecodeConfig(beam_size=4, n_best=4, coverage_penalty=0.2)):
        expected, found = new.translate_batch(SENTENCES, config), old.translate_batch(SENTENCES, config)
        assert [r.target_ids for r in found] == [r.target_ids for r in expected]
        for a, b in zip(found, expected):
            np.testing.assert_allclose(a.attention, b.attention, rtol=0, atol=1e-5)
            assert [h.target_ids for h in a.alternatives] == [h.target_ids for h in b.alternatives]
