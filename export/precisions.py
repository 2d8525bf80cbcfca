"""Which graph precisions a bundle carries: the check of a requested list and the pruning
of a bundle directory down to it (shared by a fresh export and an in-place rebuild)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from data.files import BUNDLE_FILE
from seq2seq.runtime.bundle import PRECISIONS, replace_graphs, write_manifest


def precision_problems(precisions: tuple[str, ...]) -> list[str]:
    problems = [
        f"unknown precision {p!r} (choose from {', '.join(PRECISIONS)})" for p in precisions if p not in PRECISIONS
    ]
    if not precisions or len(set(precisions)) != len(precisions):
        problems.append(f"graph precisions {list(precisions)}: name each once, the default first")
    return problems


def keep_graphs(directory: Path, precisions: tuple[str, ...]) -> dict[str, Any]:
    """Make the bundle in `directory` carry only the graphs of `precisions`, the first its
    default: other graph files are deleted and bundle.json rewritten. Returns the manifest."""
    manifest = json.loads((directory / BUNDLE_FILE).read_text())
    graphs = {p: manifest["graphs"][p] for p in precisions}
    for precision, files in manifest["graphs"].items():
        if precision not in precisions:
            for name in files.values():
                (directory / name).unlink()
    manifest = replace_graphs(manifest, directory, graphs, precisions[0])
    write_manifest(directory, manifest)
    return manifest
