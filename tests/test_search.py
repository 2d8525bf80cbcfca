"""Beam search against a scripted decoder with fixed probabilities (fairseq's approach).

Tests of the log-prob ranking turn the coverage penalty off (the scripted cross weights are
codes, not attention); the coverage-penalty tests below use real-looking weights.

The scripted backend reads each row's prefix back from the KV cache it is handed, so a
search that reorders the cache wrongly gets the wrong probabilities, and its cross
weights encode (prefix, layer, head, source position), so a wrongly reordered alignment
buffer is caught too. Expected hypotheses and scores are worked out by hand below.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from seq2seq import search
from seq2seq.backend import DecoderCache, StepOutput
from seq2seq.config import DecodeConfig, ModelConfig
from seq2seq.model import key_padding_mask
from seq2seq.search import (
    beam_search,
    coverage_penalty,
    greedy_search,
    hypothesis_score,
    pad_batch,
    top_candidates,
)
from seq2seq.torch_backend import TorchBackend

PAD, UNK, BOS, EOS, A, B = 0, 1, 2, 3, 4, 5
VOCAB = 6
LAYERS, HEADS = 2, 3


def plain(**settings) -> DecodeConfig:
    """A decode config without the coverage penalty: ranking by (length-penalised) log-prob."""
    return DecodeConfig(**{"coverage_penalty": 0.0, **settings})


def lp(p: float) -> float:
    """The log-prob the backend reports for probability p (float32, as a real backend would)."""
    return float(np.float32(np.log(p)))


# Per sentence (its first source token): prefix -> {token: probability}. Unlisted prefixes
# get DEFAULT. UNK never has probability; PAD and BOS are banned by the search itself.
DEFAULT = {EOS: 0.1, A: 0.45, B: 0.45}
TABLES = {
    # Sentence 7, beam 2 (worked through in test_beam_search_exact_hypotheses_and_scores):
    7: {
        (): {A: 0.6, B: 0.3, EOS: 0.1},
        (A,): {EOS: 0.3, A: 0.36, B: 0.34},
        (B,): {EOS: 0.05, A: 0.9, B: 0.05},
        (A, A): {EOS: 0.5, A: 0.25, B: 0.25},
        (B, A): {EOS: 0.9, A: 0.05, B: 0.05},
    },
    # Sentence 8: a short and a long hypothesis whose ranking flips with the length penalty.
    8: {(): {A: 0.9, B: 0.07, EOS: 0.03}, (A,): {EOS: 0.34, A: 0.33, B: 0.33}, (A, A): {EOS: 0.99, A: 0.005, B: 0.005}},
    # Sentence 9: EOS almost never; only the length limit ends it.
    9: {(): {A: 0.7, B: 0.29, EOS: 0.01}},
    # Sentence 10, beam 2: at step 1 the EOS after B is ranked third (K = 2), behind a
    # beam that goes on to the best hypothesis (test_eos_ranked_below_k_does_not_finish).
    10: {
        (): {A: 0.6, B: 0.4},
        (A,): {EOS: 0.5, A: 0.15, B: 0.15},
        (B,): {EOS: 0.3, A: 0.05, B: 0.65},
        (B, B): {EOS: 0.99, A: 0.005, B: 0.005},
    },
}
NO_EOS = {EOS: 0.01, A: 0.6, B: 0.39}


def prefix_code(prefix: tuple[int, ...]) -> int:
    """A distinct small integer per prefix (base 6 with a leading 1): exact in float32."""
    code = 1
    for token in prefix:
        code = code * VOCAB + token
    return code


def expected_attention(prefix: tuple[int, ...], layer: int, head: int, position: int) -> float:
    return prefix_code(prefix) * 1000 + layer * 100 + head * 10 + position


class ScriptedBackend:
    """A fake model: log-probs from TABLES, prefix kept in the 'KV cache' it returns."""

    pad_id, bos_id, eos_id = PAD, BOS, EOS
    config = ModelConfig(
        vocab_size=VOCAB, d_model=6, n_heads=HEADS, decoder_layers=LAYERS, alignment_layer=1, alignment_heads=(2,)
    )

    def __init__(self) -> None:
        self.calls = 0

    def encode(self, src_ids: np.ndarray, src_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # Cross "keys" carry the source ids, so each row's step knows its sentence.
        b, s = src_ids.shape
        cross = np.broadcast_to(src_ids[None, :, None, :, None], (LAYERS, b, HEADS, s, 1)).astype(np.float32)
        return cross.copy(), cross.copy()

    def step(self, tokens, src_mask, cache: DecoderCache, need_attention) -> StepOutput:
        self.calls += 1
        n, s = tokens.shape[0], src_mask.shape[1]
        new = np.broadcast_to(tokens[None, :, None, :, None], (LAYERS, n, HEADS, 1, 1)).astype(np.float32)
        history = np.concatenate([cache.self_k, new], axis=3)  # (L, N, H, P+1, 1)
        log_probs = np.full((n, VOCAB), -np.inf, dtype=np.float32)
        weights = np.zeros((LAYERS, n, HEADS, s), dtype=np.float32)
        for row in range(n):
            generated = [int(t) for t in history[0, row, 0, :, 0]]
            assert generated[0] == BOS
            prefix = tuple(generated[1:])
            sentence = int(cache.cross_k[0, row, 0, 0, 0])
            table = TABLES[sentence].get(prefix, NO_EOS if sentence == 9 else DEFAULT)
            for token, p in table.items():
                log_probs[row, token] = lp(p)
            for layer in range(LAYERS):
                for head in range(HEADS):
                    weights[layer, row, head] = [expected_attention(prefix, layer, head, j) for j in range(s)]
            weights[:, row] *= src_mask[row]  # padding gets no attention, as in the real model
        return StepOutput(
            log_probs,
            DecoderCache(cache.cross_k, cache.cross_v, history, history.copy()),
            weights if need_attention else None,
        )


def sources(*sentences: list[int]) -> tuple[np.ndarray, np.ndarray]:
    return pad_batch([list(s) for s in sentences], PAD)


def penalty(length: int, alpha: float) -> float:
    return ((5 + length) / 6) ** alpha


# --------------------------------------------------------------------------- exact results


def test_beam_search_exact_hypotheses_and_scores():
    # Beam 2 on sentence 7, candidates ranked by total log-prob (2K = 4 examined per step):
    # step 0: A (log .6), B (log .3)                                  -> beams A, B
    # step 1: BA (.3*.9) > AA (.6*.36) > AB (.6*.34) > A+EOS (.6*.3)  -> beams BA, AA
    # step 2: BA+EOS (.3*.9*.9) > AA+EOS (.6*.36*.5) > AAA, AAB       -> two finished: stop
    alpha = 0.6
    config = plain(beam_size=2, n_best=2, length_penalty=alpha)
    [hypotheses] = beam_search(ScriptedBackend(), *sources([7, 6, EOS]), config)
    best_log_prob = ((0.0 + lp(0.3)) + lp(0.9)) + lp(0.9)
    second_log_prob = ((0.0 + lp(0.6)) + lp(0.36)) + lp(0.5)
    assert [h.tokens for h in hypotheses] == [[B, A], [A, A]]
    assert [h.log_prob for h in hypotheses] == [best_log_prob, second_log_prob]
    assert [h.score for h in hypotheses] == [best_log_prob / penalty(3, alpha), second_log_prob / penalty(3, alpha)]
    assert hypotheses[0].token_log_probs == [lp(0.3), lp(0.9), lp(0.9)]
    assert hypotheses[1].token_log_probs == [lp(0.6), lp(0.36), lp(0.5)]


def test_greedy_is_beam_one_and_misses_what_beam_two_finds():
    src = sources([7, 6, EOS])
    [greedy] = greedy_search(ScriptedBackend(), *src, plain(length_penalty=0.6))
    # Argmax at each step: A (.6), then A (.36 > .34), then EOS (.5).
    assert greedy.tokens == [A, A]
    assert greedy.log_prob == ((0.0 + lp(0.6)) + lp(0.36)) + lp(0.5)
    [[beam_one]] = beam_search(ScriptedBackend(), *src, plain(beam_size=1, n_best=1, length_penalty=0.6))
    assert (beam_one.tokens, beam_one.score) == (greedy.tokens, greedy.score)
    [[beam_two]] = beam_search(ScriptedBackend(), *src, plain(beam_size=2, n_best=1))
    assert beam_two.tokens == [B, A] and beam_two.log_prob > greedy.log_prob


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_n_best_is_ordered_by_length_normalised_score(alpha: float):
    # Sentence 8, beam 2: step 1 finishes [A] (.9*.34), step 2 finishes [A, A] (.9*.33*.99).
    short = (0.0 + lp(0.9)) + lp(0.34)
    long = ((0.0 + lp(0.9)) + lp(0.33)) + lp(0.99)
    short_score, long_score = short / penalty(2, alpha), long / penalty(3, alpha)
    assert (short_score > long_score) == (alpha == 0.0)  # the penalty flips the ranking
    [hypotheses] = beam_search(
        ScriptedBackend(), *sources([8, EOS]), plain(beam_size=2, n_best=2, length_penalty=alpha)
    )
    expected = sorted([([A], short, short_score), ([A, A], long, long_score)], key=lambda h: -h[2])
    assert [(h.tokens, h.log_prob, h.score) for h in hypotheses] == expected
    assert hypotheses[0].score >= hypotheses[1].score


def test_length_limit_forces_eos_with_its_real_log_prob():
    config = plain(beam_size=2, n_best=2, length_penalty=0.0, max_length_ratio=0.0, max_length_extra=3)
    [hypotheses] = beam_search(ScriptedBackend(), *sources([9, EOS]), config)
    assert len(hypotheses) == 2
    for h in hypotheses:
        assert len(h.tokens) == 3 and EOS not in h.tokens
        assert h.token_log_probs[-1] == lp(0.01)  # the model's own EOS log-prob, not renormalised
        assert h.log_prob == sum(h.token_log_probs)
    assert hypotheses[0].tokens == [A, A, A]
    assert hypotheses[0].log_prob == (((0.0 + lp(0.7)) + lp(0.6)) + lp(0.6)) + lp(0.01)


def test_eos_ranked_below_k_does_not_finish():
    # Beam 2 on sentence 10, by total probability:
    # step 0: A (.6), B (.4)                                          -> beams A, B
    # step 1: A+EOS (.3) > BB (.26) > B+EOS (.12) > AA (.09) = AB     -> [A] finishes; beams BB, AA
    #         B+EOS ranks third (K = 2): two open beams beat it. Taking it as the second
    #         finished hypothesis would end the search here, with [A] as the best.
    # step 2: BB+EOS (.4*.65*.99) ranks first                         -> [B, B] finishes; two: stop
    # With alpha = 1, [B, B] (log .2574 / (8/6)) beats [A] (log .3 / (7/6)).
    config = plain(beam_size=2, n_best=2, length_penalty=1.0)
    [hypotheses] = beam_search(ScriptedBackend(), *sources([10, EOS]), config)
    a_eos = (0.0 + lp(0.6)) + lp(0.5)
    b_b_eos = ((0.0 + lp(0.4)) + lp(0.65)) + lp(0.99)
    assert [(h.tokens, h.log_prob) for h in hypotheses] == [([B, B], b_b_eos), ([A], a_eos)]
    assert hypotheses[0].score == b_b_eos / penalty(3, 1.0) > hypotheses[1].score == a_eos / penalty(2, 1.0)


# --------------------------------------------------------------------------- coverage penalty


# The alignment head's (layer 1, head 2) weights on source [8, 6, EOS] by prefix: the other
# heads look only at the source EOS, and the head itself gives it 0.3, so reading the wrong
# head or counting the EOS column changes every score below.
COVERAGE_ROWS = {(): [0.5, 0.5], (A,): [0.8, 0.2], (A, A): [0.1, 0.9]}


class AttendingBackend(ScriptedBackend):
    """Sentence 8's log-probs, with cross weights that are real attention for the coverage."""

    def step(self, tokens, src_mask, cache: DecoderCache, need_attention) -> StepOutput:
        out = super().step(tokens, src_mask, cache, need_attention)
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


