"""Source occlusion (seq2seq/analysis/occlusion.py): the occluded sources, the batched teacher-forced
log-probs against one run per occluded source (tiny exported model), and the untranslated
flags that read them, through the translator and forced alignment (the shipped model)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from toy import LEXICON, SENTENCES

from seq2seq.analysis.occlusion import occluded_log_probs, occluded_source, occlusion_features, word_pieces
from seq2seq.analysis.quality import Detector, Evidence, QualityThresholds, assess_alignment
from seq2seq.core.alignment import align
from seq2seq.core.config import AlignmentOptions, DecodeConfig
from seq2seq.decoding.forced import align_pairs, forced_attention, teacher_forced_attention
from seq2seq.decoding.translator import Translator
from seq2seq.loading import load_translator

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "models" / "de-en"
UNK = 1


def test_occluded_sources_remove_replace_or_mask_the_pieces() -> None:
    ids = [10, 11, 12, 13, 3]  # ... EOS
    assert occluded_source(ids, [1, 2], "remove", UNK) == ([10, 13, 3], [True] * 3)
    assert occluded_source(ids, [1, 2], "unk", UNK) == ([10, UNK, UNK, 13, 3], [True] * 5)
    assert occluded_source(ids, [1, 2], "mask", UNK) == (ids, [True, False, False, True, True])
    with pytest.raises(ValueError, match="remove"):
        occluded_source(ids, [1], "drop", UNK)


def test_occlusion_features_sum_the_drops_signed_and_positive() -> None:
    base = np.log([0.5, 0.5, 0.9])  # (T+1,)
    occluded = np.log([[0.05, 0.5, 0.9], [0.5, 0.8, 0.9]])  # word 0 mattered, word 1 hindered
    features = occlusion_features(base, occluded)
    assert features["occlusion_drop"] == pytest.approx([np.log(10), np.log(0.5 / 0.8)])
    assert features["log_occlusion_drop_positive"] == pytest.approx(np.log([np.log(10) + 0.1, 0.1]))
    not_occluded = occlusion_features(base, np.full((1, 3), np.nan))  # punctuation: dropped nothing
    assert not_occluded["occlusion_drop"] == [0.0] and not_occluded["log_occlusion_drop_positive"] == [np.log(0.1)]


@pytest.fixture(scope="module")
def tiny(tiny_bundle: Path) -> Translator:
    return load_translator(tiny_bundle, "onnx", threads=1)


@pytest.mark.parametrize("mode", ["remove", "unk"])
def test_batched_occlusion_equals_one_teacher_forced_run_per_occluded_source(tiny: Translator, mode: str) -> None:
    pairs = [(s, " ".join(LEXICON.get(w, w) for w in s.split())) for s in SENTENCES[:3]]
    prepared = forced_attention(tiny, pairs)
    occlusions = []
    for (source, target), (attention, source_pieces, target_pieces, *_) in zip(pairs, prepared):
        maps = align(attention, source, source_pieces, target, target_pieces, tiny.own_source)
        groups = word_pieces(maps)
        assert [not g for g in groups] == [w == "." for w in source.split()]  # punctuation is not occluded
        source_ids = tiny.tokenizer.encode(source) + [tiny.backend.eos_id]
        occlusions.append((source_ids, tiny.tokenizer.encode(target), groups))
    # A small budget: the rows of one pair land in several batches, beside other pairs' rows.
    batched = occluded_log_probs(tiny.backend, occlusions, mode, max_batch_tokens=40)
    for (source_ids, target_ids, groups), got in zip(occlusions, batched):
        assert got.shape == (len(groups), len(target_ids) + 1)
        for word, pieces in enumerate(groups):
            if not pieces:
                assert np.isnan(got[word]).all()
                continue
            ids, _ = occluded_source(source_ids, pieces, mode, UNK)
            (_, expected), *_ = teacher_forced_attention(tiny.backend, [ids], [target_ids])
            np.testing.assert_allclose(got[word], expected, atol=1e-4)
        occluded = got[[bool(pieces) for pieces in groups]]
        assert not np.allclose(occluded, occluded[:1])  # each row occluded another word


# --------------------------------------------------------------------------- the shipped model

# Flag a word when taking it out of the source makes the target *more* likely: the single
# rule the benchmark fits (export/quality_signals.py, "occlusion drop": drop < -0.25).
OCCLUSION_ONLY = Detector(("occlusion_drop",), (-1.0,), 0.0, 0.25)


@pytest.fixture(scope="module")
def shipped() -> Translator:
    return load_translator(SHIPPED)


def test_forced_alignment_flags_from_occlusion_what_the_translation_left_out(shipped: Translator) -> None:
    pairs = [
        ("Das Haus ist klein.", "The house is small."),
        ("Ich habe heute keine Zeit.", "I have no time."),
        ("Ich habe heute keine Zeit.", "I have no time today."),
        ("Der Mann kauft ein rotes Auto.", "The man buys a car."),
    ]
    translator = _with_detector(shipped, OCCLUSION_ONLY)
    flagged = [[r.word.source_tokens[i].text for i in r.quality.untranslated] for r in align_pairs(translator, pairs)]
    assert flagged == [[], ["heute"], [], ["rotes"]]


def test_the_translator_runs_the_occlusion_only_for_a_detector_that_reads_it(
    shipped: Translator, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = DecodeConfig(n_best=2, alignment=AlignmentOptions())
    translator = _with_detector(shipped, OCCLUSION_ONLY)
    result = translator.translate("Ich habe heute keine Zeit.", config)
    for hypothesis in [result, *result.alternatives]:  # the same as the quality from its parts
        occluded = translator.occluded([hypothesis])[0]
        assert occluded.shape == (5 + 1, len(hypothesis.target_ids) + 1)  # 6 words with the "."
        evidence = Evidence(hypothesis.attention, np.asarray(hypothesis.token_log_probs), shipped.own_source, occluded)
        assert hypothesis.quality == assess_alignment(
            hypothesis.alignment, hypothesis.mean_log_prob, translator.quality, evidence
        )

    # A quality.json without occlusion features (every file written before them) costs no occlusion pass.
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("occlusion run for a detector that does not read it")

    monkeypatch.setattr("seq2seq.decoding.translator.occluded_log_probs", refuse)
    monkeypatch.setattr("seq2seq.decoding.forced.occluded_log_probs", refuse)
    old = _with_detector(shipped, Detector(("log_coverage",), (-1.0,), -1.0, 0.0))
    assert not old.quality.needs_occlusion
    assert old.translate("Ich habe heute keine Zeit.", config).quality is not None
    assert align_pairs(old, [("Ich habe heute keine Zeit.", "I have no time.")])[0].quality is not None


def _with_detector(translator: Translator, detector: Detector) -> Translator:
    """The translator over the same backend with `detector` as its untranslated flag."""
    quality = dataclasses.replace(
        translator.quality if translator.quality else QualityThresholds(), untranslated=detector
    )
    return Translator(translator.backend, translator.tokenizer, quality=quality)
