"""/v1/attention and the self-attention heatmaps, over a real onnxruntime bundle.

The tiny toy model of test_export.py is trained for a few seconds and exported; the app
runs in-process (TestClient) and loads the bundle in its lifespan as a server would. The
maps must be the real weights of the translation the search produced: softmax rows, the
causal mask visible in the decoder, none in the encoder or the cross-attention.
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from toy import SENTENCES

REPO = Path(__file__).resolve().parents[1]
SENTENCE = SENTENCES[1]  # "die Katze war sehr alt und schön heute ."


@pytest.fixture(scope="module")
def client(tiny_bundle: Path) -> TestClient:
    from service.app import create_app
    from service.settings import Settings

    app = create_app(Settings(models=tiny_bundle.parent, threads=1, char_limit=400))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


@pytest.fixture(scope="module")
def answer(client: TestClient) -> dict:
    response = client.post("/v1/attention", json={"text": SENTENCE, "source": "de", "target": "en"})
    assert response.status_code == 200, response.text
    return response.json()


def test_shapes_and_labels(answer: dict) -> None:
    assert (answer["source"], answer["target"], answer["model"]) == ("de", "en", "de-en")
    (sentence,) = answer["sentences"]
    layers = {
        "encoder": answer["encoder_layers"],
        "decoder": answer["decoder_layers"],
        "cross": answer["decoder_layers"],
    }
    source = sentence["encoder"]["rows"]
    decoder_inputs = sentence["decoder"]["rows"]
    assert source[-1] == "</s>" and decoder_inputs[0] == "<s>"
    assert sentence["outputs"] == decoder_inputs[1:] + ["</s>"]  # row i predicts the next token
    assert sentence["encoder"]["columns"] == source
    assert sentence["decoder"]["columns"] == decoder_inputs
    assert sentence["cross"]["rows"] == decoder_inputs and sentence["cross"]["columns"] == source
    for kind in ("encoder", "decoder", "cross"):
        maps = sentence[kind]
        weights = np.array(maps["weights"])
        assert weights.shape == (layers[kind], answer["n_heads"], len(maps["rows"]), len(maps["columns"])), kind
        assert np.all(weights >= 0)
        np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=2e-3, err_msg=kind)


def test_decoder_is_causal_and_encoder_is_not(answer: dict) -> None:
    (sentence,) = answer["sentences"]
    decoder = np.array(sentence["decoder"]["weights"])
    assert np.all(np.triu(decoder, k=1) == 0), "a decoder position attended to a later one"
    assert np.all(decoder[..., 0, 0] == 1.0)  # <s> can only read itself
    encoder = np.array(sentence["encoder"]["weights"])
    later = np.triu(encoder, k=1)
    assert later.sum(axis=(-2, -1)).min() > 0.1, "every encoder head should read later positions"
    cross = np.array(sentence["cross"]["weights"])
    assert np.triu(cross, k=1).sum() > 0  # unmasked: a rectangle


def test_maps_are_those_of_the_translation(client: TestClient, answer: dict) -> None:
    """Same text as /v1/translate, and the same alignment at the model's layer and heads."""
    translated = client.post(
        "/v1/translate", json={"text": SENTENCE, "source": "de", "target": "en", "alignment": {"level": "word"}}
    ).json()["translations"][0]
    assert answer["translation"] == translated["text"]
    (sentence,) = answer["sentences"]
    word = sentence["alignment"]["word"]
    assert word["head_sets"][-1] == [] and len(word["head_sets"]) == answer["n_heads"] + 1
    reference = translated["sentences"][0]["alignment"]
    assert answer["alignment_heads"] == []  # so the default is the mean
    index = len(word["head_sets"]) - 1
    np.testing.assert_allclose(word["matrices"][answer["alignment_layer"]][index], reference["matrix"], atol=1e-4)
    assert word["links"][answer["alignment_layer"]][index] == reference["links"]
    assert [t["text"] for t in word["target_tokens"]] == [t["text"] for t in reference["target_tokens"]]
    # The cross-attention rows, without </s>, renormalised, are the subword alignment.
    subword = sentence["alignment"]["subword"]
    cross = np.array(sentence["cross"]["weights"])[0, 1, :-1, :-1]
    np.testing.assert_allclose(cross / cross.sum(axis=1, keepdims=True), subword["matrices"][0][1], atol=2e-3)


def test_get_equals_post(client: TestClient, answer: dict) -> None:
    got = client.get("/v1/attention", params={"q": SENTENCE, "source": "de", "target": "en"})
    assert got.status_code == 200 and got.json() == answer
    # Every decoding field of the query reaches the search, as the body's do.
    query = {"q": SENTENCE, "beam_size": 2, "no_repeat_ngram_size": 1}
    posted = client.post("/v1/attention", json={"text": SENTENCE, "beam_size": 2, "no_repeat_ngram_size": 1})
    assert client.get("/v1/attention", params=query).json() == posted.json()
    assert posted.json()["translation"] != answer["translation"]  # n = 1: no piece twice