@pytest.mark.parametrize("seed", range(4))
def test_top_candidates_equals_a_stable_full_sort(seed: int):
    rng = np.random.default_rng(seed)
    # Few distinct values, so ties straddle the cut-off; and -inf (banned or dead beams).
    candidates = rng.integers(-6, 0, size=(50, 40)).astype(np.float64)
    candidates[rng.random(candidates.shape) < 0.3] = -np.inf
    candidates[0] = -np.inf
    candidates[1, :3] = 0.0
    for count in (1, 2, 6, 8, 39, 40):
        expected = np.argsort(-candidates, axis=1, kind="stable")[:, :count]
        actual = top_candidates(candidates, count)
        values = np.take_along_axis(candidates, expected, axis=1)
        # Positions that are -inf are never used by the search; all others must be identical.
        assert np.array_equal(np.take_along_axis(candidates, actual, axis=1), values)
        assert np.array_equal(np.where(np.isfinite(values), actual, -1), np.where(np.isfinite(values), expected, -1))


@pytest.mark.parametrize("seed", range(4))
def test_ranking_from_each_rows_best_equals_ranking_all_candidates(seed: int):
    """`_Candidates.rank` picks from each row's 2K best log-probs; it must give what ranking
    all K·V candidates of a sentence gives (`search._rank_all`), ties and -inf included."""
    rng = np.random.default_rng(seed)
    for k, vocab in ((1, 30), (2, 30), (4, 50), (3, 7)):
        sentences = 40
        # Few distinct values, so ties straddle every row's cut-off; dead beams and banned tokens.
        log_probs = rng.integers(-8, 0, size=(sentences * k, vocab)).astype(np.float32)
        log_probs[rng.random(log_probs.shape) < 0.2] = -np.inf
        log_probs[:k, :] = -np.inf
        log_probs[:k, 3] = -1.0  # only EOS left: fewer than 2K finite
        scores = rng.integers(-5, 0, size=sentences * k).astype(np.float64)
        scores[rng.random(scores.shape) < 0.1] = -np.inf
        ranked = search._Candidates.rank(scores, log_probs, k, eos_id=3)
        sums, beams, tokens = search._rank_all(scores, log_probs, k, np.arange(sentences))
        finite = np.isfinite(sums)
        assert np.array_equal(ranked.scores, sums)
        assert np.array_equal(
            np.where(finite, ranked.rows, -1), np.where(finite, beams + (np.arange(sentences) * k)[:, None], -1)
        )
        assert np.array_equal(np.where(finite, ranked.tokens, -1), np.where(finite, tokens, -1))


