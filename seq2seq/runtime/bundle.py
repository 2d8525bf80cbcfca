"""The release bundle: a directory that describes itself in `bundle.json`.

A bundle holds everything needed to translate and to keep working on the model:

    bundle.json          this manifest (languages, model config, files with sha256, ...)
    config.json          the ModelConfig, as beside every checkpoint
    model.pt             torch weights: the torch backend and later retraining load these
    spm.model            the SentencePiece tokenizer
    encoder.onnx         fp32 graphs (see export/exporter.py for their inputs and outputs)
    decoder_step.onnx
    encoder.int8.onnx    int8 graphs: the fp32 graphs with their MatMul weights dynamically
    decoder_step.int8.onnx   quantized to int8
    data_manifest.json   only with `--data-manifest`: the data directory's provenance file
    quality.json         the quality-signal thresholds chosen on valid data (seq2seq/analysis/quality.py),
                         carried over from the checkpoint directory or added by
                         `export/quality_signals.py --save` (`set_quality_file`)
    calibration.json     the confidence read as P(usable), expected chrF and bands, fitted on valid
                         by `export/confidence_calibration.py --save` (`set_calibration_file`)

bundle.json's `decoding` holds the search settings (`seq2seq.core.config.SEARCH_FIELDS`: beam size,
length penalty, coverage penalty, repetition guard) the model is served and measured with:
every translation that does not set them gets them (`Translator.decode_defaults`), so the
figures in `metrics` describe what users get. The export writes DecodeConfig's (or those of
the bundle it re-exports), export/release.sh the ones it chose on valid (`set_decoding`); a
bundle without the section, from before it, decodes with DecodeConfig's defaults.

A bundle carries the graphs of one or both precisions (`graphs` in bundle.json, chosen
with `crossalign export --graphs`); `precision` names the ones a runtime loads unless
told otherwise. Graphs of the other precision are rebuilt from model.pt in place, as the
same bytes, by the command in `REBUILD_COMMAND` (the loader's error says so).

Every file except bundle.json itself is listed with its sha256 and size, and
`load_bundle_manifest` checks them all before anything is loaded, so a truncated download
or a swapped graph fails loudly with the file's name instead of translating wrongly.
`bundle.json` is not hashed so that `metrics` can be filled in after the export.

An ensemble (`seq2seq.runtime.ensemble`) is a directory holding only `ensemble.json`: the
bundles it averages, by path, which one's alignment head it reports, and optionally its own
serving `decoding` (`read_ensemble`, `write_ensemble`).

Torch-free: the onnxruntime serving path reads bundles.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from data.files import BUNDLE_FILE, CALIBRATION_FILE, DICTIONARY_FILE, ENSEMBLE_FILE, QUALITY_FILE, sha256_file
from seq2seq.core.config import MAX_TERM_BONUS, SEARCH_FIELDS, DecodeConfig, ModelConfig, from_dict, to_dict

FORMAT = "crossalign-bundle"
FORMAT_VERSION = 1
PRECISIONS = ("fp32", "int8")
# Graph roles -> file names per precision; the runtime looks graphs up by role, never by name.
GRAPH_FILES = {
    "fp32": {"encoder": "encoder.onnx", "decoder_step": "decoder_step.onnx"},
    "int8": {"encoder": "encoder.int8.onnx", "decoder_step": "decoder_step.int8.onnx"},
}
# How a user gets graphs a bundle does not carry (needs torch: the `export` extra).
REBUILD_COMMAND = "crossalign export {directory} --in-place --graphs {graphs}"


class BundleError(ValueError):
    """A bundle is missing files, has corrupted files, or has an unreadable manifest."""


def file_entry(path: Path) -> dict[str, Any]:
    """{"sha256": hex digest, "bytes": size} of one file."""
    return {"sha256": sha256_file(path), "bytes": Path(path).stat().st_size}


@dataclass(frozen=True)
class Bundle:
    """A verified bundle directory and its parsed manifest."""

    directory: Path
    manifest: dict[str, Any]
    model_config: ModelConfig
    precisions: tuple[str, ...] = field(default=())  # graph precisions present, e.g. ("fp32", "int8")
    # The search settings translations get unless they set their own (bundle.json `decoding`).
    decode_defaults: DecodeConfig = field(default_factory=DecodeConfig)

    @property
    def default_precision(self) -> str:
        return str(self.manifest["precision"])

    @property
    def tokenizer_path(self) -> Path:
        return self.directory / self.manifest["tokenizer"]

    @property
    def quality_path(self) -> Path | None:
        """The quality thresholds file, None for a bundle without one (defaults then apply)."""
        name = self.manifest.get("quality")
        return None if name is None else self.directory / name

    @property
    def calibration_path(self) -> Path | None:
        """The confidence's calibration (`seq2seq.analysis.calibration`), None without one."""
        return self.directory / CALIBRATION_FILE if CALIBRATION_FILE in self.manifest["files"] else None

    @property
    def dictionary_path(self) -> Path | None:
        """The term index of automatic hints (`data.dictionary.TermIndex`), None without one."""
        return self.directory / DICTIONARY_FILE if DICTIONARY_FILE in self.manifest["files"] else None

    def graph_paths(self, precision: str | None = None) -> tuple[Path, Path]:
        """(encoder, decoder_step) paths for `precision` (default: the bundle's precision)."""
        precision = precision or self.default_precision
        if precision not in PRECISIONS:
            raise BundleError(f"unknown precision {precision!r}: choose one of {', '.join(PRECISIONS)}")
        graphs = self.manifest["graphs"].get(precision)
        if graphs is None:
            carried = [self.default_precision, *(p for p in self.precisions if p != self.default_precision)]
            command = REBUILD_COMMAND.format(directory=self.directory, graphs=" ".join((*carried, precision)))
            raise BundleError(
                f"{self.directory}: no {precision} graphs in this bundle (it has "
                f"{', '.join(self.precisions) or 'none'}); build them from its model.pt with "
                f"`{command}`"
            )
        return self.directory / graphs["encoder"], self.directory / graphs["decoder_step"]


