"""Reranking the n-best (seq2seq/decoding/rerank.py) and the sentence chrF it uses
(seq2seq/analysis/chrf.py)."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
from toy import SENTENCES

from seq2seq.analysis.chrf import chrf
from seq2seq.core.config import DecodeConfig, RerankOptions
from seq2seq.decoding.rerank import (
    CHANNEL_BATCH_POSITIONS,
    channel_scores,
    channel_scores_batch,
    mbr_utilities,
    rerank_order,
    softmax,
)
from seq2seq.decoding.search import pad_batch
from seq2seq.loading import load_translator


def test_sentence_chrf_is_sacrebleus():
    metric = sacrebleu.metrics.CHRF()
    rng = random.Random(3)
    words = [
        "the",
        "a",
        "house",
        "is",
        "small",
        "big",
        "dog",
        "cat",
        "train",
        "late",
        ".",
        ",",
        "!",
        "went",
        "going",
        "gone",
        "Zug",
        "fährt",
    ]
    pairs = [("", ""), ("a", ""), ("", "a"), ("ab", "ab"), ("The train is late.", "The train is delayed.")]
    for _ in range(400):
        pairs.append(tuple(" ".join(rng.choices(words, k=rng.randint(0, 9))) for _ in range(2)))
    for hypothesis, reference in pairs:
        assert chrf(hypothesis, reference) == pytest.approx(metric.sentence_score(hypothesis, [reference]).score)


def test_mbr_chooses_the_consensus_and_not_the_outlier():
    candidates = ["The train is late.", "The train is delayed.", "The train has lost its delay.", "The train is late!"]
    utilities = mbr_utilities(candidates, np.full(4, 0.25))
    assert int(np.argmax(utilities)) in (0, 3) and int(np.argmin(utilities)) == 2
    # A candidate is not its own evidence: with all the weight on candidate 2, the others are
    # judged by their agreement with it, and it by the rest's renormalised weights.
    lopsided = mbr_utilities(candidates, np.array([0.0, 0.0, 1.0, 0.0]))
    assert lopsided[0] == pytest.approx(chrf(candidates[0], candidates[2]))
    assert lopsided[2] == 0.0


def test_rerank_order_by_mode():
    candidates = ["a b c", "a b d", "x y z"]
    scores = np.array([-0.1, -0.2, -0.3])
    channel = np.array([-5.0, -0.1, -0.2])
    assert rerank_order(candidates, scores, RerankOptions("none")).tolist() == [0, 1, 2]
    # The channel outweighs the search's small lead at λ 1: candidate 1 wins.
    assert rerank_order(candidates, scores, RerankOptions("channel", channel_weight=1.0), channel)[0] == 1
    assert rerank_order(candidates, scores, RerankOptions("channel", channel_weight=0.0), channel)[0] == 0
    assert rerank_order(candidates, scores, RerankOptions("mbr"))[-1] == 2  # the outlier last
    with pytest.raises(ValueError, match="needs the channel"):
        rerank_order(candidates, scores, RerankOptions("mbr+channel"))
    same = ["a", "a", "a"]  # ties keep the search's order
    assert rerank_order(same, scores, RerankOptions("mbr")).tolist() == [0, 1, 2]


def test_softmax_weights_follow_the_scores_and_the_temperature():
    weights = softmax(np.array([0.0, -1.0]), 1.0)
    assert weights.sum() == pytest.approx(1.0) and weights[0] / weights[1] == pytest.approx(np.e)
    assert softmax(np.array([0.0, -1.0]), 2.0)[1] > weights[1]  # warmer is flatter


def test_rerank_options_are_checked_at_their_limits():
    RerankOptions("mbr", candidates=2)
    RerankOptions("mbr", candidates=32)
    for bad in (1, 33):
        with pytest.raises(ValueError, match="2 to 32"):
            RerankOptions("mbr", candidates=bad)
    with pytest.raises(ValueError, match="unknown rerank mode"):
        RerankOptions("best")
    with pytest.raises(ValueError, match="temperature"):
        RerankOptions("mbr", temperature=0.0)


def test_channel_scores_are_the_reverse_models_log_prob_per_source_piece(tiny_bundle: Path):
    reverse = load_translator(tiny_bundle, threads=1, streams=1)
    backend, tokenizer = reverse.backend, reverse.tokenizer
    source, candidates = SENTENCES[0], [SENTENCES[1], SENTENCES[2]]
    found = channel_scores(backend, tokenizer, source, candidates)
    for candidate, value in zip(candidates, found):
        src_ids, src_mask = pad_batch([tokenizer.encode(candidate) + [backend.eos_id]], backend.pad_id)
        target = tokenizer.encode(source)
        forced = backend.teacher_force(src_ids, src_mask, np.array([target], dtype=np.int64))
        produced = [*target, backend.eos_id]
        expected = forced.log_probs[0, np.arange(len(produced)), produced].mean()
        assert value == pytest.approx(float(expected), abs=1e-5)


def test_a_reranked_translation_is_the_channel_adjusted_best_of_the_searchs_n_best(tiny_bundle: Path):
    translator = load_translator(tiny_bundle, threads=1, streams=1)
    translator.channel = load_translator(tiny_bundle, threads=1, streams=1)  # the toy reads both ways
    options = RerankOptions("channel", candidates=4, channel_weight=3.0)
    wide = DecodeConfig(beam_size=4, n_best=4, return_attention=False)
    for text in SENTENCES[:6]:
        listed = translator.translate_batch([text], wide)[0]
        candidates = [listed.text, *(a.text for a in listed.alternatives)]
        scores = np.array([listed.score, *(a.score for a in listed.alternatives)])
        reverse = channel_scores(translator.channel.backend, translator.channel.tokenizer, text, candidates)
        expected = candidates[int(np.argmax(scores + 3.0 * reverse))]
        reranked = translator.translate_batch([text], DecodeConfig(beam_size=2, rerank=options))[0]
        assert reranked.text == expected and reranked.alternatives == []
    # "none" is the plain search; n_best keeps that many of the reranked list.
    plain = DecodeConfig(beam_size=2, return_attention=False)
    assert [r.text for r in translator.translate_batch(SENTENCES, replace(plain, rerank=RerankOptions("none")))] == [
        r.text for r in translator.translate_batch(SENTENCES, plain)
    ]
    two = translator.translate_batch(SENTENCES[:2], DecodeConfig(beam_size=2, n_best=2, rerank=options))
    assert all(len(r.alternatives) == 1 for r in two)


def test_a_channel_mode_without_a_channel_model_or_a_watched_rerank_is_refused(tiny_bundle: Path):
    from seq2seq.decoding.translator import Watch

    translator = load_translator(tiny_bundle, threads=1, streams=1)
    with pytest.raises(ValueError, match="reverse direction"):
        translator.translate_batch(SENTENCES[:1], DecodeConfig(rerank=RerankOptions("channel")))
    assert translator.translate_batch(SENTENCES[:1], DecodeConfig(rerank=RerankOptions("mbr")))[0].text
    with pytest.raises(ValueError, match="greedy"):
        translator.translate_wanted(
            SENTENCES[:1], DecodeConfig(beam_size=1, rerank=RerankOptions("mbr")), watch=Watch(lambda step: None)
        )


def test_channel_scores_of_a_batch_are_each_sources_whatever_the_runs(tiny_bundle: Path):
    reverse = load_translator(tiny_bundle, threads=1, streams=1)
    sources = SENTENCES[:4]
    candidates = [SENTENCES[4:7], SENTENCES[7:8], SENTENCES[1:5], SENTENCES[2:4]]
    alone = [channel_scores(reverse.backend, reverse.tokenizer, s, c) for s, c in zip(sources, candidates)]
    for budget in (1, 40, CHANNEL_BATCH_POSITIONS, 8192):  # one row a run, a few rows, the default, one run
        batched = channel_scores_batch(reverse.backend, reverse.tokenizer, sources, candidates, budget=budget)
        for one, together in zip(alone, batched):
            np.testing.assert_allclose(together, one, atol=1e-5)
