"""The search's speed levers change nothing, with the real onnxruntime graphs: the same
hypotheses, scores, token log-probs and attention.

- The first step runs on one row per sentence and is expanded to K rows afterwards
  (`search._Beams.first_step`), against running it on all K equal rows (the shipped int8
  bundle, whose quantized MatMuls scale each run by its activations' range, and the tiny
  fp32 bundle).
- The decoder graph's own TopK ranks each row's best tokens (export/topk.py), against the
  partial sort in numpy.
- The back-pointers are walked as Python lists (`search._Trace.backtrack`), against the walk
  over numpy scalars.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from seq2seq.core.backend import DecoderCache, SearchBackend, StepOutput, select_rows
from seq2seq.core.config import DecodeConfig
from seq2seq.decoding import candidates, search
from seq2seq.loading import load_translator
from seq2seq.runtime.bundle import load_bundle_manifest
from seq2seq.runtime.onnx_backend import OnnxBackend

SHIPPED_BUNDLE = Path(__file__).resolve().parents[1] / "models" / "de-en"
GOLD = Path(__file__).resolve().parents[1] / "data" / "gold" / "de-en.gold.tsv"


def first_step_on_every_row(
    self: search._Beams, backend: SearchBackend, need_attention: bool, top_k: int = 0, need_self_attention: bool = False
) -> StepOutput:
    """What the search did before: all K rows of every sentence step from BOS (the cross K/V
    one per row, unless the graph reads one per sentence: docs/performance.md, lever 23)."""
    expand = np.repeat(np.arange(len(self.active)), self.k)
    cross = (self.cache.cross_k, self.cache.cross_v)
    if not self.cross_per_sentence:
        cross = (select_rows(cross[0], expand), select_rows(cross[1], expand))
    expanded = DecoderCache(*cross, select_rows(self.cache.self_k, expand), select_rows(self.cache.self_v, expand))
    return backend.step(self.tokens, self.mask, expanded, need_attention, top_k, need_self_attention)


def search_both_ways(
    monkeypatch: pytest.MonkeyPatch, bundle_dir: Path, precision: str, sentences: list[str], config: DecodeConfig
) -> tuple[list, list]:
    translator = load_translator(bundle_dir, precision=precision, verify=False)
    assert isinstance(translator.backend, OnnxBackend)
    ids, mask = search.pad_batch([translator.encode_source(s) for s in sentences], translator.backend.pad_id)
    expanded_after = search.beam_search(translator.backend, ids, mask, config)
    with monkeypatch.context() as patched:
        patched.setattr(search._Beams, "first_step", first_step_on_every_row)
        expanded_before = search.beam_search(translator.backend, ids, mask, config)
    return expanded_after, expanded_before


def assert_same_hypotheses(actual: list, expected: list, atol: float = 0.0) -> None:
    """The same tokens; the same scores, log-probs and attention, bit for bit, or within
    `atol` where the two ways multiply in differently shaped products."""
    assert len(actual) == len(expected)
    for mine, theirs in zip(actual, expected, strict=True):
        assert [h.tokens for h in mine] == [h.tokens for h in theirs]
        for a, b in zip(mine, theirs, strict=True):
            numbers = [(a.score, b.score), (a.log_prob, b.log_prob), (a.token_log_probs, b.token_log_probs)]
            for x, y in [*numbers, (a.attention, b.attention)]:
                np.testing.assert_allclose(x, y, rtol=0, atol=atol)


@pytest.mark.parametrize("beam", [1, 4])
def test_first_step_on_one_row_per_sentence_changes_nothing_int8(monkeypatch: pytest.MonkeyPatch, beam: int) -> None:
    if "int8" not in load_bundle_manifest(SHIPPED_BUNDLE, verify=False).precisions:
        pytest.fail("the shipped bundle carries int8 graphs")
    sentences = [line.split("\t")[0] for line in GOLD.read_text(encoding="utf-8").splitlines()[:12]]
    config = DecodeConfig(beam_size=beam, n_best=beam)
    after, before = search_both_ways(monkeypatch, SHIPPED_BUNDLE, "int8", sentences, config)
    assert_same_hypotheses(after, before)
    assert all(len(hyps) == beam for hyps in after)


def test_first_step_on_one_row_per_sentence_changes_nothing_fp32(
    monkeypatch: pytest.MonkeyPatch, tiny_bundle: Path
) -> None:
    from toy import SENTENCES

    sentences = SENTENCES[:8]
    config = DecodeConfig(beam_size=3, n_best=3, coverage_penalty=0.3)
    after, before = search_both_ways(monkeypatch, tiny_bundle, "fp32", sentences, config)
    # The graph reads each sentence's cross K/V once for its rows (docs/performance.md,
    # lever 23): its first step's one row per sentence is a (1, Dh) x (Dh, S) product where
    # the K rows were one (K, Dh) x (Dh, S), which round differently in the last bits.
    assert_same_hypotheses(after, before, atol=1e-5)


def test_the_graphs_top_k_is_the_best_of_its_log_probs(tiny_bundle: Path) -> None:
    backend = load_translator(tiny_bundle, verify=False).backend
    assert isinstance(backend, OnnxBackend) and backend.has_top_k
    ids, mask = search.pad_batch([[5, 6, 7, 3], [8, 3]], backend.pad_id)
    cache = DecoderCache.start(*backend.encode(ids, mask))
    tokens = np.full((2, 1), backend.bos_id, dtype=np.int64)
    out = backend.step(tokens, mask, cache, need_attention=True, top_k=7)
    assert out.top is not None
    values, top_ids = out.top
    assert values.shape == top_ids.shape == (2, 7) and top_ids.dtype == np.int64
    assert np.array_equal(values, np.take_along_axis(out.log_probs, top_ids, axis=1))
    assert np.array_equal(values, -np.sort(-out.log_probs, axis=1)[:, :7])
    assert backend.step(tokens, mask, cache, need_attention=False).top is None  # not asked for


def test_a_run_that_wants_no_top_k_feeds_zero(monkeypatch: pytest.MonkeyPatch, tiny_bundle: Path) -> None:
    """Greedy search asks for no TopK, so the graph's TopK is fed C = 0 (every node runs
    whatever is fetched): empty outputs, and the other outputs as with C > 0."""
    backend = load_translator(tiny_bundle, verify=False, streams=1).backend
    assert isinstance(backend, OnnxBackend) and backend.has_top_k
    ids, mask = search.pad_batch([[5, 6, 7, 3], [8, 3]], backend.pad_id)
    cache = DecoderCache.start(*backend.encode(ids, mask))
    tokens = np.full((2, 1), backend.bos_id, dtype=np.int64)
    names = ("log_probs", "new_past_k", "new_past_v", "top_log_probs", "top_ids")
    none, some = (backend.run_decoder(tokens, mask, cache, names, top_k=k) for k in (0, 5))
    assert none["top_ids"].shape == (2, 1, 0) and some["top_ids"].shape == (2, 1, 5)
    for name in names[:3]:
        assert np.array_equal(none[name], some[name]), name

    fed: list[int] = []
    feed = OnnxBackend.decoder_feed

    def recording(self: OnnxBackend, *args: object, **kwargs: object) -> dict[str, np.ndarray]:
        inputs = feed(self, *args, **kwargs)
        fed.append(int(inputs["top_k"][0]))
        return inputs

    monkeypatch.setattr(OnnxBackend, "decoder_feed", recording)
    search.beam_search(backend, ids, mask, DecodeConfig(beam_size=1))
    assert fed and set(fed) == {0}
    fed.clear()
    search.beam_search(backend, ids, mask, DecodeConfig(beam_size=2))
    assert fed and 0 not in fed


@pytest.mark.parametrize("beam", [2, 4])
def test_search_from_the_graphs_top_k_equals_search_from_numpy(
    monkeypatch: pytest.MonkeyPatch, tiny_bundle: Path, beam: int
) -> None:
    from toy import SENTENCES

    translator = load_translator(tiny_bundle, verify=False)
    backend = translator.backend
    ids, mask = search.pad_batch([translator.encode_source(s) for s in SENTENCES], backend.pad_id)
    config = DecodeConfig(beam_size=beam, n_best=beam, coverage_penalty=0.2)
    used = []
    rank = candidates.Candidates.rank.__func__

    def spying_rank(cls, scores, log_probs, k, eos_id, row_best=None):
        used.append(row_best is not None)
        return rank(cls, scores, log_probs, k, eos_id, row_best)

    with monkeypatch.context() as patched:
        patched.setattr(candidates.Candidates, "rank", classmethod(spying_rank))
        from_graph = search.beam_search(backend, ids, mask, config)
    assert any(used)
    step = backend.step
    with monkeypatch.context() as patched:  # the same runs, their TopK dropped
        patched.setattr(backend, "step", lambda *args: dataclasses.replace(step(*args), top=None))
        from_numpy = search.beam_search(backend, ids, mask, config)
    assert_same_hypotheses(from_graph, from_numpy)


def backtrack_one_step_at_a_time(
    attention: list[np.ndarray],
    parents: list[np.ndarray],
    tokens: list[np.ndarray],
    log_probs: list[np.ndarray],
    step: int,
    row: int,
) -> tuple[list[int], list[float], np.ndarray]:
    """What `_Trace.backtrack` did before: numpy scalars read step by step, then `np.stack`."""
    generated, token_log_probs, rows_attention = [], [], []
    for t in range(step, -1, -1):
        rows_attention.append(attention[t][:, row])
        if t > 0:
            generated.append(int(tokens[t - 1][row]))
            token_log_probs.append(float(log_probs[t - 1][row]))
            row = int(parents[t - 1][row])
    return generated[::-1], token_log_probs[::-1], np.stack(rows_attention[::-1], axis=2).astype(np.float32)


def test_backtrack_from_lists_equals_the_walk_over_numpy_scalars() -> None:
    """`_Trace` keeps its back-pointers as lists and fills the attention rows into one array:
    the same tokens, float32 log-probs (as floats) and maps as the old walk, with rows whose
    count changes from step to step (sentences leaving the batch)."""
    rng = np.random.default_rng(0)
    layers, heads, source, steps = 2, 3, 5, 9
    counts = [12, 12, 12, 8, 8, 8, 4, 4, 4, 4]  # rows at each step
    trace = search._Trace()
    attention, parents, tokens, log_probs = [], [], [], []
    for t in range(steps + 1):
        attention.append(rng.random((layers, counts[t], heads, source), dtype=np.float32))
        trace.attention.append(attention[-1])
        if t < steps:
            parents.append(rng.integers(0, counts[t], counts[t + 1]))
            tokens.append(rng.integers(0, 8000, counts[t + 1]))
            log_probs.append(-rng.random(counts[t + 1], dtype=np.float32) * 10)
            trace.select(parents[-1], tokens[-1], log_probs[-1])
    for step in range(steps + 1):
        for row in range(counts[step]):
            mine = trace.backtrack(step, row)
            theirs = backtrack_one_step_at_a_time(attention, parents, tokens, log_probs, step, row)
            assert mine[0] == theirs[0] and mine[1] == theirs[1]
            assert mine[2].dtype == theirs[2].dtype and np.array_equal(mine[2], theirs[2])


def assert_small_runs_unbound_equal_bound(
    monkeypatch: pytest.MonkeyPatch, bundle_dir: Path, precision: str, sentences: list[str]
) -> None:
    """Runs of at most PLAIN_RUN_ROWS rows go through `InferenceSession.run` and are stacked
    afterwards (onnx_backend.run_decoder): the same arrays as the I/O-bound run, and the
    same search."""
    from seq2seq.runtime import onnx_backend

    translator = load_translator(bundle_dir, precision=precision, threads=2, streams=1, verify=False)
    backend = translator.backend
    ids, mask = search.pad_batch([translator.encode_source(s) for s in sentences], backend.pad_id)
    config = DecodeConfig(beam_size=4, n_best=2)
    assert len(sentences) * config.beam_size <= onnx_backend.PLAIN_RUN_ROWS
    cache = DecoderCache.start(*backend.encode(ids, mask))
    tokens = np.full((len(sentences), 1), backend.bos_id, dtype=np.int64)
    names = onnx_backend.DECODER_OUTPUTS
    unbound = backend.run_decoder(tokens, mask, cache, names, top_k=9)
    plain_search = search.beam_search(backend, ids, mask, config)
    with monkeypatch.context() as patched:
        patched.setattr(onnx_backend, "PLAIN_RUN_ROWS", 0)
        bound = backend.run_decoder(tokens, mask, cache, names, top_k=9)
        bound_search = search.beam_search(backend, ids, mask, config)
    assert unbound.keys() == bound.keys()
    for name in names:
        assert unbound[name].shape == bound[name].shape and np.array_equal(unbound[name], bound[name]), name
    assert_same_hypotheses(plain_search, bound_search)


def test_small_runs_unbound_equal_the_bound_runs_int8(monkeypatch: pytest.MonkeyPatch) -> None:
    sentences = [line.split("\t")[0] for line in GOLD.read_text(encoding="utf-8").splitlines()[:2]]
    assert_small_runs_unbound_equal_bound(monkeypatch, SHIPPED_BUNDLE, "int8", sentences)


def test_small_runs_unbound_equal_the_bound_runs_fp32(monkeypatch: pytest.MonkeyPatch, tiny_bundle: Path) -> None:
    from toy import SENTENCES

    assert_small_runs_unbound_equal_bound(monkeypatch, tiny_bundle, "fp32", SENTENCES[:2])
