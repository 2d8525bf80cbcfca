"""Constant Reshape targets in the exported graphs: fewer kernels per decoder step.

The legacy exporter traces `x.view(b, t, H, Dh)` with `b, t = x.shape[:2]` as graph values,
so every head split and merge reaches its Reshape through a Shape -> Gather -> Unsqueeze ->
Concat chain (and `h * dh` through a Mul), evaluated at every run. onnxruntime folds the
parts that are static but not the batch and length dims, so about 80 of a decoder step's
~200 kernels were this bookkeeping (a quarter of its kernel time at batch 1; docs/performance.md,
lever 7). ONNX's Reshape copies an input dim where the target says 0, so a target whose dynamic
entries are the data's own dims at the same positions can be a constant: `[0, 0, H, Dh]`
to split heads, `[0, 0, D]` to merge them. The chains then feed nothing and are removed.

A target that also needs a dim the data does not have there, such as the sentences B of
the grouped cross-attention's (B·G, T, H, Dh) -> (B, G·T, H, Dh) (lever 23), is
built once per graph instead, from the graph input that declares that dim (here `src_mask`,
(sentences, source)): one Shape -> Gather -> Concat shared by every layer's Reshape with the
same target, where each layer had its own chain. One dim that is neither the data's own
nor an input's may be left to Reshape's -1 (the element count fixes it).

Same maths, same outputs: only where a dim comes from is changed, and only where onnx's
shape inference (with symbolic data propagation) proves it is the very dim Reshape would
copy, or the input's dim it names.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# A symbolic dim: an int when static, else the name onnx's shape inference gave it
# (`rows`, `unk__4`, ...; one name is one value), else (tensor, axis).
Dim = int | str | tuple[str, int]

# The names of the shared targets' tensors (`_shared_target_tensor`) start with this.
SHARED_PREFIX = "shared_target"


def fold_reshape_targets(model: Any) -> int:
    """Make every Reshape target in `model` (an onnx ModelProto, changed in place) that
    copies its data's own dynamic dims a constant with 0 there; drop the nodes this leaves
    unused. Returns the number of Reshapes made constant.

    In rounds: a constant target lets shape inference see the static dims downstream (the
    heads and head size after the split), which is what proves the merge's target.
    """
    total = 0
    while folded := _fold_round(model):
        total += folded
    return total


def _fold_round(model: Any) -> int:
    import onnx
    from onnx import numpy_helper

    graph = model.graph
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    shapes: dict[str, list[Dim]] = {}
    for value in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
        dims = value.type.tensor_type.shape.dim
        shapes[value.name] = [
            d.dim_value if d.HasField("dim_value") else d.dim_param or (value.name, axis) for axis, d in enumerate(dims)
        ]
    constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    input_dims = _input_dims(graph)
    values: dict[str, list[Dim]] = {}  # small int tensors, element by element

    def known(name: str) -> list[Dim] | None:
        if name in values:
            return values[name]
        if name in constants and constants[name].dtype == np.int64 and constants[name].size <= 8:
            return [int(v) for v in constants[name].reshape(-1)]
        return None

    folded = 0
    for node in graph.node:
        ins = [known(name) for name in node.input]
        out: list[Dim] | None = None
        if node.op_type == "Constant":
            tensor = next((a.t for a in node.attribute if a.name == "value"), None)
            array = None if tensor is None else numpy_helper.to_array(tensor)
            if array is not None and array.dtype == np.int64 and array.size <= 8:
                out = [int(v) for v in array.reshape(-1)]
        elif node.op_type == "Shape" and len(node.attribute) == 0 and node.input[0] in shapes:
            out = list(shapes[node.input[0]])
        elif node.op_type == "Gather" and ins[0] is not None and ins[1] is not None and len(ins[1]) == 1:
            out = [ins[0][int(ins[1][0])]] if isinstance(ins[1][0], int) else None
        elif node.op_type in ("Unsqueeze", "Squeeze", "Cast") and ins[0] is not None and len(ins[0]) == 1:
            out = ins[0]
        elif node.op_type == "Concat" and all(i is not None for i in ins):
            out = [d for i in ins for d in i]  # type: ignore[union-attr]
        elif node.op_type == "Mul" and all(i is not None and len(i) == 1 and isinstance(i[0], int) for i in ins):
            out = [int(np.prod([i[0] for i in ins]))]  # type: ignore[index]
        elif (
            node.op_type == "Reshape"
            and node.input[1] not in constants
            and ins[1] is not None
            and node.input[0] in shapes
        ):
            target = _constant_target(ins[1], shapes[node.input[0]])
            if target is not None:
                name = f"{node.output[0]}.target"
                graph.initializer.append(numpy_helper.from_array(np.array(target, dtype=np.int64), name))
                node.input[1] = name
                folded += 1
            elif not node.input[1].startswith(SHARED_PREFIX):
                shared = _shared_target(ins[1], shapes[node.input[0]], input_dims)
                if shared is not None:
                    node.input[1] = _shared_target_tensor(graph, shared)
                    folded += 1
        if out is not None:
            for name in node.output:
                values[name] = out
    _drop_unused(graph)
    return folded


def _constant_target(target: list[Dim], data: list[Dim]) -> list[int] | None:
    """`target` with the data's own dims at their positions as 0, or None if some entry
    stays dynamic. A static dim stays its number (0 would mean the same, a number is clearer)."""
    constant = []
    for axis, dim in enumerate(target):
        if isinstance(dim, int):
            constant.append(dim)
        elif axis < len(data) and data[axis] == dim:
            constant.append(0)
        else:
            return None
    return constant


def _input_dims(graph: Any) -> dict[str, tuple[str, int]]:
    """Each named dynamic dim of the graph's inputs -> (input, axis) of its first occurrence."""
    dims: dict[str, tuple[str, int]] = {}
    for graph_input in graph.input:
        for axis, dim in enumerate(graph_input.type.tensor_type.shape.dim):
            if dim.dim_param and dim.dim_param not in dims:
                dims[dim.dim_param] = (graph_input.name, axis)
    return dims


