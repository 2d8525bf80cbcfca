"""Watching a translation as it is made (issue 31): the search's step observer, the
Translator's `Watch`, and `POST /v1/translate/stream` on a real server.

The observer is checked against the search's own hypotheses on the scripted decoder (every
step's token, log-prob and attention row is the one the finished hypothesis holds, and
watching changes nothing); the Translator's watch on the tiny bundle with two search streams
(each step reaches its own text); the stream against `/v1/translate` on the tiny bundle and
on the shipped one (the same tokens, the same sentences with their maps, the rows of the
map streamed row by row), its errors (4xx before the stream, an `error` event after), a
client that hangs up (its work leaves the queue), and the model view's heatmap.
"""

from __future__ import annotations

import dataclasses
import io
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from scripted_backend import EOS, HEADS, LAYERS, ScriptedBackend, plain, sources
from test_service_server import serving
from toy import SENTENCES

from seq2seq.analysis.heads import block_diagonal, head_statistics
from seq2seq.core.alignment import pieces_with_offsets, visible
from seq2seq.decoding.search import WATCHED_CANDIDATES, SearchStep, beam_search

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "models" / "de-en"
KEY = "stream-key"
AUTH = {"X-API-Key": KEY}


# --------------------------------------------------------------------------- the search


def test_a_watched_greedy_search_reports_every_step_of_every_hypothesis() -> None:
    """Each sentence's steps, in order, are its hypothesis's pieces and then EOS, with the
    log-probs and attention rows the hypothesis holds; the chosen piece heads the candidates;
    watching changes no result."""
    batch = sources([7, 6, EOS], [8, EOS], [10, 5, EOS])
    config = plain(beam_size=1, n_best=1, return_attention=True)
    steps: list[SearchStep] = []
    watched = beam_search(ScriptedBackend(), *batch, config, observe=steps.append)
    unwatched = beam_search(ScriptedBackend(), *batch, config)
    assert [[(h.tokens, h.score) for h in s] for s in watched] == [[(h.tokens, h.score) for h in s] for s in unwatched]
    assert [s.step for s in steps] == list(range(len(steps)))
    for sentence, [hypothesis] in enumerate(watched):
        rows = [(s, list(s.sentences).index(sentence)) for s in steps if sentence in s.sentences]
        assert [int(s.tokens[r]) for s, r in rows] == [*hypothesis.tokens, EOS]
        assert [float(s.log_probs[r]) for s, r in rows] == pytest.approx(hypothesis.token_log_probs)
        for t, (step, row) in enumerate(rows):
            assert step.candidates.shape == (len(step.sentences), WATCHED_CANDIDATES)
            assert step.candidates[row, 0] == step.tokens[row]
            ranked = step.candidate_log_probs[row].tolist()
            assert ranked == sorted(ranked, reverse=True)
            width = hypothesis.attention.shape[-1]
            np.testing.assert_array_equal(step.cross_weights[:, row, :, :width], hypothesis.attention[:, :, t])
            assert step.self_weights.shape == (LAYERS, len(step.sentences), HEADS, t + 1)


def test_only_a_greedy_search_can_be_watched() -> None:
    with pytest.raises(ValueError, match="greedy"):
        beam_search(ScriptedBackend(), *sources([7, EOS]), plain(beam_size=2), observe=lambda step: None)


