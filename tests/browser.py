"""The browser the page is tested and photographed in: Debian's chromium driven by playwright.

playwright's own browser download cannot work on these machines, so `executable_path`
points at the system binary (`apt-get install chromium`, install.sh). tests/test_explorer.py
drives it against a real server, and tests/screenshots.py makes the docs' pictures of the
page with it, launched the same way.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

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
# The first screen the page is laid out for: the translation and its map fit it.
FIRST_SCREEN = {"width": 1400, "height": 1000}


def launch(playwright: Any) -> Any:
    """Debian's chromium, headless, from a started `sync_playwright()`."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
