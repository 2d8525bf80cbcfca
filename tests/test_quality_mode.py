"""Quality modes (seq2seq.analysis.quality.QUALITY_MODES): "thorough" flags untranslated words with the
detector that reads source occlusion, "fast" with its attention-only twin and never runs the
occlusion; every quality block says which flagged it. Through the library, the CLIs and a
real server, on the tiny exported model with a hand-written quality.json."""

from __future__ import annotations

import argparse
import json
import shutil
import typing
from pathlib import Path

import httpx
import pytest
from test_service_server import serving
from toy import LEXICON, SENTENCES

from data.files import QUALITY_FILE
from seq2seq.analysis.quality import UNTRANSLATED_BY, Detector, QualityThresholds
from seq2seq.cli import build_parser
from seq2seq.cli import main as cli_main
from seq2seq.cli.translate import check_resume_options, fill_unset_options, job_file, job_options
from seq2seq.core.config import AlignmentOptions, DecodeConfig
from seq2seq.decoding.forced import align_pairs
from seq2seq.decoding.records import Quality
from seq2seq.loading import load_translator
from seq2seq.runtime.bundle import set_quality_file
from service import serve
from service.settings import Settings

# Flags nothing (logit -1 < 0) but reads the occlusion: what "thorough" runs.
WITH_OCCLUSION = Detector(("log_coverage", "occlusion_drop"), (0.0, 0.0), -1.0, 0.0)
# Flags every word that is not punctuation (logit 1 > 0): which detector flagged shows in the flags.
ATTENTION_ONLY = Detector(("log_coverage",), (0.0,), 1.0, 0.0)
NEW = QualityThresholds(untranslated_coverage=-1.0, untranslated=WITH_OCCLUSION, untranslated_fast=ATTENTION_ONLY)
# A quality.json written before the fast detector; its coverage threshold flags every word.
OLD = QualityThresholds(untranslated_coverage=10.0, untranslated=WITH_OCCLUSION)

PAIRS = [(s, " ".join(LEXICON.get(w, w) for w in s.split())) for s in SENTENCES[:2]]


def test_a_mode_chooses_the_untranslated_detector_and_names_it() -> None:
    assert NEW.for_mode("thorough") is NEW and NEW.untranslated_by == "occlusion"
    fast = NEW.for_mode("fast")
    assert fast.untranslated == ATTENTION_ONLY and not fast.needs_occlusion and fast.untranslated_by == "attention"
    assert fast.ungrounded == NEW.ungrounded and fast.untranslated_coverage == NEW.untranslated_coverage
    # Without a fast detector: the coverage threshold; a detector that reads no occlusion is its own fast one.
    assert OLD.for_mode("fast").untranslated is None and OLD.for_mode("fast").untranslated_by == "coverage threshold"
    before_occlusion = QualityThresholds(untranslated=ATTENTION_ONLY)
    assert before_occlusion.for_mode("fast") is before_occlusion and before_occlusion.untranslated_by == "attention"
    with pytest.raises(ValueError, match="thorough, fast"):
        NEW.for_mode("quick")
    # The API's schema names every value the library gives.
    assert typing.get_args(Quality.model_fields["untranslated_by"].annotation) == UNTRANSLATED_BY


def test_the_fast_detector_round_trips_and_older_files_load(tmp_path: Path) -> None:
    NEW.save(tmp_path / QUALITY_FILE)
    assert QualityThresholds.load(tmp_path) == NEW
    old = NEW.to_dict()
    del old["untranslated_fast"]
    (tmp_path / QUALITY_FILE).write_text(json.dumps(old))
    assert QualityThresholds.load(tmp_path).untranslated_fast is None
    # It must fit the model, as the others do.
    with pytest.raises(ValueError, match="untranslated_fast"):
        QualityThresholds(untranslated_fast=Detector(("attended_surprise_layer5",), (1.0,), 0.0, 0.0)).check(2)


def bundle_with(directory: Path, tiny_bundle: Path, thresholds: QualityThresholds) -> Path:
    """A copy of the tiny bundle (alone in its models directory) whose quality.json is `thresholds`."""
    bundle = directory / "models" / "de-en"
    shutil.copytree(tiny_bundle, bundle)
    thresholds.save(bundle / QUALITY_FILE)
    set_quality_file(bundle)
    return bundle


