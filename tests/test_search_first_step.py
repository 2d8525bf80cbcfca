"""The beam search runs its first step on one row per sentence and expands it to K rows
afterwards (`search._Beams.first_step`). These tests pin that this changes nothing: the
same hypotheses, scores, token log-probs and attention as running the first step on all
K equal rows, with the real onnxruntime graphs (the shipped int8 bundle, whose quantized
MatMuls scale each run by its activations' range, and the tiny fp32 bundle)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from seq2seq import search
from seq2seq.backend import DecoderCache, SearchBackend, StepOutput, select_rows
from seq2seq.bundle import load_bundle_manifest
from seq2seq.config import DecodeConfig
from seq2seq.loading import load_translator
from seq2seq.onnx_backend import OnnxBackend

SHIPPED_BUNDLE = Path(__file__).resolve().parents[1] / "models" / "de-en"
GOLD = Path(__file__).resolve().parents[1] / "data" / "gold" / "de-en.gold.tsv"


def first_step_on_every_row(self: search._Beams, backend: SearchBackend, need_attention: bool) -> StepOutput:
    """What the search did before: all K rows of every sentence step from BOS."""
    expand = np.repeat(np.arange(len(self.active)), self.k)
    arrays = (self.cache.cross_k, self.cache.cross_v, self.cache.self_k, self.cache.self_v)
    expanded = DecoderCache(*(select_rows(a, expand) for a in arrays))
    return backend.step(self.tokens, self.mask, expanded, need_attention)


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


def assert_same_hypotheses(actual: list, expected: list) -> None:
    assert len(actual) == len(expected)
    for mine, theirs in zip(actual, expected, strict=True):
        assert [h.tokens for h in mine] == [h.tokens for h in theirs]
        for a, b in zip(mine, theirs, strict=True):
            assert a.score == b.score and a.log_prob == b.log_prob
            assert a.token_log_probs == b.token_log_probs
            assert np.array_equal(a.attention, b.attention)


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
    assert_same_hypotheses(after, before)