def test_beam_search_with_partial_top_k_equals_full_sort(tiny_model, monkeypatch):
    sentences = [[5, 9, 7, 11, 6, 14, EOS], [13, 8, EOS], [21, 4, 17, 10, EOS], [9, 7, 5, 5, 5, 5, 5, 5, EOS]]
    runs = []
    for select in (
        search.top_candidates,
        lambda candidates, count: np.argsort(-candidates, axis=1, kind="stable")[:, :count],
    ):
        monkeypatch.setattr(search, "top_candidates", select)
        for config in (
            plain(beam_size=1),
            plain(beam_size=4, n_best=4),
            plain(beam_size=2, n_best=2, length_penalty=1.0),
        ):
            for backend_hypotheses in (
                beam_search(TorchBackend(tiny_model), *sources(*sentences), config),
                beam_search(ScriptedBackend(), *sources([7, 6, EOS], [10, EOS], [9, EOS]), config),
            ):
                runs.append(
                    [
                        [(h.tokens, h.score, h.token_log_probs, h.attention.tobytes()) for h in hyps]
                        for hyps in backend_hypotheses
                    ]
                )
    half = len(runs) // 2
    assert runs[:half] == runs[half:]


def test_cache_reorder_moves_self_kv_and_leaves_cross_kv_until_rows_leave():
    """`DecoderCache.reorder`: the self K/V follow every reorder; the cross K/V, the same for
    the beams of one sentence, are copied only when the row count changes; nothing is
    copied when no row moves. The cache is a value: the original is never changed."""
    layers, rows, heads, source, past = 2, 4, 1, 3, 2  # 2 sentences x beam 2
    cross = np.repeat(np.arange(2.0), 2)[None, :, None, None, None] * np.ones((layers, rows, heads, source, 1))
    history = np.arange(rows, dtype=np.float32)[None, :, None, None, None] * np.ones((layers, rows, heads, past, 1))
    cache = DecoderCache(cross, cross.copy(), history, history.copy())
    assert cache.past_length == past

    same = cache.reorder(np.arange(rows))
    assert same.self_k is cache.self_k and same.cross_k is cache.cross_k
    swapped = cache.reorder(np.array([1, 1, 2, 3]))  # beam 1 of sentence 0 takes over
    assert swapped.cross_k is cache.cross_k
    assert swapped.self_k[0, :, 0, 0, 0].tolist() == [1, 1, 2, 3]
    left = cache.reorder(np.array([3, 2]))  # sentence 0 finished
    assert left.cross_k.shape[1] == 2 and left.cross_k[0, :, 0, 0, 0].tolist() == [1, 1]
    assert left.self_v[0, :, 0, 0, 0].tolist() == [3, 2]
    assert cache.self_k[0, :, 0, 0, 0].tolist() == [0, 1, 2, 3]  # unchanged
    start = DecoderCache.start(cross, cross)
    assert start.past_length == 0 and start.self_k.shape == (layers, rows, heads, 0, 1)