def _shared_target(
    target: list[Dim], data: list[Dim], inputs: dict[str, tuple[str, int]]
) -> list[int | tuple[str, int]] | None:
    """`target` as entries a graph can build once for all layers: a number (0 for the data's
    own dim, -1 for at most one dim that is neither the data's nor an input's, when the
    target has no -1 of its own) or (input, axis). None if that is not possible."""
    entries: list[int | tuple[str, int]] = []
    inferred = -1 in target
    for axis, dim in enumerate(target):
        if isinstance(dim, int):
            entries.append(dim)
        elif axis < len(data) and data[axis] == dim:
            entries.append(0)
        elif isinstance(dim, str) and dim in inputs:
            entries.append(inputs[dim])
        elif not inferred:
            entries.append(-1)
            inferred = True
        else:
            return None
    return entries


def _shared_target_tensor(graph: Any, entries: list[int | tuple[str, int]]) -> str:
    """The name of a tensor holding `entries` (see `_shared_target`), made once per graph:
    Shape of each input used, Gather of each of its axes, and a Concat, placed first."""
    from onnx import helper, numpy_helper

    def key(entry: int | tuple[str, int]) -> str:
        return str(entry) if isinstance(entry, int) else f"{entry[0]}.{entry[1]}"

    name = f"{SHARED_PREFIX}.{'_'.join(key(e) for e in entries)}"
    made = {output for node in graph.node for output in node.output}
    if name in made:
        return name
    parts: list[str] = []
    nodes = []
    numbers: list[int] = []  # consecutive numbers go in one initializer
    for entry in [*entries, None]:
        if isinstance(entry, int):
            numbers.append(entry)
            continue
        if numbers:
            part = f"{name}.{len(parts)}"
            graph.initializer.append(numpy_helper.from_array(np.array(numbers, dtype=np.int64), part))
            parts.append(part)
            numbers = []
        if entry is None:
            break
        graph_input, axis = entry
        shape, part = f"{SHARED_PREFIX}.shape.{graph_input}", f"{SHARED_PREFIX}.dim.{graph_input}.{axis}"
        if shape not in made:
            nodes.append(helper.make_node("Shape", [graph_input], [shape], name=shape))
            made.add(shape)
        if part not in made:
            indices = f"{part}.index"
            graph.initializer.append(numpy_helper.from_array(np.array([axis], dtype=np.int64), indices))
            nodes.append(helper.make_node("Gather", [shape, indices], [part], name=part, axis=0))
            made.add(part)
        parts.append(part)
    nodes.append(helper.make_node("Concat", parts, [name], name=name, axis=0))
    for position, node in enumerate(nodes):
        graph.node.insert(position, node)
    return name


def _drop_unused(graph: Any) -> None:
    """Remove nodes none of whose outputs is used, until none is left; then unused initializers."""
    outputs = {o.name for o in graph.output}
    while True:
        used = {name for node in graph.node for name in node.input} | outputs
        dead = [node for node in graph.node if not any(o in used for o in node.output)]
        if not dead:
            break
        for node in dead:
            graph.node.remove(node)
    used = {name for node in graph.node for name in node.input} | outputs
    for tensor in [t for t in graph.initializer if t.name not in used]:
        graph.initializer.remove(tensor)
