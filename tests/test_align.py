"""Forced alignment (`crossalign align`, `POST /v1/align`) and AER evaluation.

The tiny model of test_export (a few seconds of training on a word-for-word toy language)
is exported once per module. Guided alignment is in test_guided.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from toy import SENTENCES, toy_pairs

from seq2seq.analysis.aer import read_gold, write_pharaoh
from seq2seq.cli import main as cli_main
from seq2seq.core.config import AlignmentError as ForcedAlignmentError
from seq2seq.core.config import DecodeConfig
from seq2seq.decoding.forced import ForcedAlignment, align_pair, align_pairs, teacher_force_by_steps
from seq2seq.decoding.translator import Translator
from seq2seq.loading import load_translator
from seq2seq.loading import load_translator as load_onnx_translator
from service.app import create_app
from service.compute.engine import TranslatorEngine
from service.settings import Settings

REPO = Path(__file__).resolve().parents[1]
PAIRS = toy_pairs(6, seed=7)


@pytest.fixture(scope="module")
def onnx_translator(tiny_bundle: Path) -> Translator:
    return load_onnx_translator(tiny_bundle, threads=1)


@pytest.fixture(scope="module")
def torch_translator(tiny_bundle: Path) -> Translator:
    return load_translator(tiny_bundle, "torch")


class StepOnly:
    """A backend that teacher-forces through encode and step alone: the step-by-step path."""

    def __init__(self, backend):
        self.inner, self.config = backend, backend.config
        self.bos_id, self.eos_id, self.pad_id = backend.bos_id, backend.eos_id, backend.pad_id
        self.cross_per_sentence = backend.cross_per_sentence

    def encode(self, *args):
        return self.inner.encode(*args)

    def step(self, *args, **kwargs):
        return self.inner.step(*args, **kwargs)

    def teacher_force(self, src_ids, src_mask, tgt_ids):
        return teacher_force_by_steps(self, src_ids, src_mask, tgt_ids)


# --------------------------------------------------------------------------- the library


@pytest.mark.parametrize("layer,heads,step_shift", [(None, None, False), (0, (), True), (-1, (1, 3), False)])
def test_backends_agree_on_forced_alignment(
    onnx_translator: Translator, torch_translator: Translator, layer, heads, step_shift
) -> None:
    stepwise = Translator(StepOnly(onnx_translator.backend), onnx_translator.tokenizer)
    results = [
        align_pairs(t, PAIRS, "subword", layer, heads, step_shift)
        for t in (onnx_translator, torch_translator, stepwise)
    ]
    for onnx, torch_, steps in zip(*results):
        assert isinstance(onnx, ForcedAlignment)
        assert onnx.links == torch_.links == steps.links
        np.testing.assert_allclose(torch_.word.matrix, onnx.word.matrix, atol=1e-4, rtol=0)
        np.testing.assert_allclose(steps.alignment.matrix, onnx.alignment.matrix, atol=1e-4, rtol=0)
        assert onnx.word.matrix.shape == (len(onnx.word.target_tokens), len(onnx.word.source_tokens))
        np.testing.assert_allclose(onnx.word.matrix.sum(axis=1), 1.0, atol=1e-6)


def test_forced_alignment_of_the_model_translation_equals_its_search_alignment(torch_translator: Translator) -> None:
    """Teacher forcing the model's own translation reproduces the map the search stored."""
    for sentence in SENTENCES:
        result = torch_translator.translate(sentence, DecodeConfig(beam_size=4))
        searched = torch_translator.align(sentence, result, "word")
        forced = align_pair(torch_translator, sentence, result.text)
        assert forced.links == searched.links
        np.testing.assert_allclose(forced.word.matrix, searched.matrix, atol=1e-5, rtol=0)
        assert [t.text for t in forced.word.target_tokens] == [t.text for t in searched.target_tokens]


