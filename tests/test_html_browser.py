"""Marked text never turns inert markup live (issue 41, #3), checked in a real browser.

Each hostile input holds a handler (`onerror=fired('name')`) that a browser does not run:
inside a raw text element (`xmp`, `noembed`, `noframes`, `noscript`, `title`, `textarea`,
`iframe`, `plaintext`), a comment, a CDATA section of foreign content, an end tag's
attribute, an unfinished tag at the end. Every input goes through every HTML path of the
library (a page with blocks, as `/translate` and HTML files read it; one marked segment, as
`/v1/translate`, `/v1/align` and SubRip cues read it), translated by a writer that keeps the
word order and by one that reverses it (so every tag moves), and the input and each output are
loaded in Debian's chromium (as tests/test_explorer.py launches it): no handler may fire on an
output that did not fire on its input. A control input whose handler fires on both shows the
page would tell.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_explorer import CHROMIUM, CHROMIUM_ARGS  # noqa: E402
from test_markup import upper_translate, word_map  # noqa: E402

from seq2seq.core.alignment import words  # noqa: E402
from seq2seq.documents.html import read_html, segments, write_html  # noqa: E402
from seq2seq.documents.inline import read_inline  # noqa: E402
from seq2seq.documents.translate import Translation, place_segments  # noqa: E402

sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the dev extra)")
pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).is_file(), reason=f"no chromium at {CHROMIUM} (apt-get install chromium)"
)

IMG = "<img src=x onerror=fired('{}')>"
HOSTILE = {
    **{
        name: f"<p>Das Haus ist <{name}>{IMG.format(name)}</{name}> sehr klein.</p>"
        for name in ("xmp", "noembed", "noframes", "noscript", "title", "textarea", "iframe")
    },
    "plaintext": f"<p>Das <b>Haus</b> ist <plaintext>{IMG.format('plaintext')}",
    "inline": f"<p>Das <b>Haus <xmp>{IMG.format('inline')}</xmp></b> ist klein.</p>",
    "not_an_end": f"<p>Das Haus <xmp></ xmp>{IMG.format('not_an_end')}</xmp> ist klein.</p>",
    "self_closing": f"<p>Das Haus <textarea/>{IMG.format('self_closing')}</textarea> ist klein.</p>",
    "double_escaped": f"<p>Das Haus <script><!--<script></script>{IMG.format('double_escaped')}</script> ist.</p>",
    "comment": f"<p>Das <b>Haus</b> <!-- -- >{IMG.format('comment')} --> ist klein.</p>",
    "cdata": f"<p>Das Haus <svg><![CDATA[ > </svg>{IMG.format('cdata')} ]]></svg> ist klein.</p>",
    "end_tag_attribute": f'<p>Das <b>Haus</b> ist</b a="{IMG.format("end_tag_attribute")}"> klein.</p>',
    "attribute_and_open_comment": f'<p>Das <b title="-->{IMG.format("attribute")}">Haus</b> ist <!-- offen',
    "unfinished_tag": "<p>Das <i>Haus</i> ist <img src=x onerror=fired('unfinished_tag')",
    "control": f"<p>Das {IMG.format('control')} Haus ist klein.</p>",  # live on the input too
}


def reverse_translate(texts: list[str]) -> list[Translation]:
    """Each word in capitals, in the reverse order: every tag moves."""
    out = []
    for text in texts:
        found = words(text)
        target = " ".join(word.text.upper() for word in reversed(found))
        links = [(i, len(found) - 1 - i) for i in range(len(found))]
        out.append(Translation(target, word_map(text, target, links)))
    return out


def outputs(markup: str) -> dict[str, str]:
    """The input as each HTML path writes it, by each translator."""
    written = {}
    for label, translate in (("upper", upper_translate), ("reversed", reverse_translate)):
        for blocks in (True, False):
            parts = read_html(markup, blocks=blocks)
            placed = place_segments([segment.marked for segment in segments(parts)], translate)
            written[f"{label} {'page' if blocks else 'segment'}"] = write_html(parts, placed)
        item = read_inline(markup, "html", attributes=True)
        written[f"{label} inline"] = item.write(place_segments([item.marked], translate)[0])
    return written


@pytest.fixture(scope="module")
def fired():
    """fired(markup) -> the names of the handlers that ran once the page had loaded."""
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.route("**/*", lambda route: route.abort())  # nothing leaves the machine

        def run(markup: str) -> set[str]:
            head = "<script>window.found = []; function fired(name) { window.found.push(name); }</script>"
            page.set_content(f"<!DOCTYPE html><html><head>{head}</head><body>{markup}</body></html>")
            page.wait_for_timeout(150)  # the failed image loads report
            return set(page.evaluate("window.found"))

        yield run
        browser.close()


@pytest.mark.parametrize("name", list(HOSTILE))
def test_no_handler_fires_on_a_translation_that_did_not_on_its_source(fired, name: str) -> None:
    markup = HOSTILE[name]
    before = fired(markup)
    assert before == ({"control"} if name == "control" else set()), before
    for path, written in outputs(markup).items():
        after = fired(written)
        assert after <= before, f"{path}: {written!r} fired {after - before}"
        if name == "control":
            assert after == before, f"{path}: the control's handler must still fire: {written!r}"
