"""The HTTP layer over a scripted engine (fast), the sentence splitter, the micro-batcher.

The engine is the real `TranslatorEngine` and `Translator` over a scripted `EchoBackend`
that "translates" the toy alphabet word for word with a known, diagonal cross-attention,
so every answer (texts, scores, maps, offsets) is predictable. The same contract against
a real uvicorn server and an onnxruntime bundle is in test_service_server.py.
"""

from __future__ import annotations

import io
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from data.tokenizer import Tokenizer
from seq2seq.backend import DecoderCache, StepOutput, TeacherForced
from seq2seq.config import DecodeConfig, ModelConfig
from seq2seq.forced import teacher_force_by_steps
from seq2seq.heatmap import FLAG_COLOUR
from seq2seq.quality import QualityThresholds
from seq2seq.segment import split_sentences
from seq2seq.translator import Translator
from service.app import create_app
from service.batching import MicroBatcher, work_units
from service.engine import TranslatorEngine
from service.settings import Settings

REPO = Path(__file__).resolve().parents[1]


class EchoBackend:
    """Copies the source token by token (p = 0.9), attending exactly to the copied position;
    EOS comes only after the last source token.

    The source ids are smuggled through cross_k, which the search expands and reorders
    like real encoder states.
    """

    def __init__(self, vocab_size: int):
        self.config = ModelConfig(
            vocab_size=vocab_size, d_model=8, n_heads=2, d_ff=16, encoder_layers=1, decoder_layers=2, max_positions=64
        )
        self.bos_id, self.eos_id, self.pad_id = 2, 3, 0
        self.vocab_size = vocab_size

    def encode(self, src_ids: np.ndarray, src_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ids = src_ids.astype(np.float32)[None, :, None, :, None]  # (1, B, 1, S, 1)
        cross = np.broadcast_to(ids, (2, src_ids.shape[0], 2, src_ids.shape[1], 1)).copy()
        return cross, cross

    def step(self, tokens, src_mask, cache: DecoderCache, need_attention) -> StepOutput:
        rows, length = tokens.shape[0], cache.cross_k.shape[3]
        position = cache.past_length
        source = cache.cross_k[0, :, 0, :, 0].astype(np.int64)  # (N, S)
        lengths = src_mask.sum(axis=1)
        probs = np.full((rows, self.vocab_size), 0.1 / (self.vocab_size - 1))
        attend = np.minimum(position, lengths - 1)
        wanted = np.where(position < lengths - 1, source[np.arange(rows), attend], self.eos_id)
        probs[:, self.eos_id] = 1e-9  # ends only after the last source token: no short hypotheses
        probs[np.arange(rows), wanted] = 0.9
        weights = np.zeros((2, rows, 2, length), dtype=np.float32)
        weights[:, np.arange(rows), :, attend] = 1.0
        past = np.zeros((2, rows, 2, position + 1, 1), dtype=np.float32)
        return StepOutput(
            np.log(probs).astype(np.float32),
            DecoderCache(cache.cross_k, cache.cross_v, past, past),
            weights if need_attention else None,
        )

    def teacher_force(self, src_ids, src_mask, tgt_ids) -> TeacherForced:
        return teacher_force_by_steps(self, src_ids, src_mask, tgt_ids)


@pytest.fixture(scope="module")
def echo_engine(toy_tokenizer_path: Path) -> TranslatorEngine:
    tokenizer = Tokenizer(toy_tokenizer_path)
    translator = Translator(EchoBackend(tokenizer.vocab_size), tokenizer)
    engine = TranslatorEngine({("de", "en"): ("de-en", translator)}, window_s=0.002)
    yield engine
    engine.close()


def make_client(engine: TranslatorEngine, **settings: object) -> TestClient:
    return TestClient(create_app(Settings(**settings), engine=engine), raise_server_exceptions=False)


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
    ({"json": {"q": "a", "source": "de", "target": "en", "alternatives": 99}}, "beam_size"),
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


def test_requests_over_size_limits_get_413(echo_engine: TranslatorEngine) -> None:
    """Each text within the schema, the whole over a limit the schema cannot state: 413."""
    with make_client(echo_engine, char_limit=300, batch_limit=8, max_request_work=400, heatmap_max_tokens=50) as client:
        many = client.post("/translate", json={"q": ["a " * 100] * 2, "source": "de", "target": "en"})
        assert many.status_code == 413 and "text limit (300)" in many.json()["error"]
        heavy = client.post("/v1/translate", json={"text": "a b " * 30, "beam_size": 4})  # 4 x 120 > 400
        assert heavy.status_code == 413 and "work (480 units" in heavy.json()["error"]
        assert client.post("/v1/translate", json={"text": "a b " * 30, "beam_size": 3}).status_code == 200
        wide = client.get("/v1/heatmap", params={"q": "a " * 60, "beam_size": 1})
        assert wide.status_code == 413 and "per axis" in wide.json()["error"]


def test_oversized_body_is_refused_before_reading(echo_engine: TranslatorEngine) -> None:
    with make_client(echo_engine, max_body_bytes=2048) as client:
        response = client.post("/v1/translate", json={"text": "a " * 2000})
        assert response.status_code == 413 and "2048 bytes" in response.json()["error"]
        assert 'status="413"' in client.get("/metrics").text


def test_api_keys_and_rate_limit(echo_engine: TranslatorEngine) -> None:
    with make_client(echo_engine, api_keys="k1, k2", rate_limit=2) as client:
        request = {"q": "a", "source": "de", "target": "en"}
        assert client.post("/translate", json=request).status_code == 403
        assert client.post("/translate", json={**request, "api_key": "nope"}).status_code == 403
        assert client.post("/translate", json={**request, "api_key": "k1"}).status_code == 200
        assert client.post("/v1/translate", json={"text": "a"}, headers={"X-API-Key": "k1"}).status_code == 200
        limited = client.post("/translate", json={**request, "api_key": "k1"})
        assert limited.status_code == 429 and "per minute" in limited.json()["error"]
        assert client.post("/translate", json={**request, "api_key": "k2"}).status_code == 200
        # Wrong-key attempts count against the address: the two above used its rate up.
        guessing = client.post("/v1/translate", json={"text": "a"}, headers={"Authorization": "Bearer k3"})
        assert guessing.status_code == 429 and "failed API key attempts" in guessing.json()["error"]
        assert 1 <= int(guessing.headers["Retry-After"]) <= 60
        assert int(limited.headers["Retry-After"]) >= 1
        bearer = client.post("/v1/translate", json={"text": "a"}, headers={"Authorization": "Bearer k2"})
        assert bearer.status_code == 200


def test_key_is_checked_before_the_body(echo_engine: TranslatorEngine) -> None:
    with make_client(echo_engine, api_keys="k1") as client:
        for body in ({"q": 3}, {"q": "a", "source": "de", "target": "en", "beam": "x", "format": "pdf"}):
            assert client.post("/translate", json=body).status_code == 403
            assert client.post("/translate", json=body, headers={"Authorization": "Bearer bad"}).status_code == 403
            assert client.post("/translate", json=body, headers={"Authorization": "Bearer k1"}).status_code == 400
        assert (
            client.post(
                "/translate",
                content=b"{not json",
                headers={"Authorization": "Bearer x", "Content-Type": "application/json"},
            ).status_code
            == 403
        )


def test_native_routes_check_the_key_before_reading_the_body(echo_engine: TranslatorEngine) -> None:
    """Malformed JSON gets its 400 only from a client whose key is valid, as on /translate."""
    broken = {"content": b'{"text": "a", ', "headers": {"Content-Type": "application/json"}}
    with make_client(echo_engine, api_keys="k1") as client:
        for path in ("/v1/translate", "/v1/align", "/v1/heatmap", "/v1/attention"):
            assert client.post(path, **broken).status_code == 403, path
            wrong = client.post(
                path, content=broken["content"], headers={**broken["headers"], "Authorization": "Bearer k2"}
            )
            assert wrong.status_code == 403 and wrong.json()["error"] == "Invalid API key", path
            right = client.post(
                path, content=broken["content"], headers={**broken["headers"], "Authorization": "Bearer k1"}
            )
            assert right.status_code == 400 and "malformed JSON" in right.json()["error"], path
        assert client.get("/v1/heatmap", params={"q": "a", "api_key": "k1", "format": "svg"}).status_code == 200
        assert client.get("/v1/heatmap", params={"q": "a", "api_key": "k2"}).status_code == 403


def test_v1_align_takes_fair_turns_and_the_request_timeout(toy_tokenizer_path: Path) -> None:
    """/v1/align goes through the scheduler as translations do: a newcomer's pairs ride in the
    next model call however much another client has queued, and it waits at most
    `request_timeout`."""
    tokenizer = Tokenizer(toy_tokenizer_path)
    engine = TranslatorEngine(
        {("de", "en"): ("de-en", Translator(EchoBackend(tokenizer.vocab_size), tokenizer))},
        window_s=0.002,
        max_sentences=2,
    )
    batcher = engine.models["de", "en"].batcher
    gate, run, calls = threading.Event(), batcher.run, []

    def gated(items: list, job: object) -> list:
        calls.append(type(job).__name__)
        gate.wait(30)
        return run(items, job)

    batcher.run = gated
    pair = {"text": "a b c", "translation": "a b c", "source": "de"}
    try:
        with make_client(engine, request_timeout=0.5) as client:
            slow = client.post("/v1/align", json=pair)  # the model call never ends: timed out
            assert slow.status_code == 503 and "longer than 0.5 s" in slow.json()["error"], slow.text
            assert slow.headers["Retry-After"]
            gate.set()
            while batcher.queued_work:
                time.sleep(0.01)
            gate.clear()
            calls.clear()
            heavy = batcher.submit(["a b"] * 8, DecodeConfig(beam_size=1), client="key:heavy")  # four calls
            while not calls:  # the first of them is running
                time.sleep(0.01)
            answer: dict = {}
            newcomer = threading.Thread(target=lambda: answer.update(response=client.post("/v1/align", json=pair)))
            newcomer.start()
            while batcher.queued_work <= work_units(["a b"] * 8, 1):
                time.sleep(0.01)
            gate.set()
            newcomer.join(30)
            heavy.result(timeout=30)
            assert answer["response"].status_code == 200
            assert answer["response"].json()["alignments"][0]["word_alignment"] == "0-0 1-1 2-2"
            assert calls[:2] == ["DecodeConfig", "ForcedJob"], calls  # the very next call, not the fifth
    finally:
        gate.set()
        engine.close()
    assert batcher.queued_work == 0


def test_cors(echo_engine: TranslatorEngine) -> None:
    with make_client(echo_engine, cors_origins="https://example.org") as client:
        response = client.get("/languages", headers={"Origin": "https://example.org"})
        assert response.headers["access-control-allow-origin"] == "https://example.org"


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
        "models": [{"name": "de-en", "source": "de", "target": "en"}],
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
    batcher = MicroBatcher(translator.translate_batch, window_s=0.05, max_sentences=64, on_batch=sizes.append)
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
    code = "import sys, service.app, service.serve, seq2seq.heatmap; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


@pytest.mark.parametrize("step_shift", [False, True])
def test_heatmap_caption_says_how_the_map_was_read(step_shift: bool) -> None:
    from seq2seq.alignment import Alignment, Token
    from seq2seq.heatmap import _parts

    tokens = [Token("a", 0, 1), Token("b", 2, 3)]
    alignment = Alignment("word", tokens, tokens, np.eye(2), [(0, 0), (1, 1)], 1, (2,), step_shift)
    caption = _parts(alignment)[-1]
    assert caption.startswith("word alignment, layer 1, heads 2")
    assert ("step-shifted" in caption) == step_shift


def test_heatmap_caption_wraps_inside_the_image_and_the_bytes_are_stable() -> None:
    from seq2seq.alignment import Alignment, Token
    from seq2seq.heatmap import _parts, render_heatmap

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
