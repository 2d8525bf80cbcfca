"""The models directory: where it is, the bundles in it and the direction each translates.

`crossalign serve` serves every bundle of a models directory and `crossalign translate`
picks one of them by its languages; both find the directory by one rule
(`default_models_dir`), so either command works wherever it runs:

1. `CROSSALIGN_MODELS`, when set (the service's setting; `--models DIR` overrides it);
2. `models/` in the working directory, when it holds a bundle (a checkout, or a project
   with bundles of its own);
3. the shipped models: `models/` beside the installed packages (in an editable install,
   the repository's).

A directory is a bundle when it holds bundle.json; its direction is bundle.json's
`languages`, else its config.json's (`model_direction`). Torch-free.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from data.files import BUNDLE_FILE, CONFIG_FILE, ENSEMBLE_FILE
from seq2seq.core.config import ModelConfig, load_config
from seq2seq.runtime.bundle import read_ensemble

MODELS_ENV = "CROSSALIGN_MODELS"
# models/ beside the packages (seq2seq/, data/, ...): the shipped bundles of a checkout or an editable install.
SHIPPED_MODELS = Path(__file__).resolve().parents[2] / "models"

Direction = tuple[str, str]  # (source language, target language)


def default_models_dir() -> Path:
    """The models directory when none is named: `CROSSALIGN_MODELS`, else `./models` when it
    holds a bundle, else the shipped models beside the packages (see the module's doc)."""
    named = os.environ.get(MODELS_ENV, "")
    if named:
        return Path(named)
    here = Path("models")
    if find_bundles(here) or not SHIPPED_MODELS.is_dir():
        return here
    return SHIPPED_MODELS


def find_bundles(models: Path) -> list[Path]:
    """`models` itself if it is a bundle, else every bundle directly inside it, sorted."""
    models = Path(models)
    if (models / BUNDLE_FILE).is_file():
        return [models]
    if not models.is_dir():
        return []
    return sorted(d for d in models.iterdir() if (d / BUNDLE_FILE).is_file())


def bundle_languages(directory: Path) -> dict[str, str]:
    """The `languages` of a bundle's bundle.json; ValueError naming the file if it is malformed."""
    path = Path(directory) / BUNDLE_FILE
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ValueError(f"{path}: unreadable manifest: {first}") from None
    languages = manifest.get("languages", {}) if isinstance(manifest, dict) else None
    if not isinstance(languages, dict):
        raise ValueError(f"{path}: `languages` must be an object")
    return languages


def model_direction(directory: Path) -> Direction:
    """(source, target) of a model directory: a bundle's bundle.json `languages`, falling back
    on its config.json's (as a training output has only); an ensemble's reporting member's.
    Raises ValueError (BundleError) naming the file that is unreadable or missing."""
    directory = Path(directory)
    if (directory / ENSEMBLE_FILE).is_file():
        spec = read_ensemble(directory)
        return model_direction(spec.members[spec.alignment])
    languages = bundle_languages(directory) if (directory / BUNDLE_FILE).is_file() else {}
    if "source" in languages and "target" in languages:
        return languages["source"], languages["target"]
    try:
        config = load_config(ModelConfig, directory / CONFIG_FILE)
    except (OSError, ValueError, TypeError) as error:
        raise ValueError(f"{directory / CONFIG_FILE}: unreadable model config: {error}") from None
    return languages.get("source", config.source_lang), languages.get("target", config.target_lang)


def model_directions(models: Path) -> dict[Direction, Path]:
    """Each direction the bundles under `models` translate (`find_bundles`), with its bundle;
    the first bundle in sorted order takes a direction two share, and a bundle whose
    languages cannot be read is left out (the service logs it; a command that wants it says so)."""
    directions: dict[Direction, Path] = {}
    for bundle in find_bundles(models):
        try:
            directions.setdefault(model_direction(bundle), bundle)
        except ValueError:
            continue
    return directions
