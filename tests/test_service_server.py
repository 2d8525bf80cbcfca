"""The service as it runs: `python -m service.serve` on 127.0.0.1, a real onnxruntime bundle.

A tiny toy German -> English model is trained for a few seconds and exported (the helpers
of test_export.py), then served by uvicorn in a subprocess on a free loopback port. The
tests speak HTTP to it: the LibreTranslate contract, the native API, heatmap downloads,
metrics, the bad-input matrix (after which the server must still answer), and a
concurrent burst whose every answer must equal the single-request answer.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
from toy import SENTENCES

from seq2seq.core.config import DecodeConfig

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def models_dir(tiny_bundle: Path) -> Path:
    """The directory holding the shared tiny bundle (tests/conftest.py), as `serve --models` takes it."""
    return tiny_bundle.parent


def start_server(
    models: Path, port: int, log: Path | None = None, log_level: str = "warning", **settings: str
) -> subprocess.Popen:
    """`python -m service.serve` on 127.0.0.1:`port`, healthy; its output goes to `log` if given."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "CROSSALIGN_THREADS": "1",
        **{f"CROSSALIGN_{k.upper()}": str(v) for k, v in settings.items()},
    }
    output = open(log, "wb") if log else None  # noqa: SIM115 - the child holds it for its life
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "service.serve",
            "--models",
            str(models),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            log_level,
        ],
        cwd=REPO,
        env=env,
        stdout=output,
        stderr=subprocess.STDOUT if output else None,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited with {server.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.2)
    server.terminate()
    raise RuntimeError("the server did not become healthy within 60 s")


