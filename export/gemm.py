"""Fuse each weight MatMul of the fp32 graphs with its bias Add into one Gemm.

torch exports `nn.Linear` on a (B, T, D) activation as MatMul then Add: the bias is added
in a second pass over the output, 24 times per decoder step. onnxruntime fuses MatMul + Add
into a Gemm (whose kernel adds the bias as it writes) only for 2-D inputs, so here each
pair becomes Reshape (B·T, D) -> Gemm -> Reshape (B, T, D'). A Reshape moves no data, and
the target of the second one is built once per graph from the input that every activation
of the graph shares its leading dims with, by the model's construction: `tokens` (N, T) in
the decoder step, `src_ids` (B, S) in the encoder. onnx's shape inference (with symbolic
data propagation, which carries the rows through the grouped cross-attention's reshapes)
loses T after the position slice, so only the rank and the first dim are checked here;
the export's parity check runs both graphs on real sentences (T = 1 and whole targets)
against torch. Same maths, outputs equal up to float rounding.

Applied to the fp32 graphs only, after the int8 graphs are made from them: the quantizer
quantizes MatMuls, and the int8 kernel already adds the bias (export/calibrate.py).
Measured (docs/performance.md, lever 22): the fp32 decoder step 1.01-1.03x faster.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def fuse_bias_gemms(model: Any, leading_input: str) -> int:
    """Rewrite `model` (an onnx ModelProto, changed in place): every MatMul of an activation
    (*leading, D) by a constant weight (directly, or through a 2-D Transpose of one) whose
    only consumer adds a constant bias (D',) becomes Reshape -> Gemm -> Reshape, where
    `leading` are the dims of the graph input `leading_input`. Returns how many."""
    import onnx
    from onnx import helper

    graph = model.graph
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True).graph
    shapes = {value.name: _dims(value) for value in (*inferred.value_info, *inferred.input, *inferred.output)}
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    producers = {output: node for node in graph.node for output in node.output}
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    leading = shapes[leading_input]

    added_shapes: dict[int, str] = {}  # D' -> the output shape (*leading, D')
    new_nodes: list[Any] = []
    fused = 0
    for matmul in [node for node in graph.node if node.op_type == "MatMul"]:
        weight, transposed = _weight(matmul.input[1], initializers, producers)
        users = consumers.get(matmul.output[0], [])
        if weight is None or len(users) != 1 or users[0].op_type != "Add":
            continue
        add = users[0]
        bias = next((name for name in add.input if name != matmul.output[0]), None)
        activation = shapes.get(matmul.input[0])
        if bias not in initializers or activation is None:
            continue
        rows, columns = initializers[weight].dims
        d_in, d_out = (columns, rows) if transposed else (rows, columns)
        if len(activation) != len(leading) + 1 or activation[0] != leading[0]:
            continue
        if list(initializers[bias].dims) != [d_out] or activation[-1] != d_in:
            continue
        flat = _constant(graph, initializers, f"gemm.flat.{d_in}", [-1, d_in])
        if d_out not in added_shapes:
            if not new_nodes:
                new_nodes.append(helper.make_node("Shape", [leading_input], ["gemm.leading"], name="gemm.leading"))
            out_dim = _constant(graph, initializers, f"gemm.dim.{d_out}", [d_out])
            shape = added_shapes[d_out] = f"gemm.shape.{d_out}"
            new_nodes.append(helper.make_node("Concat", ["gemm.leading", out_dim], [shape], axis=0, name=shape))
        name = matmul.name or matmul.output[0]
        flat_in, flat_out = f"{name}.flat_in", f"{name}.flat_out"
        replacement = [
            helper.make_node("Reshape", [matmul.input[0], flat], [flat_in], name=f"{name}/Reshape_in"),
            helper.make_node("Gemm", [flat_in, weight, bias], [flat_out], name=f"{name}/Gemm", transB=int(transposed)),
            helper.make_node("Reshape", [flat_out, added_shapes[d_out]], [add.output[0]], name=f"{name}/Reshape_out"),
        ]
        position = list(graph.node).index(matmul)
        graph.node.remove(matmul)
        graph.node.remove(add)
        for offset, node in enumerate(replacement):
            graph.node.insert(position + offset, node)
        fused += 1
    for offset, node in enumerate(new_nodes):  # the shapes depend on graph inputs only
        graph.node.insert(offset, node)
    _drop_unused(graph)
    return fused


def fuse_graph_file(path: Path, leading_input: str) -> int:
    """`fuse_bias_gemms` on the graph file at `path`, rewritten in place; returns how many."""
    import onnx

    model = onnx.load(str(path))
    fused = fuse_bias_gemms(model, leading_input)
    onnx.save(model, str(path))
    return fused


def _dims(value: Any) -> list[int | str | None]:
    return [d.dim_param or (d.dim_value if d.HasField("dim_value") else None) for d in value.type.tensor_type.shape.dim]


def _weight(name: str, initializers: dict[str, Any], producers: dict[str, Any]) -> tuple[str | None, bool]:
    """The constant 2-D weight a MatMul's second input is, and whether it is reached through
    a Transpose (nn.Linear's (out, in) weight; Gemm's transB reads it as it is)."""
    if name in initializers and len(initializers[name].dims) == 2:
        return name, False
    node = producers.get(name)
    if node is not None and node.op_type == "Transpose" and node.input[0] in initializers:
        perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), [1, 0])
        if len(initializers[node.input[0]].dims) == 2 and perm == [1, 0]:
            return node.input[0], True
    return None, False


def _constant(graph: Any, initializers: dict[str, Any], name: str, values: list[int]) -> str:
    from onnx import numpy_helper

    if name not in initializers:
        initializers[name] = numpy_helper.from_array(np.array(values, dtype=np.int64), name)
        graph.initializer.append(initializers[name])
    return name


def _drop_unused(graph: Any) -> None:
    """Remove the nodes (the weights' Transposes) and initializers nothing reads any more."""
    while True:
        used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
        dead = [node for node in graph.node if not any(output in used for output in node.output)]
        if not dead:
            break
        for node in dead:
            graph.node.remove(node)
    used = {name for node in graph.node for name in node.input}
    for tensor in [t for t in graph.initializer if t.name not in used]:
        graph.initializer.remove(tensor)
