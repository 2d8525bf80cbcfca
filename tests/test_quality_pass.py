"""The quality block everywhere the alignment goes: computed by the translator and by forced
alignment in the same pass as the map, with the thresholds the bundle carries (quality.json,
listed and hashed in bundle.json), in the batch records, `crossalign align` and the heatmap.

The omission checks run the shipped model (models/de-en), whose guided head makes them
meaningful: a source word the given translation leaves out must be flagged."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from data.files import BUNDLE_FILE, QUALITY_FILE
from seq2seq.analysis.calibration import Calibration
from seq2seq.analysis.heatmap import FLAG_COLOUR, FLAG_LEGEND, render_heatmap
from seq2seq.analysis.quality import Evidence, QualityThresholds, SentenceQuality, assess_alignment, join
from seq2seq.cli import main as cli_main
from seq2seq.core.config import AlignmentOptions, DecodeConfig
from seq2seq.decoding.forced import align_pair
from seq2seq.decoding.search import length_penalty
from seq2seq.decoding.translator import Translator
from seq2seq.loading import load_translator
from seq2seq.runtime.bundle import BundleError, load_bundle_manifest, set_quality_file

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "models" / "de-en"


@pytest.fixture(scope="module")
def shipped() -> Translator:
    return load_translator(SHIPPED)


def test_the_shipped_bundle_lists_and_loads_its_thresholds(shipped: Translator) -> None:
    bundle = load_bundle_manifest(SHIPPED)
    assert bundle.quality_path == SHIPPED / QUALITY_FILE and QUALITY_FILE in bundle.manifest["files"]
    # quality.json's thresholds, with the bundle's calibration.json beside them (test_calibration.py)
    assert shipped.quality == replace(
        QualityThresholds.load(SHIPPED / QUALITY_FILE), calibration=Calibration.load(bundle.calibration_path)
    )
    assert shipped.quality != QualityThresholds()  # the model's own, not the defaults


def test_the_translator_fills_quality_in_the_same_pass(shipped: Translator) -> None:
    config = DecodeConfig(n_best=2, coverage_penalty=0.0, alignment=AlignmentOptions())
    result = shipped.translate("Das Haus ist klein.", config)
    assert result.text == "The house is small."
    for hypothesis in [result, *result.alternatives]:
        occluded = shipped.occluded([hypothesis])[0] if shipped.quality.needs_occlusion else None
        evidence = Evidence(hypothesis.attention, np.asarray(hypothesis.token_log_probs), shipped.own_source, occluded)
        assert hypothesis.quality == assess_alignment(
            hypothesis.alignment, hypothesis.mean_log_prob, shipped.quality, evidence
        )
        # The search's per-piece log-probs (EOS last) add up to the sentence's.
        assert sum(hypothesis.token_log_probs) == pytest.approx(hypothesis.log_prob)
        assert len(hypothesis.quality.target_surprise) == len(hypothesis.alignment.word.target_tokens)
        # The raw log-prob is exposed, not recovered from the length-penalised score.
        length = len(hypothesis.target_ids) + 1
        assert hypothesis.score == pytest.approx(hypothesis.log_prob / length_penalty(length, config.length_penalty))
        assert hypothesis.mean_log_prob == hypothesis.log_prob / length
    assert result.quality.untranslated == [] and result.quality.ungrounded == []
    assert 0.0 <= result.quality.confidence <= 1.0
    assert shipped.translate("Das Haus ist klein.", DecodeConfig()).quality is None  # no alignment, no block


def test_forced_alignment_flags_the_word_a_translation_left_out(shipped: Translator) -> None:
    complete = align_pair(shipped, "Das Haus ist klein.", "The house is small.")
    omitted = align_pair(shipped, "Ich habe heute keine Zeit.", "I have no time.")
    assert complete.quality.untranslated == []
    assert [omitted.word.source_tokens[i].text for i in omitted.quality.untranslated] == ["heute"]
    assert omitted.quality.confidence < complete.quality.confidence
    assert omitted.to_record()["quality"] == omitted.quality.to_dict()


def test_align_cli_lists_the_untranslated_source_words(tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(
        "Ich habe heute keine Zeit.\tI have no time.\nDas Haus ist sehr klein.\tThe house is small.\n"
        "Das Haus ist klein.\tThe house is small.\nno tab here\n",
        encoding="utf-8",
    )
    out = tmp_path / "out.txt"
    status = cli_main(["align", "--model", str(SHIPPED), "-i", str(pairs), "-o", str(out), "--format", "untranslated"])
    assert status == 3  # the line without a tab
    lines = out.read_text(encoding="utf-8").split("\n")
    # The left-out word is flagged in each damaged pair (the shipped model may also flag a
    # neighbour whose attention the missing word drew away); the complete pair gets none.
    assert lines[0] == "2:heute" and "3:sehr" in lines[1].split() and lines[2:] == ["", "", ""]
    records = tmp_path / "out.jsonl"
    cli_main(["align", "--model", str(SHIPPED), "-i", str(pairs), "-o", str(records), "--format", "jsonl"])
    first = json.loads(records.read_text(encoding="utf-8").splitlines()[0])
    assert first["quality"]["untranslated"] == [2] and first["source_words"][2]["text"] == "heute"


def test_bundle_quality_file_is_hashed_and_a_fresh_export_carries_it(tiny_checkpoint: Path, tmp_path: Path) -> None:
    from export.exporter import export_model

    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(tiny_checkpoint, checkpoint)
    chosen = QualityThresholds(untranslated_coverage=5.0, ungrounded_peak=0.0, chosen_on={"split": "test"})
    chosen.save(checkpoint / QUALITY_FILE)
    bundle = tmp_path / "bundle"
    export_model(checkpoint, bundle, parity_sentences=["das haus ist klein ."])
    manifest = json.loads((bundle / BUNDLE_FILE).read_text())
    assert manifest["quality"] == QUALITY_FILE and QUALITY_FILE in manifest["files"]
    translator = load_translator(bundle)
    assert translator.quality == chosen
    result = translator.translate("das haus ist klein .", DecodeConfig(alignment=AlignmentOptions()))
    words = [t.text for t in result.alignment.word.source_tokens]
    # A coverage threshold of 5 flags every word but punctuation: the bundle's thresholds are used.
    assert result.quality.untranslated == [i for i, w in enumerate(words) if w != "."]

    # Thresholds chosen after the export are listed by set_quality_file; tampering is caught.
    QualityThresholds(untranslated_coverage=0.0).save(bundle / QUALITY_FILE)
    with pytest.raises(BundleError, match=QUALITY_FILE):
        load_bundle_manifest(bundle)
    set_quality_file(bundle)
    assert load_translator(bundle).quality.untranslated_coverage == 0.0


def test_join_renumbers_flags_and_weights_sentence_figures() -> None:
    first = SentenceQuality([0.1, 1.0], [0], [0.9], [0.1], [], 0.55, 0.5, -1.0, 0.4)
    second = SentenceQuality([1.0, 0.2, 1.0], [1], [0.2, 0.9], [0.9, 0.2], [0], 0.8, 1.0, -0.5, 0.7)
    joined = join([(first, 1), (second, 3)])
    assert joined.source_coverage == [0.1, 1.0, 1.0, 0.2, 1.0] and joined.untranslated == [0, 3]
    assert joined.target_peak == [0.9, 0.2, 0.9] and joined.ungrounded == [1]
    assert joined.coverage == pytest.approx((0.55 + 3 * 0.8) / 4)
    assert joined.confidence == pytest.approx((0.4 + 3 * 0.7) / 4)
    assert join([(first, 1)]) is first


def test_heatmap_marks_untranslated_columns_and_ungrounded_rows(shipped: Translator) -> None:
    word = align_pair(shipped, "Ich habe heute keine Zeit.", "I have no time.").word
    plain = render_heatmap(word, "svg").decode()
    marked = render_heatmap(word, "svg", untranslated=[2], ungrounded=[1]).decode()
    shown = lambda svg: " ".join(re.findall(r"<text[^>]*>([^<]*)</text>", svg))  # noqa: E731  (wrapped lines)
    assert FLAG_COLOUR not in plain and FLAG_LEGEND not in shown(plain)
    assert FLAG_LEGEND in shown(marked)
    # Two frames (a column, a row) and two coloured labels.
    assert marked.count(FLAG_COLOUR) >= 4
    png = render_heatmap(word, "png", untranslated=[2])
    assert png.startswith(b"\x89PNG") and png != render_heatmap(word, "png")
    with pytest.raises(ValueError, match="outside"):
        render_heatmap(word, "svg", untranslated=[len(word.source_tokens)])
    assert np.isfinite(word.matrix).all()
