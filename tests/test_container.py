"""The Dockerfile builds with no registry but the base it is given, from what .dockerignore sends.

deploy/container.sh (run by .ci/run) builds and runs the image for real; these checks answer
in a second what would otherwise fail minutes into that build: an image pulled from a
registry, or a path the build copies that the context leaves out.
"""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = (REPO / "Dockerfile").read_text()


def instructions(keyword: str) -> list[list[str]]:
    """The arguments of every `keyword` instruction (continuation lines joined), split on spaces."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    return [line.split()[1:] for line in joined.splitlines() if line.split()[:1] == [keyword]]


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore's `patterns` leave `path` (or a folder above it) out of the context.

    fnmatch's `*` also crosses `/`, so this errs towards "left out": it never misses what
    Docker's own matching would drop (the file has no `!` exceptions).
    """
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(fnmatch.fnmatch(prefix, pattern) for prefix in prefixes for pattern in patterns)


def test_every_image_comes_from_the_base_argument_or_a_stage() -> None:
    # A "# syntax=" directive makes BuildKit pull its frontend from Docker Hub.
    assert not re.search(r"^#\s*syntax\s*=", DOCKERFILE, re.MULTILINE | re.IGNORECASE)
    stages: set[str] = set()
    for args in instructions("FROM"):
        assert args[0] == "${PYTHON_IMAGE}" or args[0] in stages, f"FROM {args[0]} needs a registry"
        if len(args) == 3 and args[1].upper() == "AS":
            stages.add(args[2])
    for args in instructions("COPY"):
        source = next((a.split("=", 1)[1] for a in args if a.startswith("--from=")), None)
        assert source is None or source in stages, f"COPY --from={source} needs a registry"
    assert ["PYTHON_IMAGE=python:3.11-slim"] in instructions("ARG")  # docker build's default: public


def test_the_context_holds_every_path_the_build_copies() -> None:
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    from_context = [args for args in instructions("COPY") if not any(a.startswith("--from=") for a in args)]
    sources = [s for args in from_context for s in args[:-1] if not s.startswith("--")]
    assert {"install.sh", "pyproject.toml", "models", "service"} <= set(sources)
    for source in sources:
        assert (REPO / source).exists(), f"the Dockerfile copies {source}, which is not in the tree"
        assert not ignored(source, patterns), f"the Dockerfile copies {source}, which .dockerignore leaves out"
    # The bundles travel whole: the server verifies every file a bundle lists (model.pt too).
    bundles = sorted((REPO / "models").glob("*/bundle.json"))
    assert bundles
    for bundle in bundles:
        for name in [*json.loads(bundle.read_text())["files"], "bundle.json"]:
            path = bundle.parent.relative_to(REPO) / name
            assert not ignored(str(path), patterns), f"{path} is listed by its bundle but left out of the image"
