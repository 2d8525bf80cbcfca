"""ONNX export, the onnxruntime backend and the release bundle.

The tiny model of tests/toy.py is exported once per module.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from toy import SENTENCES

from data.files import BUNDLE_FILE
from data.tokenizer import EOS_ID, PAD_ID, Tokenizer
from export import cli as export_cli
from export import regraph
from export.exporter import ExportError, export_model
from export.parity import PARITY_SENTENCES, check_parity
from export.shapes import SHARED_PREFIX
from seq2seq.core.backend import DecoderCache
from seq2seq.core.config import DecodeConfig, TrainConfig, to_dict
from seq2seq.decoding.search import beam_search, pad_batch
from seq2seq.loading import load_translator
from seq2seq.runtime.bundle import BundleError, load_bundle_manifest, update_metrics
from seq2seq.runtime.onnx_backend import DECODER_OUTPUTS, OnnxBackend
from seq2seq.training.model import load_model
from seq2seq.training.torch_backend import TorchBackend

REPO = Path(__file__).resolve().parents[1]
SHIPPED_BUNDLE = REPO / "models" / "de-en"
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def backends(tiny_bundle: Path) -> tuple[TorchBackend, OnnxBackend]:
    return TorchBackend(load_model(tiny_bundle)), OnnxBackend.from_bundle(load_bundle_manifest(tiny_bundle), threads=1)


# --------------------------------------------------------------------------- parity


def test_teacher_forcing_is_the_same_on_both_backends(backends: tuple[TorchBackend, OnnxBackend]) -> None:
    """`teacher_force` is part of the backend protocol: both backends give every map, equal."""
    src_ids, src_mask = pad_batch([[5, 6, 7, EOS_ID], [8, EOS_ID]], PAD_ID)
    tgt_ids, _ = pad_batch([[6, 9, 5], [10]], PAD_ID)
    torch_maps, onnx_maps = (backend.teacher_force(src_ids, src_mask, tgt_ids) for backend in backends)
    config = backends[0].config
    assert torch_maps.cross.shape == (config.decoder_layers, 2, config.n_heads, 4, 4)
    assert onnx_maps.encoder_self is not None and onnx_maps.decoder_self is not None
    for name in ("log_probs", "cross", "encoder_self", "decoder_self"):
        torch_value, onnx_value = getattr(torch_maps, name), getattr(onnx_maps, name)
        # Rows that read a padded source or target position are not compared.
        if name == "log_probs":
            torch_value, onnx_value = torch_value[0], onnx_value[0]
        else:
            torch_value, onnx_value = torch_value[:, 0], onnx_value[:, 0]
        np.testing.assert_allclose(torch_value, onnx_value, atol=TOLERANCE, rtol=0, err_msg=name)
    # The padded pair: its own 2 source and 1 + 1 target positions agree too.
    np.testing.assert_allclose(
        torch_maps.cross[:, 1, :, :2, :2], onnx_maps.cross[:, 1, :, :2, :2], atol=TOLERANCE, rtol=0
    )


def test_export_records_parity_within_tolerance(tiny_bundle: Path) -> None:
    parity = json.loads((tiny_bundle / BUNDLE_FILE).read_text())["parity"]["fp32"]
    assert parity["token_agreement"] == {"greedy": 1.0, "beam4": 1.0}
    for name in ("max_log_prob_diff", "max_cross_weight_diff", "max_cross_kv_diff", "max_score_diff"):
        assert parity[name] <= TOLERANCE, name


@pytest.mark.parametrize("beam_size", [1, 4])
def test_onnx_search_equals_torch_search(
    backends: tuple[TorchBackend, OnnxBackend], tiny_bundle: Path, beam_size: int
) -> None:
    torch_backend, onnx_backend = backends
    tokenizer = Tokenizer(tiny_bundle / "spm.model")
    src_ids, src_mask = pad_batch([tokenizer.encode(s) + [EOS_ID] for s in SENTENCES], PAD_ID)
    config = DecodeConfig(beam_size=beam_size, n_best=beam_size)
    expected = beam_search(torch_backend, src_ids, src_mask, config)
    actual = beam_search(onnx_backend, src_ids, src_mask, config)
    assert any(hyps[0].tokens for hyps in expected), "the tiny model should translate something"
    for expected_hyps, actual_hyps in zip(expected, actual):
        assert [h.tokens for h in actual_hyps] == [h.tokens for h in expected_hyps]
        for e, a in zip(expected_hyps, actual_hyps):
            assert abs(e.score - a.score) <= TOLERANCE
            np.testing.assert_allclose(a.token_log_probs, e.token_log_probs, atol=TOLERANCE, rtol=0)
            # Every layer and head, every step, including the step that produced EOS.
            np.testing.assert_allclose(a.attention, e.attention, atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize("rows,source,past,new", [(1, 3, 0, 1), (3, 7, 0, 1), (3, 7, 4, 1), (2, 5, 0, 6), (4, 2, 5, 3)])
def test_decoder_graph_matches_torch_for_every_shape(
    backends: tuple[TorchBackend, OnnxBackend], rows: int, source: int, past: int, new: int
) -> None:
    """Dynamic batch, source, past (including the empty past of the first step) and new lengths."""
    torch_backend, onnx_backend = backends
    model, config = torch_backend.model, torch_backend.config
    rng = np.random.default_rng(rows * 100 + source * 10 + past)
    src_ids = rng.integers(4, config.vocab_size, (rows, source))
    src_mask = np.ones((rows, source), dtype=bool)
    src_mask[-1, source // 2 :] = False  # a padded row
    tokens = rng.integers(4, config.vocab_size, (rows, new))
    shape = (config.decoder_layers, rows, config.n_heads, past, config.head_dim)
    past_k, past_v = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)

    cross_k, cross_v, encoder_self = onnx_backend.encoder.run(None, {"src_ids": src_ids, "src_mask": src_mask})
    # A fresh export takes and gives the keys transposed, (.., Dh, S|P) (lever 22).
    assert onnx_backend.keys_transposed
    assert cross_k.shape[-2:] == (config.head_dim, source)
    graph_past_k = np.ascontiguousarray(past_k.swapaxes(-1, -2))
    cache = DecoderCache(cross_k, cross_v, graph_past_k if past else past_k, past_v)
    outputs = list(onnx_backend.run_decoder(tokens, src_mask, cache).values())
    assert outputs[1].shape[-2:] == (config.head_dim, past + new)
    cross_k, outputs[1] = onnx_backend.keys_in_rows(cross_k), onnx_backend.keys_in_rows(outputs[1])
    with torch.inference_mode():
        encoded = model.encode(torch.from_numpy(src_ids), torch.from_numpy(src_mask), need_weights=True)
        decoded = model.decode(
            torch.from_numpy(tokens),
            encoded.cross_k,
            encoded.cross_v,
            torch.from_numpy(src_mask),
            torch.from_numpy(past_k) if past else None,
            torch.from_numpy(past_v) if past else None,
            need_cross_weights=True,
            need_self_weights=True,
        )
    np.testing.assert_allclose(cross_k, encoded.cross_k.numpy(), atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(cross_v, encoded.cross_v.numpy(), atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(encoder_self, torch.stack(encoded.self_weights).numpy(), atol=TOLERANCE, rtol=0)
    expected = (decoded.log_probs, decoded.self_k, decoded.self_v, decoded.cross_weights, decoded.self_weights)
    assert outputs[3].shape == (config.decoder_layers, rows, config.n_heads, new, source)
    for name, actual, reference in zip(DECODER_OUTPUTS, outputs, expected):
        np.testing.assert_allclose(actual, reference.numpy(), atol=TOLERANCE, rtol=0, err_msg=name)


def test_attention_maps_match_the_searched_alignment(tiny_bundle: Path) -> None:
    """Teacher forcing the whole target at once gives the maps that incremental search stored."""
    translator = load_translator(tiny_bundle, threads=1)
    result = translator.translate(SENTENCES[1], DecodeConfig(beam_size=4))
    src_ids, src_mask = pad_batch([result.source_ids + [EOS_ID]], PAD_ID)
    forced = translator.backend.teacher_force(src_ids, src_mask, np.array([result.target_ids], dtype=np.int64))
    maps = {"encoder_self": forced.encoder_self, "decoder_self": forced.decoder_self, "cross": forced.cross}
    config = translator.backend.config
    steps, source = len(result.target_ids) + 1, src_ids.shape[1]
    assert maps["encoder_self"].shape == (config.encoder_layers, 1, config.n_heads, source, source)
    assert maps["decoder_self"].shape == (config.decoder_layers, 1, config.n_heads, steps, steps)
    np.testing.assert_allclose(maps["cross"][:, 0], result.attention, atol=TOLERANCE, rtol=0)
    # Causal: no decoder position looks ahead; every row is a distribution.
    assert np.all(np.triu(maps["decoder_self"], k=1) == 0)
    np.testing.assert_allclose(maps["cross"].sum(-1), 1.0, atol=1e-5)


def test_head_reshapes_have_constant_targets(tiny_bundle: Path) -> None:
    """export/shapes.py: every head split and merge has a constant Reshape target (no Shape ->
    Gather -> Concat chain left to run per step); the parity tests above check that the
    outputs did not move. The exceptions are built once per run from the Shape of a graph
    input: the targets that give each Gemm's output back its leading dims (export/gemm.py),
    and those of the grouped cross-attention, which need the sentences and rows
    (docs/performance.md, lever 23), one Concat for all layers."""
    for name in ("encoder.onnx", "decoder_step.onnx"):
        graph = onnx.load(str(tiny_bundle / name)).graph
        constants = {tensor.name for tensor in graph.initializer}
        inputs = {graph_input.name for graph_input in graph.input}
        built = {node.output[0]: node for node in graph.node}
        reshapes = [node for node in graph.node if node.op_type == "Reshape"]
        heads = [node for node in reshapes if node.input[1] not in constants]
        assert len(reshapes) > len(heads) > 0, name
        for node in heads:
            concat = built[node.input[1]]
            assert concat.op_type == "Concat", name
            for dim in (built[part] for part in concat.input if part not in constants):
                shape = built[dim.input[0]] if dim.op_type == "Gather" else dim
                assert shape.op_type == "Shape" and shape.input[0] in inputs, name
    decoder = onnx.load(str(tiny_bundle / "decoder_step.onnx")).graph
    grouped = [node for node in decoder.node if node.op_type == "Concat" and node.name.startswith(SHARED_PREFIX)]
    # (B·G, T, H, Dh) -> (B, G·T, H, Dh), and back for the context and the weights.
    assert len(grouped) == 3
    ops = [node.op_type for node in decoder.node]
    # What is left reads the past and new lengths, for the position slice and the causal mask,
    # the Gemms' leading dims, and the sentences and rows of the grouped cross-attention.
    assert ops.count("Shape") == 5


def test_torch_backend_from_bundle_translates_identically(tiny_bundle: Path) -> None:
    onnx = load_translator(tiny_bundle, "onnx", threads=1).translate_batch(SENTENCES)
    eager = load_translator(tiny_bundle, "torch", threads=1).translate_batch(SENTENCES)
    assert [r.target_ids for r in onnx] == [r.target_ids for r in eager]
    assert [r.text for r in onnx] == [r.text for r in eager]


# --------------------------------------------------------------------------- bundle


def test_bundle_describes_itself(tiny_bundle: Path, tiny_checkpoint: Path) -> None:
    loaded = load_bundle_manifest(tiny_bundle)
    manifest = loaded.manifest
    assert manifest["languages"] == {"source": "de", "target": "en"}
    assert loaded.model_config == load_model(tiny_checkpoint).config
    assert json.loads((tiny_bundle / "config.json").read_text()) == manifest["model_config"]
    assert manifest["precision"] == "fp32" and loaded.precisions == ("fp32",)
    assert manifest["alignment"] == {
        "layer": loaded.model_config.resolved_alignment_layer,
        "heads": [],
        "step_shift": False,
    }
    assert not Path(manifest["source_checkpoint"]).is_absolute()  # no exporting machine's paths
    assert manifest["license"] == "CC0-1.0 (generated in the test)"
    assert manifest["data"]["corpus"] == "toy"
    assert manifest["metrics"] == {}
    for name in ("config.json", "model.pt", "spm.model", "encoder.onnx", "decoder_step.onnx", "data_manifest.json"):
        entry = manifest["files"][name]
        assert entry["bytes"] == (tiny_bundle / name).stat().st_size and len(entry["sha256"]) == 64
    assert not list(tiny_bundle.parent.glob(".*staging")), "the staging directory was moved into place"


def test_metrics_can_be_added_after_export(tiny_bundle: Path, tmp_path: Path) -> None:
    copy = shutil.copytree(tiny_bundle, tmp_path / "bundle")
    update_metrics(copy, {"test": {"bleu": 12.5}})
    assert load_bundle_manifest(copy).manifest["metrics"] == {"test": {"bleu": 12.5}}


def test_corrupted_graph_is_named(tiny_bundle: Path, tmp_path: Path) -> None:
    copy = shutil.copytree(tiny_bundle, tmp_path / "bundle")
    graph = copy / "decoder_step.onnx"
    data = bytearray(graph.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, different bytes
    graph.write_bytes(bytes(data))
    with pytest.raises(BundleError, match=r"decoder_step\.onnx: corrupted"):
        load_bundle_manifest(copy)
    with pytest.raises(BundleError, match=r"decoder_step\.onnx"):
        load_translator(copy)


def test_a_decoder_graph_with_stacked_caches_is_refused(tiny_bundle: Path, tmp_path: Path) -> None:
    """Bundles exported before the per-layer cache interface fail with the fix in the message."""
    model = onnx.load(str(tiny_bundle / "decoder_step.onnx"))
    for graph_input in model.graph.input:  # rename, as the old graph's names were
        if graph_input.name == "past_k_0":
            graph_input.name = "past_k"
            for node in model.graph.node:
                node.input[:] = ["past_k" if name == "past_k_0" else name for name in node.input]
    old = tmp_path / "decoder_step.onnx"
    onnx.save(model, str(old))
    config = load_bundle_manifest(tiny_bundle).model_config
    with pytest.raises(BundleError, match=r"past_k_0.*re-export the bundle"):
        OnnxBackend(tiny_bundle / "encoder.onnx", old, config, threads=1)


def test_missing_files_are_all_named(tiny_bundle: Path, tmp_path: Path) -> None:
    copy = shutil.copytree(tiny_bundle, tmp_path / "bundle")
    (copy / "encoder.onnx").unlink()
    (copy / "spm.model").write_bytes(b"truncated")
    with pytest.raises(BundleError) as raised:
        load_bundle_manifest(copy)
    assert "encoder.onnx: missing" in str(raised.value)
    assert "spm.model: corrupted" in str(raised.value)


# --------------------------------------------------------------------------- export template


def test_validation_reports_every_problem_at_once(tiny_checkpoint: Path, tmp_path: Path) -> None:
    broken = shutil.copytree(tiny_checkpoint, tmp_path / "broken")
    (broken / "model.pt").unlink()
    config = json.loads((broken / "config.json").read_text())
    config["vocab_size"] = 123
    (broken / "config.json").write_text(json.dumps(config))
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "notes.txt").write_text("not a bundle")
    with pytest.raises(ExportError) as raised:
        export_model(broken, occupied, opset=13)
    message = str(raised.value)
    assert "model.pt: missing" in message
    assert "80 pieces, but the model's vocab_size is 123" in message
    assert "refusing to overwrite" in message
    assert "opset 13" in message
    assert (occupied / "notes.txt").exists() and not (occupied / BUNDLE_FILE).exists()


def test_int8_export_through_the_cli(tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    export_cli.add_arguments(parser)
    out, sentences = tmp_path / "int8", tmp_path / "parity.tsv"
    sentences.write_text("".join(f"{s}\tref\n" for s in SENTENCES))
    args = parser.parse_args([str(tiny_checkpoint), "--out", str(out), "--int8", "--parity-file", str(sentences)])
    assert export_cli.main(args) == 0
    loaded = load_bundle_manifest(out)
    assert loaded.default_precision == "int8" and loaded.precisions == ("fp32", "int8")
    assert loaded.graph_paths()[0].name == "encoder.int8.onnx"
    assert "int8" in loaded.manifest["parity"]
    results = load_translator(out, threads=1).translate_batch(SENTENCES, DecodeConfig(beam_size=4))
    assert len(results) == len(SENTENCES) and any(r.target_ids for r in results)
    for result in results:
        assert result.attention is not None and np.isfinite(result.attention).all()
    # A second export into the same place needs --force: one line that says so, exit status 2.
    assert export_cli.main(parser.parse_args([str(tiny_checkpoint), "--out", str(out)])) == 2
    refused = capsys.readouterr().err
    assert len(refused.splitlines()) == 1 and "a bundle is already there (pass --force to replace it)" in refused
    # Calibrated activation scales (export/calibrate.py): a translation is the same alone
    # as in a batch, which dynamic per-tensor scales do not give.
    calibration = loaded.manifest["int8_calibration"]
    assert calibration["sentences"] == len(SENTENCES) and calibration["decoder_step"]["runs"] > 0
    translator = load_translator(out, threads=1)
    alone = [translator.translate(s, DecodeConfig(beam_size=4)).target_ids for s in SENTENCES]
    assert alone == [r.target_ids for r in results]
    # Every MatMul that multiplies by a weight is quantized (before the weights' Transposes
    # were folded, none was): the fp32 graph's weight MatMuls (Gemms with their bias since
    # lever 22, export/gemm.py) become MatMulIntegerToFloat with constant activation
    # scales, and the MatMuls left in fp32 are the attention's, activation by activation.
    for role in ("encoder", "decoder_step"):
        fp32, int8 = (onnx.load(str(path)) for path in (out / f"{role}.onnx", out / f"{role}.int8.onnx"))
        weights = {tensor.name for tensor in fp32.graph.initializer}
        made_by = {output: node for node in fp32.graph.node for output in node.output}
        weight_matmuls = sum(
            1
            for node in fp32.graph.node
            if node.op_type == "Gemm"
            or node.op_type == "MatMul"
            and node.input[1] in made_by
            and made_by[node.input[1]].op_type == "Transpose"
            and made_by[node.input[1]].input[0] in weights
        )
        ops = [node.op_type for node in int8.graph.node]
        assert weight_matmuls > 0 and ops.count("MatMulIntegerToFloat") == weight_matmuls
        assert "DynamicQuantizeLinear" not in ops and "MatMulInteger" not in ops
        assert ops.count("MatMul") == ops.count("Softmax") * 2


def test_an_int8_bundle_runs_int8_and_its_fp32_graphs_are_one_command_away(
    tiny_checkpoint: Path, tiny_bundle: Path, tmp_path: Path
) -> None:
    """A bundle may ship int8 graphs alone (they are half the size); the loader runs the
    precision bundle.json names, asking for the other one names the command that adds it,
    and that command rebuilds from model.pt the very graphs a fresh fp32 export writes."""
    parser = argparse.ArgumentParser()
    export_cli.add_arguments(parser)
    out = tmp_path / "int8"
    assert export_cli.main(parser.parse_args([str(tiny_checkpoint), "--out", str(out), "--graphs", "int8"])) == 0
    loaded = load_bundle_manifest(out)
    assert loaded.default_precision == "int8" and loaded.precisions == ("int8",)
    assert not (out / "encoder.onnx").exists() and "encoder.onnx" not in loaded.manifest["files"]
    assert set(loaded.manifest["parity"]) == {"fp32", "int8"}  # int8 is made from checked fp32 graphs
    int8 = load_translator(out, threads=1)
    assert int8.backend.precision == "int8"
    with pytest.raises(BundleError, match=rf"no fp32 graphs.*crossalign export {out} --in-place --graphs int8 fp32"):
        load_translator(out, precision="fp32")
    with pytest.raises(ValueError, match="onnx backend"):
        load_translator(out, "torch", precision="int8")

    update_metrics(out, {"test_bleu_beam4": 1.5})
    assert export_cli.main(parser.parse_args([str(out), "--in-place", "--graphs", "int8", "fp32"])) == 0
    both = load_bundle_manifest(out)  # verified: every sha256 matches
    assert both.default_precision == "int8" and both.precisions == ("fp32", "int8")
    assert both.manifest["metrics"] == {"test_bleu_beam4": 1.5}  # the rest of the bundle is kept
    for name in ("encoder.onnx", "decoder_step.onnx"):
        assert both.manifest["files"][name] == load_bundle_manifest(tiny_bundle).manifest["files"][name]
    fp32 = load_translator(out, threads=1, precision="fp32")
    assert fp32.backend.precision == "fp32"
    assert not list(tmp_path.glob(".*")), "no staging directory left behind"

    # int8 stays close to fp32, token by token: teacher-forced on fp32's beam-4 output, int8
    # ranks the same next token first at nearly every position, with probabilities near.
    expected = fp32.translate_batch(SENTENCES, DecodeConfig(beam_size=4))
    src_ids, src_mask = pad_batch([fp32.encode_source(s) for s in SENTENCES], PAD_ID)
    tgt_ids, tgt_mask = pad_batch([r.target_ids for r in expected], PAD_ID)
    rows = np.concatenate([np.ones((len(SENTENCES), 1), dtype=bool), tgt_mask], axis=1)  # + the EOS step
    reference, quantized = (t.backend.teacher_force(src_ids, src_mask, tgt_ids).log_probs[rows] for t in (fp32, int8))
    agreement = float((reference.argmax(-1) == quantized.argmax(-1)).mean())
    largest = float(np.abs(np.exp(reference) - np.exp(quantized)).max())
    print(f"int8 vs fp32: next-token agreement {agreement:.3f}, largest probability difference {largest:.3f}")
    assert agreement >= 0.95 and largest < 0.1

    # And back: int8 dropped, fp32 the default again.
    assert export_cli.main(parser.parse_args([str(out), "--in-place", "--graphs", "fp32"])) == 0
    assert load_bundle_manifest(out).precisions == ("fp32",) and not (out / "encoder.int8.onnx").exists()


def test_unknown_or_repeated_precisions_are_refused(tiny_checkpoint: Path, tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="name each once"):
        export_model(tiny_checkpoint, tmp_path / "twice", ("fp32", "fp32"))
    with pytest.raises(ExportError, match="unknown precision 'fp16'"):
        regraph.regraph_bundle(tmp_path, ("fp16",))


# Sentences of each shipped bundle's source language for its parity check.
SHIPPED_PARITY = {
    "de-en": PARITY_SENTENCES[:4],
    "en-de": ["The dog is small.", "I have no time today.", "Where is the station?", "We bought a new car."],
}


@pytest.mark.parametrize("direction", sorted(SHIPPED_PARITY))
def test_shipped_bundle_matches_torch(direction: str) -> None:
    """fp32 graphs (when the bundle carries them) within the tolerance; int8 graphs (when it
    does) within quantization error of torch: teacher-forced log-probs within 0.5 nats
    everywhere (a wrong scale or weight is off by whole nats) and the same beam-4 tokens on
    half the sentences. Where torch's top two tokens are close, int8 rounding may pick the other
    one (stage 5: greedy differs on 2 of these 4 sentences by one token; stage 10: beam 4 on 2,
    by one token each), so neither is required to agree everywhere: what a broken graph gets
    wrong is the log-probs, by whole nats."""
    shipped, sentences = REPO / "models" / direction, SHIPPED_PARITY[direction]
    bundle = load_bundle_manifest(shipped, verify=False)
    if "fp32" in bundle.precisions:
        report = check_parity(shipped, sentences=sentences)
        assert not report.problems, report.problems
    if "int8" in bundle.precisions:
        report = check_parity(shipped, sentences=sentences, precision="int8", tolerance=float("inf"))
        assert report.max_log_prob_diff < 0.5, report
        assert report.token_agreement["beam4"] >= 0.5 and report.token_agreement["greedy"] >= 0.5, report.problems


def test_model_card_joins_the_curves_of_continued_runs(tmp_path: Path) -> None:
    from export.model_card import joined_history, plot_curve

    for name, entries in (("first", [(500, 10.0, 1.0), (1000, 20.0, 2.0)]), ("second", [(250, 6.0, 2.5)])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "history.jsonl").write_text(
            "".join(
                json.dumps(
                    {
                        "step": s,
                        "epoch": 0,
                        "minutes": m,
                        "train_loss": 4.0,
                        "valid_loss": 3.0,
                        "valid_bleu": b,
                        "tokens_per_s": 1000,
                    }
                )
                + "\n"
                for s, m, b in entries
            )
        )
    history = joined_history([tmp_path / "first", tmp_path / "second"])
    assert [(h["stage"], h["step"], h["minutes"], h["valid_bleu"]) for h in history] == [
        (1, 500, 10.0, 1.0),
        (1, 1000, 20.0, 2.0),
        (2, 1250, 26.0, 2.5),
    ]
    plot_curve(history, tmp_path / "curve.png")
    assert (tmp_path / "curve.png").stat().st_size > 1000
    # A cooldown branch resumed the first run's checkpoint at 1,000 (no init_from): the same
    # stage, its steps as they are, and the first run's entries past the branch left out.
    (tmp_path / "second" / "train_config.json").write_text(json.dumps({"init_from": "first/final"}))
    (tmp_path / "cool").mkdir()
    (tmp_path / "cool" / "train_config.json").write_text(json.dumps({"init_from": None, "cooldown_steps": 600}))
    shutil.copy(tmp_path / "second" / "history.jsonl", tmp_path / "cool" / "history.jsonl")
    cool = (tmp_path / "cool" / "history.jsonl").read_text().replace('"step": 250', '"step": 1300')
    (tmp_path / "cool" / "history.jsonl").write_text(cool.replace('"minutes": 6.0', '"minutes": 26.0'))
    first = (tmp_path / "first" / "history.jsonl").read_text()
    (tmp_path / "first" / "history.jsonl").write_text(
        first + first.splitlines(keepends=True)[-1].replace("1000", "1500")
    )
    history = joined_history([tmp_path / "first", tmp_path / "cool"])
    assert [(h["stage"], h["step"], h["minutes"]) for h in history] == [
        (1, 500, 10.0),
        (1, 1000, 20.0),
        (1, 1300, 26.0),
    ]
    assert [h["stage"] for h in joined_history([tmp_path / "first", tmp_path / "second"])] == [1, 1, 1, 2]


def test_model_card_states_the_cooldown_of_the_schedule() -> None:
    from export.model_card import schedule

    plain = {"lr": 7e-4, "warmup_steps": 300, "max_steps": 9500}
    assert schedule(plain) == "peak lr 0.0007, 300 warmup steps then inverse-sqrt decay"  # runs before the option
    cooled = schedule({**plain, "cooldown_steps": 600})
    assert cooled.endswith("falling linearly to zero over the last 600 steps (to step 9500)")


def test_model_card_names_the_shipped_precision_and_the_other_figures() -> None:
    from export.model_card import precision_line

    fp32 = {
        "test_bleu_beam4": 8.6,
        "test_chrf_beam4": 29.3,
        "test_bleu_greedy": 7.7,
        "test_chrf_greedy": 27.7,
        "gold_bleu_beam4": 15.2,
        "gold_chrf_beam4": 38.8,
        "gold_aer_default_map": 16.1,
    }
    line = precision_line({"graphs": "int8", "fp32": fp32, "test_bleu_beam4": 8.63})
    assert "int8 graphs" in line and "test BLEU 8.6 / chrF 29.3" in line and "--in-place --graphs int8 fp32" in line
    assert precision_line({"graphs": "fp32", "test_bleu_beam4": 8.6}) == ""


def test_release_figures_and_the_int8_rule(tmp_path: Path) -> None:
    from export.figures import int8_refusal, release_figures

    def write(prefix: str, bleu: float) -> None:
        run = {"bleu": bleu, "chrf": 30.0, "length_ratio": 0.95}
        for name in ("test_beam4", "test_greedy", "gold_beam4"):
            (tmp_path / f"{prefix}{name}.json").write_text(json.dumps(run))
        (tmp_path / f"{prefix}gold_aer.json").write_text(json.dumps({"aer": 14.6, "precision": 86.0, "recall": 84.0}))

    write("fp32.", 9.4)
    write("", 9.3)
    fp32, int8 = release_figures(tmp_path, "fp32."), release_figures(tmp_path)
    assert (fp32["test_bleu_beam4"], int8["test_bleu_beam4"], int8["gold_aer_default_map"]) == (9.4, 9.3, 14.6)
    assert int8_refusal(fp32, int8) is None
    assert "loses 0.50 test BLEU" in int8_refusal(fp32, {**int8, "test_bleu_beam4": 8.9})


def test_model_card_speaks_of_its_bundles_direction(tmp_path: Path) -> None:
    """An English -> German bundle's card says so, in its title, its curve and its text."""
    from export.model_card import write_card

    bundle, run, data = tmp_path / "en-de", tmp_path / "run", tmp_path / "data"
    for directory in (bundle, run, data):
        directory.mkdir()
    shipped = json.loads((SHIPPED_BUNDLE / "bundle.json").read_text())
    config = json.loads((SHIPPED_BUNDLE / "config.json").read_text())
    (bundle / "config.json").write_text(json.dumps(config | {"source_lang": "en", "target_lang": "de"}))
    (run / "train_config.json").write_text(json.dumps(to_dict(TrainConfig(max_steps=900, init_from="models/de-en"))))
    (run / "history.jsonl").write_text(
        json.dumps(
            {
                "step": 300,
                "epoch": 0,
                "minutes": 9.0,
                "train_loss": 5.0,
                "valid_loss": 4.0,
                "valid_bleu": 3.0,
                "tokens_per_s": 900,
            }
        )
        + "\n"
    )
    (data / "manifest.json").write_text((SHIPPED_BUNDLE / "data_manifest.json").read_text())
    card = write_card(bundle, run, data, shipped["metrics"], "crossalign train ...").read_text()
    assert card.startswith("# crossalign en-de — model card") and "English→German transformer" in card
    assert "German→English" not in card and "with their German references" in card
    assert (bundle / "training_curve.png").stat().st_size > 1000
    # A data directory with extra training corpora (`data prepare --extra-corpus`) says what they added.
    manifest = json.loads((SHIPPED_BUNDLE / "data_manifest.json").read_text())
    manifest |= {"extra_corpora": ["gettext:/cache/catalogs/de"], "extra_pairs": 1234, "extra_dropped": 5}
    manifest["inputs"] = manifest["inputs"] + [{"path": f"/c/{i}.mo", "sha256": f"{i:064x}"} for i in range(9)]
    (data / "manifest.json").write_text(json.dumps(manifest))
    card = write_card(bundle, run, data, shipped["metrics"], "crossalign train ...").read_text()
    assert "trained by crossalign on the Ding corpus and translated software messages" in card
    assert "with training pairs only from gettext (de) (1234 pairs; no held-out or gold sentence among them)" in card
    assert "Extra training pairs: translated messages of Debian packages" in card
    manifest |= {  # two extra corpora, as `data prepare` records them
        "extra_corpora": ["gettext:/cache/catalogs/de", "descriptions:/cache/descriptions/de/", "tsv:/mine.tsv"],
        "extra_added": {"gettext:/cache/catalogs/de": 1000, "descriptions:/cache/descriptions/de/": 234},
        "extra_licenses": {"tsv:/mine.tsv": "user-supplied (see the corpus's own license)"},
        "extra_tags": {"tsv:/mine.tsv": "⟦tsv⟧"},
    }
    (data / "manifest.json").write_text(json.dumps(manifest))
    card = write_card(bundle, run, data, shipped["metrics"], "crossalign train ...").read_text()
    assert "on the Ding corpus, translated software messages (gettext catalogs) and translated Debian package" in card
    sources = "gettext (de: 1000 pairs), descriptions (de: 234 pairs), tsv (mine.tsv, sources tagged `⟦tsv⟧`)"
    assert f"from {sources} (1234 pairs;" in card
    assert "Extra training pairs: Debian package descriptions and their translations" in card
    assert "Extra training pairs: `tsv:/mine.tsv`: user-supplied" in card
    assert f"and {len(manifest['inputs']) - 3} more (data_manifest.json lists every file)" in card