def test_pad_and_bos_are_never_generated():
    class LovesPad(ScriptedBackend):
        def step(self, *args, **kwargs):
            out = super().step(*args, **kwargs)
            out.log_probs[:, PAD] = 0.0
            out.log_probs[:, BOS] = -0.01
            return out

    [hypotheses] = beam_search(LovesPad(), *sources([7, 6, EOS]), plain(beam_size=2, n_best=2))
    assert [h.tokens for h in hypotheses] == [[B, A], [A, A]]


# --------------------------------------------------------------------------- batches and attention


def test_batch_equals_each_sentence_alone():
    sentences = [[9, 5, 5, 4, 4, EOS], [7, 6, EOS], [8, EOS]]  # different lengths: padding in the batch
    config = plain(beam_size=2, n_best=2, length_penalty=0.6, max_length_ratio=0.5, max_length_extra=2)
    batched = beam_search(ScriptedBackend(), *sources(*sentences), config)
    for sentence, together in zip(sentences, batched):
        [alone] = beam_search(ScriptedBackend(), *sources(sentence), config)
        assert [(h.tokens, h.score, h.token_log_probs) for h in together] == [
            (h.tokens, h.score, h.token_log_probs) for h in alone
        ]
        for h_together, h_alone in zip(together, alone):
            assert np.array_equal(h_together.attention[..., : len(sentence)], h_alone.attention)
            assert (h_together.attention[..., len(sentence) :] == 0).all()
    # Sentence 9's limit is 0.5 * 6 + 2 = 5 tokens; the others end early on their own.
    assert [len(h.tokens) for h in batched[0]] == [5, 5]


