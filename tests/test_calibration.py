"""The confidence on a scale a person can act on (seq2seq/analysis/calibration.py): the fit,
its file in a bundle, the translator's calibrated block (and none without the file), the
shipped bundles' calibrations, and a real server (`python -m service.serve`, the tiny
bundle) answering `/translate` with `quality: true` and `/v1/translate` with the band."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import numpy as np
import pytest
from test_service_server import serving

from data.files import BUNDLE_FILE, CALIBRATION_FILE
from seq2seq.analysis.calibration import BANDS, Calibration, fit_calibration, pool_adjacent_violators, reliability
from seq2seq.analysis.quality import join
from seq2seq.core.config import AlignmentOptions
from seq2seq.loading import load_translator
from seq2seq.runtime.bundle import BundleError, load_bundle_manifest, set_calibration_file
from service.routes.libre import LOW_CONFIDENCE

MODELS = Path(__file__).resolve().parents[1] / "models"
# A calibration that reads every confidence as low: P(usable) 0.05..0.1 (below low_below 0.15).
ALL_LOW = Calibration(knots=(0.0, 1.0), usable=(0.05, 0.1), expected_chrf=(10.0, 20.0))
ALIGNED = AlignmentOptions()


# --------------------------------------------------------------------------- the fit


def test_pooling_adjacent_violators_gives_the_closest_non_decreasing_sequence() -> None:
    assert pool_adjacent_violators([3, 1, 2], [1, 1, 1]).tolist() == [2, 2, 2]
    assert pool_adjacent_violators([1, 3, 2, 4], [1, 1, 3, 1]).tolist() == [1, 2.25, 2.25, 4]
    assert pool_adjacent_violators([1, 2, 3], [1, 1, 1]).tolist() == [1, 2, 3]  # already monotone: kept


def test_the_fit_reads_each_bins_held_out_share_usable() -> None:
    # 400 sentences: confidence i/400; the upper half usable (chrF 60), the lower not (chrF 20).
    confidence = np.arange(400) / 400
    chrf = np.where(confidence >= 0.5, 60.0, 20.0)
    calibration = fit_calibration(confidence, chrf, bins=4, usable_chrf=40.0)
    assert calibration.knots == pytest.approx([0.12375, 0.37375, 0.62375, 0.87375])
    assert calibration.usable == (0.0, 0.0, 1.0, 1.0) and calibration.expected_chrf == (20.0, 20.0, 60.0, 60.0)
    # Between the bins' centres, linear; beyond the ends, flat.
    assert calibration(0.49875).usable == pytest.approx(0.5) and calibration(0.99).usable == 1.0
    assert calibration(0.0).band == "low" and calibration(0.99).band == "high"
    assert calibration(0.99).expected_chrf == 60.0
    # The usable threshold counts a sentence at it: chrF 40.0 is usable, 39.99 is not.
    at = fit_calibration(confidence, np.where(confidence >= 0.5, 40.0, 39.99), bins=4, usable_chrf=40.0)
    assert at.usable == (0.0, 0.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="at least 8 sentences"):
        fit_calibration(confidence[:7], chrf[:7], bins=4)
    fit_calibration(confidence[:8], chrf[:8], bins=4)  # 2 per bin: enough


def test_the_bands_limits_at_n_and_n_plus_one() -> None:
    calibration = Calibration(knots=(0.0, 1.0), usable=(0.0, 1.0), expected_chrf=(0.0, 100.0))
    assert (calibration.low_below, calibration.high_from) == (0.15, 0.45)
    assert calibration.band(0.1499) == "low" and calibration.band(0.15) == "medium"
    assert calibration.band(0.4499) == "medium" and calibration.band(0.45) == "high"
    assert calibration(0.15).band == "medium" and calibration(0.1499).band == "low"
    with pytest.raises(ValueError, match="knots must increase"):
        Calibration(knots=(0.5, 0.5), usable=(0.0, 1.0), expected_chrf=(0.0, 1.0))
    with pytest.raises(ValueError, match="low_below"):
        Calibration(knots=(0.0, 1.0), usable=(0.0, 1.0), expected_chrf=(0.0, 1.0), low_below=0.5, high_from=0.4)


def test_a_reliability_diagram_bins_predictions_by_width() -> None:
    predicted = np.array([0.05, 0.05, 0.55, 0.95, 1.0])
    observed = np.array([0.0, 1.0, 1.0, 1.0, 0.0])
    assert reliability(predicted, observed, bins=10) == [(0.05, 0.5, 2), (0.55, 1.0, 1), (0.975, 0.5, 2)]


def test_a_calibration_round_trips_through_its_file(tmp_path: Path) -> None:
    ALL_LOW.save(tmp_path / CALIBRATION_FILE)
    assert Calibration.load(tmp_path / CALIBRATION_FILE) == ALL_LOW
    assert Calibration.load(tmp_path / "missing.json") is None and Calibration.load(None) is None


# --------------------------------------------------------------------------- in a bundle, through the translator


@pytest.fixture(scope="module")
def calibrated_models(tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A models directory holding a copy of the tiny bundle with the ALL_LOW calibration, listed."""
    models = tmp_path_factory.mktemp("calibrated") / "models"
    shutil.copytree(tiny_bundle, models / "de-en")
    ALL_LOW.save(models / "de-en" / CALIBRATION_FILE)
    set_calibration_file(models / "de-en")
    return models


