"""The GNMT coverage penalty in beam and greedy search: exact scores against the scripted
decoder of tests/scripted_backend.py with real-looking attention, eq. 14 itself, and the
real model's scores against its own returned attention.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scripted_backend import (
    EOS,
    HEADS,
    LAYERS,
    VOCAB,
    A,
    ScriptedBackend,
    lp,
    penalty,
    plain,
    sources,
)

from seq2seq.core.backend import DecoderCache, StepOutput
from seq2seq.core.config import DecodeConfig, ModelConfig
from seq2seq.decoding.search import beam_search, coverage_penalty, greedy_search, hypothesis_score
from seq2seq.training.torch_backend import TorchBackend

# The alignment head's (layer 1, head 2) weights on source [8, 6, EOS] by prefix: the other
# heads look only at the source EOS, and the head itself gives it 0.3, so reading the wrong
# head or counting the EOS column changes every score below.
COVERAGE_ROWS = {(): [0.5, 0.5], (A,): [0.8, 0.2], (A, A): [0.1, 0.9]}


class AttendingBackend(ScriptedBackend):
    """Sentence 8's log-probs, with cross weights that are real attention for the coverage."""

    def step(
        self, tokens, src_mask, cache: DecoderCache, need_attention, top_k=0, need_self_attention=False
    ) -> StepOutput:
        out = super().step(tokens, src_mask, cache, need_attention, top_k, need_self_attention)
        assert need_attention  # the coverage penalty needs the weights even when the caller does not
        n, s = src_mask.shape
        weights = np.zeros((LAYERS, n, HEADS, s), dtype=np.float32)
        for row in range(n):
            eos = int(src_mask[row].sum()) - 1
            weights[:, row, :, eos] = 1.0
            prefix = tuple(int(t) for t in out.cache.self_k[0, row, 0, 1:, 0])
            weights[1, row, 2, :eos] = COVERAGE_ROWS.get(prefix, [0.5, 0.5]) + [0.0] * (eos - 2)
            weights[1, row, 2, eos] = 0.3
        out.cross_weights = weights
        return out


@pytest.mark.parametrize("step_shift", [False, True])
def test_coverage_penalty_changes_the_winner_with_exact_scores(step_shift: bool, monkeypatch):
    # Sentence 8, beam 2, alpha 0: [A] (.9*.34) beats [A, A] (.9*.33*.99) on log-prob alone.
    # The alignment head's coverage over source pieces 8 and 6 (EOS excluded):
    #   unshifted (rows of the steps that produced the tokens): [A] row () = (.5, .5);
    #       [A, A] rows (), (A,) = (1.3, .7)
    #   shifted (rows of the steps that read them): [A] row (A,) = (.8, .2);
    #       [A, A] rows (A,), (A, A) = (.9, 1.1)
    monkeypatch.setattr(
        AttendingBackend,
        "config",
        ModelConfig(
            vocab_size=VOCAB,
            d_model=6,
            n_heads=HEADS,
            decoder_layers=LAYERS,
            alignment_layer=1,
            alignment_heads=(2,),
            alignment_step_shift=step_shift,
        ),
    )
    short = (0.0 + lp(0.9)) + lp(0.34)
    long = ((0.0 + lp(0.9)) + lp(0.33)) + lp(0.99)
    short_coverage, long_coverage = ([0.8, 0.2], [0.9, 1.1]) if step_shift else ([0.5, 0.5], [1.3, 0.7])
    beta = 0.5
    short_score = short + beta * sum(math.log(c) for c in short_coverage)
    long_score = long + beta * math.log(min(long_coverage))
    assert long_score > short_score and short > long  # the penalty flips the ranking

    config = DecodeConfig(beam_size=2, n_best=2, length_penalty=0.0, coverage_penalty=beta, return_attention=False)
    [hypotheses] = beam_search(AttendingBackend(), *sources([8, 6, EOS]), config)
    assert [h.tokens for h in hypotheses] == [[A, A], [A]]
    assert [h.log_prob for h in hypotheses] == [long, short]
    assert [h.score for h in hypotheses] == pytest.approx([long_score, short_score], abs=1e-6)
    assert all(h.attention is None for h in hypotheses)  # read for the score, not returned
    [without] = beam_search(AttendingBackend(), *sources([8, 6, EOS]), plain(beam_size=2, n_best=2, length_penalty=0.0))
    assert [(h.tokens, h.score) for h in without] == [([A], short), ([A, A], long)]


def test_coverage_penalty_ignores_batch_padding_and_greedy_uses_it():
    config = DecodeConfig(beam_size=2, n_best=2, length_penalty=0.6, coverage_penalty=0.3)
    alone = beam_search(AttendingBackend(), *sources([8, 6, EOS]), config)
    batched = beam_search(AttendingBackend(), *sources([8, 6, EOS], [9, 5, 5, 4, 4, 4, EOS]), config)
    assert [(h.tokens, h.score) for h in batched[0]] == [(h.tokens, h.score) for h in alone[0]]
    [greedy] = greedy_search(AttendingBackend(), *sources([8, 6, EOS]), config)
    # Greedy takes [A] (.9, then EOS .34 > A .33) and scores it with both penalties.
    assert greedy.tokens == [A]
    assert greedy.score == pytest.approx(greedy.log_prob / penalty(2, 0.6) + 0.3 * 2 * math.log(0.5))


def test_hypothesis_score_is_gnmt_eq_14():
    # Wu et al. 2016, eq. 14: s = log P / lp + β Σ log(min(c, 1)); covered words cost nothing.
    assert coverage_penalty(np.array([1.0, 1.7, 3.0]), beta=0.4) == 0.0
    assert coverage_penalty(np.array([0.5, 1.2, 0.25]), beta=0.2) == pytest.approx(0.2 * math.log(0.125))
    assert coverage_penalty(np.array([0.0, 1.0]), beta=1.0) == pytest.approx(math.log(1e-3))  # floored
    config = DecodeConfig(length_penalty=0.6, coverage_penalty=0.2)
    score = hypothesis_score(-3.0, 6, config, np.array([0.5, 1.0]))
    assert score == pytest.approx(-3.0 / penalty(6, 0.6) + 0.2 * math.log(0.5))
    assert hypothesis_score(-3.0, 6, plain(length_penalty=0.6)) == -3.0 / penalty(6, 0.6)
    with pytest.raises(ValueError, match="coverage"):
        hypothesis_score(-3.0, 6, config)
    with pytest.raises(ValueError, match="coverage_penalty"):
        DecodeConfig(coverage_penalty=-0.1)


def test_real_model_coverage_scores_match_its_returned_attention(tiny_model):
    # Both backends share the search; on the torch model the score must be the one its own
    # attention gives (alignment head: the model's default layer, mean of all heads).
    config = DecodeConfig(beam_size=3, n_best=3, coverage_penalty=0.4, max_length_ratio=1.0, max_length_extra=3)
    sentences = [[5, 9, 7, 11, 6, 14, EOS], [13, 8, EOS]]
    model_config = tiny_model.config
    layer = model_config.alignment_layer % model_config.decoder_layers
    for sentence, hypotheses in zip(sentences, beam_search(TorchBackend(tiny_model), *sources(*sentences), config)):
        for h in hypotheses:
            rows = h.attention[layer].mean(axis=0, dtype=np.float64)[:-1, : len(sentence) - 1]  # unshifted, no EOS
            expected = hypothesis_score(h.log_prob, len(h.tokens) + 1, config, rows.sum(axis=0))
            assert h.score == pytest.approx(expected, abs=1e-5)
        assert [h.score for h in hypotheses] == sorted((h.score for h in hypotheses), reverse=True)