def test_unalignable_pairs_are_errors_in_place(onnx_translator: Translator) -> None:
    results = align_pairs(
        onnx_translator, [("der Hund", "  "), PAIRS[0], ("", "the dog"), (" ".join(["der"] * 300), "the")]
    )
    assert [type(r) for r in results] == [
        ForcedAlignmentError,
        ForcedAlignment,
        ForcedAlignmentError,
        ForcedAlignmentError,
    ]
    assert "empty target" in str(results[0]) and "too long" in str(results[3])
    with pytest.raises(ForcedAlignmentError, match="layer 5"):
        align_pair(onnx_translator, *PAIRS[0], layer=5)


# --------------------------------------------------------------------------- crossalign align


def test_align_cli_pharaoh_and_jsonl_with_bad_lines(
    tiny_bundle: Path, onnx_translator: Translator, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    lines = [f"{s}\t{t}".encode() for s, t in PAIRS[:3]]
    lines[1:1] = [b"no tab here", b"der Hund\t", b"der \xff Hund\tthe dog"]
    lines.append(f"{PAIRS[3][0]}\t{PAIRS[3][1]}\tsentence".encode())  # a third column is ignored
    source = tmp_path / "pairs.tsv"
    source.write_bytes(b"\n".join(lines) + b"\n")
    expected = [a.word.pharaoh for a in align_pairs(onnx_translator, PAIRS[:4])]

    pharaoh = tmp_path / "out.pharaoh"
    arguments = ["align", "--model", str(tiny_bundle), "-i", str(source), "-o", str(pharaoh), "--threads", "1"]
    assert cli_main(arguments) == 3
    written = pharaoh.read_text().split("\n")[:-1]
    assert written == [expected[0], "", "", "", expected[1], expected[2], expected[3]]
    errors = capsys.readouterr().err
    assert "line 2: expected source<TAB>target" in errors and "line 4: invalid UTF-8" in errors

    jsonl = tmp_path / "out.jsonl"
    assert (
        cli_main(
            [
                "align",
                "--model",
                str(tiny_bundle),
                "-i",
                str(source),
                "-o",
                str(jsonl),
                "--format",
                "jsonl",
                "--backend",
                "torch",
                "--layer",
                "0",
                "--heads",
                "1",
                "--step-shift",
                "--level",
                "subword",
            ]
        )
        == 3
    )
    records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [r["line"] for r in records] == list(range(1, 8))
    assert records[2]["error"] == "target: empty text" and "error" not in records[0]
    first = records[0]
    assert first["source"] == PAIRS[0][0] and first["target"] == PAIRS[0][1]
    assert [w["text"] for w in first["source_words"]] == PAIRS[0][0].split()
    matrix = np.array(first["matrix"])
    assert matrix.shape == (len(first["target_words"]), len(first["source_words"]))
    assert (first["layer"], first["heads"], first["step_shift"]) == (0, [1], True)
    assert first["subword_alignment"]["level"] == "subword"
    links = [tuple(map(int, link.split("-"))) for link in first["word_alignment"].split()]
    assert links == sorted((int(np.argmax(row)), j) for j, row in enumerate(matrix))


class FailsOn:
    """A backend whose teacher forcing raises for any batch holding a given target: a pair
    that breaks inside the model (as an input the checks let through could)."""

    def __init__(self, backend, poison: list[int]):
        self.inner, self.poison, self.calls = backend, poison, []
        self.config, self.bos_id, self.eos_id, self.pad_id = (
            backend.config,
            backend.bos_id,
            backend.eos_id,
            backend.pad_id,
        )
        self.cross_per_sentence = backend.cross_per_sentence

    def encode(self, *args):
        return self.inner.encode(*args)

    def step(self, *args, **kwargs):
        return self.inner.step(*args, **kwargs)

    def teacher_force(self, src_ids, src_mask, tgt_ids):
        self.calls.append(len(tgt_ids))
        if any(
            list(row[: len(self.poison)]) == self.poison
            and (len(row) == len(self.poison) or row[len(self.poison)] == self.pad_id)
            for row in tgt_ids
        ):
            raise RuntimeError("the model broke")
        return self.inner.teacher_force(src_ids, src_mask, tgt_ids)


def test_align_cli_applies_the_service_input_rules_and_retries_a_failed_batch_line_by_line(
    tiny_bundle: Path,
    onnx_translator: Translator,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    guilty = PAIRS[2]
    backend = FailsOn(onnx_translator.backend, onnx_translator.tokenizer.encode(guilty[1]))
    monkeypatch.setattr(
        "seq2seq.cli.align.load_translator", lambda *args, **kwargs: Translator(backend, onnx_translator.tokenizer)
    )
    lines = [f"{s}\t{t}".encode() for s, t in PAIRS[:4]]
    lines[1:1] = [b"der \x00 Hund\tthe dog", b"der Hund\tthe \x1b[31mdog", b"der Hund\xc2\x85\tthe dog"]
    source = tmp_path / "pairs.tsv"
    source.write_bytes(b"\n".join(lines) + b"\n")
    output = tmp_path / "out.jsonl"

    assert (
        cli_main(["align", "--model", str(tiny_bundle), "-i", str(source), "-o", str(output), "--format", "jsonl"]) == 3
    )

    records = [json.loads(line) for line in output.read_text().split("\n")[:-1]]  # (U+0085 is no record end)
    assert [r["line"] for r in records] == list(range(1, 8))
    assert [r.get("error", "")[:30] for r in records] == [
        "",
        "source: control character U+00",
        "target: control character U+00",
        "source: control character U+00",
        "",
        "alignment failed: RuntimeError",
        "",
    ]
    assert "U+0000 at column 5" in records[1]["error"] and "U+001B" in records[2]["error"]
    assert "U+0085" in records[3]["error"]
    expected = [a.word.pharaoh for a in align_pairs(onnx_translator, [PAIRS[0], PAIRS[1], PAIRS[3]])]
    assert [records[i]["word_alignment"] for i in (0, 4, 6)] == expected
    assert max(backend.calls) > 1, "the good pairs were batched together first"
    assert "line 6: alignment failed" in capsys.readouterr().err

    # /v1/align: the same pair fails its request alone, as a server error, not as "too long".
    engine = TranslatorEngine({("de", "en"): ("de-en", Translator(backend, onnx_translator.tokenizer))})
    with TestClient(create_app(Settings(), engine=engine), raise_server_exceptions=False) as client:
        pairs = [{"text": s, "translation": t} for s, t in PAIRS[:4]]
        failed = client.post("/v1/align", json={"pairs": pairs, "source": "de"})
        assert failed.status_code == 500 and failed.json()["error"].startswith("pairs[2]: alignment failed")
        good = client.post("/v1/align", json={"pairs": pairs[:2] + pairs[3:], "source": "de"})
        assert good.status_code == 200 and len(good.json()["alignments"]) == 3


# --------------------------------------------------------------------------- POST /v1/align


def test_v1_align_takes_the_work_cap_and_the_queue_bound(onnx_translator: Translator) -> None:
    """Forced alignment is admitted as translations are: 413 over the per-request work cap,
    503 + Retry-After while translations fill the queue, and its own work is released."""
    import threading

    engine = TranslatorEngine({("de", "en"): ("de-en", onnx_translator)}, window_s=0.002, max_queue_work=1000)
    batcher = engine.models["de", "en"].batcher
    gate, translate_batch = threading.Event(), batcher.run
    batcher.run = lambda texts, config, wanted, observe: (
        gate.wait(30) and translate_batch(texts, config, wanted, observe)
    )
    settings = Settings(max_request_work=400, max_queue_work=1000)
    source, target = PAIRS[0]
    with TestClient(create_app(settings, engine=engine), raise_server_exceptions=False) as client:
        heavy = {"pairs": [{"text": source, "translation": target}] * (400 // len(source + target) + 1), "source": "de"}
        assert client.post("/v1/align", json=heavy).status_code == 413
        queued = batcher.submit([source] * 39, DecodeConfig(beam_size=1))  # translations: 975 units of 1000
        busy = client.post("/v1/align", json={"text": source, "translation": target, "source": "de"})
        assert busy.status_code == 503 and int(busy.headers["Retry-After"]) >= 1, busy.text
        gate.set()
        queued.result(timeout=30)
        answer = client.post("/v1/align", json={"text": source, "translation": target, "source": "de"})
        assert answer.status_code == 200 and answer.json()["alignments"][0]["word_alignment"]
    assert batcher.queued_work == 0


def test_v1_align_matches_the_library(onnx_translator: Translator, torch_translator: Translator) -> None:
    engine = TranslatorEngine({("de", "en"): ("de-en", onnx_translator)}, window_s=0.002)
    with TestClient(create_app(Settings(), engine=engine), raise_server_exceptions=False) as client:
        source, target = PAIRS[0]
        body = client.post("/v1/align", json={"text": source, "translation": target, "source": "de"}).json()
        (item,) = body["alignments"]
        assert item["word_alignment"] == align_pair(torch_translator, source, target).word.pharaoh
        assert item["text"] == source and item["translation"] == target
        for word in item["source_words"]:
            assert source[word["start"] : word["end"]] == word["text"]
        # The quality block is the library's for the same pair (as `crossalign align --format jsonl` writes it).
        assert item["quality"] == align_pair(onnx_translator, source, target).to_record()["quality"]
        assert set(item["quality"]) >= {"untranslated", "ungrounded", "confidence"}

        many = client.post(
            "/v1/align",
            json={
                "pairs": [{"text": s, "translation": t} for s, t in PAIRS[:3]],
                "source": "de",
                "target": "en",
                "layer": 0,
                "heads": [2],
                "level": "subword",
            },
        ).json()
        expected = align_pairs(torch_translator, PAIRS[:3], "subword", 0, (2,))
        assert [a["word_alignment"] for a in many["alignments"]] == [e.word.pharaoh for e in expected]
        assert all(a["subword_alignment"]["heads"] == [2] for a in many["alignments"])

        for bad, message in [
            ({"text": source, "translation": " ", "source": "de"}, "translation: text is only whitespace"),
            ({"text": source, "translation": target, "source": "de", "layer": 7}, "layer 7"),
            ({"text": source, "source": "de"}, "translation"),
            ({"pairs": [], "source": "de"}, "empty"),
        ]:
            response = client.post("/v1/align", json=bad)
            assert response.status_code == 400 and message in response.json()["error"], response.json()
    engine.close()


# --------------------------------------------------------------------------- crossalign eval --gold


def test_eval_gold_scores_a_pharaoh_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    gold_path = REPO / "data" / "gold" / "de-en.gold.tsv"
    gold = read_gold(gold_path)
    hypothesis = tmp_path / "sure.pharaoh"
    write_pharaoh(hypothesis, [pair.sure for pair in gold])
    assert cli_main(["eval", "--gold", str(gold_path), "--hyp", str(hypothesis), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["aer"], result["precision"], result["recall"], result["pairs"]) == (0.0, 100.0, 100.0, len(gold))
    assert (
        cli_main(["eval", "--gold", str(gold_path), "--hyp", str(REPO / "data/gold/eflomal.gold.pharaoh"), "--json"])
        == 0
    )
    assert json.loads(capsys.readouterr().out)["aer"] == 13.28  # the baseline of data/gold/README.md


def test_alignment_sources_ranks_every_source(tiny_bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from export import alignment_sources

    gold = tmp_path / "gold.tsv"
    gold.write_text("".join(f"{s}\t{t}\t{' '.join(f'{i}-{i}' for i in range(len(s.split())))}\n" for s, t in PAIRS))
    assert (
        alignment_sources.main(
            ["--model", str(tiny_bundle), "--gold", str(gold), "--json", str(tmp_path / "rows.json")]
        )
        == 0
    )
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert len(rows) == 2 * 2 * (1 + 4)  # 2 layers x (mean + 4 heads) x shift off/on
    assert [r["aer"] for r in rows] == sorted(r["aer"] for r in rows)
    assert "best: layer" in capsys.readouterr().out
