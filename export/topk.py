"""The search's candidates in the decoder graph: a TopK over the step's log-probs.

Beam search ranks, at every step, the 2K best continuations of each sentence from each
row's own best log-probs (`seq2seq.decoding.candidates.Candidates.rank`). Picking those few out of the
vocabulary in numpy (a partial sort of (N, V) float32, `np.argpartition`) was 11-13% of
beam-4 batch-32 decoding; onnxruntime's TopK kernel does it in about a third of the time on
the graph's own thread pool, in the same run. So the decoder-step graph gets one input and
two outputs (`seq2seq.runtime.onnx_backend.SEARCH_TOP_IO`):

    top_k          (1,) int64: how many to return, C
    top_log_probs  (N, T, C) float32: each position's C largest log-probs, largest first
    top_ids        (N, T, C) int64: their vocabulary ids

`log_probs` stays an output: the search still reads single entries of it (the EOS of a
finished hypothesis, rows at their length limit), and teacher forcing reads all of it.
The TopK sees every token; the search drops the ones it never produces (PAD, BOS) itself,
so the policy stays in the search. Same maths: nothing before the TopK changes.
"""

from __future__ import annotations

from typing import Any

from seq2seq.runtime.onnx_backend import SEARCH_TOP_IO


def add_search_top_k(model: Any) -> None:
    """Append the TopK to a decoder-step graph (an onnx ModelProto, changed in place)."""
    from onnx import TensorProto, helper

    graph = model.graph
    if any(graph_input.name in SEARCH_TOP_IO["inputs"] for graph_input in graph.input):
        return  # already there (a graph re-exported in place)
    (top_k,) = SEARCH_TOP_IO["inputs"]
    values, ids = SEARCH_TOP_IO["outputs"]
    graph.input.append(helper.make_tensor_value_info(top_k, TensorProto.INT64, [1]))
    graph.node.append(
        helper.make_node("TopK", ["log_probs", top_k], [values, ids], name="search_top_k", axis=-1, largest=1, sorted=1)
    )
    for name, element in ((values, TensorProto.FLOAT), (ids, TensorProto.INT64)):
        graph.output.append(helper.make_tensor_value_info(name, element, list(SEARCH_TOP_IO["outputs"][name])))
