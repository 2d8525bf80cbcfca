"""File helpers shared by corpus preparation and the release bundle (no corpus code here)."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks (bundles hold 50 MB graphs)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