def test_watched_candidates_from_the_graphs_top_k_are_those_of_a_full_sort(tiny_bundle: Path) -> None:
    """The candidates a watched step reports come from the decoder graph's TopK where that is
    exact, else from a partial sort of the log-probs: the same either way, bans included
    (PAD and BOS, the repetition guard's, the length limit's)."""
    from seq2seq.core.config import DecodeConfig
    from seq2seq.decoding.candidates import top_candidates
    from seq2seq.decoding.search import _watched_candidates, pad_batch
    from seq2seq.loading import load_translator

    translator = load_translator(tiny_bundle, threads=1)
    backend = translator.backend
    ids, mask = pad_batch([translator.encode_source(s) for s in SENTENCES[:6]], backend.pad_id)
    config = DecodeConfig(beam_size=1, n_best=1, no_repeat_ngram_size=1, max_length_ratio=0.5, max_length_extra=1)
    by_graph: list[SearchStep] = []
    beam_search(backend, ids, mask, config, observe=by_graph.append)
    by_sort: list[SearchStep] = []
    step = backend.step
    with pytest.MonkeyPatch.context() as patched:  # the same search, its candidates ranked here
        patched.setattr(backend, "step", lambda *args: dataclasses.replace(step(*args), top=None))
        beam_search(backend, ids, mask, config, observe=by_sort.append)
    assert len(by_graph) == len(by_sort) > 2
    for graph, sort in zip(by_graph, by_sort):
        np.testing.assert_array_equal(graph.candidates, sort.candidates)
        np.testing.assert_array_equal(graph.candidate_log_probs, sort.candidate_log_probs)
    # The rule's edges: an id banned after the graph ranked it, and a tie across the last
    # place, where a TopK may leave out any of the equal ones (here id 4).
    raw = np.log(np.array([[0.3, 0.2, 0.2, 0.1, 0.1, 0.05, 0.05, 1e-4], [0.4, 0.2, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05]]))
    ranked = np.array([[0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 3, 5, 6, 7]])
    edited = raw.copy()
    edited[0, 0] = -np.inf
    expected = top_candidates(edited, WATCHED_CANDIDATES)
    assert expected.tolist() == [[1, 2, 3, 4, 5], [0, 1, 2, 3, 4]]
    np.testing.assert_array_equal(_watched_candidates(edited, ranked), expected)


def test_the_translators_watch_hands_each_step_to_its_text_across_search_streams(tiny_bundle: Path) -> None:
    """Two search streams split a batch: each step still names the text it belongs to, its
    pieces are the result's, and each result is handed over once, as returned."""
    from seq2seq.core.config import AlignmentOptions, DecodeConfig
    from seq2seq.decoding.translator import Watch
    from seq2seq.loading import load_translator

    translator = load_translator(tiny_bundle, threads=2, streams=2)
    assert translator.streams == 2
    texts = SENTENCES[:5]
    steps: dict[int, list] = {}
    handed: dict[int, object] = {}
    watch = Watch(on_step=lambda s: steps.setdefault(s.text, []).append(s), on_result=handed.__setitem__)
    config = DecodeConfig(beam_size=1, alignment=AlignmentOptions())
    results = translator.translate_wanted(texts, config, watch=watch)
    assert sorted(handed) == list(range(len(texts))) and all(handed[i] is r for i, r in enumerate(results))
    for index, result in enumerate(results):
        mine = steps[index]
        assert [s.step for s in mine] == list(range(len(result.target_ids) + 1))
        assert [s.token for s in mine] == [*result.target_ids, translator.backend.eos_id]
        assert [s.piece for s in mine[:-1]] == result.target_tokens
        np.testing.assert_allclose(np.stack([s.cross for s in mine], axis=2), result.attention, atol=1e-6)
        assert all(s.decoder.shape == (2, 4, s.step + 1) for s in mine)


# --------------------------------------------------------------------------- head statistics


def test_head_statistics_of_maps_whose_answers_are_known() -> None:
    eye = np.eye(4)[None, None]  # every row reads itself
    even = np.full((1, 1, 4, 4), 0.25)
    on_mark = np.zeros((1, 1, 4, 4))
    on_mark[..., -1] = 1.0  # every row rests on </s>
    assert head_statistics([eye], "encoder").entropy[0, 0] == 0.0
    assert head_statistics([even], "encoder").entropy[0, 0] == pytest.approx(1.0)
    assert head_statistics([eye], "encoder").diagonal[0, 0] == 1.0
    assert head_statistics([on_mark], "cross").mark_share[0, 0] == 1.0
    assert head_statistics([on_mark], "cross").mark == "</s>"
    causal = np.tril(np.ones((4, 4)))
    causal /= causal.sum(axis=1, keepdims=True)  # evenly over what each row may read
    decoder = head_statistics([causal[None, None]], "decoder")
    assert decoder.entropy[0, 0] == pytest.approx(1.0) and decoder.mark == "<s>"
    assert decoder.mark_share[0, 0] == pytest.approx(np.mean([1, 1 / 2, 1 / 3, 1 / 4]))
    both = head_statistics([eye, even[..., :2, :2] * 2], "encoder")  # rows of two sentences, each counted once
    assert both.diagonal[0, 0] == pytest.approx(1.0) and both.entropy[0, 0] == pytest.approx(4 * 0 / 6 + 2 * 1 / 6)
    whole = block_diagonal([eye, np.ones((1, 1, 2, 3)) / 3])
    assert whole.shape == (1, 1, 6, 7) and np.allclose(whole.sum(axis=-1), 1.0)


