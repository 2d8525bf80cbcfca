"""Both directions in one server: a de->en and an en->de bundle under one models directory.

Two exports of the tiny toy model, one recording German -> English and one English ->
German (as `crossalign data prepare --reverse` makes a run record it): /languages lists
both, `source: "auto"` picks the direction by the text's language, every route answers both
ways with the model of that direction, the CLIs take either bundle, and the explorer's
language pair switches the direction in a real browser.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from toy import SENTENCES

from seq2seq.cli import main as cli_main
from service.app import create_app
from service.settings import Settings

GERMAN = SENTENCES[0]  # "der Hund ist klein ."
ENGLISH = "the dog is small ."


@pytest.fixture(scope="module")
def client(two_models: Path):
    with TestClient(create_app(Settings(models=str(two_models), threads=1))) as client:
        yield client


def test_languages_lists_both_directions(client: TestClient) -> None:
    languages = {item["code"]: item["targets"] for item in client.get("/languages").json()}
    assert languages == {"de": ["en"], "en": ["de"]}
    health = client.get("/health").json()
    assert sorted((m["source"], m["target"]) for m in health["models"]) == [("de", "en"), ("en", "de")]


@pytest.mark.parametrize(("text", "source", "target"), [(GERMAN, "de", "en"), (ENGLISH, "en", "de")])
def test_auto_picks_the_direction_by_the_texts_language(client: TestClient, text: str, source: str, target: str):
    native = client.post("/v1/translate", json={"text": text, "source": "auto"}).json()["translations"][0]
    assert (native["source"], native["target"]) == (source, target)
    libre = client.post("/translate", json={"q": text, "source": "auto", "target": target}).json()
    assert libre["detectedLanguage"]["language"] == source


@pytest.mark.parametrize(("text", "source", "target"), [(GERMAN, "de", "en"), (ENGLISH, "en", "de")])
def test_every_route_answers_both_ways(client: TestClient, text: str, source: str, target: str) -> None:
    pair = {"source": source, "target": target}
    translated = client.post("/translate", json={"q": text, **pair, "alignment": True})
    assert translated.status_code == 200 and translated.json()["alignment"]["source_tokens"]
    native = client.post("/v1/translate", json={"text": text, **pair}).json()["translations"][0]
    assert (native["source"], native["target"]) == (source, target)
    words = [w["text"] for w in native["sentences"][0]["source_words"]]
    assert words == text.split()  # the map is over this direction's source
    aligned = client.post("/v1/align", json={"text": text, "translation": native["text"], **pair})
    assert aligned.status_code == 200, aligned.text
    attention = client.post("/v1/attention", json={"text": text, **pair})
    assert attention.status_code == 200, attention.text
    heatmap = client.get("/v1/heatmap", params={"q": text, **pair, "format": "svg"})
    assert heatmap.status_code == 200 and heatmap.headers["content-type"].startswith("image/svg")
    assert f"alignment-{source}-{target}" in heatmap.headers["content-disposition"]
    # A pair the server does not serve is refused by name.
    refused = client.post("/v1/translate", json={"text": text, "source": source, "target": source})
    assert refused.status_code == 400 and "not served" in refused.json()["error"]


def test_the_clis_take_either_bundle(two_models: Path, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text(ENGLISH + "\n")
    out = tmp_path / "out.jsonl"
    assert (
        cli_main(["translate", "-m", str(two_models / "en-de"), "-i", str(source), "-o", str(out), "-f", "jsonl"]) == 0
    )
    assert json.loads(out.read_text())["source"] == ENGLISH
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(f"{ENGLISH}\t{GERMAN}\n")
    aligned = tmp_path / "aligned.jsonl"
    command = ["align", "--model", str(two_models / "en-de"), "-i", str(pairs), "-o", str(aligned), "--format", "jsonl"]
    assert cli_main(command) == 0
    assert [w["text"] for w in json.loads(aligned.read_text())["source_words"]] == ENGLISH.split()


def test_the_explorer_switches_direction(two_models: Path) -> None:
    """In a real browser: the language pair lists both directions, and choosing English ->
    German translates the English text with the en->de model (its words label the map)."""
    from browser import CHROMIUM, launch
    from test_service_server import free_port, start_server

    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no chromium at {CHROMIUM}")
    port = free_port()
    process = start_server(two_models, port)
    try:
        with sync_api.sync_playwright() as playwright:
            browser = launch(playwright)
            page = browser.new_page()
            bodies = []
            page.on("request", lambda r: bodies.append(r.post_data) if r.url.endswith("/v1/attention") else None)
            page.goto(f"http://127.0.0.1:{port}/")
            settled = "n => +(document.querySelector('#result').dataset.done || 0) >= n"
            page.wait_for_function(settled, arg=1)  # the page's example, translated at once
            pair = page.get_by_label("Languages")
            assert sorted(pair.locator("option").evaluate_all("os => os.map(o => o.value)")) == [
                "auto:",
                "de:en",
                "en:de",
            ]
            page.get_by_label("Text to translate").fill(ENGLISH)
            pair.select_option("en:de")
            page.get_by_role("button", name="Translate").click()
            page.wait_for_function(settled, arg=2)
            sent = json.loads(bodies[-1])
            assert (sent["source"], sent["target"]) == ("en", "de")
            words = page.locator("#source-tokens .token").all_inner_texts()
            assert [w.strip() for w in words] == ENGLISH.split()
            browser.close()
    finally:
        process.terminate()
        process.wait(timeout=15)


def test_the_models_of_one_server_take_turns_on_the_cores(echo_engine) -> None:
    """Two served models never run a call at once: each one's onnxruntime threads already
    take every core, so overlapping calls would only contend (bench/service_load.py --mix)."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from seq2seq.core.config import DecodeConfig
    from service.compute.engine import TranslatorEngine

    active, overlaps, lock = [0], [0], threading.Lock()

    class Slow:
        """A translator whose calls take a while and count how many run at once."""

        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def translate_wanted(self, texts, config=None, wanted=None, watch=None):
            with lock:
                active[0] += 1
                overlaps[0] = max(overlaps[0], active[0])
            time.sleep(0.05)
            with lock:
                active[0] -= 1
            return self.inner.translate_wanted(texts, config, wanted, watch)

    (model,) = echo_engine.models.values()
    pairs = {("de", "en"): ("de-en", Slow(model.translator)), ("en", "de"): ("en-de", Slow(model.translator))}
    engine = TranslatorEngine(pairs, window_s=0.002)
    try:
        config = DecodeConfig(beam_size=1)
        with ThreadPoolExecutor(8) as pool:
            calls = [pool.submit(engine.models[pair].translate, ["b a c"], config) for pair in list(pairs) * 6]
            assert all(call.result(timeout=30)[0].text for call in calls)
        assert overlaps[0] == 1
    finally:
        engine.close()
