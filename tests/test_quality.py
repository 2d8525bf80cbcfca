"""Quality signals (seq2seq/analysis/quality.py), the planted damage they are measured on
(export/planted.py) and the script that measures them and chooses a model's detectors and
thresholds (export/quality_signals.py), on hand-made maps and on a tiny exported model."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from toy import SENTENCES, toy_pairs, train_tiny

from export import planted, quality_signals
from export.exporter import export_model
from seq2seq.analysis.confidence import confidence_features, length_misfit, sentence_coverage
from seq2seq.analysis.occlusion import DROP_FLOOR, OCCLUSION_FEATURES
from seq2seq.analysis.quality import (
    COVERAGE_FLOOR,
    Detector,
    Evidence,
    QualityThresholds,
    assess,
    assess_alignment,
    feature_names,
    source_coverage,
    target_entropy,
    target_peak,
    word_features,
)
from seq2seq.core.alignment import Alignments, Token, align, words
from seq2seq.core.config import AlignmentOptions
from seq2seq.decoding.forced import align_pair
from seq2seq.loading import load_translator

# Rows = target words ("The", "house", "glows", "."), columns = source words ("Das", "Haus", "ist", "klein", ".").
SOURCE = ["Das", "Haus", "ist", "klein", "."]
TARGET = ["The", "house", "glows", "."]
MAP = np.array(
    [
        [0.90, 0.10, 0.00, 0.00, 0.00],
        [0.05, 0.90, 0.05, 0.00, 0.00],
        [0.20, 0.20, 0.20, 0.20, 0.20],  # spread evenly: drawn from no one source word
        [0.00, 0.00, 0.00, 0.00, 1.00],
    ]
)


def test_per_word_signals_read_the_map() -> None:
    assert source_coverage(MAP) == pytest.approx([1.15, 1.2, 0.25, 0.2, 1.2])
    assert target_peak(MAP) == pytest.approx([0.9, 0.9, 0.2, 1.0])
    entropy = target_entropy(MAP)
    assert entropy[2] == pytest.approx(1.0) and entropy[3] == pytest.approx(0.0)
    expected = -(0.9 * math.log(0.9) + 0.1 * math.log(0.1)) / math.log(5)
    assert entropy[0] == pytest.approx(expected)
    assert target_entropy(np.ones((3, 1))).tolist() == [0.0, 0.0, 0.0]  # one source word: nothing to spread


def test_assess_flags_untranslated_and_ungrounded_words_but_never_punctuation() -> None:
    thresholds = QualityThresholds(untranslated_coverage=0.3, ungrounded_peak=0.5)
    quality = assess(MAP, SOURCE, TARGET, thresholds=thresholds)
    assert quality.untranslated == [2, 3]  # "ist" and "klein" received 0.25 and 0.2
    assert quality.ungrounded == [2]  # "glows"
    no_mass_on_period = MAP.copy()
    no_mass_on_period[3] = [0.0, 0.0, 0.0, 1.0, 0.0]
    assert assess(no_mass_on_period, SOURCE, TARGET, thresholds=thresholds).untranslated == [2]  # "." is exempt
    assert quality.coverage == pytest.approx((1.0 + 1.0 + 0.25 + 0.2) / 4)
    assert quality.length_ratio == pytest.approx(3 / 4)
    assert quality.confidence is None and quality.mean_log_prob is None
    record = quality.to_dict()
    assert record["untranslated"] == [2, 3] and record["confidence"] is None
    assert json.loads(json.dumps(record)) == record


def test_a_score_exactly_at_the_threshold_is_not_flagged() -> None:
    """The flags are strict inequalities: a detector flags a logit above its threshold, the
    fallbacks a coverage or a peak below theirs. A word exactly at a threshold is not flagged
    (a `>=` for `>`, or a `<=` for `<`, would flag it); one just past it is. Binary fractions
    keep every sum exact."""
    at_threshold = np.array(
        [
            [0.5, 0.25, 0.125, 0.125, 0.0],  # "The": peak 0.5, exactly the peak threshold
            [0.25, 0.625, 0.0, 0.0, 0.125],
            [0.25, 0.25, 0.125, 0.0, 0.375],  # "glows": peak 0.375, below it
            [0.0, 0.0, 0.0, 0.0, 1.0],
        ]
    )  # coverage: "ist" 0.25, exactly the coverage threshold; "klein" 0.125, below it
    fallback = QualityThresholds(untranslated_coverage=0.25, ungrounded_peak=0.5)
    quality = assess(at_threshold, SOURCE, TARGET, thresholds=fallback)
    assert quality.source_coverage[2] == 0.25 and quality.target_peak[0] == 0.5
    assert quality.untranslated == [3] and quality.ungrounded == [2]

    # Learned detectors: logit = 0 + 1 * feature, threshold 0.5.
    detectors = replace(
        fallback, untranslated=Detector(("x",), (1.0,), 0.0, 0.5), ungrounded=Detector(("y",), (1.0,), 0.0, 0.5)
    )
    target_features = {"y": np.array([0.5, 0.0, 0.75, 0.9]), "surprise": np.zeros(4)}
    features = ({"x": np.array([0.5, np.nextafter(0.5, 1.0), 0.0, 0.5, 0.9])}, target_features)
    learned = assess(MAP, SOURCE, TARGET, thresholds=detectors, features=features)
    assert learned.untranslated == [1] and learned.ungrounded == [2]  # never "." (punctuation)


def test_confidence_is_the_clipped_linear_estimate() -> None:
    thresholds = QualityThresholds(expected_length_ratio=1.1, confidence_weights=(0.6, 0.2, 0.3, 0.5))
    quality = assess(MAP, SOURCE, TARGET, mean_log_prob=-0.8, thresholds=thresholds)
    features = [1.0, -0.8, (1.0 + 1.0 + 0.25 + 0.2) / 4, -abs(math.log((3 + 1) / (4 + 1) / 1.1))]
    assert confidence_features(-0.8, source_coverage(MAP), SOURCE, TARGET, 1.1) == pytest.approx(features)
    assert quality.confidence == pytest.approx(float(np.dot(features, [0.6, 0.2, 0.3, 0.5])))
    assert assess(MAP, SOURCE, TARGET, mean_log_prob=-50.0, thresholds=thresholds).confidence == 0.0
    assert assess(MAP, SOURCE, TARGET, mean_log_prob=5.0, thresholds=thresholds).confidence == 1.0


def test_sentence_features_and_bad_shapes() -> None:
    assert sentence_coverage(np.array([2.0, 0.5, 0.0]), ["a", "b", ","]) == pytest.approx(0.75)
    assert sentence_coverage(np.array([0.0]), ["."]) == 1.0  # nothing to cover
    assert length_misfit(["a", "b", "c"], ["x", "y", "z", "!"], 1.0) == 0.0
    assert length_misfit(["a"], ["x", "y", "z"], 1.0) == pytest.approx(-math.log(2))
    with pytest.raises(ValueError, match="shape"):
        assess(MAP, SOURCE[:-1], TARGET)


def test_thresholds_round_trip_and_defaults(tmp_path: Path) -> None:
    thresholds = QualityThresholds(0.31, 0.42, 1.07, (0.1, 0.2, 0.3, 0.4), {"split": "valid"})
    thresholds.save(tmp_path / "quality.json")
    assert QualityThresholds.load(tmp_path) == thresholds
    assert QualityThresholds.load(tmp_path / "quality.json") == thresholds
    assert QualityThresholds.load(tmp_path / "elsewhere") == QualityThresholds()
    with pytest.raises(ValueError, match="confidence_weights"):
        QualityThresholds(confidence_weights=(1.0, 2.0))
    with pytest.raises(ValueError, match="expected_length_ratio"):
        QualityThresholds(expected_length_ratio=0.0)


# --------------------------------------------------------------------------- planted damage


def test_planted_omission_deletes_a_span_and_names_the_source_words_it_translated() -> None:
    source, target = "Wir haben gestern im Garten gegessen.", "We ate in the garden yesterday."
    links = {(0, 0), (1, 1), (2, 5), (3, 2), (3, 3), (4, 4), (5, 1), (6, 6)}
    seen = set()
    for seed in range(40):
        omitted = planted.plant_omission(source, target, links, random.Random(seed))
        assert omitted is not None
        damaged, truth = omitted
        kept = [t.text.lower() for t in words(damaged)]  # a new first word is capitalised
        deleted = [t.text.lower() for t in words(target) if t.text.lower() not in kept]
        assert 1 <= len(deleted) <= 3 and len(kept) + len(deleted) == len(words(target))
        gone = {j for j, t in enumerate(words(target)) if t.text.lower() in deleted}
        # Exactly the source words whose every link went to the deleted words.
        assert truth == {
            i for i in range(6) if {j for s, j in links if s == i} <= gone and any(s == i for s, _ in links)
        }
        assert "  " not in damaged and not damaged.endswith(" .")
        seen.add(damaged)
    assert len(seen) > 3  # different spans for different seeds


def test_planted_insertion_marks_the_inserted_target_words() -> None:
    target = "The train leaves at half past seven."
    for seed in range(20):
        damaged, truth = planted.plant_insertion(target, ["quickly", "garden"], random.Random(seed))
        tokens = [t.text for t in words(damaged)]
        assert [tokens[j] for j in sorted(truth)] == [w for w in tokens if w in ("quickly", "garden")]
        assert [w for j, w in enumerate(tokens) if j not in truth] == [t.text for t in words(target)]


def test_spearman_and_the_same_rate_baseline() -> None:
    assert planted.spearman(np.array([1, 2, 3, 4.0]), np.array([10, 20, 30, 45.0])) == pytest.approx(1.0)
    assert planted.spearman(np.array([1, 2, 2, 3.0]), np.array([3, 2, 2, 1.0])) == pytest.approx(-1.0)
    case = planted.Case("valid", "omission", "", "", frozenset({0}))
    items = [
        planted.Scored(case, np.array([0.1, 0.9, 0.5, 0.7]), [0, 1, 2, 3]),
        planted.Scored(case, np.array([0.8, 0.2]), [0, 1]),
    ]
    assert planted.rank_baseline(items, 2) == [{0}, {1}]  # each sentence's lowest word
    assert planted.prf([{0}, {1}], [frozenset({0}), frozenset({0})]) == pytest.approx((0.5, 0.5, 0.5))


def test_unlinked_source_words_are_left_out_of_the_omission_scoring() -> None:
    """A source word that no link of the original pair touches is neither a hit nor a false alarm."""
    source, target = "Er hat doch Zeit.", "He has time."
    links = [{(0, 0), (1, 1), (3, 2), (4, 3)}]  # "doch" (2) is linked to nothing
    cases = planted.make_cases("valid", [(source, target)], links, seed=3)
    assert all(case.unlinked == {2} and case.pair == 0 for case in cases if case.kind != "insertion")
    omission = next(case for case in cases if case.kind == "omission")
    item = quality_signals.scored(omission, np.zeros(5), words(source))
    assert 2 not in item.candidates and item.unlinked == [2]
    assert planted.flag_below([item], 0.5) == [set(item.candidates)]
    assert planted.flag_below([item], 0.5, unlinked=True) == [set(item.candidates) | {2}]


def test_fit_detector_learns_the_rule_behind_the_truth() -> None:
    """Logistic regression on one feature: the words above 0 are the planted truth; the fitted
    detector flags exactly them (weights in raw feature units, the threshold a logit)."""
    rng = np.random.default_rng(0)
    items = []
    for _ in range(40):
        x = rng.normal(size=6) * 3
        case = planted.Case("valid-fit", "omission", "", "", frozenset(np.nonzero(x > 0)[0].tolist()))
        items.append(({"x": x, "noise": rng.normal(size=6)}, planted.Scored(case, x, list(range(6)))))
    detector = planted.fit_detector(items, ("x", "noise"))
    assert detector is not None and detector.features == ("x", "noise")
    assert abs(detector.weights[0]) > 10 * abs(detector.weights[1])
    for table, item in items:
        flagged = set(np.nonzero(detector.logits(table) > detector.threshold)[0].tolist())
        assert flagged == item.case.truth
    nothing = [
        (
            {"x": np.zeros(3)},
            planted.Scored(planted.Case("valid-fit", "omission", "", "", frozenset()), np.zeros(3), [0, 1, 2]),
        )
    ]
    assert planted.fit_detector(nothing, ("x",)) is None  # no truth to learn from


# --------------------------------------------------------------------------- detectors


def scripted_translation(gap: str = ",") -> tuple[Alignments, Evidence]:
    """A scripted translation of "Er kommt morgen ." as "He comes , ." (one piece per word)
    by a two-layer, one-head model: layer 0 is its alignment head (read at input steps,
    step shift), layer 1 looks ahead at the source word it is about to translate.

    The step that produced "," looked ahead at "morgen", and "," was a surprise (-log p = 6):
    the translation of "morgen" is missing. In the alignment map "morgen" still gets 0.8 of
    a word's mass, from the rows of "," and "." beside the gap, so a coverage threshold
    below 0.8 does not see it. `gap` replaces "," by a word (the same surprise).

    Occluded (leave-one-out), each word but "morgen" made the piece it translated far less
    likely; without "morgen" the gap got *more* likely (-log p 5 instead of 6).
    """
    source, target = "Er kommt morgen .", f"He comes {gap} ."
    source_pieces = [Token(w.text, w.start, w.end) for w in words(source)]
    target_pieces = [Token(w.text, w.start, w.end) for w in words(target)]
    # Steps 0..4 (inputs BOS He comes , . ; outputs He comes , . EOS); columns Er kommt morgen . EOS.
    aligning = [[1, 0, 0, 0, 0], [1, 0, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0, 0.6, 0.4, 0], [0, 0, 0.2, 0.8, 0]]
    ahead = [[1, 0, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 0, 1, 0], [0, 0, 0, 0, 1]]
    attention = np.array([aligning, ahead], dtype=np.float64)[:, None]  # (L=2, H=1, T+1=5, S+1=5)
    own = AlignmentOptions(layer=0, heads=(0,), step_shift=True)
    maps = align(attention, source, source_pieces, target, target_pieces, own)
    token_log_probs = np.log([0.9, 0.9, np.exp(-6.0), 0.8, 0.9])  # the gap was a surprise
    occluded = np.tile(token_log_probs, (4, 1))  # (Sw=4, T+1=5)
    occluded[0, 0], occluded[1, 1], occluded[2, 2], occluded[3, 3] = np.log(0.01), np.log(0.01), -5.0, np.log(0.1)
    return maps, Evidence(attention, token_log_probs, own, occluded)


SURPRISE = [-math.log(0.9), -math.log(0.9), 6.0, -math.log(0.8)]


def test_word_features_read_every_layer_and_the_surprise() -> None:
    maps, evidence = scripted_translation()
    source, target = word_features(maps, evidence)
    assert set(source) == set(feature_names(2)[0]) and set(target) == set(feature_names(2)[1])
    coverage = source_coverage(maps.word.matrix)
    assert coverage == pytest.approx([1.0, 1.0, 0.8, 1.2])
    assert np.exp(source["log_coverage"]) - COVERAGE_FLOOR == pytest.approx(coverage)
    assert np.exp(source["log_coverage_layer0"]) - COVERAGE_FLOOR == pytest.approx(coverage)
    assert np.exp(source["log_coverage_layer0_output"]) - COVERAGE_FLOOR == pytest.approx([2.0, 1.0, 0.6, 0.4])
    # Layer 1 looked at each word once, when producing the piece after it: its surprise.
    assert source["attended_surprise_layer1"] == pytest.approx(SURPRISE)
    assert source["attended_surprise_layer0"][1] == pytest.approx(6.0)  # "," produced looking at "kommt"
    assert target["surprise"] == pytest.approx(SURPRISE)
    assert target["surprise_max"] == pytest.approx(SURPRISE)  # one piece per word
    assert target["peak"] == pytest.approx(target_peak(maps.word.matrix))
    with pytest.raises(ValueError, match="token log-probs"):
        Evidence(evidence.attention, evidence.token_log_probs[:-1], evidence.own_source)


def test_occlusion_features_are_the_drops_of_the_target_without_the_word() -> None:
    maps, evidence = scripted_translation()
    source, _ = word_features(maps, evidence)
    drops = [math.log(0.9 / 0.01), math.log(0.9 / 0.01), -1.0, math.log(0.8 / 0.1)]
    assert source["occlusion_drop"] == pytest.approx(drops)
    assert np.exp(source["log_occlusion_drop_positive"]) - DROP_FLOOR == pytest.approx(np.maximum(drops, 0.0))
    # The word whose translation is missing is the one the target did not rely on.
    detector = Detector(("occlusion_drop",), (-1.0,), 0.0, 0.0)
    thresholds = QualityThresholds(untranslated_coverage=0.5, untranslated=detector)
    assert thresholds.needs_occlusion and not QualityThresholds().needs_occlusion
    assert assess_alignment(maps, None, thresholds, evidence).untranslated == [2]
    thresholds.check(decoder_layers=2)  # the occlusion features are known to every model
    # Evidence without the occluded log-probs has no occlusion features: such a detector cannot read it.
    plain = Evidence(evidence.attention, evidence.token_log_probs, evidence.own_source)
    assert "occlusion_drop" not in word_features(maps, plain)[0]
    with pytest.raises(ValueError, match="occlusion_drop"):
        assess_alignment(maps, None, thresholds, plain)
    with pytest.raises(ValueError, match="occluded log-probs"):
        Evidence(evidence.attention, evidence.token_log_probs, evidence.own_source, np.zeros((4, 3)))
    with pytest.raises(ValueError, match="4"):
        word_features(
            maps, Evidence(evidence.attention, evidence.token_log_probs, evidence.own_source, np.zeros((3, 5)))
        )


def test_the_detector_flags_an_omission_the_coverage_threshold_misses() -> None:
    maps, evidence = scripted_translation()
    fallback = QualityThresholds(untranslated_coverage=0.5)
    assert assess_alignment(maps, None, fallback, evidence).untranslated == []  # "morgen" has 0.8
    # A detector reading the surprise of the steps that looked at a word, as the fitted
    # ones do, finds it.
    detector = Detector(("log_coverage", "attended_surprise_layer1"), (-1.0, 1.0), -2.0, 0.0)
    thresholds = QualityThresholds(untranslated_coverage=0.5, untranslated=detector)
    quality = assess_alignment(maps, None, thresholds, evidence)
    assert quality.untranslated == [2]
    assert quality.source_coverage == pytest.approx([1.0, 1.0, 0.8, 1.2])  # the figures shown are the map's
    # Without the evidence the thresholds apply, as before.
    assert assess_alignment(maps, None, thresholds).untranslated == []


def test_ungrounded_from_the_decoder_surprise_never_punctuation() -> None:
    thresholds = QualityThresholds(ungrounded_peak=0.0, ungrounded=Detector(("surprise",), (1.0,), 0.0, 5.0))
    maps, evidence = scripted_translation()
    quality = assess_alignment(maps, -1.0, thresholds, evidence)
    assert quality.ungrounded == []  # "," was the surprise, but punctuation is never flagged
    maps, evidence = scripted_translation(gap="now")
    quality = assess_alignment(maps, -1.0, thresholds, evidence)
    assert quality.ungrounded == [2]
    assert quality.target_surprise == pytest.approx(SURPRISE)
    assert quality.to_dict()["target_surprise"][2] == 6.0
    assert assess_alignment(maps, -1.0, QualityThresholds(ungrounded_peak=0.0)).ungrounded == []  # peak alone
    assert assess_alignment(maps, -1.0, thresholds).target_surprise is None  # not known without evidence


def test_detectors_round_trip_and_old_files_load(tmp_path: Path) -> None:
    untranslated = Detector(("log_coverage", "attended_surprise_layer1"), (-1.5, 0.25), -3.0, -0.5)
    ungrounded = Detector(("surprise", "peak"), (0.3, 2.0), -9.0, -1.0)
    thresholds = QualityThresholds(0.7, 0.74, 1.04, (0.3, 0.2, 0.1, 0.1), {"split": "valid"}, untranslated, ungrounded)
    thresholds.save(tmp_path / "quality.json")
    assert QualityThresholds.load(tmp_path) == thresholds
    # A quality.json written before the detectors: they are None, its thresholds apply.
    old = {
        "untranslated_coverage": 0.76,
        "ungrounded_peak": 0.8,
        "expected_length_ratio": 1.0454,
        "confidence_weights": [0.36, 0.23, 0.19, 0.05],
        "chosen_on": {"pairs": 1112},
    }
    (tmp_path / "quality.json").write_text(json.dumps(old))
    loaded = QualityThresholds.load(tmp_path)
    assert loaded.untranslated is None and loaded.ungrounded is None and loaded.untranslated_coverage == 0.76
    maps, evidence = scripted_translation()
    assert assess_alignment(maps, None, loaded, evidence).untranslated == []  # coverage 0.8 >= 0.76
    assert assess_alignment(maps, None, QualityThresholds(untranslated_coverage=0.9), evidence).untranslated == [2]
    # A detector must fit the model it is loaded with.
    QualityThresholds(untranslated=untranslated).check(decoder_layers=2)
    with pytest.raises(ValueError, match="attended_surprise_layer1"):
        QualityThresholds(untranslated=untranslated).check(decoder_layers=1)
    with pytest.raises(ValueError, match="weights"):
        Detector(("surprise",), (1.0, 2.0), 0.0, 0.0)
    with pytest.raises(ValueError, match="does not produce"):
        ungrounded.logits({"surprise": np.zeros(2)})


# --------------------------------------------------------------------------- the script on a real model


@pytest.fixture(scope="module")
def toy_release(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny exported bundle and a data directory of word-for-word toy pairs with their links."""
    directory = tmp_path_factory.mktemp("quality")
    checkpoint = train_tiny(directory)
    manifest = directory / "manifest.json"
    manifest.write_text(json.dumps({"corpus": "toy", "license": "CC0-1.0 (generated in the test)"}))
    export_model(checkpoint, directory / "de-en", data_manifest=manifest, parity_sentences=SENTENCES)
    data = directory / "data"
    data.mkdir()
    gold_lines = []
    for split, seed in (("valid", 11), ("test", 12), ("gold", 13)):
        pairs = toy_pairs(12, seed=seed)
        diagonal = [" ".join(f"{i}-{i}" for i in range(len(words(s)))) for s, _ in pairs]
        if split == "gold":
            gold_lines = [f"{s}\t{t}\t{links}" for (s, t), links in zip(pairs, diagonal)]
            continue
        (data / f"{split}.tsv").write_text("".join(f"{s}\t{t}\tsentence\n" for s, t in pairs))
        (data / f"eflomal.{split}.pharaoh").write_text("".join(line + "\n" for line in diagonal))
    (data / "gold.tsv").write_text("\n".join(gold_lines) + "\n")
    return directory / "de-en", data


