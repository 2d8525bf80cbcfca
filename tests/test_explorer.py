"""The attention explorer page in a real browser against the real server on 127.0.0.1.

Debian's chromium (`apt-get install chromium`) driven by playwright (tests/browser.py:
playwright's own browser download cannot work on these machines, so `executable_path`
points at the system binary, and the test is skipped where it is missing). The server is
`python -m service.serve` over the tiny toy bundle, served in both directions (the same toy
model as en-de too), so the page offers reranking by the reverse model.

The docs' pictures of the page are made by tests/screenshots.py from the same page, launched
the same way (`python tests/screenshots.py`); a test here runs it on the toy bundle.
"""

from __future__ import annotations

import io
import json
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlparse

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from browser import CHROMIUM, FIRST_SCREEN, launch  # noqa: E402
from test_calibration import ALL_LOW  # noqa: E402
from test_rerank_service import reversed_bundle  # noqa: E402
from test_service_server import free_port, start_server  # noqa: E402
from toy import SENTENCES  # noqa: E402

from data.files import CALIBRATION_FILE  # noqa: E402
from seq2seq.runtime.bundle import set_calibration_file  # noqa: E402

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
    reversed_bundle(work / "models" / "de-en", work / "models" / "en-de")
    return work / "models"


@pytest.fixture(scope="module")
def server(models: Path) -> str:
    port = free_port()
    process = start_server(models, port)
    yield f"http://127.0.0.1:{port}"
    process.terminate()
    process.wait(timeout=15)


def offline_page(browser, server: str, enforce_csp: bool = False):
    """A page whose requests are recorded in `page.requests`; any request that would leave the
    machine (not to `server`) is recorded in `page.escaped` and aborted. The page's Content
    Security Policy is bypassed unless `enforce_csp`: playwright evaluates a string given to
    `wait_for_function` in the page, which the policy (rightly) refuses."""
    context = browser.new_context(
        accept_downloads=True, viewport={"width": 1100, "height": 900}, bypass_csp=not enforce_csp
    )
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


def open_page(page, url: str) -> None:
    """Go to `url` and wait for its first translation to settle (the bare page translates its
    example, a link its text): `#result[data-done]` counts the translations finished."""
    page.goto(url)
    page.wait_for_function("+(document.querySelector('#result').dataset.done || 0) >= 1")


def submit(page) -> None:
    """Press Translate and wait until that translation has finished (shown, or its error)."""
    done = int(page.locator("#result").get_attribute("data-done") or 0)
    page.get_by_role("button", name="Translate").click()
    page.wait_for_function("n => +(document.querySelector('#result').dataset.done || 0) > n", arg=done)


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        browser = launch(playwright)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def page(browser, server: str):
    """The page after translating SENTENCE; every request it made is kept in `page.requests`."""
    context = browser.new_context(accept_downloads=True, viewport={"width": 1100, "height": 900}, bypass_csp=True)
    page = context.new_page()
    page.requests, page.failed = [], []
    page.on("request", lambda request: page.requests.append(request.url))
    page.on(
        "response",
        lambda response: page.failed.append((response.url, response.status)) if response.status >= 400 else None,
    )
    open_page(page, server + "/")
    page.get_by_label("Text to translate").fill(SENTENCE)
    page.get_by_label("Languages").select_option("de:en")
    page.get_by_label("Beam size").fill("4")
    submit(page)
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
    caption = page.locator("#map-caption").inner_text()
    # What the map shows, in words: rows, the red frames, the step shift explained, no jargon.
    assert "each row is a translated word" in caption and "Red frames" in caption and "one step late" in caption
    assert "decoder input" not in caption and "quer" not in caption.lower()
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
    if path == "/docs":  # no keys on this server: no "Authorize" button, no lock on any route
        assert page.locator(".btn.authorize").count() == 0
        assert page.locator(".authorization__btn").count() == 0
        assert page.locator(".opblock").count() > 10
    context.close()


