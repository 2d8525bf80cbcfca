"""Fixed activation scales for the int8 graphs, so an int8 translation does not depend on
what else is in its batch.

Dynamic quantization (`export/quantize.py`) quantizes each weight MatMul's input with one
scale and zero point computed at run time from the minimum and maximum of the whole input
tensor, i.e. over every row of the batch. A sentence's activations are then rounded
differently depending on its batch-mates (and, in the encoder, on their padding): measured
on 192 test sentences of the stage-4 model, 17% of greedy and 25% of beam-4 translations
changed between translating each sentence alone and in batches of 32 (fp32: none). The
service micro-batches concurrent requests and the batch CLI sorts lines by length, so the
same sentence could come back differently from one call to the next.

Calibration makes those scales constants: the fp32 graphs translate a set of calibration
sentences (beam 4, batches of 16), every activation that feeds a quantized MatMul is read
on those runs from the int8 graph, and each `DynamicQuantizeLinear` becomes a
`QuantizeLinear` with the scale and zero point of that activation's observed range (always
including 0, as the dynamic formula does; values beyond it saturate). Then each
`MatMulInteger -> Cast -> Mul(scale) [-> Add(bias)]` chain is fused by hand into
onnxruntime's `com.microsoft.MatMulIntegerToFloat` (onnxruntime fuses the dynamic pattern
itself, but not one whose scales are constants): as fast as the dynamic graphs
(docs/performance.md), and rows no longer interact, so a translation is the same alone or
in any batch (tested).

Measured on the stage-4 weights (480 test sentences, beam 4): fp32 BLEU 8.84 / chrF 30.24,
dynamic int8 8.93 / 30.21, calibrated int8 8.86 / 30.36 (128 valid sources).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from data.tokenizer import Tokenizer
from seq2seq.core.backend import DecoderCache
from seq2seq.core.config import DecodeConfig, ModelConfig
from seq2seq.decoding.search import beam_search, pad_batch
from seq2seq.runtime.onnx_backend import OnnxBackend

MAX_CALIBRATION_SENTENCES = 128
DEFAULT_SOURCE = "the export's parity sentences (export/parity.py, or --parity-file)"
CALIBRATION_BATCH = 16
CALIBRATION_BEAM = 4  # the served search, so the ranges are the ones serving meets
# ... without the repetition guard, as the shipped scales were calibrated: it changes the
# piece fed on a few steps, and with it a rebuild of the shipped bundle (`--in-place`)
# gave other decoder bytes (measured) instead of the same.
CALIBRATION_DECODE = DecodeConfig(beam_size=CALIBRATION_BEAM, no_repeat_ngram_size=0)


@dataclass(frozen=True)
class Calibration:
    """German sentences the int8 activation scales are calibrated on, and where they came
    from (recorded in bundle.json)."""

    sentences: tuple[str, ...]
    source: str

    def record(self) -> dict[str, Any]:
        return {
            "sentences": len(self.sentences),
            "source": self.source,
            "batch": CALIBRATION_BATCH,
            "beam_size": CALIBRATION_BEAM,
        }


def read_calibration_sentences(path: Path) -> list[str]:
    """The first `MAX_CALIBRATION_SENTENCES` non-empty lines of `path` (TSV: first column)."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [line.split("\t")[0] for line in lines if line.strip()][:MAX_CALIBRATION_SENTENCES]


class ActivationRanges:
    """The range of every input of a `DynamicQuantizeLinear` in an int8 graph (an onnx
    ModelProto), widened by each feed it observes: (min(0, lowest), max(0, highest))."""

    def __init__(self, model: Any) -> None:
        import onnxruntime as ort
        from onnx import TensorProto, helper

        self.names = [node.input[0] for node in model.graph.node if node.op_type == "DynamicQuantizeLinear"]
        probe = type(model)()
        probe.CopyFrom(model)
        outputs = {output.name for output in probe.graph.output}
        for name in self.names:
            if name not in outputs:
                probe.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
        self.session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
        self.inputs = {graph_input.name for graph_input in self.session.get_inputs()}
        self.low, self.high = dict.fromkeys(self.names, 0.0), dict.fromkeys(self.names, 0.0)
        self.feeds = 0

    def observe(self, feed: dict[str, np.ndarray]) -> None:
        values = self.session.run(self.names, {name: value for name, value in feed.items() if name in self.inputs})
        for name, value in zip(self.names, values):
            if value.size:
                self.low[name] = min(self.low[name], float(value.min()))
                self.high[name] = max(self.high[name], float(value.max()))
        self.feeds += 1

    def ranges(self) -> dict[str, tuple[float, float]]:
        return {name: (self.low[name], self.high[name]) for name in self.names}