@contextlib.contextmanager
def serving(models: Path, **settings: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """(base URL, process) of a server on a free port, stopped on exit."""
    port = free_port()
    process = start_server(models, port, **settings)
    try:
        yield f"http://127.0.0.1:{port}", process
    finally:
        process.terminate()
        process.wait(timeout=15)


@pytest.fixture(scope="module")
def server(models_dir: Path) -> tuple[str, subprocess.Popen]:
    with serving(models_dir, char_limit="400", batch_limit="8", batch_window_ms="10") as running:
        yield running


@pytest.fixture(scope="module")
def http(server: tuple[str, subprocess.Popen]) -> httpx.Client:
    with httpx.Client(base_url=server[0], timeout=60) as client:
        yield client


def test_server_runs_onnx_without_torch(server: tuple[str, subprocess.Popen], http: httpx.Client) -> None:
    # An export records DecodeConfig's search settings as the bundle's serving defaults.
    decoding = DecodeConfig().search_settings
    assert http.get("/health").json()["models"] == [
        {"name": "de-en", "source": "de", "target": "en", "decoding": decoding}
    ]
    maps = Path(f"/proc/{server[1].pid}/maps")
    if maps.exists():
        loaded = maps.read_text()
        assert "onnxruntime" in loaded and "libtorch" not in loaded


def test_libretranslate_contract(http: httpx.Client) -> None:
    single = http.post("/translate", json={"q": "der Hund ist klein .", "source": "de", "target": "en"})
    assert single.status_code == 200
    text = single.json()["translatedText"]
    assert isinstance(text, str) and text
    listed = http.post(
        "/translate",
        json={"q": ["der Hund ist klein .", "das Haus ist rot ."], "source": "de", "target": "en", "alternatives": 2},
    ).json()
    assert listed["translatedText"][0] == text and len(listed["alternatives"]) == 2
    form = http.post("/translate", data={"q": "der Hund ist klein .", "source": "de", "target": "en"})
    assert form.json()["translatedText"] == text
    aligned = http.post(
        "/translate", json={"q": "der Hund ist klein .", "source": "de", "target": "en", "alignment": True}
    ).json()
    matrix = np.array(aligned["alignment"]["matrix"])
    assert matrix.shape == (len(aligned["alignment"]["target_tokens"]), 5)
    assert np.allclose(matrix.sum(axis=1), 1.0, atol=1e-3)
    assert http.get("/languages").json()[0] == {"code": "de", "name": "German", "targets": ["en"]}


def test_native_api(http: httpx.Client) -> None:
    text = "der Hund ist klein . das Haus ist rot ."
    body = http.post(
        "/v1/translate",
        json={
            "text": text,
            "beam_size": 4,
            "n_best": 2,
            "no_repeat_ngram_size": 3,
            "alignment": {"level": "subword", "layer": -1, "heads": [0, 2]},
        },
    ).json()
    (translation,) = body["translations"]
    assert translation["source"] == "de" and translation["target"] == "en"
    for sentence in translation["sentences"]:
        alignment = sentence["alignment"]
        assert alignment["layer"] == 1 and alignment["heads"] == [0, 2]
        matrix = np.array(alignment["matrix"])
        assert matrix.shape == (len(sentence["target_tokens"]), len(sentence["source_tokens"]))
        assert np.allclose(matrix.sum(axis=1), 1.0, atol=1e-3)
        for token in sentence["source_tokens"] + sentence["source_words"]:  # a bare "▁" piece too
            assert text[token["start"] : token["end"]] == token["text"]
        links = [tuple(map(int, link.split("-"))) for link in sentence["word_links"].split()]
        assert all(i < len(sentence["source_words"]) and j < len(sentence["target_words"]) for i, j in links)
        assert len(sentence["alternatives"]) == 1 and sentence["alternatives"][0]["alignment"]["matrix"]


def test_heatmap_png_and_svg(http: httpx.Client) -> None:
    from PIL import Image

    png = http.get(
        "/v1/heatmap",
        params={
            "q": "der Hund ist klein .",
            "source": "de",
            "target": "en",
            "format": "png",
            "width": 500,
            "height": 400,
            "layer": 0,
            "head": [1],
        },
    )
    assert png.status_code == 200 and png.content[:8] == b"\x89PNG\r\n\x1a\n"
    assert 'filename="alignment-de-en-der-hund-ist-klein.png"' in png.headers["content-disposition"]
    assert Image.open(io.BytesIO(png.content)).size == (500, 400)
    svg = http.post("/v1/heatmap", json={"q": "der Hund ist klein .", "format": "svg"})
    assert svg.headers["content-disposition"].startswith("attachment;")
    labels = {e.text for e in ET.fromstring(svg.content).iter("{http://www.w3.org/2000/svg}text")}
    assert {"der", "Hund", "ist", "klein"} <= labels


def test_source_attention_mass_is_named_as_a_sum_and_the_old_name_is_a_deprecated_alias(http: httpx.Client) -> None:
    """`quality.source_coverage` read as a fraction but is a sum (values above 1): renamed
    `source_attention_mass`, the old name kept, deprecated, for one release (issue 42)."""
    body = http.post("/v1/translate", json={"text": "der Hund ist klein . das Haus ist rot ."}).json()
    for sentence in body["translations"][0]["sentences"]:
        quality = sentence["quality"]
        assert quality["source_attention_mass"] == quality["source_coverage"]
        assert len(quality["source_attention_mass"]) == len(sentence["source_words"])
    libre = http.post("/translate", json={"q": "der Hund", "source": "de", "target": "en", "alignment": True}).json()
    assert libre["quality"]["source_attention_mass"] == libre["quality"]["source_coverage"]
    properties = http.get("/openapi.json").json()["components"]["schemas"]["Quality"]["properties"]
    assert properties["source_coverage"]["deprecated"] is True and "source_attention_mass" in properties
    assert "deprecated" not in properties["source_attention_mass"]
    assert "not a fraction" in properties["source_attention_mass"]["description"]


def test_heatmap_download_names_spell_non_ascii_letters(http: httpx.Client) -> None:
    """ "schläft" is "schlaeft" in the file name, not "schlft" (issue 42); marks are dropped."""
    from seq2seq.analysis.heatmap import filename
    from seq2seq.core.languages import transliterate

    assert transliterate("schläft Straße Öl café Łódź") == "schlaeft Strasse Oel cafe Lodz"
    assert (
        filename("de", "en", "Крыса und Maus", "png") == "alignment-de-en-und-maus.png"
    )  # no ASCII spelling: left out
    from service.routes.files import attachment

    # A translated file's ASCII fallback name spells the letters too; what has no spelling is "_".
    assert attachment("Bericht über Крыса.docx").startswith('attachment; filename="Bericht ueber _____.docx"; ')
    png = http.get("/v1/heatmap", params={"q": "der Hund schläft über Nacht", "source": "de", "target": "en"})
    assert png.status_code == 200, png.text
    assert 'filename="alignment-de-en-der-hund-schlaeft-ueber.png"' in png.headers["content-disposition"]
    heads = http.post("/v1/heatmap", json={"q": "Grüße", "view": "heads", "width": 600, "height": 500})
    assert heads.status_code == 200, heads.text
    assert 'filename="heads-cross-de-en-gruesse.png"' in heads.headers["content-disposition"]


BAD_REQUESTS = [
    ("POST", "/translate", {"json": {"source": "de", "target": "en"}}),
    ("POST", "/translate", {"json": {"q": "", "source": "de", "target": "en"}}),
    ("POST", "/translate", {"json": {"q": 42, "source": "de", "target": "en"}}),
    ("POST", "/translate", {"json": {"q": "der Hund", "source": "en", "target": "de"}}),
    ("POST", "/translate", {"json": {"q": "x" * 401, "source": "de", "target": "en"}}),
    ("POST", "/translate", {"json": {"q": ["der"] * 9, "source": "de", "target": "en"}}),
    ("POST", "/translate", {"content": b"{not json", "headers": {"content-type": "application/json"}}),
    ("POST", "/translate", {"content": b'{"q": "\xc3\x28"}', "headers": {"content-type": "application/json"}}),
    ("POST", "/v1/translate", {"content": b"{not json", "headers": {"content-type": "application/json"}}),
    ("POST", "/v1/translate", {"content": b'{"text": "\xc3\x28"}', "headers": {"content-type": "application/json"}}),
    ("POST", "/v1/translate", {"json": {"texts": ["der"] * 9}}),
    ("POST", "/v1/translate", {"json": {"text": "der", "alignment": {"layer": 99}}}),
    ("POST", "/v1/translate", {"json": {"text": "der", "no_repeat_ngram_size": 11}}),
    ("GET", "/v1/attention", {"params": {"q": "der Hund", "no_repeat_ngram_size": -1}}),
    ("GET", "/v1/heatmap", {"params": {"q": "der Hund", "width": 100000, "height": 100000}}),
    ("GET", "/v1/heatmap", {"params": {"q": "der Hund", "format": "bmp"}}),
    ("POST", "/detect", {"json": {}}),
]


def test_bad_input_matrix_gets_4xx_and_server_keeps_serving(http: httpx.Client) -> None:
    for method, path, kwargs in BAD_REQUESTS:
        response = http.request(method, path, **kwargs)
        assert 400 <= response.status_code < 500, (path, kwargs, response.text)
        assert response.json()["error"], (path, kwargs)
    assert http.get("/health").status_code == 200


def test_concurrent_burst_matches_single_answers(http: httpx.Client, server: tuple[str, subprocess.Popen]) -> None:
    sentences = SENTENCES + ["die Frau war nicht alt .", "das Auto ist blau und neu ."]
    expected = {
        s: http.post("/translate", json={"q": s, "source": "de", "target": "en"}).json()["translatedText"]
        for s in sentences
    }
    jobs = [sentences[i % len(sentences)] for i in range(200)]

    def client_run(share: list[str]) -> list[tuple[str, str]]:
        with httpx.Client(base_url=server[0], timeout=60) as client:
            return [
                (s, client.post("/translate", json={"q": s, "source": "de", "target": "en"}).json()["translatedText"])
                for s in share
            ]

    with ThreadPoolExecutor(20) as pool:
        answers = [a for part in pool.map(client_run, [jobs[i::20] for i in range(20)]) for a in part]
    assert len(answers) == 200
    assert all(answer == expected[source] for source, answer in answers)
    metrics = http.get("/metrics").text
    assert 'crossalign_requests_total{method="POST",route="/translate",status="200"}' in metrics
    batch_counts = [line for line in metrics.splitlines() if line.startswith("crossalign_batch_sentences_count")]
    batch_sum = [line for line in metrics.splitlines() if line.startswith("crossalign_batch_sentences_sum")]
    calls, sentences_run = float(batch_counts[0].split()[-1]), float(batch_sum[0].split()[-1])
    assert sentences_run / calls > 1.5, "concurrent requests should share model calls"