# --------------------------------------------------------------------------- the stream


def read_events(response: httpx.Response) -> Iterator[tuple[str, dict]]:
    """(event name, its JSON) of a Server-Sent Events body, as they arrive."""
    name = None
    for line in response.iter_lines():
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            yield name or "message", json.loads(line[len("data: ") :])


def stream(url: str, body: dict, headers: dict | None = None) -> list[tuple[str, dict]]:
    """Every event of streaming `body` (with the tests' key unless `headers` are given)."""
    headers = AUTH if headers is None else headers
    with httpx.stream("POST", url + "/v1/translate/stream", json=body, headers=headers, timeout=120) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), r.read()
        return list(read_events(r))


@pytest.fixture(scope="module")
def tiny(tiny_bundle: Path) -> Iterator[str]:
    with serving(tiny_bundle.parent, api_keys=KEY, batch_window_ms="5") as (url, _):
        yield url


@pytest.fixture(scope="module")
def shipped() -> Iterator[str]:
    if not (SHIPPED / "bundle.json").is_file():
        pytest.skip("models/de-en is not shipped")
    with serving(SHIPPED, api_keys=KEY, batch_window_ms="5") as (url, _):
        yield url


def check_against_translate(url: str, body: dict) -> list[tuple[str, dict]]:
    """Stream `body` and check every event against /v1/translate's answer to the same body."""
    events = stream(url, body)
    answer = httpx.post(url + "/v1/translate", json=body, headers=AUTH, timeout=120)
    assert answer.status_code == 200, answer.text
    translations = answer.json()["translations"]
    names = [name for name, _ in events]
    assert names[0] == "start" and names[-1] == "done" and "error" not in names
    start, done = events[0][1], events[-1][1]
    assert [len(t["sentences"]) for t in start["texts"]] == [len(t["sentences"]) for t in translations]
    sentences = [(i, data) for i, (name, data) in enumerate(events) if name == "sentence"]
    assert sorted((d["index"], d["sentence"]) for _, d in sentences) == [
        (i, j) for i, t in enumerate(translations) for j in range(len(t["sentences"]))
    ]
    for position, data in sentences:
        expected = translations[data["index"]]["sentences"][data["sentence"]]
        assert data["result"] == expected  # exactly what /v1/translate answers, maps and quality included
        steps = [
            d
            for n, d in events[:position]
            if n == "step" and (d["index"], d["sentence"]) == (data["index"], data["sentence"])
        ]
        if body.get("beam_size", 1) > 1:
            assert steps == []  # a beam's prefix is not final: finished sentences only
            continue
        assert [d["step"] for d in steps] == list(range(len(steps))) and steps[-1]["end"]
        assert not any(d["end"] for d in steps[:-1]) and steps[-1]["token"] == "</s>"
        pieces = [d["token"] for d in steps[:-1]]
        assert [d["input"] for d in steps] == ["<s>", *pieces]
        text, spans = pieces_with_offsets(pieces)
        assert steps[-1]["translation"] == text == expected["text"]
        offset = expected["target_start"]
        assert [(t.start + offset, t.end + offset) for t in (visible(s, text) for s in spans)] == [
            (t["start"], t["end"]) for t in expected["target_tokens"]
        ]  # the same pieces as the answer's tokens
        assert [w["text"] for d in steps for w in d["words"]] == [w["text"] for w in expected["target_words"]]
        assert all(d["candidates"][0]["token"] == d["token"] for d in steps)
        assert all(0 < d["prob"] <= 1 and d["prob"] == d["candidates"][0]["prob"] for d in steps)
        # Each step's row is a row of the map: with a step shift, the map's row t is step t + 1.
        matrix = expected["alignment"]["matrix"]
        shift = expected["alignment"]["step_shift"]
        rows = [d["attention"] for d in steps][1:] if shift else [d["attention"] for d in steps][:-1]
        if expected["alignment"]["level"] == "subword":
            np.testing.assert_allclose(rows, matrix, atol=2e-4)
        columns = "source_tokens" if expected["alignment"]["level"] == "subword" else "source_words"
        sentence = start["texts"][data["index"]]["sentences"][data["sentence"]]
        assert sentence[columns] == expected["alignment"]["source_tokens"]
        assert all(len(d["attention"]) == len(sentence[columns]) for d in steps)
    for translation, summary in zip(translations, done["translations"]):
        assert summary == {k: translation[k] for k in ("text", "score", "source", "target", "alternatives")}
    assert done["sentences"] == sum(len(t["sentences"]) for t in translations)
    assert done["steps"] == sum(1 for name, _ in events if name == "step")
    return events