def test_each_hypothesis_carries_its_own_attention_rows():
    src = [7, 6, EOS]
    [hypotheses] = beam_search(ScriptedBackend(), *sources(src), plain(beam_size=2, n_best=2))
    # [B, A] descends from beam 1 at step 1 while [A, A] descends from beam 0: the rows
    # cross over, so a buffer that is not reordered with the beams gives the wrong maps.
    for h in hypotheses:
        assert h.attention.shape == (LAYERS, HEADS, len(h.tokens) + 1, len(src))
        assert h.attention.dtype == np.float32
        for i in range(len(h.tokens) + 1):  # row i: the step that produced token i (last: EOS)
            prefix = tuple(h.tokens[:i])
            expected = np.array(
                [
                    [[expected_attention(prefix, layer, head, j) for j in range(len(src))] for head in range(HEADS)]
                    for layer in range(LAYERS)
                ],
                dtype=np.float32,
            )
            assert np.array_equal(h.attention[:, :, i], expected), (h.tokens, i)


def test_no_attention_when_not_asked_for():
    [hypotheses] = beam_search(
        ScriptedBackend(), *sources([7, 6, EOS]), plain(beam_size=2, n_best=2, return_attention=False)
    )
    assert all(h.attention is None for h in hypotheses)


# --------------------------------------------------------------------------- the real model


def manual_greedy(model, src: list[int], limit: int) -> list[int]:
    """Argmax decoding with full (uncached) decoder calls, independent of the search code:
    at most `limit` tokens, then EOS, as the search's length limit does."""
    src_ids = torch.tensor([src])
    mask = key_padding_mask(src_ids, PAD)
    generated = [BOS]
    with torch.no_grad():
        encoded = model.encode(src_ids, mask)
        for _ in range(limit):
            log_probs = model.decode(torch.tensor([generated]), encoded.cross_k, encoded.cross_v, mask).log_probs[0, -1]
            log_probs[[PAD, BOS]] = -math.inf
            generated.append(int(log_probs.argmax()))
            if generated[-1] == EOS:
                return generated[1:]
    return generated[1:] + [EOS]


def test_torch_model_greedy_matches_manual_decoding_and_batches_match(tiny_model):
    backend = TorchBackend(tiny_model)
    sentences = [[5, 9, 7, 11, 6, 14, EOS], [13, 8, EOS], [21, 4, 17, 10, EOS]]
    config = plain(beam_size=1, max_length_ratio=1.0, max_length_extra=3)
    greedy = greedy_search(backend, *sources(*sentences), config)
    for sentence, hypothesis in zip(sentences, greedy):
        assert hypothesis.tokens + [EOS] == manual_greedy(tiny_model, sentence, limit=len(sentence) + 3)

    beam = plain(beam_size=3, n_best=3, length_penalty=0.6, max_length_ratio=1.0, max_length_extra=3)
    batched = beam_search(backend, *sources(*sentences), beam)
    for sentence, together in zip(sentences, batched):
        [alone] = beam_search(backend, *sources(sentence), beam)
        assert [h.tokens for h in together] == [h.tokens for h in alone]
        for h_together, h_alone in zip(together, alone):
            assert h_together.score == pytest.approx(h_alone.score, abs=1e-5)
            assert h_together.attention.shape == (2, 4, len(h_together.tokens) + 1, 7)
            assert np.abs(h_together.attention[..., : len(sentence)] - h_alone.attention).max() < 1e-5
            assert (h_together.attention[..., len(sentence) :] == 0).all()
