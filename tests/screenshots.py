"""The docs' pictures of the explorer, taken from the real page in one command.

    python tests/screenshots.py                 # all of them, from the shipped models
    python tests/screenshots.py --only heads    # one

A real server (`python -m service.serve`, as the tests start it) serves `--models`, and
Debian's chromium (tests/browser.py, as tests/test_explorer.py launches it) opens the page
at the first-screen size (1400 x 1000) and saves, under `--out` (docs/):

- explorer.png: the first screen after a link `/?q=…`, a translated word hovered;
- explorer-heads.png: the model view, every cross-attention head, the alignment head opened;
- explorer-playback.png: the greedy decoding played back two thirds of the way.

Each PNG is reduced to a 256-colour palette (no dithering: the text stays crisp), which
keeps it near 100 KB.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from browser import FIRST_SCREEN, launch  # noqa: E402
from test_service_server import free_port, start_server  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TEXT = "Der alte Hund schläft heute im Garten."
SHOTS = {
    "map": "explorer.png",
    "heads": "explorer-heads.png",
    "playback": "explorer-playback.png",
}


def first_screen(page, out: Path) -> None:
    """The page as a link opens it, the second translated word hovered (its source lit)."""
    page.locator("#target-tokens .token").nth(1).hover()
    page.screenshot(path=str(out))


def model_view(page, out: Path) -> None:
    """Every cross-attention head, the alignment head opened large."""
    page.locator("#heads .head.alignment").first.click()
    page.locator("#model-view").screenshot(path=str(out))


def playback(page, out: Path) -> None:
    """The greedy decoding, played to its end and back a third: the triangle two thirds grown."""
    page.get_by_role("button", name="Decode step by step").click()
    page.wait_for_function("document.querySelector('#playback').dataset.done === 'done'")
    page.get_by_role("button", name="First step").click()
    forward, steps = page.get_by_role("button", name="Step forward"), 0
    while forward.is_enabled():
        forward.click()
        steps += 1
    for _ in range(steps // 3):
        page.get_by_role("button", name="Step back").click()
    page.locator("#playback").screenshot(path=str(out))


TAKE = {"map": first_screen, "heads": model_view, "playback": playback}


def small_png(path: Path) -> None:
    """`path` rewritten as a 256-colour palette PNG, without dithering."""
    image = Image.open(path).convert("RGB")
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(path, optimize=True)


def screenshots(models: Path, out: Path, views: list[str], text: str = TEXT, browser: Any = None) -> list[Path]:
    """Serve `models`, open the page on `text` for each view and save its picture under `out`
    (in `browser`, a launched one, or a browser of its own)."""
    from playwright.sync_api import sync_playwright

    port = free_port()
    server = start_server(models, port)
    try:
        if browser is not None:
            return [take(browser, port, view, text, out) for view in views]
        with sync_playwright() as playwright:
            own = launch(playwright)
            written = [take(own, port, view, text, out) for view in views]
            own.close()
            return written
    finally:
        server.terminate()
        server.wait(timeout=15)


def take(browser: Any, port: int, view: str, text: str, out: Path) -> Path:
    """One picture: the page at the first-screen size, a link to `text`, then `view`'s steps."""
    page = browser.new_page(viewport=FIRST_SCREEN, device_scale_factor=1)
    page.goto(f"http://127.0.0.1:{port}/?{urlencode({'q': text, 'source': 'de', 'target': 'en'})}")
    page.wait_for_function("+(document.querySelector('#result').dataset.done || 0) >= 1")
    path = out / SHOTS[view]
    TAKE[view](page, path)
    small_png(path)
    page.close()
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description="the docs' screenshots of the attention explorer, from the real page")
    parser.add_argument("--models", type=Path, default=REPO / "models", help="the bundles to serve (default: models)")
    parser.add_argument("--out", type=Path, default=REPO / "docs", help="where the PNGs go (default: docs)")
    parser.add_argument("--only", choices=sorted(SHOTS), action="append", help="one view (repeatable); default all")
    parser.add_argument("--text", default=TEXT, help=f"the sentence shown (default: {TEXT!r})")
    arguments = parser.parse_args()
    arguments.out.mkdir(parents=True, exist_ok=True)
    for path in screenshots(arguments.models, arguments.out, arguments.only or list(SHOTS), arguments.text):
        with Image.open(path) as image:
            print(f"wrote {path} ({image.width} x {image.height}, {path.stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
