"""The HTTP layer over a scripted engine (fast), the sentence splitter, the micro-batcher.

The engine is the real `TranslatorEngine` and `Translator` over a scripted `EchoBackend`
(tests/echo_backend.py) that "translates" the toy alphabet word for word with a known,
diagonal cross-attention, so every answer (texts, scores, maps, offsets) is predictable.
The service's limits, keys, timeouts and CORS are in test_service_limits.py; the same
contract against a real uvicorn server and an onnxruntime bundle is in
test_service_server.py.
"""

from __future__ import annotations

import io
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from echo_backend import EchoBackend, make_client
from fastapi.testclient import TestClient

from data.tokenizer import Tokenizer
from seq2seq.analysis.heatmap import FLAG_COLOUR
from seq2seq.analysis.quality import QualityThresholds
from seq2seq.core.config import DecodeConfig
from seq2seq.core.segment import split_sentences
from seq2seq.decoding.translator import Translator
from service.compute.batching import MicroBatcher
from service.compute.engine import TranslatorEngine, model_call

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def client(echo_engine: TranslatorEngine) -> TestClient:
    with make_client(echo_engine, char_limit=200, batch_limit=4) as client:
        yield client


# --------------------------------------------------------------------------- LibreTranslate


def test_translate_single_and_list(client: TestClient) -> None:
    single = client.post("/translate", json={"q": "a b c", "source": "de", "target": "en"})
    assert single.status_code == 200
    assert single.json() == {"translatedText": "a b c", "alternatives": []}
    listed = client.post("/translate", json={"q": ["a b", "c d e"], "source": "de", "target": "en", "alternatives": 2})
    body = listed.json()
    assert body["translatedText"] == ["a b", "c d e"]
    assert len(body["alternatives"]) == 2 and all(len(a) == 2 for a in body["alternatives"])


def test_translate_form_bodies(client: TestClient) -> None:
    form = client.post("/translate", data={"q": "a b", "source": "de", "target": "en"})
    assert form.json()["translatedText"] == "a b"
    multipart = client.post("/translate", files={"q": (None, "c d"), "source": (None, "de"), "target": (None, "en")})
    assert multipart.json()["translatedText"] == "c d"


def test_translate_alignment_extension(client: TestClient) -> None:
    text = "a b c\nd e"  # two sentences (toy words only: the toy tokenizer knows no punctuation)
    body = client.post("/translate", json={"q": text, "source": "de", "target": "en", "alignment": True}).json()
    assert body["translatedText"] == text
    alignment = body["alignment"]
    assert alignment["level"] == "word"
    matrix = np.array(alignment["matrix"])
    assert matrix.shape == (len(alignment["target_tokens"]), len(alignment["source_tokens"]))
    assert np.allclose(matrix.sum(axis=1), 1.0, atol=1e-3)
    for token in alignment["source_tokens"]:
        assert text[token["start"] : token["end"]] == token["text"]
    assert alignment["links"] == "0-0 1-1 2-2 3-3 4-4"
    for token in alignment["target_tokens"]:
        assert body["translatedText"][token["start"] : token["end"]] == token["text"]


def test_alignment_brings_quality_blocks_with_the_translators_thresholds(
    echo_engine: TranslatorEngine, toy_tokenizer_path: Path
) -> None:
    text = "a b c\nd e"  # two sentences: 3 + 2 words
    with make_client(echo_engine) as client:
        body = client.post("/translate", json={"q": text, "source": "de", "target": "en", "alignment": True}).json()
        quality = body["quality"]
        assert len(quality["source_coverage"]) == len(body["alignment"]["source_tokens"]) == 5
        assert quality["untranslated"] == [] and quality["ungrounded"] == []  # the echo reads every word
        assert quality["source_coverage"] == pytest.approx([1.0] * 5, abs=1e-3)
        assert 0.0 <= quality["confidence"] <= 1.0
        assert "quality" not in client.post("/translate", json={"q": text, "source": "de", "target": "en"}).json()
        schema = client.get("/openapi.json").json()["components"]["schemas"]
        assert "untranslated" in schema["Quality"]["properties"]
        assert "quality" in schema["AlignedSentence"]["properties"]

    # Thresholds no word can meet: every word is flagged, counted per text on /translate and
    # per sentence on /v1/translate.
    tokenizer = Tokenizer(toy_tokenizer_path)
    strict = Translator(
        EchoBackend(tokenizer.vocab_size),
        tokenizer,
        quality=QualityThresholds(untranslated_coverage=2.0, ungrounded_peak=1.5),
    )
    engine = TranslatorEngine({("de", "en"): ("de-en", strict)}, window_s=0.002)
    try:
        with make_client(engine) as client:
            libre = client.post(
                "/translate", json={"q": [text, "f"], "source": "de", "target": "en", "alignment": True}
            ).json()
            assert [q["untranslated"] for q in libre["quality"]] == [[0, 1, 2, 3, 4], [0]]
            assert [q["ungrounded"] for q in libre["quality"]] == [[0, 1, 2, 3, 4], [0]]
            native = client.post("/v1/translate", json={"text": text, "alignment": True}).json()
            sentences = native["translations"][0]["sentences"]
            assert [s["quality"]["untranslated"] for s in sentences] == [[0, 1, 2], [0, 1]]
            assert [len(s["source_words"]) for s in sentences] == [3, 2]
            # The word-level heatmap frames the flagged columns and rows; a subword one has no flags.
            svg = client.get("/v1/heatmap", params={"q": text, "source": "de", "format": "svg"}).text
            assert svg.count(FLAG_COLOUR) >= 2 * 5 and "untranslated source word" in svg
            subword = client.get(
                "/v1/heatmap", params={"q": text, "source": "de", "format": "svg", "level": "subword"}
            ).text
            assert FLAG_COLOUR not in subword
    finally:
        engine.close()