@pytest.fixture(scope="module")
def bundles(tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {
        name: bundle_with(tmp_path_factory.mktemp(name), tiny_bundle, thresholds)
        for name, thresholds in (("new", NEW), ("old", OLD))
    }


# quality.json, mode -> what flags untranslated words, and whether the occlusion runs
EXPECTED = {
    ("new", "thorough"): ("occlusion", True),
    ("new", "fast"): ("attention", False),
    ("old", "thorough"): ("occlusion", True),
    ("old", "fast"): ("coverage threshold", False),
}


@pytest.mark.parametrize(("file", "mode"), list(EXPECTED))
def test_only_thorough_runs_the_occlusion_and_fast_flags_with_the_attention_detector(
    bundles: dict[str, Path], file: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    translator = load_translator(bundles[file], "onnx", threads=1, quality_mode=mode)
    assert translator.quality_mode == mode
    calls = []
    teacher_force = translator.backend.teacher_force
    monkeypatch.setattr(translator.backend, "teacher_force", lambda *a: calls.append(1) or teacher_force(*a))
    by, occludes = EXPECTED[file, mode]
    flags_everything = by != "occlusion"  # ATTENTION_ONLY and the old coverage threshold flag every word

    results = translator.translate_batch([s for s, _ in PAIRS], DecodeConfig(alignment=AlignmentOptions()))
    assert bool(calls) == occludes  # the search never teacher-forces: only the occlusion does
    aligned = align_pairs(translator, PAIRS)
    assert len(calls) == (3 if occludes else 1)  # + align's attention pass and, thorough, its occlusion batch
    for source, item in zip([s for s, _ in PAIRS] * 2, [*results, *aligned]):
        assert item.quality is not None and item.quality.untranslated_by == by
        content = [n for n, word in enumerate(source.split()) if word != "."]
        assert item.quality.untranslated == (content if flags_everything else [])
        assert item.quality.to_dict()["untranslated_by"] == by


def test_the_cli_flag_reaches_translate_and_align(bundles: dict[str, Path], tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{s}\t{t}\n" for s, t in PAIRS), encoding="utf-8")
    for mode, by in (("fast", "attention"), ("thorough", "occlusion")):
        out = tmp_path / f"align.{mode}.jsonl"
        command = ["align", "--model", str(bundles["new"]), "-i", str(pairs), "-o", str(out), "--format", "jsonl"]
        assert cli_main([*command, "--threads", "1", "--quality", mode]) == 0
        assert [json.loads(line)["quality"]["untranslated_by"] for line in out.read_text().splitlines()] == [by] * 2
        out = tmp_path / f"translate.{mode}.jsonl"
        command = ["translate", "-m", str(bundles["new"]), "-i", str(pairs), "--input-format", "tsv", "-o", str(out)]
        assert cli_main([*command, "-f", "jsonl", "--alignment", "--threads", "1", "--quality", mode]) == 0
        records = [json.loads(line) for line in out.read_text().splitlines()]
        assert [r["quality"]["untranslated_by"] for r in records] == [by] * 2

    # The mode decides what the records hold: a resume with another is refused, naming it; a
    # job file written before the flag existed was a thorough run's.
    def parse(*more: str) -> argparse.Namespace:
        args = build_parser([*command, *more]).parse_args([*command, *more])
        fill_unset_options(args)  # as the command does before it records or compares its options
        return args

    thorough, fast = parse("--resume", "--quality", "thorough"), parse("--resume", "--quality", "fast")
    job_file(out).write_text(json.dumps(job_options(thorough)))
    assert check_resume_options(thorough) == [] and "quality: 'thorough'" in check_resume_options(fast)[0]
    job_file(out).write_text(json.dumps({k: v for k, v in job_options(thorough).items() if k != "quality"}))
    assert check_resume_options(thorough) == [] and len(check_resume_options(fast)) == 1


def test_the_service_setting_reaches_every_quality_block(bundles: dict[str, Path]) -> None:
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    assert parser.parse_args(["--quality", "fast"]).quality == "fast"
    assert Settings().quality == "thorough"
    with pytest.raises(ValueError, match="thorough, fast"):
        Settings(quality="quick")
    source, target = PAIRS[0]
    for mode, by in (("fast", "attention"), ("thorough", "occlusion")):
        with serving(bundles["new"].parent, quality=mode) as (url, _), httpx.Client(base_url=url, timeout=60) as http:
            body = http.post("/v1/translate", json={"text": source, "alignment": {}}).json()
            assert [s["quality"]["untranslated_by"] for s in body["translations"][0]["sentences"]] == [by]
            body = http.post("/v1/align", json={"text": source, "translation": target, "source": "de"}).json()
            assert body["alignments"][0]["quality"]["untranslated_by"] == by
            libre = http.post("/translate", json={"q": source, "source": "de", "target": "en", "alignment": True})
            assert libre.json()["quality"]["untranslated_by"] == by
            schema = http.get("/openapi.json").json()["components"]["schemas"]["Quality"]
            assert "untranslated_by" in schema["required"]
            assert schema["properties"]["untranslated_by"]["enum"] == list(UNTRANSLATED_BY)
