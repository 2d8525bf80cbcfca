"""The service's limits over the scripted engine of test_service.py: request sizes and
work (413), API keys checked before the body, the rate limit, the request timeout and fair
turns on /v1/align, and CORS.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from echo_backend import EchoBackend, make_client

from data.tokenizer import Tokenizer
from seq2seq.core.config import DecodeConfig
from seq2seq.decoding.translator import Translator
from service.compute.batching import work_units
from service.compute.engine import TranslatorEngine


def test_requests_over_size_limits_get_413(echo_engine: TranslatorEngine) -> None:
    """The work and the maps over their limits: 413. The characters of a request over
    `char_limit` are a 400 whether one text or several together (issue 41, 17: one limit,
    one answer, as LibreTranslate gives), pinned at N and N + 1."""
    with make_client(echo_engine, char_limit=300, batch_limit=8) as client:
        for texts, status in ((["a " * 75] * 2, 200), (["a " * 75, "a " * 75 + "b"], 400), (["a " * 150 + "b"], 400)):
            answer = client.post("/translate", json={"q": texts, "source": "de", "target": "en"})
            assert answer.status_code == status, (sum(map(len, texts)), answer.text)
            assert status == 200 or "limit" in answer.json()["error"] and "300" in answer.json()["error"]
    with make_client(echo_engine, char_limit=300, batch_limit=8, max_request_work=400, heatmap_max_tokens=50) as client:
        heavy = client.post("/v1/translate", json={"text": "a b " * 30, "beam_size": 4})  # 4 x 120 > 400
        assert heavy.status_code == 413 and "work (480 units" in heavy.json()["error"]
        assert client.post("/v1/translate", json={"text": "a b " * 30, "beam_size": 3}).status_code == 200
        wide = client.get("/v1/heatmap", params={"q": "a " * 60, "beam_size": 1})
        assert wide.status_code == 413 and "per axis" in wide.json()["error"]


def test_maps_too_large_are_refused_before_translating_and_alike(echo_engine: TranslatorEngine) -> None:
    """/v1/heatmap and /v1/attention count a text's source tokens before translating it, and
    answer the same limit (`heatmap_max_tokens`) with the same 413; /v1/attention's answer is
    capped in weights (`attention_max_weights`), a heatmap in area (`heatmap_max_area`)."""
    batcher = echo_engine.models["de", "en"].batcher
    run, calls = batcher.run, []
    batcher.run = lambda items, job, wanted, observe: calls.append(len(items)) or run(items, job, wanted, observe)
    try:
        settings = {"heatmap_max_tokens": 50, "attention_max_weights": 2000, "heatmap_max_area": 1_000_000}
        with make_client(echo_engine, **settings) as client:
            long = "a " * 60  # 60 words, 60 pieces: over 50 on the source axis
            answers = [
                client.get("/v1/heatmap", params={"q": long}),
                client.get("/v1/heatmap", params={"q": long, "level": "subword"}),
                client.get("/v1/heatmap", params={"q": long, "kind": "encoder"}),
                client.post("/v1/attention", json={"text": long}),
            ]
            assert [a.status_code for a in answers] == [413] * 4, [a.text for a in answers]
            assert all("source tokens" in a.json()["error"] and "at most" in a.json()["error"] for a in answers)
            assert calls == []  # nothing was translated
            # 30 tokens: within the token limit, but the encoder's maps alone (2 heads x 31 x 31) and
            # the least the decoder's can hold are over 2,000 weights: refused before translating.
            weighty = client.post("/v1/attention", json={"text": "a b c " * 10, "source": "de"})
            assert weighty.status_code == 413 and "2050 weights" in weighty.json()["error"] and calls == []
            # 15 tokens: 580 before translating; the translation's maps take the answer over.
            late = client.post("/v1/attention", json={"text": "a b c " * 5, "source": "de"})
            assert late.status_code == 413 and "weights" in late.json()["error"] and calls == [1]
            wide = client.get("/v1/heatmap", params={"q": "a b", "width": 2000, "height": 1000})
            assert wide.status_code == 400 and "at most 1000000" in wide.json()["error"]
            assert client.get("/v1/heatmap", params={"q": "a b", "width": 1000, "height": 1000}).status_code == 200
    finally:
        batcher.run = run


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

    def gated(items: list, job: object, wanted: Callable[[], np.ndarray], observe: object) -> list:
        calls.append(type(job).__name__)
        gate.wait(30)
        return run(items, job, wanted, observe)

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