def test_explorer_sends_the_key_as_a_bearer_header(browser, models: Path) -> None:
    port = free_port()
    process = start_server(models, port, api_keys="sesame")
    server = f"http://127.0.0.1:{port}"
    try:
        context, page = offline_page(browser, server)
        sent: list[tuple[str, str | None]] = []
        page.on("request", lambda request: sent.append((request.url, request.headers.get("authorization"))))
        open_page(page, server + "/?api_key=sesame")  # an old-style link: the key moves out of the URL
        assert "api_key" not in page.url and page.get_by_label("API key").input_value() == "sesame"
        page.get_by_label("Text to translate").fill(SENTENCE)
        submit(page)
        api_calls = [(url, auth) for url, auth in sent if "/v1/attention" in url]
        assert api_calls and all(auth == "Bearer sesame" and "sesame" not in url for url, auth in api_calls)
        with page.expect_download() as download:  # a link cannot carry the header: fetched with it
            page.get_by_role("link", name="Download the cross map as PNG").click()
        assert Path(download.value.path()).read_bytes()[:4] == b"\x89PNG"
        page.get_by_label("API key").fill("wrong")
        submit(page)
        assert "Invalid API key" in page.locator("#status").inner_text()
        # Issue 41, 17: a link's key never replaces the key the tab holds (it is dropped from the URL all the same).
        page.get_by_label("API key").fill("sesame")
        with page.expect_response(lambda response: "/v1/attention" in response.url and response.ok):
            page.get_by_role("button", name="Translate").click()  # the tab keeps the key it sent
        page.goto(server + "/?api_key=someone-elses")
        assert "api_key" not in page.url and page.get_by_label("API key").input_value() == "sesame"
        assert page.escaped == []
        # A server with keys shows Swagger UI's "Authorize" (a server without shows none: below).
        page.goto(server + "/docs")
        page.locator(".btn.authorize").wait_for(state="visible", timeout=30000)
        context.close()
    finally:
        process.terminate()
        process.wait(timeout=15)


def test_the_page_works_under_its_content_security_policy(browser, server: str) -> None:
    """Issue 41, 17: the page is sent with its policy (its own files only, no framing) and
    nosniff, and translating, the model view, a download and the playback break none of it."""
    headers = httpx.get(server + "/", timeout=30).headers
    policy = headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy and "unsafe" not in policy
    assert headers["x-content-type-options"] == "nosniff" and headers["x-frame-options"] == "DENY"
    context, page = offline_page(browser, server, enforce_csp=True)
    refused: list[str] = []
    page.on(
        "console", lambda message: refused.append(message.text) if "Content Security Policy" in message.text else None
    )
    page.goto(server + "/")
    # The example's translation first, then ours: a playback started before ours has come is of
    # the example's and is reset when ours arrives. (Attribute selectors, not wait_for_function:
    # the policy refuses the string it evaluates.)
    page.locator("#result[data-done='1']").wait_for(state="attached")
    page.get_by_label("Text to translate").fill(SENTENCE)
    page.get_by_role("button", name="Translate").click()
    page.locator("#result[data-done='2']").wait_for(state="attached")
    page.locator("#translation-text").wait_for(state="visible")
    page.locator("#heads .head").first.wait_for(state="visible")  # the model view, drawn on canvases
    page.get_by_role("button", name="Decode step by step").click()
    # no string to evaluate: CSP holds; a loaded machine may take a while to play it back
    page.locator("#playback[data-done='done']").wait_for(state="attached", timeout=90_000)
    with page.expect_download() as download:
        page.get_by_role("link", name="Download the cross map as PNG").click()
    assert Path(download.value.path()).read_bytes()[:4] == b"\x89PNG"
    assert refused == [] and page.escaped == []
    context.close()


# --------------------------------------------------------------------------- issue 31: links, heads, playback


