"""Marked text through the HTTP API: `/translate` with `format: html`, `/v1/translate` and
`/v1/align` with `format: html | xml`, over the scripted echo engine (it copies the toy
alphabet word for word with a diagonal map, so every answer is known). The same routes
on a real onnxruntime bundle are in test_documents.py."""

from __future__ import annotations

import pytest
from echo_backend import make_client
from fastapi.testclient import TestClient

from service.compute.engine import TranslatorEngine


@pytest.fixture(scope="module")
def client(echo_engine: TranslatorEngine) -> TestClient:
    with make_client(echo_engine, char_limit=400, batch_limit=4) as client:
        yield client


def translate_html(client: TestClient, q: str | list[str], **extra: object) -> dict:
    response = client.post("/translate", json={"q": q, "source": "de", "target": "en", "format": "html", **extra})
    assert response.status_code == 200, response.text
    return response.json()


def test_html_is_translated_whole_segment_by_segment(client: TestClient) -> None:
    page = '<p>a <b class="x">b</b> c</p><ul><li>d</li></ul><script>if (a < b) f("</p>")</script><!-- e'
    body = translate_html(client, page)
    assert body["translatedText"] == page  # the echo engine copies: markup, attributes and raw parts as sent
    listed = translate_html(client, ["<i>a</i> b", '<a title="b c" href="/x">c d</a> e'])
    assert listed["translatedText"] == ["<i>a</i> b", '<a title="b c" href="/x">c d</a> e']


def test_html_with_the_alignment_gives_each_segment_its_map(client: TestClient) -> None:
    body = translate_html(client, "<p>a <b>b</b></p><p>c d</p>", alignment=True)
    maps = body["alignment"]
    assert [(m["text"], m["translation"]) for m in maps] == [("a b", "a b"), ("c d", "c d")]
    assert maps[0]["links"] == "0-0 1-1" and maps[0]["level"] == "word"
    assert len(body["quality"]) == 2 and "confidence" in body["quality"][0]


def test_native_translate_with_markup(client: TestClient) -> None:
    response = client.post(
        "/v1/translate",
        json={"texts": ['a <g id="1">b</g><x id="2"/> c', "<b>d</b>"], "source": "de", "format": "xml"},
    )
    assert response.status_code == 200, response.text
    first, second = response.json()["translations"]
    assert first["marked_text"] == 'a <g id="1">b</g><x id="2"/> c'
    assert first["plain_source"] == "a b c" and first["text"] == "a b c"
    assert first["sentences"][0]["word_links"] == "0-0 1-1 2-2"
    assert second["marked_text"] == "<b>d</b>"
    html = client.post("/v1/translate", json={"text": "a<br>b <i>c</i>", "source": "de", "format": "html"})
    # The line break stays after the word it followed; the sentences it parted are joined by a
    # line break, as their sources were (HTML renders it as a space).
    assert html.json()["translations"][0]["marked_text"] == "a<br>\nb <i>c</i>"


def test_align_places_the_texts_markup_on_a_given_translation(client: TestClient) -> None:
    response = client.post(
        "/v1/align",
        json={"text": "a <b>b</b> c", "translation": "a b c", "source": "de", "format": "html"},
    )
    assert response.status_code == 200, response.text
    (pair,) = response.json()["alignments"]
    assert pair["marked_translation"] == "a <b>b</b> c" and pair["text"] == "a b c"
    plain = client.post("/v1/align", json={"text": "a b", "translation": "a b", "source": "de"}).json()
    assert plain["alignments"][0]["marked_translation"] is None


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/v1/translate", {"text": "<g>a", "source": "de", "format": "xml"}, "text: not well-formed XML"),
        ("/v1/translate", {"text": "a", "source": "de", "format": "rtf"}, "format"),
        (
            "/v1/align",
            {"pairs": [{"text": "a", "translation": "a"}, {"text": "<x/>", "translation": "a"}], "format": "xml"},
            "pairs[1].text has no words",
        ),
        (
            "/v1/translate",
            {"text": '<!DOCTYPE x [<!ENTITY e "a">]><g>&e;</g>', "source": "de", "format": "xml"},
            "not well-formed",
        ),
    ],
)
def test_bad_markup_is_a_400_naming_the_text(client: TestClient, path: str, body: dict, message: str) -> None:
    response = client.post(path, json=body)
    assert response.status_code == 400 and message in response.json()["error"], response.text
