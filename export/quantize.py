"""Dynamic int8 quantization of a bundle's fp32 graphs (`crossalign export --int8`; the
exporter then calibrates their activation scales, export/calibrate.py).

Used by the exporter (export/exporter.py) to add int8 graphs beside the fp32 ones, and by
bench/inference.py and bench/ctranslate2_compare.py for bundles exported without them.
Only the weight MatMuls are quantized; the attention maps stay fp32 (see `quantize_graphs`).
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from seq2seq.runtime.bundle import GRAPH_FILES

log = logging.getLogger("crossalign.export")


def fold_weight_transposes(graph: Any) -> int:
    """Replace every Transpose of a constant weight by the transposed weight; returns how many.

    nn.Linear stores W as (out, in) and the tied output projection is Eᵀ, so the exported
    graphs reach every weight MatMul through a Transpose (the export skips constant folding
    to keep the bundle small; onnxruntime folds them when a session loads). The dynamic
    quantizer only quantizes MatMuls whose weight is an initializer, so without this it
    quantizes none of them. `graph` is an onnx GraphProto, changed in place.
    """
    from onnx import numpy_helper

    initializers = {tensor.name: tensor for tensor in graph.initializer}
    folded: dict[str, str] = {}  # Transpose output -> new initializer name
    keep = []
    for node in graph.node:
        if node.op_type != "Transpose" or node.input[0] not in initializers:
            keep.append(node)
            continue
        perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
        weight = numpy_helper.to_array(initializers[node.input[0]])
        name = f"{node.input[0]}.transposed"
        if name not in initializers:
            initializers[name] = numpy_helper.from_array(np.ascontiguousarray(weight.transpose(perm)), name)
            graph.initializer.append(initializers[name])
        folded[node.output[0]] = name
    del graph.node[:]
    graph.node.extend(keep)
    for node in graph.node:
        for index, name in enumerate(node.input):
            if name in folded:
                node.input[index] = folded[name]
    used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    unused = [tensor for tensor in graph.initializer if tensor.name not in used]
    for tensor in unused:
        graph.initializer.remove(tensor)
    return len(folded)


def quantize_graphs(source_dir: Path, out_dir: Path) -> dict[str, str]:
    """Dynamic int8 quantization of the fp32 graphs' MatMul weights; returns role -> file.

    The weights' Transposes are folded first (`fold_weight_transposes`), so every weight
    MatMul is quantized (25 of the decoder's 37 MatMuls; the rest multiply activations).
    Attention scores and weights (activation x activation) stay fp32, so the alignment
    maps are not quantized directly. Activations are quantized per tensor with a scale
    computed at run time over the whole input, so an int8 translation changes with what else
    is in its batch (fp32 does not): the exporter then fixes those scales by calibration
    (export/calibrate.py). The embedding lookup stays fp32. bench/inference.py and
    bench/ctranslate2_compare.py use this, dynamic as it is, for bundles exported without
    int8 graphs.
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out_dir.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    level = root.level
    # onnxruntime.quantization logs a line per tensor, and a pre-processing hint, on the root
    # logger. The hint is about shape inference for static quantization and convolution
    # graphs; dynamic MatMul quantization of our graphs needs none, so we keep them quiet.
    root.setLevel(max(level, logging.ERROR))
    try:
        with tempfile.TemporaryDirectory(prefix="crossalign-quantize-") as scratch:
            for role, name in GRAPH_FILES["int8"].items():
                model = onnx.load(str(source_dir / GRAPH_FILES["fp32"][role]))
                count = fold_weight_transposes(model.graph)
                folded = Path(scratch) / f"{role}.folded.onnx"
                onnx.save(model, str(folded))
                log.info("quantizing %s (%d weight transposes folded)", name, count)
                quantize_dynamic(
                    folded,
                    out_dir / name,
                    op_types_to_quantize=["MatMul"],
                    weight_type=QuantType.QInt8,
                    per_channel=False,
                )
    finally:
        root.setLevel(level)
    return dict(GRAPH_FILES["int8"])
