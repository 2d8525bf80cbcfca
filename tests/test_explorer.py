"""The attention explorer page in a real browser against the real server on 127.0.0.1.

Debian's chromium (`apt-get install chromium`) driven by playwright; playwright's own
browser download cannot work on these machines, so `executable_path` points at the
system binary and the test is skipped where it is missing. The server is
`python -m service.serve` over the tiny toy bundle of test_export.py.

Also a tool: `python tests/test_explorer.py --models models --out docs/explorer.png`
serves the bundles under `--models` and saves a screenshot of the page.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_service_server import free_port, start_server  # noqa: E402
from toy import SENTENCES  # noqa: E402

CHROMIUM = os.environ.get("CROSSALIGN_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# Headless, and quiet: without the background-networking flags chromium keeps trying to
# reach Google's services, which a closed network answers with refused connections.
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SENTENCE = SENTENCES[0]  # "der Hund ist klein ."
ALIGNMENT_HEAD = 1

sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the dev extra)")
pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).is_file(), reason=f"no chromium at {CHROMIUM} (apt-get install chromium)"
)


@pytest.fixture(scope="module")
def models(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from export.exporter import export_model

    work = tmp_path_factory.mktemp("explorer_model")
    checkpoint = shutil.copytree(tiny_checkpoint, work / "ckpt")
    # One alignment head, as a guided model has: the page must start on it.
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(
        json.dumps(config | {"alignment_heads": [ALIGNMENT_HEAD], "alignment_step_shift": True})
    )
    # Quality thresholds that flag every source word (punctuation is never flagged) and no
    # target word: the bundle carries them to the page.
    (checkpoint / "quality.json").write_text(json.dumps({"untranslated_coverage": 5.0, "ungrounded_peak": 0.0}))
    export_model(checkpoint, work / "models" / "de-en", parity_sentences=SENTENCES[:2])
    return work / "models"


@pytest.fixture(scope="module")
def server(models: Path) -> str:
    port = free_port()
    process = start_server(models, port)
    yield f"http://127.0.0.1:{port}"
    process.terminate()
    process.wait(timeout=15)


def offline_page(browser, server: str):
    """A page whose requests are recorded in `page.requests`; any request that would leave the
    machine (not to `server`) is recorded in `page.escaped` and aborted."""
    context = browser.new_context(accept_downloads=True, viewport={"width": 1100, "height": 900})
    page = context.new_page()
    page.requests, page.escaped = [], []

    def guard(route) -> None:
        url = route.request.url
        page.requests.append(url)
        if url.startswith(server + "/") or url.startswith(("blob:", "data:")):
            route.continue_()
        else:
            page.escaped.append(url)
            route.abort()

    page.route("**/*", guard)
    return context, page


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def page(browser, server: str):
    """The page after translating SENTENCE; every request it made is kept in `page.requests`."""
    context = browser.new_context(accept_downloads=True, viewport={"width": 1100, "height": 900})
    page = context.new_page()
    page.requests, page.failed = [], []
    page.on("request", lambda request: page.requests.append(request.url))
    page.on(
        "response",
        lambda response: page.failed.append((response.url, response.status)) if response.status >= 400 else None,
    )
    page.goto(server + "/")
    page.get_by_label("Text to translate").fill(SENTENCE)
    page.get_by_label("Language pair").select_option("de:en")
    page.get_by_label("Beam size").fill("4")
    page.get_by_role("button", name="Translate").click()
    page.locator("#translation-text").wait_for(state="visible")
    yield page
    context.close()


def weights(page) -> list[tuple[int, int, float]]:
    """(row, column, weight) of every cell of the map on show."""
    return page.eval_on_selector_all(
        "#map .cell", "cells => cells.map(c => [+c.dataset.row, +c.dataset.col, +c.dataset.weight])"
    )


def choose_kind(page, label: str) -> None:
    page.get_by_role("radio", name=label).check()
    page.wait_for_function(
        "kind => document.querySelector('#map').dataset.kind === kind", arg=label.split()[0].replace("-attention", "")
    )


def test_translation_and_alignment_map(page, server: str) -> None:
    expected = httpx.post(
        server + "/v1/translate", json={"text": SENTENCE, "source": "de", "target": "en"}, timeout=60
    ).json()["translations"][0]
    assert page.locator("#translation-text").inner_text() == expected["text"]
    assert page.locator("#result").get_attribute("aria-live") == "polite"
    grid = page.locator("#map")
    rows, columns = int(grid.get_attribute("data-rows")), int(grid.get_attribute("data-columns"))
    assert columns == 5  # der Hund ist klein .
    cells = weights(page)
    assert len(cells) == rows * columns
    for row in range(rows):  # the alignment: rows sum to 1
        assert abs(sum(w for r, _, w in cells if r == row) - 1) < 2e-3
    assert page.locator("#map .cell.link").count() == rows  # one hard link per target word
    # No request left the server: no CDN, nothing external; and none failed (the icon is served).
    assert page.requests and all(url.startswith(server) for url in page.requests)
    assert page.failed == []
    icon = httpx.get(server + "/favicon.ico", timeout=10)
    assert (
        icon.status_code == 200 and icon.headers["content-type"] == "image/x-icon" and icon.content[:4] == b"\0\0\1\0"
    )


def test_untranslated_and_ungrounded_words_are_marked_with_a_legend(page, server: str) -> None:
    answer = httpx.post(
        server + "/v1/attention", json={"text": SENTENCE, "source": "de", "target": "en"}, timeout=60
    ).json()["sentences"][0]
    words = [t["text"] for t in answer["alignment"]["word"]["source_tokens"]]
    assert answer["quality"]["untranslated"] == [0, 1, 2, 3] and words[4] == "."
    assert answer["quality"]["ungrounded"] == []
    for kind in ("cross-attention", "encoder self-attention"):  # the strips keep their marks
        choose_kind(page, kind)
        flagged = page.locator("#source-tokens .token.untranslated")
        assert flagged.all_inner_texts() == words[:4]  # "." is never flagged
        assert page.locator("#target-tokens .token.ungrounded").count() == 0
        style = flagged.first.evaluate(
            "t => [getComputedStyle(t).borderTopStyle, getComputedStyle(t).borderTopColor].join(' ')"
        )
        assert style == "dashed rgb(179, 89, 0)"  # visibly marked
        plain = page.locator("#source-tokens .token").nth(4)
        assert plain.evaluate("t => getComputedStyle(t).borderTopStyle") != "dashed"
        assert "left out" in (flagged.first.get_attribute("title") or "")
    legend = page.locator("#flag-legend")
    assert legend.is_visible() and "untranslated" in legend.inner_text() and "ungrounded" in legend.inner_text()
    assert "4 flagged" in legend.inner_text()
    # What flagged them: this toy model's quality.json has thresholds only.
    assert f"found by {answer['quality']['untranslated_by']}" in legend.inner_text()


def test_cross_attention_starts_on_the_models_alignment_head(page) -> None:
    choose_kind(page, "decoder self-attention")
    assert page.get_by_label("Head", exact=True).input_value() == "mean"
    choose_kind(page, "cross-attention")
    head = page.get_by_label("Head", exact=True)
    assert head.input_value() == str(ALIGNMENT_HEAD)
    assert "alignment head" in head.locator("option:checked").inner_text()
    assert f"head {ALIGNMENT_HEAD}" in page.locator("#map-caption").inner_text()
    assert "Step-shifted" in page.locator("#map-caption").inner_text()
    default = weights(page)
    head.select_option("mean")
    assert weights(page) != default
    head.select_option(str(ALIGNMENT_HEAD))
    assert weights(page) == default


def test_hover_and_focus_show_where_weight_went(page) -> None:
    choose_kind(page, "cross-attention")
    source = page.locator("#source-tokens .token")
    assert source.count() == 5
    page.locator("#target-tokens .token").first.hover()
    painted = source.evaluate_all("tokens => tokens.map(t => t.style.backgroundColor)")
    assert all(painted), "every source word is shaded by its weight"
    assert "drew most from" in page.locator("#readout").inner_text()
    page.locator("#map .row-label").first.hover()
    assert page.locator("#map .cell.cross-hair").count() == 5
    source.nth(1).focus()  # the keyboard equivalent
    assert "gave most to" in page.locator("#readout").inner_text()
    page.locator("#map .col-label").nth(2).focus()
    assert page.locator("#readout").inner_text().startswith("Column")


def test_decoder_self_attention_is_lower_triangular(page) -> None:
    choose_kind(page, "decoder self-attention")
    cells = weights(page)
    rows = int(page.locator("#map").get_attribute("data-rows"))
    assert rows == int(page.locator("#map").get_attribute("data-columns"))
    assert page.locator("#map .row-label").first.inner_text() == "<s>"
    assert all(w == 0 for r, c, w in cells if c > r), "the upper triangle must be empty"
    assert cells[0][2] == 1.0  # <s> can only read itself
    assert page.locator("#map .cell.masked").count() == rows * (rows - 1) // 2
    assert page.locator("#level").is_disabled()


def test_encoder_self_attention_is_a_full_square(page) -> None:
    choose_kind(page, "encoder self-attention")
    cells = weights(page)
    assert page.locator("#map .row-label").last.inner_text() == "</s>"
    assert sum(w for r, c, w in cells if c > r) > 0.1, "the encoder reads later positions too"
    assert page.locator("#map .cell.masked").count() == 0


def test_layer_and_head_switch_the_map(page) -> None:
    choose_kind(page, "decoder self-attention")
    page.get_by_label("Layer", exact=True).select_option("1")
    page.get_by_label("Head", exact=True).select_option("mean")
    mean = weights(page)
    page.get_by_label("Head", exact=True).select_option("0")
    head0 = weights(page)
    assert head0 != mean
    page.get_by_label("Layer", exact=True).select_option("0")
    assert weights(page) != head0
    assert "layer 0, head 0" in page.locator("#map-caption").inner_text()


def test_downloads_png_and_svg(page) -> None:
    from PIL import Image

    choose_kind(page, "decoder self-attention")
    page.get_by_label("Layer", exact=True).select_option("0")
    page.get_by_label("Head", exact=True).select_option("1")
    with page.expect_download() as png_download:
        page.get_by_role("link", name="Download the decoder map as PNG").click()
    png = Path(png_download.value.path()).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and Image.open(io.BytesIO(png)).size[0] > 100
    assert png_download.value.suggested_filename.startswith("decoder-attention-de-en-der-hund")
    with page.expect_download() as svg_download:
        page.get_by_role("link", name="Download the decoder map as SVG").click()
    texts = [
        e.text
        for e in ET.fromstring(Path(svg_download.value.path()).read_bytes()).iter("{http://www.w3.org/2000/svg}text")
    ]
    assert "decoder self-attention, layer 0, heads 1" in texts and "<s>" in texts
    choose_kind(page, "cross-attention")
    with page.expect_download() as cross_download:
        page.get_by_role("link", name="Download the cross map as SVG").click()
    assert cross_download.value.suggested_filename.startswith("alignment-de-en-der-hund")


def test_accessible_and_narrow(page) -> None:
    unlabelled = page.eval_on_selector_all(
        "input, select, textarea", "els => els.filter(e => !e.labels || !e.labels.length).map(e => e.id || e.name)"
    )
    assert unlabelled == []
    page.set_viewport_size({"width": 360, "height": 800})
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 1, "the page scrolls sideways on a narrow screen (only the map may)"
    page.keyboard.press("Tab")  # the controls are reachable from the keyboard
    page.set_viewport_size({"width": 1100, "height": 900})


@pytest.mark.parametrize("path,operation", [("/docs", ".opblock-summary-path"), ("/redoc", "[data-section-id]")])
def test_api_docs_render_with_no_request_leaving_the_machine(browser, server: str, path: str, operation: str) -> None:
    context, page = offline_page(browser, server)
    page.goto(server + path)
    page.locator(operation).first.wait_for(state="visible", timeout=30000)
    shown = page.locator("body").inner_text()
    for route in ("/translate", "/v1/translate", "/v1/heatmap", "/v1/align", "/health"):
        assert route in shown, f"{path} does not show {route}"
    page.wait_for_load_state("networkidle")
    assert page.escaped == [], f"{path} tried to reach {page.escaped}"
    assert any("/docs-assets/" in url for url in page.requests)
    context.close()


def test_explorer_sends_the_key_as_a_bearer_header(browser, models: Path) -> None:
    port = free_port()
    process = start_server(models, port, api_keys="sesame")
    server = f"http://127.0.0.1:{port}"
    try:
        context, page = offline_page(browser, server)
        sent: list[tuple[str, str | None]] = []
        page.on("request", lambda request: sent.append((request.url, request.headers.get("authorization"))))
        page.goto(server + "/?api_key=sesame")  # an old-style link: the key moves out of the URL
        assert "api_key" not in page.url and page.get_by_label("API key").input_value() == "sesame"
        page.get_by_label("Text to translate").fill(SENTENCE)
        page.get_by_role("button", name="Translate").click()
        page.locator("#translation-text").wait_for(state="visible")
        api_calls = [(url, auth) for url, auth in sent if "/v1/attention" in url]
        assert api_calls and all(auth == "Bearer sesame" and "sesame" not in url for url, auth in api_calls)
        with page.expect_download() as download:  # a link cannot carry the header: fetched with it
            page.get_by_role("link", name="Download the cross map as PNG").click()
        assert Path(download.value.path()).read_bytes()[:4] == b"\x89PNG"
        page.get_by_label("API key").fill("wrong")
        page.get_by_role("button", name="Translate").click()
        page.wait_for_function("document.querySelector('#status').textContent.includes('Invalid API key')")
        assert page.escaped == []
        context.close()
    finally:
        process.terminate()
        process.wait(timeout=15)


def screenshot(models: Path, out: Path, text: str) -> None:
    """Serve `models`, translate `text` on the page and save a screenshot to `out`."""
    port = free_port()
    process = start_server(models, port)
    try:
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1100, "height": 1000}, device_scale_factor=1)
            page.goto(f"http://127.0.0.1:{port}/")
            page.get_by_label("Text to translate").fill(text)
            page.get_by_role("button", name="Translate").click()
            page.locator("#translation-text").wait_for(state="visible")
            page.locator("#target-tokens .token").nth(1).hover()
            out.parent.mkdir(parents=True, exist_ok=True)
            bottom = page.evaluate("document.querySelector('#explorer').getBoundingClientRect().bottom")
            page.screenshot(path=str(out), full_page=True, clip={"x": 0, "y": 0, "width": 1100, "height": bottom})
            browser.close()
    finally:
        process.terminate()
        process.wait(timeout=15)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="screenshot of the attention explorer")
    parser.add_argument("--models", type=Path, default=Path("models"))
    parser.add_argument("--out", type=Path, default=Path("docs/explorer.png"))
    parser.add_argument("--text", default="Das Haus ist sehr klein.")
    arguments = parser.parse_args()
    screenshot(arguments.models, arguments.out, arguments.text)
    print(f"wrote {arguments.out}")