@pytest.mark.parametrize(
    "body",
    [
        {"text": SENTENCES[0], "source": "de", "target": "en", "beam_size": 1},
        {"text": f"{SENTENCES[1]} {SENTENCES[2]}", "beam_size": 1, "alignment": {"level": "subword"}},
        {"texts": SENTENCES[2:5], "beam_size": 1, "alignment": {"level": "subword", "step_shift": True}},
        {"text": f"{SENTENCES[3]} {SENTENCES[4]}", "beam_size": 3, "n_best": 2},
    ],
    ids=["greedy", "two-sentences-subword", "texts-shifted", "beam"],
)
def test_the_stream_is_translate_step_by_step_on_the_tiny_bundle(tiny: str, body: dict) -> None:
    check_against_translate(tiny, {"source": "de", **body})


@pytest.mark.parametrize(
    "body",
    [
        {"text": "Das Haus ist sehr klein. Der Hund schläft im Garten.", "beam_size": 1},
        {"text": "Ich habe heute keine Zeit.", "beam_size": 1, "alignment": {"level": "subword"}},
        {"text": "Die Katze schläft auf dem Sofa.", "beam_size": 4},
    ],
    ids=["greedy-words", "greedy-subword", "beam"],
)
def test_the_stream_is_translate_step_by_step_on_the_shipped_bundle(shipped: str, body: dict) -> None:
    check_against_translate(shipped, {"source": "de", "target": "en", **body})


def test_every_head_streams_its_cross_and_decoder_rows(tiny: str) -> None:
    events = stream(tiny, {"text": SENTENCES[0], "source": "de", "beam_size": 1, "all_heads": True})
    start = events[0][1]
    pieces = len(start["texts"][0]["sentences"][0]["source_tokens"])
    steps = [d for name, d in events if name == "step"]
    for d in steps:
        cross, decoder = np.array(d["cross"]), np.array(d["decoder"])
        assert cross.shape == (start["decoder_layers"], start["n_heads"], pieces + 1)
        assert decoder.shape == (start["decoder_layers"], start["n_heads"], d["step"] + 1)  # the triangle's row
        np.testing.assert_allclose(cross.sum(axis=-1), 1.0, atol=1e-3)
        np.testing.assert_allclose(decoder.sum(axis=-1), 1.0, atol=1e-3)
    assert "cross" not in stream(tiny, {"text": SENTENCES[0], "source": "de", "beam_size": 1})[1][1]


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"text": ""}, 400, "text"),
        ({"text": "a", "source": "fr"}, 400, "not served"),
        ({"text": "der Hund", "beam_size": 99}, 400, "beam_size"),
        ({"text": "der Hund", "format": "html"}, 400, "format"),
        ({"text": "der Hund", "glossary": {"Hund": "dog"}}, 400, "hints"),
        ({"text": "der Hund", "alignment": {"layer": 7}}, 400, "layer"),
        ({"text": "der Hund ist klein . " * 200, "beam_size": 8}, 413, "work"),
    ],
)
def test_bad_input_is_a_4xx_before_the_stream_starts(tiny: str, body: dict, status: int, message: str) -> None:
    response = httpx.post(tiny + "/v1/translate/stream", json={"source": "de", **body}, headers=AUTH, timeout=30)
    assert response.status_code == status and response.headers["content-type"] == "application/json"
    assert message in response.json()["error"]


def test_keys_apply_to_the_stream(tiny: str) -> None:
    response = httpx.post(tiny + "/v1/translate/stream", json={"text": "der Hund", "source": "de"}, timeout=30)
    assert response.status_code == 403 and "API key" in response.json()["error"]


def test_an_error_once_started_is_an_error_event_with_the_json_routes_message(tiny_bundle: Path) -> None:
    """A request timeout shorter than any translation: /v1/translate answers 503, the stream
    has started and says the same in an `error` event. The rate limit counts streams too,
    and refuses one before it starts."""
    with serving(tiny_bundle.parent, request_timeout="0.001", batch_window_ms="50", rate_limit="3") as (url, _):
        body = {"text": SENTENCES[0], "source": "de", "beam_size": 1}
        refused = httpx.post(url + "/v1/translate", json=body, timeout=30)
        events = stream(url, body, headers={})
        stream(url, body, headers={})
        limited = httpx.post(url + "/v1/translate/stream", json=body, timeout=30)
    assert refused.status_code == 503
    assert [name for name, _ in events] == ["start", "error"]
    assert events[1][1] == {"status": 503, "error": refused.json()["error"]}
    assert limited.status_code == 429 and "Retry-After" in limited.headers