class _ObservedBackend(OnnxBackend):
    """The fp32 graphs, showing every encoder and decoder-step input feed they run with to the
    int8 graphs' `ActivationRanges` (one feed at a time: the feeds of 128 sentences would
    take gigabytes)."""

    def __init__(self, observers: dict[str, ActivationRanges], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.observers = observers

    def encode(self, src_ids: np.ndarray, src_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.observers["encoder"].observe(self._source_feed(src_ids, src_mask))
        return super().encode(src_ids, src_mask)

    def run_decoder(
        self,
        tokens: np.ndarray,
        src_mask: np.ndarray,
        cache: DecoderCache,
        names: tuple[str, ...] = ("log_probs",),
        top_k: int = 0,
    ) -> dict[str, np.ndarray]:
        self.observers["decoder_step"].observe(self.decoder_feed(tokens, src_mask, cache, top_k))
        return super().run_decoder(tokens, src_mask, cache, names, top_k)


def observe_calibration(
    fp32_dir: Path,
    observers: dict[str, ActivationRanges],
    calibration: Calibration,
    config: ModelConfig,
    tokenizer_path: Path,
) -> None:
    """Translate the calibration sentences with the fp32 graphs in `fp32_dir` (beam 4, batches
    of `CALIBRATION_BATCH`), every run's feed observed by the int8 graph of its role."""
    from seq2seq.runtime.bundle import GRAPH_FILES

    files = GRAPH_FILES["fp32"]
    backend = _ObservedBackend(observers, fp32_dir / files["encoder"], fp32_dir / files["decoder_step"], config)
    tokenizer = Tokenizer(tokenizer_path)
    limit = config.max_positions - 1
    encoded = [tokenizer.encode(s)[: limit - 1] + [backend.eos_id] for s in calibration.sentences]
    for first in range(0, len(encoded), CALIBRATION_BATCH):
        src_ids, src_mask = pad_batch(encoded[first : first + CALIBRATION_BATCH], backend.pad_id)
        beam_search(backend, src_ids, src_mask, CALIBRATION_DECODE, config.max_positions)


def fix_activation_scales(model: Any, ranges: dict[str, tuple[float, float]]) -> int:
    """Replace each `DynamicQuantizeLinear` by a `QuantizeLinear` with the constant uint8
    scale and zero point of its input's range (the dynamic formula, applied once). The scale
    and zero-point tensors keep their names, so their readers are unchanged. Returns how many."""
    from onnx import helper, numpy_helper

    nodes, fixed = [], 0
    for node in model.graph.node:
        if node.op_type != "DynamicQuantizeLinear":
            nodes.append(node)
            continue
        low, high = ranges[node.input[0]]
        scale = max(high - low, 1e-8) / 255.0
        zero_point = int(np.clip(round(-low / scale), 0, 255))
        quantized, scale_name, zero_point_name = node.output
        model.graph.initializer.append(numpy_helper.from_array(np.array(scale, dtype=np.float32), scale_name))
        model.graph.initializer.append(numpy_helper.from_array(np.array(zero_point, dtype=np.uint8), zero_point_name))
        nodes.append(
            helper.make_node(
                "QuantizeLinear", [node.input[0], scale_name, zero_point_name], [quantized], name=f"{node.name}_fixed"
            )
        )
        fixed += 1
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return fixed


def fuse_integer_matmuls(model: Any) -> int:
    """`MatMulInteger -> Cast -> Mul(Mul(a_scale, b_scale)) [-> Add(constant bias)]` ->
    one `com.microsoft.MatMulIntegerToFloat` (the kernel onnxruntime's own fusion uses for
    dynamic graphs). Returns how many chains were fused."""
    from onnx import helper

    graph = model.graph
    producer = {output: node for node in graph.node for output in node.output}
    readers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    constants = {tensor.name for tensor in graph.initializer}
    graph_outputs = {output.name for output in graph.output}
    replaced: dict[int, Any] = {}
    dropped: set[int] = set()
    for matmul in [node for node in graph.node if node.op_type == "MatMulInteger"]:
        (cast,) = readers[matmul.output[0]]
        (scale_mul,) = readers[cast.output[0]]
        scales = producer[next(name for name in scale_mul.input if name != cast.output[0])]
        output, bias = scale_mul.output[0], []
        after = readers.get(output, [])
        if (
            len(after) == 1
            and after[0].op_type == "Add"
            and output not in graph_outputs
            and any(name in constants for name in after[0].input)
        ):
            bias = [name for name in after[0].input if name in constants]
            output = after[0].output[0]
            dropped.add(id(after[0]))
        a_quantized, b_quantized, a_zero_point, b_zero_point = matmul.input
        replaced[id(matmul)] = helper.make_node(
            "MatMulIntegerToFloat",
            [a_quantized, b_quantized, *scales.input, a_zero_point, b_zero_point, *bias],
            [output],
            name=f"{matmul.name}_to_float",
            domain="com.microsoft",
        )
        dropped |= {id(cast), id(scale_mul)}
        if len(readers[scales.output[0]]) == 1:
            dropped.add(id(scales))
    nodes = [replaced.get(id(node), node) for node in graph.node if id(node) not in dropped]
    del graph.node[:]
    graph.node.extend(nodes)
    if replaced and not any(opset.domain == "com.microsoft" for opset in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return len(replaced)


def calibrate_graphs(
    fp32_dir: Path, int8_paths: dict[str, Path], calibration: Calibration, config: ModelConfig, tokenizer_path: Path
) -> dict[str, Any]:
    """Give the dynamically quantized graphs `int8_paths` (role -> file, rewritten in place)
    fixed activation scales from the calibration sentences translated by the fp32 graphs in
    `fp32_dir`, and fuse their integer MatMuls. Returns what bundle.json records of it."""
    import onnx

    models = {role: onnx.load(str(path)) for role, path in int8_paths.items()}
    observers = {role: ActivationRanges(model) for role, model in models.items()}
    observe_calibration(fp32_dir, observers, calibration, config, tokenizer_path)
    record = calibration.record()
    for role, model in models.items():
        fixed = fix_activation_scales(model, observers[role].ranges())
        fused = fuse_integer_matmuls(model)
        onnx.save(model, str(int8_paths[role]))
        record[role] = {"runs": observers[role].feeds, "activations_fixed": fixed, "matmuls_fused": fused}
    return record