def test_the_translator_reads_the_confidence_by_its_bundles_calibration(
    calibrated_models: Path, tiny_bundle: Path
) -> None:
    bundle = load_bundle_manifest(calibrated_models / "de-en")  # hashes checked, the calibration's too
    assert bundle.calibration_path == calibrated_models / "de-en" / CALIBRATION_FILE
    translator = load_translator(calibrated_models / "de-en", threads=1)
    config = translator.decode_defaults.override(alignment=ALIGNED)
    first, second = translator.translate_batch(["der Hund ist klein .", "das Haus ist rot ."], config)
    quality = first.quality
    assert quality.confidence is not None and quality.calibrated == ALL_LOW(quality.confidence)
    assert quality.to_dict()["calibrated"] == ALL_LOW(quality.confidence).to_dict() and quality.calibrated.band == "low"
    # A text's block: the joined confidence read on the same scale.
    joined = join([(first.quality, 5), (second.quality, 5)])
    assert joined.calibrated == ALL_LOW(joined.confidence)
    # The honest fallback: a bundle without the file has no calibrated block, only the raw confidence.
    plain = load_translator(tiny_bundle, threads=1)
    bare = plain.translate("der Hund ist klein .", config).quality
    assert bare.confidence == pytest.approx(quality.confidence) and bare.calibrated is None
    assert bare.to_dict()["calibrated"] is None


def test_a_changed_calibration_file_fails_the_bundles_check(calibrated_models: Path, tmp_path: Path) -> None:
    copy = tmp_path / "de-en"
    shutil.copytree(calibrated_models / "de-en", copy)
    Calibration(knots=(0.0, 1.0), usable=(0.5, 0.6), expected_chrf=(10.0, 20.0)).save(copy / CALIBRATION_FILE)
    with pytest.raises(BundleError, match=CALIBRATION_FILE):
        load_bundle_manifest(copy)


@pytest.mark.parametrize("direction", ["de-en", "en-de"])
def test_each_shipped_bundle_carries_the_calibration_its_command_made(direction: str) -> None:
    bundle = load_bundle_manifest(MODELS / direction)
    assert bundle.calibration_path is not None
    calibration = Calibration.load(bundle.calibration_path)
    assert calibration.fitted_on["by"] == "python -m export.confidence_calibration"
    assert calibration.fitted_on["fitted_on"] == "valid" and set(calibration.fitted_on["figures"]) >= {"valid", "gold"}
    assert all(b >= a for a, b in zip(calibration.usable, calibration.usable[1:]))  # monotone
    translator = load_translator(MODELS / direction, threads=1)
    text = "Das Haus ist klein." if direction == "de-en" else "The house is small."
    quality = translator.translate(text, translator.decode_defaults.override(alignment=ALIGNED)).quality
    assert quality.calibrated == calibration(quality.confidence) and quality.calibrated.band in BANDS


# --------------------------------------------------------------------------- a real server


@pytest.fixture(scope="module")
def calibrated_http(calibrated_models: Path) -> httpx.Client:
    with serving(calibrated_models) as (url, _), httpx.Client(base_url=url, timeout=60) as client:
        yield client


def test_translate_with_quality_warns_in_the_low_band(calibrated_http: httpx.Client) -> None:
    asked = {"q": "der Hund ist klein .", "source": "de", "target": "en"}
    answer = calibrated_http.post("/translate", json={**asked, "quality": True})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["warning"].startswith(LOW_CONFIDENCE) and "alignment" not in body
    calibrated = body["quality"]["calibrated"]
    assert calibrated["band"] == "low" and calibrated["usable"] == round(
        ALL_LOW(body["quality"]["confidence"]).usable, 4
    )
    # A list: one warning per text; a form says "true"; not asked: LibreTranslate's own shape.
    listed = calibrated_http.post("/translate", json={**asked, "q": ["der Hund", "das Haus"], "quality": True}).json()
    assert len(listed["warning"]) == 2 and all(w.startswith(LOW_CONFIDENCE) for w in listed["warning"])
    form = calibrated_http.post("/translate", data={**asked, "quality": "true"}).json()
    assert form["warning"].startswith(LOW_CONFIDENCE)
    plain = calibrated_http.post("/translate", json=asked).json()
    assert set(plain) == {"translatedText", "alternatives"}
    bad = calibrated_http.post("/translate", data={**asked, "quality": "maybe"})
    assert bad.status_code == 400 and "quality" in bad.json()["error"]
    # With the alignment too: both blocks, and the warning.
    both = calibrated_http.post("/translate", json={**asked, "quality": True, "alignment": True}).json()
    assert "alignment" in both and both["warning"].startswith(LOW_CONFIDENCE)


def test_v1_translate_shows_the_calibrated_value_and_band(calibrated_http: httpx.Client) -> None:
    body = calibrated_http.post("/v1/translate", json={"text": "der Hund ist klein .", "alignment": True}).json()
    (sentence,) = body["translations"][0]["sentences"]
    quality = sentence["quality"]
    assert quality["calibrated"] == ALL_LOW(quality["confidence"]).to_dict()
    schema = calibrated_http.get("/openapi.json").json()["components"]["schemas"]
    assert set(schema["CalibratedConfidence"]["properties"]) == {"usable", "expected_chrf", "band"}


def test_without_a_calibration_the_server_gives_no_band_and_no_warning(tiny_bundle: Path) -> None:
    with serving(tiny_bundle.parent) as (url, _):
        answer = httpx.post(
            f"{url}/translate",
            json={"q": "der Hund ist klein .", "source": "de", "target": "en", "quality": True},
            timeout=60,
        ).json()
    assert "warning" not in answer and answer["quality"]["calibrated"] is None
    assert answer["quality"]["confidence"] is not None  # the raw confidence is still there


def test_the_bundle_lists_the_calibration_with_its_hash(calibrated_models: Path) -> None:
    manifest = json.loads((calibrated_models / "de-en" / BUNDLE_FILE).read_text())
    assert (
        manifest["files"][CALIBRATION_FILE]["bytes"] == (calibrated_models / "de-en" / CALIBRATION_FILE).stat().st_size
    )
