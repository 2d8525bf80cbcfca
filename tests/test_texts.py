"""A text is its sentences, once (seq2seq/decoding/texts.py): every surface answers the same input the same.

The library's `translate_texts` over the shipped de-en model is the reference; `/v1/translate`,
`/translate` (plain text and html), the stream, `crossalign translate -f jsonl`, a document
(`/translate_file` and the library's `sentence_translator`) must give the same text, map,
terms and score for a text of two sentences. And the one score rule, the one split policy.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from test_stream import read_events

from seq2seq.cli import main as cli_main
from seq2seq.core.config import AlignmentOptions
from seq2seq.decoding.records import AlignmentMap, TermUse, aligned_sentence
from seq2seq.decoding.texts import TranslatedText, sentence_spans, text_score, translate_texts
from seq2seq.decoding.translator import TranslationResult, Translator
from seq2seq.documents.translate import sentence_translator

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "models" / "de-en"
# The text (the glossary makes a glossary term of it); a dictionary hint (a rare word) for the document.
CASES = {
    "glossary": ("Der Hund schläft im Garten. Die Katze sitzt auf dem Dach.", {"Garten": "yard"}),
    "dictionary": ("Die Gießkanne steht im Garten. Die Katze sitzt auf dem Dach.", None),
}
CLOSE = 2e-4  # scores are answered rounded to 4 decimals


@pytest.fixture(scope="module")
def shipped() -> Translator:
    from seq2seq.loading import load_translator

    return load_translator(SHIPPED)


@pytest.fixture(scope="module")
def client(shipped: Translator) -> Iterator[TestClient]:
    from echo_backend import make_client

    from service.compute.engine import TranslatorEngine

    engine = TranslatorEngine({("de", "en"): ("de-en", shipped)}, window_s=0.002)
    with make_client(engine) as client:
        yield client
    engine.close()


def reference(translator: Translator, text: str, glossary: dict[str, str] | None) -> TranslatedText:
    """The library's answer: the model's own search settings and map, the glossary."""
    options = AlignmentOptions().resolve(translator.config)
    config = translator.decode_defaults.override(glossary=tuple(glossary.items()) if glossary else None)
    config = config.override(alignment=options)
    (translated,) = translate_texts([text], lambda sentences: translator.translate_batch(sentences, config))
    assert len(translated.spans) == 2 and translated.terms, "the case must hold two sentences and a hint"
    return translated


def term_dicts(translated: TranslatedText) -> list[dict]:
    return [TermUse(**term.to_dict()).model_dump() for term in translated.terms]


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_api_the_stream_and_libretranslate_answer_a_text_as_the_library_does(
    shipped: Translator, client: TestClient, case: str
) -> None:
    text, glossary = CASES[case]
    expected = reference(shipped, text, glossary)
    asked = {"source": "de", "target": "en", **({"glossary": glossary} if glossary else {})}
    body = {"text": text, **asked}

    native = client.post("/v1/translate", json=body)
    assert native.status_code == 200, native.text
    (answer,) = native.json()["translations"]
    assert answer["text"] == expected.text
    assert answer["score"] == pytest.approx(expected.score, abs=CLOSE)
    sentences = [
        aligned_sentence(r, span, target).model_dump()
        for r, span, target in zip(expected.results, expected.spans, expected.target_spans)
    ]
    assert [s["alignment"] for s in answer["sentences"]] == [s["alignment"] for s in sentences]
    assert [t for s in answer["sentences"] for t in s["quality"]["terms"]] == term_dicts(expected)

    libre = client.post("/translate", json={"q": text, "alignment": True, **asked})
    assert libre.status_code == 200, libre.text
    libre_answer = libre.json()
    assert libre_answer["translatedText"] == expected.text
    assert libre_answer["alignment"] == AlignmentMap.from_alignment(expected.alignment()).model_dump()
    assert libre_answer["terms"] == term_dicts(expected)

    with client.stream("POST", "/v1/translate/stream", json=body) as response:
        assert response.status_code == 200
        events = list(read_events(response))
    streamed = [data["result"] for name, data in events if name == "sentence"]
    assert streamed == answer["sentences"]  # the sentences exactly as /v1/translate's
    (done,) = [data for name, data in events if name == "done"]
    assert done["translations"][0]["text"] == expected.text
    assert done["translations"][0]["score"] == answer["score"]


def test_marked_text_reports_its_terms_as_plain_text_does(shipped: Translator, client: TestClient) -> None:
    """The html path (/translate `format: html`) reports glossary terms: per text, one list per
    translated segment, spans into the segment's plain text."""
    text, glossary = CASES["glossary"]
    expected = reference(shipped, text, glossary)
    body = {"q": f"<p>{text}</p>", "source": "de", "target": "en", "format": "html", "glossary": glossary}
    answer = client.post("/translate", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["terms"] == [term_dicts(expected)]
    assert answer.json()["translatedText"] == f"<p>{expected.text}</p>"


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_batch_cli_writes_a_line_as_the_library_translates_the_text(
    shipped: Translator, tmp_path: Path, case: str
) -> None:
    text, glossary = CASES[case]
    expected = reference(shipped, text, glossary)
    source, output = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text(json.dumps({"text": text}) + "\n", encoding="utf-8")
    flags = ["-i", source, "--input-format", "jsonl", "-o", output, "-f", "jsonl", "--alignment"]
    if glossary:
        (tmp_path / "glossary.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in glossary.items()), encoding="utf-8")
        flags += ["--glossary", tmp_path / "glossary.tsv"]
    assert cli_main(["translate", "-m", str(SHIPPED), "--backend", "onnx", *map(str, flags)]) == 0
    (record,) = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert record["text"] == expected.text
    assert record["score"] == pytest.approx(expected.score, abs=CLOSE)
    assert record["alignment"] == AlignmentMap.from_alignment(expected.alignment()).model_dump()
    assert record["quality"]["terms"] == term_dicts(expected)  # spans into the whole line
    assert [(s["start"], s["end"]) for s in record["sentences"]] == expected.spans


def test_a_document_translates_its_paragraph_as_the_library_does(shipped: Translator, client: TestClient) -> None:
    """A document's segment is a text like any other: `/translate_file` writes the library's
    text with the word links of its map; the library's document translator carries its score and terms."""
    text, _ = CASES["dictionary"]
    expected = reference(shipped, text, None)
    upload = client.post(
        "/translate_file", files={"file": ("a.txt", text.encode())}, data={"source": "de", "target": "en"}
    )
    assert upload.status_code == 200, upload.text
    url = upload.json()["translatedFileUrl"].split("/download_file/")[1]
    assert client.get(f"/download_file/{url}").text.strip() == expected.text
    (sidecar,) = [json.loads(line) for line in client.get(f"/download_file/{url}?alignment=true").text.splitlines()]
    assert sidecar["translation"] == expected.text and sidecar["links"] == expected.word_map().pharaoh

    (translation,) = sentence_translator(shipped)([text])
    assert translation.text == expected.text and translation.alignment.pharaoh == expected.word_map().pharaoh
    assert translation.translated is not None
    assert translation.translated.score == pytest.approx(expected.score, abs=CLOSE)
    assert translation.translated.terms == expected.terms


def result(text: str, score: float, pieces: int) -> TranslationResult:
    return TranslationResult(text, score, [], [], target_ids=list(range(pieces)))


def test_the_score_of_a_text_weighs_each_sentence_by_the_pieces_it_produced() -> None:
    """One long sentence (9 pieces + EOS) at -1.0 and a one-piece one (+ EOS) at -4.0: every
    piece counts the same, (10 x -1 + 2 x -4) / 12, not the plain mean -2.5."""
    long, short = result("a b c", -1.0, 9), result("d", -4.0, 1)
    assert text_score([long, short]) == pytest.approx(-18 / 12)
    assert text_score([long]) == -1.0 and text_score([]) == 0.0
    translated = TranslatedText.joined("A B C. D.", [(0, 6), (7, 9)], [long, short])
    assert translated.text == "a b c d" and translated.score == pytest.approx(-1.5)
    best, runner_up = result("d", -4.0, 1), result("e f", -2.0, 2)
    best.alternatives = [runner_up]
    with_alternative = TranslatedText.joined("A B C. D.", [(0, 6), (7, 9)], [long, best])
    assert with_alternative.alternative(0) == ("a b c e f", pytest.approx((10 * -1.0 + 3 * -2.0) / 13))


def test_every_text_is_split_into_its_sentences_whatever_its_length() -> None:
    assert sentence_spans("Ja. Nein.") == [(0, 3), (4, 9)]  # two words: two sentences all the same
    assert sentence_spans("  Der Hund schläft.  ") == [(2, 19)]
    calls: list[list[str]] = []

    def translate(sentences: list[str]) -> list[TranslationResult]:
        calls.append(sentences)
        return [result(s.upper(), -1.0, len(s)) for s in sentences]

    texts = translate_texts(["Ja. Nein.", "Gut."], translate)
    assert calls == [["Ja.", "Nein.", "Gut."]]  # every sentence of every text, one batch
    assert [t.text for t in texts] == ["JA. NEIN.", "GUT."]
    assert texts[0].target_spans == [(0, 3), (4, 9)]


def test_the_retired_split_flag_is_taken_with_a_warning(
    batch_model_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from batch_toy import translate

    source, output = tmp_path / "in.txt", tmp_path / "out.jsonl"
    source.write_text("Der Hund ist klein . Das Haus ist alt .\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        code = translate(batch_model_dir, "-i", source, "-o", output, "-f", "jsonl", "--split-tokens", "500")
    assert code == 0 and "--split-tokens no longer applies" in caplog.text
    (record,) = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert [s["text"] for s in record["sentences"]] == ["Der Hund ist klein .", "Das Haus ist alt ."]