def test_the_script_chooses_thresholds_a_model_can_load(
    toy_release: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    bundle, data = toy_release
    saved = tmp_path / "quality.json"
    code = quality_signals.main(
        [
            "--model",
            str(bundle),
            "--data",
            str(data),
            "--gold",
            str(data / "gold.tsv"),
            "--cache",
            str(tmp_path / "cache"),
            "--save",
            str(saved),
            "--json",
            str(tmp_path / "figures.json"),
            "--threads",
            "1",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "untranslated: planted omissions" in out and "confidence vs sentence chrF" in out
    thresholds = QualityThresholds.load(saved)
    figures = json.loads((tmp_path / "figures.json").read_text())
    default_rows = [
        row
        for row in figures["signals"]["untranslated"]
        if row["source"] == figures["signals"]["untranslated"][0]["source"]
    ]
    assert {row["split"] for row in default_rows} == {"valid-held", "test", "gold"}
    assert thresholds.untranslated_coverage == default_rows[0]["threshold"]
    assert thresholds.chosen_on["pairs"] == 12
    files = json.loads((bundle / "bundle.json").read_text())["files"]
    assert thresholds.chosen_on["decoder_sha256"] == files["decoder_step.onnx"]["sha256"]
    assert f"detector ({len(feature_names(2)[0])} features)" in out or "untranslated detector: nothing to fit" in out
    assert thresholds.chosen_on["fit_pairs"] == 6  # the even half of valid
    # Beside it, the attention-only detector of quality mode "fast": the same features but occlusion.
    attention_only = tuple(f for f in feature_names(2)[0] if f not in OCCLUSION_FEATURES)
    assert f"attention detector ({len(attention_only)})" in out
    if thresholds.untranslated is not None:
        assert thresholds.untranslated_fast is not None and thresholds.untranslated_fast.features == attention_only
        assert thresholds.for_mode("fast").untranslated == thresholds.untranslated_fast
    assert thresholds.ungrounded is not None and thresholds.ungrounded.features == feature_names(2)[1]
    # The ratio of the toy language is exactly one target word per source word.
    assert thresholds.expected_length_ratio == pytest.approx(1.0)
    # The chosen thresholds apply to the model's own forced alignment.
    translator = load_translator(bundle, "onnx", threads=1)
    source, target = toy_pairs(1, seed=11)[0]
    alignment = align_pair(translator, source, target).word
    quality = assess(
        alignment.matrix,
        [t.text for t in alignment.source_tokens],
        [t.text for t in alignment.target_tokens],
        -0.5,
        thresholds,
    )
    assert 0.0 <= quality.confidence <= 1.0
    assert len(quality.source_coverage) == len(words(source))