def test_a_client_that_hangs_up_frees_its_work(tiny_bundle: Path) -> None:
    """64 texts in calls of two rows: the client reads the first step and closes; the queue's
    work goes back to zero at once and the model runs no more calls for it."""
    from test_reliability import scrape

    with serving(tiny_bundle.parent, max_batch_rows="2", batch_window_ms="1") as (url, _):
        texts = [SENTENCES[i % len(SENTENCES)] for i in range(64)]
        body = json.dumps({"texts": texts, "source": "de", "beam_size": 1}).encode()
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(
                b"POST /v1/translate/stream HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            seen = b""
            while b"event: step" not in seen:
                chunk = sock.recv(65536)
                assert chunk, seen
                seen += chunk
            queued = scrape(url)['crossalign_queued_work{model="de-en"}']
        assert queued > 0  # it was still at work when the client left
        deadline, metrics = time.monotonic() + 5, {}
        while time.monotonic() < deadline:
            metrics = scrape(url)
            if metrics['crossalign_queued_work{model="de-en"}'] == 0 and metrics["crossalign_requests_in_flight"] == 1:
                break
            time.sleep(0.05)
        assert metrics['crossalign_queued_work{model="de-en"}'] == 0, metrics
        calls = metrics['crossalign_batch_sentences_count{model="de-en"}']
        time.sleep(0.5)
        assert scrape(url)['crossalign_batch_sentences_count{model="de-en"}'] == calls
        assert calls < 32  # 64 sentences two a call: most were never run


# --------------------------------------------------------------------------- the model view, drawn


def test_the_heatmap_draws_every_layer_and_head_with_the_alignment_head_framed(tiny: str) -> None:
    import xml.etree.ElementTree as ET

    from PIL import Image

    from seq2seq.analysis.heatmap import head_grid_size

    params = {"q": SENTENCES[0], "source": "de", "view": "heads", "kind": "cross", "format": "svg"}
    svg = httpx.get(tiny + "/v1/heatmap", params=params, headers=AUTH, timeout=60)
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    assert 'filename="heads-cross-de-en-' in svg.headers["content-disposition"]
    texts = [e.text or "" for e in ET.fromstring(svg.content).iter("{http://www.w3.org/2000/svg}text")]
    titles = [t for t in texts if t.startswith("layer ")]
    assert len(titles) == 2 * 4  # the tiny model: 2 decoder layers x 4 heads
    assert sorted(t for t in titles if "(alignment)" in t) == [f"layer 0, head {h} (alignment)" for h in range(4)]
    encoder = httpx.get(
        tiny + "/v1/heatmap", params={**params, "kind": "encoder", "format": "png"}, headers=AUTH, timeout=60
    )
    assert encoder.status_code == 200 and Image.open(io.BytesIO(encoder.content)).size == head_grid_size(2, 4)
    too_big = httpx.get(tiny + "/v1/heatmap", params={**params, "width": 99_999}, headers=AUTH, timeout=60)
    assert too_big.status_code == 400 and "width" in too_big.json()["error"]


def test_the_model_view_waits_its_turn_at_the_renderer(tiny_bundle: Path) -> None:
    """The heads view is admitted by its pixels like any heatmap: with the renderer full, a
    503 with Retry-After before anything is translated."""
    from echo_backend import make_client

    from service.compute.engine import load_engine

    engine = load_engine(tiny_bundle.parent, threads=1)
    try:
        with make_client(engine, max_render_pixels=10_000) as client:
            renderer = client.app.state.renderer
            with renderer.admit(10_000):
                busy = client.get("/v1/heatmap", params={"q": SENTENCES[0], "source": "de", "view": "heads"})
            assert busy.status_code == 503 and int(busy.headers["Retry-After"]) >= 1
            assert engine.models["de", "en"].batcher.queued_work == 0
            drawn = client.get("/v1/heatmap", params={"q": SENTENCES[0], "source": "de", "view": "heads"})
            assert drawn.status_code == 200 and drawn.content[:4] == b"\x89PNG"
    finally:
        engine.close()