def test_auto_source_and_detect(client: TestClient) -> None:
    auto = client.post("/translate", json={"q": "a b", "source": "auto", "target": "en"}).json()
    assert auto["translatedText"] == "a b" and auto["detectedLanguage"]["language"] == "de"
    detected = client.post("/detect", json={"q": "Das Haus ist sehr klein und der Hund ist alt."}).json()
    assert detected[0]["language"] == "de" and detected[0]["confidence"] > 50
    french = client.post(
        "/translate", json={"q": "La maison est très petite et le chien est vieux.", "source": "auto", "target": "en"}
    )
    assert french.status_code == 422 and "French" in french.json()["error"]


def test_languages(client: TestClient) -> None:
    assert client.get("/languages").json() == [
        {"code": "de", "name": "German", "targets": ["en"]},
        {"code": "en", "name": "English", "targets": []},
    ]


BAD_LIBRE = [
    ({"json": {"source": "de", "target": "en"}}, "missing q"),
    ({"json": {"q": "", "source": "de", "target": "en"}}, "missing q"),
    ({"json": {"q": [], "source": "de", "target": "en"}}, "missing q"),
    ({"json": {"q": 5, "source": "de", "target": "en"}}, "string or a list"),
    ({"json": {"q": ["a", 1], "source": "de", "target": "en"}}, "string or a list"),
    ({"json": {"q": {"x": 1}, "source": "de", "target": "en"}}, "string or a list"),
    ({"json": {"q": "a", "source": "fr", "target": "en"}}, "not served"),
    ({"json": {"q": "a", "source": "de", "target": "xx"}}, "not served"),
    ({"json": {"q": "a", "source": "de"}}, "missing target"),
    ({"json": {"q": ["a"] * 5, "source": "de", "target": "en"}}, "batch limit"),
    ({"json": {"q": "a", "source": "de", "target": "en", "alternatives": 99}}, "alternatives + 1) must be"),
    ({"json": {"q": "a", "source": "de", "target": "en", "alternatives": -1}}, "alternatives"),
    ({"json": {"q": "a", "source": "de", "target": "en", "format": "pdf"}}, "format"),
    ({"json": {"q": "a", "source": "de", "target": "en", "alignment": {"layer": 7}}}, "layer 7"),
    ({"content": b'{"q": "a", "source": ', "headers": {"content-type": "application/json"}}, "malformed JSON"),
    ({"content": b'["a"]', "headers": {"content-type": "application/json"}}, "must be an object"),
    (
        {
            "content": b'{"q": "\xff\xfe", "source": "de", "target": "en"}',
            "headers": {"content-type": "application/json"},
        },
        "UTF-8",
    ),
    (
        {"content": b"q=%FF&source=de&target=en", "headers": {"content-type": "application/x-www-form-urlencoded"}},
        "UTF-8",
    ),
    ({"content": b"", "headers": {"content-type": "application/json"}}, "empty body"),
]


@pytest.mark.parametrize("request_kwargs,message", BAD_LIBRE, ids=[m for _, m in BAD_LIBRE])
def test_translate_bad_input(client: TestClient, request_kwargs: dict, message: str) -> None:
    response = client.post("/translate", **request_kwargs)
    assert response.status_code == 400, response.text
    assert message in response.json()["error"]


# --------------------------------------------------------------------------- native API