@pytest.mark.parametrize("kind, rows", [("encoder", "encoder"), ("decoder", "decoder")])
def test_self_attention_heatmaps(client: TestClient, answer: dict, kind: str, rows: str) -> None:
    svg = client.get(
        "/v1/heatmap",
        params={"q": SENTENCE, "source": "de", "target": "en", "format": "svg", "kind": kind, "layer": 1, "head": [2]},
    )
    assert svg.status_code == 200, svg.text
    assert f'filename="{kind}-attention-de-en-' in svg.headers["content-disposition"]
    texts = [e.text for e in ET.fromstring(svg.content).iter("{http://www.w3.org/2000/svg}text")]
    assert f"{kind} self-attention, layer 1, heads 2" in texts and "queries" in texts and "keys" in texts
    assert set(answer["sentences"][0][rows]["rows"]) <= set(texts)
    png = client.post("/v1/heatmap", json={"q": SENTENCE, "source": "de", "target": "en", "kind": kind})
    assert png.status_code == 200 and png.content[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "method, path, kwargs, status",
    [
        ("POST", "/v1/attention", {"json": {"text": "  "}}, 400),
        ("POST", "/v1/attention", {"json": {"text": "der", "extra": 1}}, 400),
        ("POST", "/v1/attention", {"json": {"text": "x" * 401}}, 400),
        ("POST", "/v1/attention", {"json": {"text": "der", "beam_size": 99}}, 400),
        ("GET", "/v1/attention", {"params": {}}, 400),
        ("GET", "/v1/heatmap", {"params": {"q": "der", "kind": "encoder", "layer": 7}}, 400),
        ("GET", "/v1/heatmap", {"params": {"q": "der", "kind": "attention"}}, 400),
        ("GET", "/v1/heatmap", {"params": {"q": "der", "kind": "decoder", "head": 9}}, 400),
    ],
)
def test_bad_requests(client: TestClient, method: str, path: str, kwargs: dict, status: int) -> None:
    response = client.request(method, path, **kwargs)
    assert response.status_code == status, response.text
    assert response.json()["error"]


def test_the_explorer_works_on_the_torch_backend(tiny_bundle: Path, answer: dict) -> None:
    """The same maps from torch eager as from onnxruntime: both backends teacher-force."""
    from seq2seq.loading import load_translator
    from service.app import create_app
    from service.compute.engine import TranslatorEngine
    from service.settings import Settings

    engine = TranslatorEngine({("de", "en"): ("de-en", load_translator(tiny_bundle, "torch"))})
    try:
        with TestClient(create_app(Settings(), engine=engine)) as client:
            response = client.post("/v1/attention", json={"text": SENTENCE, "source": "de", "target": "en"})
            assert response.status_code == 200, response.text
            heatmap = client.get("/v1/heatmap", params={"q": SENTENCE, "source": "de", "kind": "encoder"})
            assert heatmap.status_code == 200 and heatmap.content.startswith(b"\x89PNG")
    finally:
        engine.close()
    (torch_sentence,), (onnx_sentence,) = response.json()["sentences"], answer["sentences"]
    assert torch_sentence["outputs"] == onnx_sentence["outputs"]
    for kind in ("encoder", "decoder", "cross"):
        np.testing.assert_allclose(torch_sentence[kind]["weights"], onnx_sentence[kind]["weights"], atol=1e-3)
    for level in ("word", "subword"):
        assert torch_sentence["alignment"][level]["links"] == onnx_sentence["alignment"][level]["links"]


def test_backend_without_maps_is_501(toy_tokenizer_path: Path) -> None:
    from echo_backend import EchoBackend

    from data.tokenizer import Tokenizer
    from seq2seq.decoding.translator import Translator
    from service.app import create_app
    from service.compute.engine import TranslatorEngine
    from service.settings import Settings

    tokenizer = Tokenizer(toy_tokenizer_path)
    engine = TranslatorEngine({("de", "en"): ("echo", Translator(EchoBackend(tokenizer.vocab_size), tokenizer))})
    try:
        with TestClient(create_app(Settings(), engine=engine)) as client:
            response = client.post("/v1/attention", json={"text": "a b", "source": "de", "target": "en"})
            assert response.status_code == 501 and "attention maps" in response.json()["error"]
            assert client.get("/v1/heatmap", params={"q": "a b", "source": "de", "kind": "decoder"}).status_code == 501
    finally:
        engine.close()


def test_attention_routes_do_not_import_torch() -> None:
    code = "import sys, service.app, service.routes.attention; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)
