"""Lever 21: the encoder runs sentences of similar length together, each group padded only to
its own longest (`seq2seq.core.backend.length_groups`, `OnnxBackend.encode`). The split is the
cheapest one under its cost, and it changes nothing: the same cross K/V at every real
position and the same search, with the real onnxruntime graphs."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from test_search_levers import GOLD, SHIPPED_BUNDLE, assert_same_hypotheses

from seq2seq.core.backend import length_groups
from seq2seq.core.config import DecodeConfig
from seq2seq.decoding import search
from seq2seq.loading import load_translator
from seq2seq.runtime import onnx_backend
from seq2seq.runtime.onnx_backend import OnnxBackend


def split_cost(lengths: np.ndarray, groups: list[np.ndarray], run_cost: float) -> float:
    return sum(run_cost + len(rows) * lengths[rows].max() for rows in groups)


def every_split_cost(lengths: np.ndarray, run_cost: float) -> float:
    """The cheapest split into runs of sentences adjacent in length order, by brute force."""
    ordered = np.sort(lengths)
    best = np.inf
    for cuts in itertools.product([False, True], repeat=len(ordered) - 1):
        starts = [0] + [i + 1 for i, cut in enumerate(cuts) if cut]
        ends = starts[1:] + [len(ordered)]
        best = min(best, sum(run_cost + (end - start) * ordered[end - 1] for start, end in zip(starts, ends)))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_length_groups_hold_every_sentence_once_and_are_the_cheapest_split(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 40, size=int(rng.integers(1, 10)))
    run_cost = float(rng.choice([0.0, 4.0, 16.0, 64.0]))
    groups = length_groups(lengths, run_cost)
    assert sorted(np.concatenate(groups).tolist()) == list(range(len(lengths)))
    # Shortest first, and no group reaches below the longest of the one before it.
    assert all(lengths[a].max() <= lengths[b].min() for a, b in zip(groups, groups[1:]))
    assert split_cost(lengths, groups, run_cost) == pytest.approx(every_split_cost(lengths, run_cost))


def test_a_costly_run_keeps_the_batch_whole_and_a_free_one_splits_it_by_length() -> None:
    lengths = np.array([30, 4, 4, 12, 30, 5])
    assert len(length_groups(lengths, 1e6)) == 1
    free = length_groups(lengths, 0.0)
    assert [sorted(set(lengths[rows].tolist())) for rows in free] == [[4], [5], [12], [30]]


def whole_batch(backend: OnnxBackend, ids: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    cross_k, cross_v = backend.encoder.run(["cross_k", "cross_v"], backend._source_feed(ids, mask))
    return cross_k, cross_v


def assert_grouped_encode_changes_nothing(
    monkeypatch: pytest.MonkeyPatch, bundle_dir: Path, precision: str, sentences: list[str]
) -> None:
    translator = load_translator(bundle_dir, precision=precision, streams=1, verify=False)
    backend = translator.backend
    assert isinstance(backend, OnnxBackend)
    ids, mask = search.pad_batch([translator.encode_source(s) for s in sentences], backend.pad_id)
    lengths = mask.sum(axis=1)
    assert len(length_groups(lengths, onnx_backend.ENCODE_RUN_POSITIONS)) > 1, "the batch must be split"
    grouped_k, grouped_v = backend.encode(ids, mask)
    whole_k, whole_v = whole_batch(backend, ids, mask)
    # The keys as the model lays them out, (.., S, Dh), whatever the graphs' layout (lever 22).
    grouped_k, whole_k = backend.keys_in_rows(grouped_k), backend.keys_in_rows(whole_k)
    assert grouped_k.shape == whole_k.shape and grouped_v.shape == whole_v.shape
    real = mask[None, :, None, :, None]  # (1, B, 1, S, 1) against (L, B, H, S, Dh)
    for grouped, whole in ((grouped_k, whole_k), (grouped_v, whole_v)):
        assert np.allclose(np.where(real, grouped, 0), np.where(real, whole, 0), rtol=0, atol=1e-5)
    # Padded positions differ (zeros past a group's longest), and the decoder masks them all:
    # the search, attention included, is the same.
    config = DecodeConfig(beam_size=4, n_best=2)
    grouped_search = search.beam_search(backend, ids, mask, config)
    with monkeypatch.context() as patched:
        patched.setattr(onnx_backend, "ENCODE_RUN_POSITIONS", 1e9)  # one group: the whole batch
        assert len(length_groups(lengths, onnx_backend.ENCODE_RUN_POSITIONS)) == 1
        whole_search = search.beam_search(backend, ids, mask, config)
    assert_same_hypotheses(grouped_search, whole_search)


def test_grouped_encoding_changes_nothing_on_the_shipped_int8_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [line.split("\t")[0] for line in GOLD.read_text(encoding="utf-8").splitlines()]
    by_length = sorted(rows, key=len)
    sentences = by_length[:6] + by_length[-2:]  # short ones and two long ones: worth splitting
    assert_grouped_encode_changes_nothing(monkeypatch, SHIPPED_BUNDLE, "int8", sentences)


def test_grouped_encoding_changes_nothing_on_the_tiny_fp32_bundle(
    monkeypatch: pytest.MonkeyPatch, tiny_bundle: Path
) -> None:
    from toy import SENTENCES

    by_length = sorted(SENTENCES, key=len)
    long_one = " ".join(by_length[-3:])  # a sentence far longer than the rest
    assert_grouped_encode_changes_nothing(monkeypatch, tiny_bundle, "fp32", by_length[:6] + [long_one])