def test_native_translate(client: TestClient) -> None:
    text = "a b c d\ne f"
    response = client.post(
        "/v1/translate",
        json={
            "text": text,
            "source": "de",
            "target": "en",
            "beam_size": 3,
            "n_best": 2,
            "alignment": {"level": "subword", "layer": 0},
        },
    )
    assert response.status_code == 200, response.text
    (translation,) = response.json()["translations"]
    assert translation["source"] == "de" and len(translation["sentences"]) == 2
    assert len(translation["alternatives"]) == 1
    for sentence in translation["sentences"]:
        assert text[sentence["source_start"] : sentence["source_end"]] in ("a b c d", "e f")
        assert translation["text"][sentence["target_start"] : sentence["target_end"]] == sentence["text"]
        for side, whole in (("source", text), ("target", translation["text"])):
            for token in sentence[f"{side}_tokens"] + sentence[f"{side}_words"]:
                assert whole[token["start"] : token["end"]] == token["text"]
        alignment = sentence["alignment"]
        assert alignment["level"] == "subword" and alignment["layer"] == 0 and alignment["heads"] == "mean"
        matrix = np.array(alignment["matrix"])
        assert np.allclose(matrix, np.eye(len(matrix)))  # the echo attends to the copied token
        assert sentence["word_links"] == " ".join(f"{i}-{i}" for i in range(len(sentence["target_words"])))
        assert len(sentence["alternatives"]) == 1 and sentence["alternatives"][0]["alignment"]["matrix"]