def write_bundle_manifest(
    directory: Path,
    *,
    model_config: ModelConfig,
    tokenizer_file: str,
    graphs: dict[str, dict[str, str]],
    precision: str,
    files: list[str],
    data_manifest: dict[str, Any] | None = None,
    metrics: dict[str, Any] | None = None,
    quality_file: str | None = None,
    decoding: DecodeConfig = DecodeConfig(),
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Hash `files` (names inside `directory`) and write `directory/bundle.json`; returns it.

    graphs maps precision -> {"encoder": file, "decoder_step": file}; `precision` names the
    graphs a runtime loads by default; `quality_file` names the quality thresholds, if any;
    `decoding`'s search settings become the bundle's serving defaults.
    `extra` adds free-form keys (exporter versions, the
    graph interface, parity results).
    """
    directory = Path(directory)
    if precision not in graphs:
        raise BundleError(f"default precision {precision} has no graphs: {sorted(graphs)}")
    listed = set(files)
    for graph_files in graphs.values():
        listed.update(graph_files.values())
    listed.add(tokenizer_file)
    if quality_file is not None:
        listed.add(quality_file)
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "languages": {"source": model_config.source_lang, "target": model_config.target_lang},
        "model_config": _config_dict(model_config),
        "tokenizer": tokenizer_file,
        "precision": precision,
        "graphs": graphs,
        # The alignment the product shows by default: decoder layer (resolved to 0-based) and
        # heads (empty = the mean of all heads), from ModelConfig.alignment_layer/heads.
        "alignment": {
            "layer": model_config.resolved_alignment_layer,
            "heads": list(model_config.alignment_heads),
            "step_shift": model_config.alignment_step_shift,
        },
        "decoding": decoding.search_settings,
        "quality": quality_file,
        "metrics": dict(metrics or {}),
        "data": data_manifest,
        "license": (data_manifest or {}).get("license"),
        "files": {name: file_entry(directory / name) for name in sorted(listed)},
    }
    manifest.update(extra or {})
    _write_json(directory / BUNDLE_FILE, manifest)
    return manifest


def replace_graphs(
    manifest: dict[str, Any], directory: Path, graphs: dict[str, dict[str, str]], precision: str
) -> dict[str, Any]:
    """A copy of `manifest` whose bundle carries exactly `graphs` (precision -> role -> file,
    files inside `directory`, hashed here) with `precision` the default; the other files'
    entries and every other key (metrics, data, quality) are kept."""
    if precision not in graphs:
        raise BundleError(f"default precision {precision} has no graphs: {sorted(graphs)}")
    old = {name for files in manifest["graphs"].values() for name in files.values()}
    new = {name for files in graphs.values() for name in files.values()}
    files = {name: entry for name, entry in manifest["files"].items() if name not in old}
    files.update({name: file_entry(Path(directory) / name) for name in new})
    return {
        **manifest,
        "precision": precision,
        "graphs": {p: dict(graphs[p]) for p in PRECISIONS if p in graphs},
        "files": dict(sorted(files.items())),
    }


def write_manifest(directory: Path, manifest: dict[str, Any]) -> None:
    """Write `directory/bundle.json` as it is (atomically)."""
    _write_json(Path(directory) / BUNDLE_FILE, manifest)


def load_bundle_manifest(directory: Path, verify: bool = True) -> Bundle:
    """Read `directory/bundle.json`; with `verify`, check every listed file's size and sha256.

    Raises BundleError naming every missing or corrupted file at once.
    """
    directory = Path(directory)
    path = directory / BUNDLE_FILE
    if not path.is_file():
        raise BundleError(f"{directory}: not a bundle, {BUNDLE_FILE} is missing")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise BundleError(f"{path}: unreadable manifest: {error}") from error
    problems = []
    if manifest.get("format") != FORMAT:
        problems.append(f"{BUNDLE_FILE}: format is {manifest.get('format')!r}, expected {FORMAT!r}")
    elif manifest.get("format_version", 0) > FORMAT_VERSION:
        problems.append(
            f"{BUNDLE_FILE}: format_version {manifest['format_version']} is newer than "
            f"this code understands ({FORMAT_VERSION})"
        )
    for key in ("model_config", "tokenizer", "graphs", "precision", "files"):
        if key not in manifest:
            problems.append(f"{BUNDLE_FILE}: no {key!r} entry")
    if problems:
        raise BundleError(f"{directory}: invalid bundle: " + "; ".join(problems))
    files: dict[str, dict[str, Any]] = manifest["files"]
    referenced = {manifest["tokenizer"], *(n for g in manifest["graphs"].values() for n in g.values())}
    if manifest.get("quality"):
        referenced.add(manifest["quality"])
    problems += [f"{name}: referenced but not listed in {BUNDLE_FILE}" for name in sorted(referenced - set(files))]
    if verify:
        problems += _verify_files(directory, files)
    if manifest["precision"] not in manifest["graphs"]:
        problems.append(f"{BUNDLE_FILE}: default precision {manifest['precision']!r} has no graphs")
    try:
        config = from_dict(ModelConfig, manifest["model_config"])
    except (TypeError, ValueError) as error:
        problems.append(f"{BUNDLE_FILE}: model_config: {error}")
    try:
        decoding = parse_decoding(manifest.get("decoding"))
    except BundleError as error:
        problems.append(f"{BUNDLE_FILE}: {error}")
    if problems:
        raise BundleError(f"{directory}: damaged bundle: " + "; ".join(problems))
    precisions = tuple(p for p in PRECISIONS if p in manifest["graphs"])
    return Bundle(directory, manifest, config, precisions, decoding)


def parse_decoding(section: Any) -> DecodeConfig:
    """The serving defaults a bundle.json `decoding` section records: DecodeConfig's defaults
    with the section's values (None, no section: a bundle from before it, DecodeConfig's alone).

    Keys this code does not know (a newer exporter's) are ignored, as `from_dict` does, and a
    setting the section lacks keeps DecodeConfig's default. Raises BundleError naming every
    bad value (a wrong type, a beam below 1, a negative penalty or n-gram size)."""
    if section is None:
        return DecodeConfig()
    if not isinstance(section, dict):
        raise BundleError(f"decoding must be an object of search settings, not {json.dumps(section)}")
    problems: list[str] = []
    values: dict[str, Any] = {}
    for name in SEARCH_FIELDS:
        if name not in section:
            continue
        value, kind = section[name], type(getattr(DecodeConfig, name))  # bool, int or float, from its default
        if kind is bool:
            if isinstance(value, bool):
                values[name] = value
            else:
                problems.append(f"decoding.{name} must be true or false, not {json.dumps(value)}")
            continue
        lowest = 1 if name == "beam_size" else 0
        # JSON has no bool-as-number, and an integral number such as 4.0 is the integer 4 in JSON Schema.
        number = isinstance(value, int | float) and not isinstance(value, bool)
        number = number and (isinstance(value, int) or math.isfinite(value))
        if not number or value < lowest or (kind is int and isinstance(value, float) and not value.is_integer()):
            noun = "an integer" if kind is int else "a number"
            problems.append(f"decoding.{name} must be {noun} >= {lowest}, not {json.dumps(value)}")
        elif name == "term_bonus" and value > MAX_TERM_BONUS:
            problems.append(f"decoding.term_bonus must be at most {MAX_TERM_BONUS}, not {json.dumps(value)}")
        else:
            values[name] = kind(value)
    if problems:
        raise BundleError("; ".join(problems))
    return DecodeConfig(**values)


def decode_defaults(directory: Path) -> DecodeConfig:
    """The serving defaults of the model in `directory`: its bundle.json `decoding`, read
    without checking the files' hashes (the torch backend and the CLIs, which decode before or
    without the graphs); DecodeConfig's for a directory without bundle.json (a training
    output); an ensemble's (its `ensemble.json`'s, else its alignment member's). Raises
    BundleError for an unreadable manifest or a bad section."""
    if (Path(directory) / ENSEMBLE_FILE).is_file():
        spec = read_ensemble(Path(directory))
        return spec.decoding or decode_defaults(spec.members[spec.alignment])
    path = Path(directory) / BUNDLE_FILE
    if not path.is_file():
        return DecodeConfig()
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BundleError(f"{path}: unreadable manifest: {error}") from error
    try:
        return parse_decoding(manifest.get("decoding") if isinstance(manifest, dict) else None)
    except BundleError as error:
        raise BundleError(f"{path}: {error}") from None


@dataclass(frozen=True)
class EnsembleSpec:
    """An ensemble directory's `ensemble.json`: the model directories averaged, which one's
    alignment head (and quality thresholds, dictionary) the ensemble reports, and the search
    settings it serves with (None: that member's own)."""

    members: tuple[Path, ...]
    alignment: int = 0
    decoding: DecodeConfig | None = None


def read_ensemble(directory: Path) -> EnsembleSpec:
    """The ensemble `directory`/ensemble.json describes; member paths are read relative to
    `directory`. Raises BundleError naming what is wrong (unreadable, fewer than two members,
    a member that is not a directory, an alignment index out of range, a bad decoding)."""
    path = Path(directory) / ENSEMBLE_FILE
    try:
        spec: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BundleError(f"{path}: unreadable: {error}") from error
    members = spec.get("members") if isinstance(spec, dict) else None
    if not isinstance(members, list) or len(members) < 2 or not all(isinstance(m, str) for m in members):
        raise BundleError(f"{path}: `members` must list at least two model directories")
    directories = tuple((Path(directory) / m).resolve() for m in members)
    missing = [str(d) for d in directories if not d.is_dir()]
    if missing:
        raise BundleError(f"{path}: no such member directory: {', '.join(missing)}")
    alignment = spec.get("alignment", 0)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or not 0 <= alignment < len(members):
        raise BundleError(f"{path}: `alignment` must be a member's index, 0 to {len(members) - 1}")
    try:
        decoding = parse_decoding(spec["decoding"]) if "decoding" in spec else None
    except BundleError as error:
        raise BundleError(f"{path}: {error}") from None
    return EnsembleSpec(directories, alignment, decoding)


def write_ensemble(directory: Path, members: Sequence[Path], alignment: int = 0, decoding: dict | None = None) -> Path:
    """Write an ensemble directory: its `ensemble.json` naming `members` by their paths
    relative to `directory` (so the two can move together), checked by reading it back."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    spec: dict[str, Any] = {
        "format": "crossalign-ensemble",
        "members": [os.path.relpath(Path(m).resolve(), directory.resolve()) for m in members],
        "alignment": alignment,
    }
    if decoding is not None:
        spec["decoding"] = decoding
    (directory / ENSEMBLE_FILE).write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
    read_ensemble(directory)
    return directory


def update_metrics(directory: Path, metrics: dict[str, Any]) -> dict[str, Any]:
    """Merge `metrics` (e.g. {"test": {"bleu": 31.2}}) into bundle.json; returns the new metrics."""
    path = Path(directory) / BUNDLE_FILE
    manifest = json.loads(path.read_text())
    manifest.setdefault("metrics", {}).update(metrics)
    _write_json(path, manifest)
    return manifest["metrics"]


def set_quality_file(directory: Path, name: str = QUALITY_FILE) -> None:
    """Record `directory/name` as the bundle's quality thresholds in bundle.json, with its hash
    (thresholds are chosen with the exported model, so after the export)."""
    _record_file(directory, name, quality=name)


def set_calibration_file(directory: Path) -> None:
    """Record `directory`/calibration.json (`export/confidence_calibration.py --save`) in
    bundle.json with its hash: the confidence's calibration, fitted on the exported model."""
    _record_file(directory, CALIBRATION_FILE)


def set_dictionary_file(directory: Path, description: dict[str, Any]) -> None:
    """Record `directory`/dictionary.tsv.gz, rewritten in place (`crossalign data hints
    --dictionary-only --bundle`), in bundle.json: its hash, and `description` (how its terms
    were chosen) as the manifest's `dictionary`."""
    _record_file(directory, DICTIONARY_FILE, dictionary=description)


def _record_file(directory: Path, name: str, **entries: Any) -> None:
    """List `directory`/`name` with its hash in bundle.json, and set the manifest's `entries`."""
    path = Path(directory) / BUNDLE_FILE
    manifest = json.loads(path.read_text())
    manifest["files"][name] = file_entry(Path(directory) / name)
    manifest["files"] = dict(sorted(manifest["files"].items()))
    manifest.update(entries)
    _write_json(path, manifest)


def set_decoding(directory: Path, config: DecodeConfig) -> dict[str, Any]:
    """Record `config`'s search settings as the bundle's serving defaults in bundle.json
    (export/release.sh, once it has chosen them on valid); returns the section."""
    path = Path(directory) / BUNDLE_FILE
    manifest = json.loads(path.read_text())
    manifest["decoding"] = config.search_settings
    _write_json(path, manifest)
    return manifest["decoding"]


def _verify_files(directory: Path, files: dict[str, dict[str, Any]]) -> list[str]:
    problems = []
    for name, entry in sorted(files.items()):
        path = directory / name
        if not path.is_file():
            problems.append(f"{name}: missing")
            continue
        size = path.stat().st_size
        if size != entry.get("bytes", size):  # cheap check first: truncated downloads
            problems.append(f"{name}: corrupted ({size} bytes, expected {entry['bytes']})")
            continue
        digest = sha256_file(path)
        if digest != entry.get("sha256"):
            problems.append(f"{name}: corrupted (sha256 {digest[:12]}…, expected {str(entry.get('sha256'))[:12]}…)")
    return problems


def _config_dict(config: ModelConfig) -> dict[str, Any]:
    values = to_dict(config)
    values["alignment_heads"] = list(values["alignment_heads"])
    return values


def _write_json(path: Path, value: dict[str, Any]) -> None:
    # Write then rename, so a crash never leaves a half-written manifest behind.
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
    temporary.replace(path)