def answer_of(server: str, route: str, body: dict) -> dict:
    response = httpx.post(server + route, json={"source": "de", "target": "en", **body}, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_link_with_q_shows_its_translation(browser, server: str) -> None:
    context, page = offline_page(browser, server)
    text = "die Katze ist sehr alt ."
    open_page(page, f"{server}/?{urlencode({'q': text, 'source': 'de', 'target': 'en'})}")
    expected = answer_of(server, "/v1/translate", {"text": text, "beam_size": 4})["translations"][0]["text"]
    assert page.locator("#translation-text").inner_text() == expected
    assert page.get_by_label("Text to translate").input_value() == text
    assert page.get_by_label("Languages").input_value() == "de:en"
    assert page.escaped == []
    # Translating another text puts it in the address: the bar is a link to what is shown.
    page.get_by_label("Text to translate").fill(SENTENCE)
    submit(page)
    assert parse_qs(urlparse(page.url).query) == {"q": [SENTENCE], "source": ["de"], "target": ["en"]}
    context.close()


def test_the_model_view_shows_every_layer_and_head_with_the_alignment_head_marked(page, server: str) -> None:
    answer = answer_of(server, "/v1/attention", {"text": SENTENCE, "beam_size": 4})
    stats = answer["sentences"][0]["heads"]
    choose_kind(page, "cross-attention")
    heads = page.locator("#heads .head")
    layers, per_layer = answer["decoder_layers"], answer["n_heads"]
    assert heads.count() == layers * per_layer == 8
    marked = page.locator("#heads .head.alignment")
    assert marked.count() == 1
    assert (marked.get_attribute("data-layer"), marked.get_attribute("data-head")) == (
        str(answer["alignment_layer"]),
        str(ALIGNMENT_HEAD),
    )
    assert "alignment head" in marked.get_attribute("aria-label")
    assert marked.evaluate("b => getComputedStyle(b).borderTopWidth") == "3px"  # visibly framed
    shown = heads.evaluate_all("hs => hs.map(h => [+h.dataset.layer, +h.dataset.head, +h.dataset.entropy])")
    entropy = stats["cross"]["entropy"]
    assert shown == [[layer, h, entropy[layer][h]] for layer in range(layers) for h in range(per_layer)]
    assert "diag" in heads.first.inner_text() and "</s>" in heads.first.inner_text()
    choose_kind(page, "encoder self-attention")
    assert page.locator("#heads .head").count() == answer["encoder_layers"] * per_layer
    assert page.locator("#heads .head.alignment").count() == 0
    # Click (or Enter on) a head: it opens large, with its tokens.
    head = page.locator('#heads .head[data-layer="1"][data-head="2"]')
    head.focus()
    page.keyboard.press("Enter")
    detail = page.locator("#head-detail")
    assert detail.is_visible() and "layer 1, head 2" in page.locator("#head-detail-title").inner_text()
    encoder = answer["sentences"][0]["encoder"]
    cells = page.eval_on_selector_all("#head-map .cell", "cs => cs.map(c => +c.dataset.weight)")
    assert cells == [w for row in encoder["weights"][1][2] for w in row]
    assert page.locator("#head-map .row-label").all_inner_texts() == encoder["rows"]
    page.get_by_role("button", name="Close the large map").click()
    assert detail.is_hidden()
    choose_kind(page, "cross-attention")


def test_playback_grows_the_triangle_a_row_a_step_and_ends_on_the_translation(browser, server: str) -> None:
    sentence = "der Hund ist sehr klein ."  # six words
    greedy = answer_of(server, "/v1/translate", {"text": sentence, "beam_size": 1})["translations"][0]
    context, page = offline_page(browser, server)
    open_page(page, server + "/")
    page.get_by_label("Text to translate").fill(sentence)
    page.get_by_label("Languages").select_option("de:en")
    submit(page)
    page.get_by_role("button", name="Decode step by step").click()
    page.wait_for_function("document.querySelector('#playback').dataset.done === 'done'")
    page.get_by_role("button", name="First step").click()
    triangle, rectangle = page.locator("#triangle"), page.locator("#rectangle")
    assert triangle.get_attribute("data-rows") == "0"
    steps = len(greedy["sentences"][0]["target_tokens"]) + 1  # every piece, then </s>
    forward = page.get_by_role("button", name="Step forward")
    for step in range(1, steps + 1):
        forward.click()
        assert triangle.get_attribute("data-rows") == str(step)  # one row more a step
        cells = page.eval_on_selector_all(
            "#triangle .cell", "cs => cs.map(c => [+c.dataset.row, +c.dataset.col, c.classList.contains('masked')])"
        )
        assert len(cells) == step * step
        assert all(masked == (column > row) for row, column, masked in cells)  # the causal triangle
        assert rectangle.get_attribute("data-rows") == str(step)
        assert page.locator("#candidates .candidate").count() >= 1
        assert page.locator("#candidates .candidate.chosen").count() == 1
        assert f"Step {step} of {steps}" in page.locator("#play-status").inner_text()
        assert page.locator("#play-final").is_visible() == (step == steps)
    assert forward.is_disabled()
    assert page.locator("#play-final-text").inner_text() == greedy["text"]
    assert page.locator("#play-so-far").inner_text() == greedy["text"]
    flagged = page.locator("#play-source-words .token.untranslated").count()
    assert flagged == len(greedy["sentences"][0]["quality"]["untranslated"])
    # Back a step with the keyboard: the last row goes, the final translation with it.
    page.get_by_role("button", name="Step back").focus()
    page.keyboard.press("ArrowLeft")
    assert triangle.get_attribute("data-rows") == str(steps - 1) and page.locator("#play-final").is_hidden()
    assert page.escaped == [] and any(url.endswith("/v1/translate/stream") for url in page.requests)
    context.close()


@pytest.fixture(scope="module")
def hinted_models(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with the hint pieces appended to its vocabulary (untrained for them: it
    takes a glossary, and may or may not use it), exported as a bundle."""
    import torch

    from data.tokenizer import Tokenizer, add_hint_pieces
    from export.exporter import export_model
    from seq2seq.training.checkpoints import grow_embeddings

    work = tmp_path_factory.mktemp("hinted_model")
    checkpoint = shutil.copytree(tiny_checkpoint, work / "ckpt")
    tokenizer = Tokenizer(add_hint_pieces(checkpoint / "spm.model", work / "spm.model"))
    shutil.copy(work / "spm.model", checkpoint / "spm.model")
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps(config | {"vocab_size": tokenizer.vocab_size}))
    state = torch.load(checkpoint / "model.pt", map_location="cpu")
    torch.save(grow_embeddings(state, tokenizer.vocab_size, tokenizer), checkpoint / "model.pt")
    export_model(checkpoint, work / "models" / "de-en", parity_sentences=SENTENCES[:2])
    return work / "models"


def test_the_term_hints_the_model_was_shown_are_listed_with_their_use(browser, hinted_models: Path) -> None:
    port = free_port()
    process = start_server(hinted_models, port)
    server = f"http://127.0.0.1:{port}"
    try:
        glossary = {"Hund": "dog", "klein": "tiny"}
        expected = answer_of(server, "/v1/attention", {"text": SENTENCE, "beam_size": 4, "glossary": glossary})
        terms = expected["sentences"][0]["quality"]["terms"]
        assert [t["source"] for t in terms] == ["Hund", "klein"]
        context, page = offline_page(browser, server)
        open_page(page, server + "/")
        # de-en alone: no reverse direction, so no channel rerank is offered (MBR is).
        disabled = page.eval_on_selector_all("#rerank option", "os => os.map(o => [o.value, o.disabled])")
        assert dict(disabled) == {"none": False, "channel": True, "mbr": False, "mbr+channel": True}
        page.get_by_label("Text to translate").fill(SENTENCE)
        page.get_by_label("Glossary").fill("Hund = dog\nklein = tiny")
        submit(page)
        assert page.locator("#terms").is_visible()
        items = page.locator("#terms-list .term")
        assert items.count() == 2
        for item, term in zip(items.all(), terms):
            text = item.inner_text()
            assert f"“{term['source']}” → “{term['term']}” (glossary)" in text
            assert item.get_attribute("data-used") == str(term["used"]).lower()
            assert ("used" if term["used"] else "not") in text
        # Strict: the request asks for the terms as a requirement, and the page shows that answer.
        strict = answer_of(
            server, "/v1/attention", {"text": SENTENCE, "beam_size": 4, "glossary": glossary, "glossary_strict": True}
        )
        page.get_by_label("Require the terms").check()
        with page.expect_request("**/v1/attention") as sent:
            page.get_by_role("button", name="Translate").click()
        assert sent.value.post_data_json["glossary_strict"] is True
        page.wait_for_function(
            "text => document.querySelector('#translation-text').innerText === text", arg=strict["translation"]
        )
        page.get_by_label("Require the terms").uncheck()
        # No glossary, no hints: the list goes.
        page.get_by_label("Glossary").fill("")
        page.get_by_role("button", name="Translate").click()
        page.wait_for_function("document.querySelector('#terms').hidden")
        page.get_by_label("Glossary").fill("Hund dog")
        page.get_by_role("button", name="Translate").click()
        assert "term = translation" in page.locator("#status").inner_text()
        assert page.escaped == []
        context.close()
    finally:
        process.terminate()
        process.wait(timeout=15)


# --------------------------------------------------------------------------- issue 42: the first screen


def box(page, selector: str) -> dict:
    return page.locator(selector).bounding_box()


def test_the_bare_page_shows_a_translated_example_with_its_map(browser, server: str) -> None:
    context = browser.new_context(viewport=FIRST_SCREEN, bypass_csp=True)  # wait_for_function evaluates strings
    page = context.new_page()
    open_page(page, server + "/")  # nothing typed, nothing pressed
    example = page.get_by_label("Text to translate").input_value()
    assert example and page.get_by_label("Languages").input_value() == "auto:"  # detection is the default
    expected = answer_of(server, "/v1/attention", {"text": example, "source": "auto", "target": None})
    assert page.locator("#translation-text").inner_text() == expected["translation"]
    assert f"Detected {'German' if expected['source'] == 'de' else 'English'}" in page.locator("#status").inner_text()
    grid = page.locator("#map")
    rows, columns = int(grid.get_attribute("data-rows")), int(grid.get_attribute("data-columns"))
    assert rows and columns and page.locator("#map .cell").count() == rows * columns
    for selector in ("#translation-text", "#map"):  # on the first screen
        assert box(page, selector)["y"] + box(page, selector)["height"] <= FIRST_SCREEN["height"]
    assert urlparse(page.url).path == "/" and not urlparse(page.url).query  # the address stays the page's
    context.close()


def test_a_translation_asked_for_before_the_languages_came_is_not_replaced_by_the_example(browser, server: str) -> None:
    """The bare page translates its example once /languages has answered; a reader who pressed
    Translate sooner keeps that translation and its playback (it once was translated again and
    its playback aborted: tests/test_explorer.py's CSP test timed out when /languages was slow)."""
    context, page = offline_page(browser, server)
    held = []
    page.route("**/languages", lambda route: held.append(route))  # the last route registered is asked first
    page.goto(server + "/")
    page.get_by_label("Text to translate").fill(SENTENCE)
    submit(page)
    shown = page.locator("#translation-text").inner_text()
    assert shown and held, "the translation came before the language list was let through"
    held[0].continue_()
    page.wait_for_function("document.querySelector('#pair').options.length > 1")  # the list has come
    page.get_by_role("button", name="Decode step by step").click()
    page.locator("#playback[data-done='done']").wait_for(state="attached", timeout=60_000)
    asked = [url for url in page.requests if url.endswith("/v1/attention")]
    assert asked == [server + "/v1/attention"], asked  # the example was not translated over it
    assert page.locator("#result").get_attribute("data-done") == "1"
    assert page.locator("#translation-text").inner_text() == shown
    assert page.get_by_label("Text to translate").input_value() == SENTENCE
    context.close()


def test_a_link_fits_the_translation_and_its_map_on_the_first_screen(browser, server: str) -> None:
    context = browser.new_context(viewport=FIRST_SCREEN, bypass_csp=True)  # wait_for_function evaluates strings
    page = context.new_page()
    long = SENTENCES[1].rstrip(" .") + " und " + SENTENCES[4]  # seventeen words: the width holds the map
    for screen in (FIRST_SCREEN, {"width": 1400, "height": 900}):  # 900: the height holds it
        page.set_viewport_size(screen)
        for text in (long, SENTENCE):
            open_page(page, f"{server}/?{urlencode({'q': text, 'source': 'de', 'target': 'en'})}")
            for selector in ("#translation-text", "#map", "#download-png"):
                shown = box(page, selector)
                assert shown["y"] + shown["height"] <= screen["height"], f"{selector} is below the fold"
                assert shown["x"] + shown["width"] <= screen["width"]
    page.set_viewport_size(FIRST_SCREEN)
    open_page(page, f"{server}/?{urlencode({'q': SENTENCE, 'source': 'de', 'target': 'en'})}")
    map_box, frame, view = box(page, "#map"), box(page, "#map-figure .map-scroll"), box(page, ".view")
    # The cells take the room there is (the old page drew 26 px cells), and the frame wraps
    # the map: no mostly empty full-width box.
    big = int(page.locator("#map").get_attribute("data-cell"))
    assert big > 40
    assert page.eval_on_selector("#map .cell", "c => c.getBoundingClientRect().width") == big
    assert frame["width"] <= map_box["width"] + 40 < view["width"]
    # Less room, smaller cells (the map refits when the window changes); a long text too.
    page.set_viewport_size({"width": 1400, "height": 760})
    page.wait_for_function("big => +document.querySelector('#map').dataset.cell < big", arg=big)
    page.set_viewport_size(FIRST_SCREEN)
    page.wait_for_function("big => +document.querySelector('#map').dataset.cell === big", arg=big)
    page.get_by_label("Text to translate").fill(" ".join(SENTENCES[:3]))
    submit(page)
    assert int(page.locator("#map").get_attribute("data-cell")) < big
    context.close()


def test_auto_detects_the_language_and_shows_the_apis_422(browser, server: str) -> None:
    context, page = offline_page(browser, server)
    open_page(page, server + "/")
    french = "Le chat dort sur le canapé depuis ce matin, et personne ne veut le réveiller."
    refused = httpx.post(server + "/v1/attention", json={"text": french, "source": "auto"}, timeout=60)
    assert refused.status_code == 422
    page.get_by_label("Text to translate").fill(french)
    page.get_by_label("Languages").select_option("auto:")
    with page.expect_request("**/v1/attention") as sent:
        submit(page)
    assert sent.value.post_data_json["source"] == "auto" and "target" not in sent.value.post_data_json
    status = page.locator("#status")
    assert status.inner_text() == f"Could not translate: {refused.json()['error']}"
    assert "French" in status.inner_text() and "error" in status.get_attribute("class")
    # German is detected, said, and linked as detected.
    page.get_by_label("Text to translate").fill(SENTENCE)
    submit(page)
    assert page.locator("#status").inner_text().startswith("Detected German; translated by de-en")
    expected = answer_of(server, "/v1/attention", {"text": SENTENCE, "source": "auto", "target": None})
    assert page.locator("#translation-text").inner_text() == expected["translation"]
    assert parse_qs(urlparse(page.url).query) == {"q": [SENTENCE], "source": ["auto"]}
    assert page.escaped == []
    context.close()


def test_the_playback_says_which_search_it_plays(browser, server: str) -> None:
    sentence = SENTENCES[1]
    beam = answer_of(server, "/v1/attention", {"text": sentence, "beam_size": 4})["translation"]
    greedy = answer_of(server, "/v1/translate", {"text": sentence, "beam_size": 1})["translations"][0]["text"]
    context, page = offline_page(browser, server)
    open_page(page, f"{server}/?{urlencode({'q': sentence, 'source': 'de', 'target': 'en'})}")

    def play_to_the_end() -> None:
        page.get_by_role("button", name="Decode step by step").click()
        page.wait_for_function("document.querySelector('#playback').dataset.done === 'done'")
        forward = page.get_by_role("button", name="Step forward")
        while forward.is_enabled():
            forward.click()

    # Beam 4 above, greedy below: said before playing, and compared at the end.
    note = page.locator("#play-note").inner_text()
    assert "greedy search (beam 1), not the translation above (beam 4)" in note and "set the beam size to 1" in note
    play_to_the_end()
    assert page.locator("#play-final-text").inner_text() == greedy
    compare = page.locator("#play-compare")
    assert compare.is_visible() and compare.get_attribute("data-same") == str(greedy == beam).lower()
    said = compare.inner_text()
    assert ("The same translation" in said) if greedy == beam else (beam in said and greedy in said)
    # Beam 1 above: the playback is that very search, and ends on it.
    page.get_by_label("Beam size").fill("1")
    submit(page)
    assert page.locator("#play-note").inner_text().startswith("This is the search that made the translation above")
    play_to_the_end()
    assert page.locator("#play-final-text").inner_text() == page.locator("#translation-text").inner_text() == greedy
    assert compare.is_hidden()
    context.close()


def test_the_thumbnails_are_labelled_with_their_tokens(page, server: str) -> None:
    answer = answer_of(server, "/v1/attention", {"text": SENTENCE, "beam_size": 4})["sentences"][0]
    for kind in ("cross-attention", "encoder self-attention"):
        choose_kind(page, kind)
        maps = answer[kind.split()[0].replace("-attention", "")]
        heads = page.locator("#heads .head")
        for index in (0, heads.count() - 1):
            head = heads.nth(index)
            assert head.locator(".thumb-cols span").all_inner_texts() == maps["columns"]  # keys, on top
            assert head.locator(".thumb-rows span").all_inner_texts() == maps["rows"]  # queries, on the left
            labels, cells = (
                box(page, f"#heads .head >> nth={index} >> .thumb-rows"),
                head.locator("canvas").bounding_box(),
            )
            assert (labels["y"], labels["height"]) == (cells["y"], cells["height"])  # a label beside each row
    assert "framed in red" in page.locator("#heads-help").inner_text()
    choose_kind(page, "cross-attention")


def test_the_rerank_choice_shows_the_reranked_translation(browser, server: str) -> None:
    sentence = SENTENCES[2]
    reranked = answer_of(server, "/v1/attention", {"text": sentence, "beam_size": 4, "rerank": "channel"})
    context, page = offline_page(browser, server)
    open_page(page, server + "/")
    page.get_by_label("Text to translate").fill(sentence)
    page.get_by_label("Languages").select_option("de:en")
    page.get_by_label("Rerank").select_option("channel")
    with page.expect_request("**/v1/attention") as sent:
        submit(page)
    assert sent.value.post_data_json["rerank"] == "channel"
    assert page.locator("#translation-text").inner_text() == reranked["translation"]
    assert "reranked by the channel" in page.locator("#status").inner_text()
    assert parse_qs(urlparse(page.url).query)["rerank"] == ["channel"]
    assert "rerank=channel" in page.get_by_role("link", name="Download the cross map as PNG").get_attribute("href")
    assert "reranking then chooses" in page.locator("#play-note").inner_text()
    # A link with the rerank reopens it.
    open_page(page, page.url)
    assert page.get_by_label("Rerank").input_value() == "channel"
    assert page.locator("#translation-text").inner_text() == reranked["translation"]
    assert page.escaped == []
    context.close()


def test_the_docs_screenshots_are_made_from_the_real_page(browser, models: Path, tmp_path: Path) -> None:
    from PIL import Image
    from screenshots import SHOTS, screenshots

    written = screenshots(models, tmp_path, list(SHOTS), text=SENTENCE, browser=browser)
    assert [path.name for path in written] == list(SHOTS.values())
    for path in written:
        with Image.open(path) as image:
            assert image.mode == "P" and image.width <= FIRST_SCREEN["width"]  # a small palette PNG
            if path.name == SHOTS["map"]:
                assert image.size == (FIRST_SCREEN["width"], FIRST_SCREEN["height"])
        assert path.stat().st_size < 250_000


def test_the_confidence_is_said_in_the_words_of_the_bundles_calibration(browser, models: Path, tmp_path: Path) -> None:
    """With a calibration in the bundle (calibration.json), the page reads the confidence as the
    share of such held-out sentences that were usable and its band, with what to do (issue 42);
    without one it shows the bare number (the `server` fixture's bundle)."""
    calibrated = shutil.copytree(models, tmp_path / "models", symlinks=True)
    ALL_LOW.save(calibrated / "de-en" / CALIBRATION_FILE)
    set_calibration_file(calibrated / "de-en")
    port = free_port()
    process = start_server(calibrated, port)
    try:
        url = f"http://127.0.0.1:{port}"
        context, page = offline_page(browser, url)
        with page.expect_response(lambda response: "/v1/attention" in response.url) as shown:
            open_page(page, f"{url}/?{urlencode({'q': SENTENCE, 'source': 'de', 'target': 'en'})}")
        quality = shown.value.json()["sentences"][0]["quality"]  # what the page was answered
        reading = ALL_LOW(quality["confidence"])
        said = page.locator("#flag-count").inner_text()
        assert f"confidence {quality['confidence']:.2f}, low: about {round(reading.usable * 100)}% of such" in said
        assert "check or rewrite it" in said and reading.band == "low"
        context.close()
    finally:
        process.terminate()
        process.wait(timeout=15)