def test_native_early_exit_reaches_the_search(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    from seq2seq.decoding import translator as translator_module

    seen: list[bool] = []
    search = translator_module.beam_search

    def recording(backend, src_ids, src_mask, config, *rest):
        seen.append(config.early_exit)
        return search(backend, src_ids, src_mask, config, *rest)

    monkeypatch.setattr(translator_module, "beam_search", recording)
    for asked in (True, False, None):
        seen.clear()
        body = {"text": "a b c", "beam_size": 3, **({} if asked is None else {"early_exit": asked})}
        response = client.post("/v1/translate", json=body)
        assert response.status_code == 200, response.text
        assert response.json()["translations"][0]["text"] == "a b c"
        assert seen and set(seen) == {bool(asked)}  # left out: off
    refused = client.post("/v1/translate", json={"text": "a", "early_exit": "fast"})
    assert refused.status_code == 400 and "early_exit" in refused.text


def test_native_batch_and_no_alignment(client: TestClient) -> None:
    body = client.post("/v1/translate", json={"texts": ["a", "b c"], "alignment": False}).json()
    assert [t["text"] for t in body["translations"]] == ["a", "b c"]
    assert body["translations"][0]["sentences"][0]["alignment"] is None
    blank = client.post("/v1/translate", json={"texts": ["a", "  "]})  # as an empty text: nothing to translate
    assert blank.status_code == 400 and "texts[1]: text is only whitespace" in blank.json()["error"]


@pytest.mark.parametrize(
    "body,message",
    [
        ({"text": "a", "texts": ["b"]}, "exactly one"),
        ({}, "exactly one"),
        ({"texts": []}, "empty"),
        ({"text": 3}, "text"),
        ({"text": "a", "beam_size": 0}, "beam_size"),
        ({"text": "a", "beam_size": 2, "n_best": 9}, "n_best"),
        ({"text": "a\x00b"}, "control character U+0000"),
        ({"text": "a", "alignment": {"heads": [9]}}, "heads"),
        ({"text": "a", "alignment": {"level": "char"}}, "level"),
        ({"text": "a", "colour": "red"}, "colour"),
        ({"text": "a", "target": "fr"}, "not a served target"),
    ],
)
def test_native_bad_input(client: TestClient, body: dict, message: str) -> None:
    response = client.post("/v1/translate", json=body)
    assert response.status_code == 400, response.text
    assert message in response.json()["error"]


def test_heatmap_downloads(client: TestClient) -> None:
    import matplotlib.image

    png = client.get("/v1/heatmap", params={"q": "a b c", "format": "png", "width": 640, "height": 480})
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"
    assert png.headers["content-disposition"] == 'attachment; filename="alignment-de-en-a-b-c.png"'
    assert png.content.startswith(b"\x89PNG\r\n\x1a\n")
    assert matplotlib.image.imread(io.BytesIO(png.content)).shape[:2] == (480, 640)
    svg = client.post("/v1/heatmap", json={"q": "a b c", "format": "svg", "level": "subword", "head": [1]})
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    labels = [e.text for e in ET.fromstring(svg.content).iter("{http://www.w3.org/2000/svg}text")]
    assert {"a", "b", "c"} <= set(labels) and any("heads 1" in (label or "") for label in labels)


@pytest.mark.parametrize(
    "params,message",
    [
        ({"q": "a", "width": 10**9}, "width"),
        ({"q": "a", "height": 5}, "height"),
        ({"q": "a", "width": "huge"}, "width"),
        ({"q": ""}, "q: empty text"),
        ({"q": " \t "}, "q: text is only whitespace"),
        ({}, "q"),
        ({"q": "a", "format": "gif"}, "format"),
        ({"q": "a", "layer": 5}, "layer"),
    ],
)
def test_heatmap_bad_input(echo_engine: TranslatorEngine, params: dict, message: str) -> None:
    with make_client(echo_engine, heatmap_max_tokens=50) as client:
        response = client.get("/v1/heatmap", params=params)
        assert response.status_code == 400, response.text
        assert message in response.json()["error"]


def test_health_metrics_and_unknown_routes(client: TestClient) -> None:
    assert client.get("/health").json() == {
        "status": "ok",
        "failed": [],
        # The search settings a request that sets none gets: here DecodeConfig's (no bundle).
        "models": [{"name": "de-en", "source": "de", "target": "en", "decoding": DecodeConfig().search_settings}],
    }
    client.post("/translate", json={"q": "a b", "source": "de", "target": "en"})
    assert client.get("/nowhere").status_code == 404
    text = client.get("/metrics").text
    assert 'crossalign_requests_total{method="POST",route="/translate",status="200"}' in text
    assert 'crossalign_request_seconds_bucket{le="0.005",method="POST",route="/translate"}' in text
    assert 'route="unmatched"' in text
    assert "crossalign_tokens_total" in text and "crossalign_requests_in_flight" in text
    assert client.get("/docs").status_code == 200
    assert "/v1/heatmap" in client.get("/openapi.json").json()["paths"]


# --------------------------------------------------------------------------- library pieces


def test_split_sentences_offsets() -> None:
    text = "Das ist gut. Er kam am 3. Mai, z.B. mit Dr. Weber!  Wo?\nNeue Zeile"
    spans = split_sentences(text)
    assert [text[s:e] for s, e in spans] == [
        "Das ist gut.",
        "Er kam am 3. Mai, z.B. mit Dr. Weber!",
        "Wo?",
        "Neue Zeile",
    ]
    assert split_sentences("   \n ") == []
    long = "wort " * 300
    assert all(e - s <= 100 for s, e in split_sentences(long, max_chars=100))


def test_micro_batcher_batches_concurrent_requests(echo_engine: TranslatorEngine) -> None:
    translator = echo_engine.models["de", "en"].translator
    sizes: list[int] = []
    batcher = MicroBatcher(model_call(translator), window_s=0.05, max_sentences=64, on_batch=sizes.append)
    texts = ["a b", "c", "d e f", "g h a b"] * 4
    results: dict[int, str] = {}

    def one(index: int) -> None:
        results[index] = batcher.submit([texts[index]], DecodeConfig(beam_size=2)).result(timeout=10)[0].text

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(texts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    batcher.close()
    assert [results[i] for i in range(len(texts))] == texts
    assert max(sizes) > 1 and sum(sizes) == len(texts)


def test_service_imports_no_torch() -> None:
    code = "import sys, service.app, service.serve, seq2seq.analysis.heatmap; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


@pytest.mark.parametrize("step_shift", [False, True])
def test_heatmap_caption_says_how_the_map_was_read(step_shift: bool) -> None:
    from seq2seq.analysis.heatmap import _parts
    from seq2seq.core.alignment import Alignment, Token

    tokens = [Token("a", 0, 1), Token("b", 2, 3)]
    alignment = Alignment("word", tokens, tokens, np.eye(2), [(0, 0), (1, 1)], 1, (2,), step_shift)
    caption = _parts(alignment)[-1]
    assert caption.startswith("word alignment, layer 1, heads 2")
    assert ("step-shifted" in caption) == step_shift


def test_heatmap_caption_wraps_inside_the_image_and_the_bytes_are_stable() -> None:
    from seq2seq.analysis.heatmap import _parts, render_heatmap
    from seq2seq.core.alignment import Alignment, Token

    tokens = [Token(w, 0, 1) for w in ["Das", "Haus", "ist", "sehr", "klein"]]
    alignment = Alignment("subword", tokens, tokens, np.eye(5), [], 1, (), True)
    svg = render_heatmap(alignment, "svg", width=300)
    assert svg == render_heatmap(alignment, "svg", width=300)  # no timestamp, fixed ids
    root = ET.fromstring(svg)
    width = float(root.get("width").removesuffix("pt")) * 100 / 72
    caption = _parts(alignment)[-1]
    lines = [
        e.text
        for e in root.iter("{http://www.w3.org/2000/svg}text")
        if e.text and len(e.text) > 8 and e.text in caption
    ]
    assert " ".join(lines) == caption and len(lines) >= 2  # all of it, on several lines
    assert all(len(line) * 7.0 <= width for line in lines), lines  # each fits the image's width
