"""Beam search against a scripted decoder with fixed probabilities (tests/scripted_backend.py).

Tests of the log-prob ranking turn the coverage penalty off (the scripted cross weights are
codes, not attention); the coverage-penalty tests, with real-looking weights, are in
test_coverage_penalty.py. Expected hypotheses and scores are worked out by hand below.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from scripted_backend import (
    BOS,
    EOS,
    HEADS,
    LAYERS,
    PAD,
    A,
    B,
    ScriptedBackend,
    expected_attention,
    lp,
    penalty,
    plain,
    sources,
)

from seq2seq.core.backend import DecoderCache, move_rows, select_rows
from seq2seq.decoding import candidates
from seq2seq.decoding.candidates import top_candidates
from seq2seq.decoding.search import _batch_order, beam_search, greedy_search
from seq2seq.training.model import key_padding_mask
from seq2seq.training.torch_backend import TorchBackend

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


def test_early_exit_stops_at_the_first_best_eos_where_the_default_waits_for_k():
    # Sentence 8, beam 2, alpha 1: at step 1 the best continuation is [A] + EOS. The default
    # waits for K = 2 finished hypotheses and [A, A] wins under the length penalty; early exit
    # (CTranslate2's rule) stops there with [A], and never runs the step that finds [A, A].
    stepped: list[int] = []

    class Counting(ScriptedBackend):
        def step(self, tokens, src_mask, cache, need_attention, top_k=0, need_self_attention=False):
            stepped.append(len(tokens))
            return super().step(tokens, src_mask, cache, need_attention, top_k, need_self_attention)

    [waited] = beam_search(Counting(), *sources([8, EOS]), plain(beam_size=2, length_penalty=1.0))
    steps_waited, stepped[:] = len(stepped), []
    [early] = beam_search(Counting(), *sources([8, EOS]), plain(beam_size=2, length_penalty=1.0, early_exit=True))
    assert [h.tokens for h in waited] == [[A, A]] and [h.tokens for h in early] == [[A]]
    assert len(stepped) < steps_waited
    # n_best = 2 needs two finished hypotheses before it may stop: then it finds [A, A] too.
    [both] = beam_search(
        ScriptedBackend(), *sources([8, EOS]), plain(beam_size=2, n_best=2, length_penalty=1.0, early_exit=True)
    )
    assert sorted(h.tokens for h in both) == [[A], [A, A]]


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


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("width", [40, candidates.FULL_SORT_WIDTH + 1, 200])  # sorted whole; partial selection
def test_top_candidates_equals_a_stable_full_sort(seed: int, width: int):
    rng = np.random.default_rng(seed)
    # Few distinct values, so ties straddle the cut-off; and -inf (banned or dead beams).
    candidates = rng.integers(-6, 0, size=(50, width)).astype(np.float64)
    candidates[rng.random(candidates.shape) < 0.3] = -np.inf
    candidates[0] = -np.inf
    candidates[1, :3] = 0.0
    for count in (1, 2, 6, 8, width - 1, width):
        expected = np.argsort(-candidates, axis=1, kind="stable")[:, :count]
        actual = top_candidates(candidates, count)
        values = np.take_along_axis(candidates, expected, axis=1)
        # Positions that are -inf are never used by the search; all others must be identical.
        assert np.array_equal(np.take_along_axis(candidates, actual, axis=1), values)
        assert np.array_equal(np.where(np.isfinite(values), actual, -1), np.where(np.isfinite(values), expected, -1))


def test_row_best_skips_banned_tokens_as_a_stable_sort_does():
    """`RowBest.of` keeps each row's W best tokens that are not banned and the best it leaves
    out, whether a row's TopK holds a banned token (skipped, the rest moved up in order) or,
    the common case it answers without sorting, none."""
    rng = np.random.default_rng(0)
    width, banned = 4, (0, 2)
    ids = np.stack([rng.permutation(np.arange(3, 40))[: width + 3] for _ in range(30)])
    ids[5, 0], ids[6, width], ids[7, [1, width + 2]], ids[8, [0, 1]] = 0, 2, (2, 0), (2, 0)
    values = -np.sort(rng.random(ids.shape).astype(np.float32), axis=1)
    for rows in (slice(None), slice(10, None)):  # some rows with banned tokens; none
        best = candidates.RowBest.of(values[rows], ids[rows], width, banned)
        allowed_first = np.argsort(np.isin(ids[rows], banned), axis=1, kind="stable")[:, : width + 1]
        assert np.array_equal(best.kept, np.take_along_axis(ids[rows], allowed_first, 1)[:, :width])
        assert np.array_equal(best.left_out, np.take_along_axis(values[rows], allowed_first, 1)[:, width])


@pytest.mark.parametrize("seed", range(4))
def test_ranking_from_each_rows_best_equals_ranking_all_candidates(seed: int):
    """`Candidates.rank` picks from each row's 2K best log-probs; it must give what ranking
    all K·V candidates of a sentence gives (`candidates.rank_all`), ties and -inf included."""
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
        ranked = candidates.Candidates.rank(scores, log_probs, k, eos_id=3)
        if k > 1 and 2 * k + 3 <= vocab:  # greedy takes the argmax, never a TopK
            # The same from a backend's TopK, which saw PAD (0) and BOS (2) before the search
            # banned them: here they are the best of every row.
            raw = log_probs.copy()
            raw[:, [0, 2]] = 0.0
            top_ids = np.argsort(-raw, axis=1, kind="stable")[:, : 2 * k + 3]
            row_best = candidates.RowBest.of(np.take_along_axis(raw, top_ids, 1), top_ids, 2 * k, (0, 2))
            assert not np.isin(row_best.kept, (0, 2)).any()  # skipped, so they cost no redo
            banned = log_probs.copy()
            banned[:, [0, 2]] = -np.inf
            from_top = candidates.Candidates.rank(scores, banned, k, eos_id=3, row_best=row_best)
            from_all = candidates.rank_all(scores, banned, k, np.arange(sentences))
            finite = np.isfinite(from_all[0])
            assert np.array_equal(from_top.scores, from_all[0])
            assert np.array_equal(np.where(finite, from_top.tokens, -1), np.where(finite, from_all[2], -1))
        sums, beams, tokens = candidates.rank_all(scores, log_probs, k, np.arange(sentences))
        if k == 1:
            # Greedy keeps only the best candidate (the one the search reads); its second is
            # left impossible.
            assert not ranked.possible[:, 1].any()
            ranked = candidates.Candidates(*(getattr(ranked, f.name)[:, :1] for f in dataclasses.fields(ranked)))
            sums, beams, tokens = sums[:, :1], beams[:, :1], tokens[:, :1]
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
        candidates.top_candidates,
        lambda candidates, count: np.argsort(-candidates, axis=1, kind="stable")[:, :count],
    ):
        monkeypatch.setattr(candidates, "top_candidates", select)
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


def test_a_sentence_no_longer_wanted_leaves_the_batch_at_the_next_step():
    """`wanted` (the service: a client that hung up) is asked after every step: sentence 9,
    which only its length limit would end (25 steps), leaves after the step where it stopped
    being wanted, and the search ends with sentence 7, whose hypotheses are those it has
    alone."""
    config = plain(beam_size=2, n_best=2, length_penalty=0.6, max_length_ratio=1.0, max_length_extra=20)
    steps: list[int] = []

    class Counting(ScriptedBackend):
        def step(self, *args, **kwargs):
            steps.append(len(steps))
            return super().step(*args, **kwargs)

    batch = sources([7, 6, EOS], [9, 5, 5, EOS])
    _, alone_nine = beam_search(Counting(), *batch, config)
    assert len(steps) == 25 and len(alone_nine[0].tokens) == 24  # unwatched: to the limit (4 + 20 tokens)
    steps.clear()
    seven, nine = beam_search(Counting(), *batch, config, wanted=lambda: np.array([True, len(steps) < 2]))
    assert len(steps) == 3  # 9 left after step 1; 7 finished at step 2
    assert nine == [] and [h.tokens for h in seven] == [[B, A], [A, A]]
    [seven_alone] = beam_search(ScriptedBackend(), *sources([7, 6, EOS]), config)
    assert [(h.tokens, h.score) for h in seven] == [(h.tokens, h.score) for h in seven_alone]


@pytest.mark.parametrize("beam", [1, 2])
def test_a_finished_sentence_hands_its_place_to_the_last_and_the_cache_is_not_copied(beam: int):
    """When sentences finish, the last ones in the batch take their places (`_batch_order`)
    and only their rows move, within the search's own arrays (`move_rows`): the cross K/V
    of every later step are the buffer of the first, never copied out. Each sentence still
    gets exactly what it gets alone (the scripted backend reads each row's sentence from its
    cross K/V and its prefix from its self K/V, so a row moved wrongly would show)."""

    class Recording(ScriptedBackend):
        def __init__(self) -> None:
            super().__init__()
            self.cross: list[np.ndarray] = []

        def step(self, tokens, src_mask, cache, need_attention, top_k=0, need_self_attention=False):
            self.cross.append(cache.cross_k)
            return super().step(tokens, src_mask, cache, need_attention, top_k, need_self_attention)

    # Sentences 7 and 8 end after a few tokens; both 9s run to their length limit.
    sentences = [[7, 6, EOS], [9, 5, 5, 4, EOS], [8, EOS], [9, 4, 4, 4, EOS]]
    config = plain(beam_size=beam, n_best=beam, max_length_ratio=1.0, max_length_extra=2)
    backend = Recording()
    batched = beam_search(backend, *sources(*sentences), config)
    for sentence, together in zip(sentences, batched):
        [alone] = beam_search(ScriptedBackend(), *sources(sentence), config)
        assert [(h.tokens, h.score) for h in together] == [(h.tokens, h.score) for h in alone]
    rows = [len(cross[0]) for cross in backend.cross]
    assert rows[1] == 4 * beam and rows[-1] == 2 * beam  # two sentences left the batch
    first = backend.cross[0 if beam == 1 else 1]  # beam > 1: the expanded copy of step 1
    assert all(np.shares_memory(cross, first) for cross in backend.cross[2:])
    # The last rows hold the two 9s, whichever place they now have.
    assert backend.cross[-1][0, :, 0, 0, 0].tolist() == [9.0] * (2 * beam)


def test_move_rows_equals_select_rows_and_copies_only_what_moves():
    """`move_rows` gives what `select_rows` gives, as a view of the array it was handed,
    with each layer's rows contiguous; a swap (each row read and overwritten) comes out right."""
    layers, rows = 2, 6
    states = np.arange(layers * rows * 3, dtype=np.float32).reshape(layers, rows, 1, 3, 1)
    for picked in ([0, 5, 2, 3], [1, 0, 2, 3, 4, 5], [0, 1, 2]):
        given = states.copy()
        moved = move_rows(given, np.array(picked))
        assert np.array_equal(moved, select_rows(states, np.array(picked)))
        assert np.shares_memory(moved, given)
        assert all(moved[layer].flags.c_contiguous for layer in range(layers))
    everything = move_rows(states.copy(), np.array([5, 4, 3, 2, 1, 0]))  # most rows move: one take
    assert np.array_equal(everything, states[:, ::-1])


def test_batch_order_fills_each_gap_from_the_end():
    keep = np.array([False, True, True, False, True, True])
    assert _batch_order(keep).tolist() == [4, 1, 2, 5]
    assert _batch_order(np.array([True, False, True])).tolist() == [0, 2]
    assert _batch_order(np.array([False, False, True])).tolist() == [2]


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
