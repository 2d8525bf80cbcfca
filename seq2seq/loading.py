"""The one loader: a `Translator` from a model directory, on either backend.

A directory is a release bundle (bundle.json + ONNX graphs + config.json + model.pt +
spm.model) or a training output (config.json + model.pt + spm.model). The onnx backend
needs a bundle, whose files are verified against bundle.json; the torch backend reads
config.json + model.pt from either.

This module sits above both backends (the layer of the model and its training): torch is
imported only when `backend="torch"` is asked for, so the service, which loads bundles on
onnxruntime, never imports it.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from data.dictionary import TermIndex
from data.files import BUNDLE_FILE, DICTIONARY_FILE, ENSEMBLE_FILE, TOKENIZER_FILE
from data.tokenizer import Tokenizer
from seq2seq.analysis.quality import DEFAULT_QUALITY_MODE, QUALITY_MODES, QualityThresholds
from seq2seq.core.backend import SearchBackend
from seq2seq.core.config import DecodeConfig
from seq2seq.decoding.translator import Translator
from seq2seq.runtime.bundle import decode_defaults, load_bundle_manifest, read_ensemble
from seq2seq.runtime.ensemble import EnsembleBackend
from seq2seq.runtime.onnx_backend import OnnxBackend

log = logging.getLogger("crossalign.loading")

BACKENDS = ("onnx", "torch")
DEFAULT_BACKEND = "onnx"  # serving never needs torch


@dataclass(frozen=True)
class LoadedModel:
    """One model directory on its backend: what a `Translator` is built from."""

    backend: SearchBackend
    stream_backend: SearchBackend | None  # the backend each search stream runs on (None: `backend`)
    streams: int
    tokenizer_path: Path
    quality: QualityThresholds
    decoding: DecodeConfig
    dictionary: Path | None


def load_translator(
    model_dir: Path | str,
    backend: str = DEFAULT_BACKEND,
    threads: int = 0,
    precision: str | None = None,
    verify: bool = True,
    max_source_tokens: int = 250,
    max_batch_tokens: int = 4096,
    quality_mode: str = DEFAULT_QUALITY_MODE,
    streams: int = 0,
    members: Sequence[Path | str] = (),
) -> Translator:
    """The shared `Translator` over the chosen backend.

    backend "onnx" runs the bundle's graphs of `precision` ("fp32" or "int8"; None: the
    precision bundle.json names as its default) with `threads` intra-op threads (0:
    `onnx_backend.default_threads`); "torch" runs config.json + model.pt in eager mode
    (`threads` then sets torch's process-wide thread count; `precision` must be None).
    `streams`: sub-batches of a batch searched at once on the onnx backend (0:
    `onnx_backend.default_streams`, two once there are two threads; see `Translator`); the
    torch backend searches a batch whole.
    quality_mode ("thorough" or "fast", `seq2seq.analysis.quality.QUALITY_MODES`) chooses the
    untranslated detector of the quality blocks: with source occlusion, or attention only.
    The translator's `decode_defaults` are the bundle's `decoding` (on either backend; a
    training output, or a bundle from before the section: DecodeConfig's).

    An ensemble (`seq2seq.runtime.ensemble`): `members`, more model directories searched
    beside `model_dir`, or a `model_dir` holding an `ensemble.json` (`ENSEMBLE_FILE`) that
    names them. `model_dir` (or the file's first member, or its `alignment` one) gives the
    alignment map, quality thresholds, decoding and dictionary; the tokenizer is the member's
    with the fewest pieces, so an ensemble with a member trained without hints takes no
    glossary or dictionary hints.
    Raises ValueError for an unknown backend or quality mode, FileNotFoundError for a
    missing directory or bundle, BundleError for a corrupted bundle or one without graphs
    of `precision`, EnsembleError for members that cannot be searched together.
    """
    model_dir = Path(model_dir)
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    if quality_mode not in QUALITY_MODES:  # before the graphs load, not after
        raise ValueError(f"unknown quality mode {quality_mode!r}: choose one of {', '.join(QUALITY_MODES)}")
    if precision is not None and backend != "onnx":
        raise ValueError(
            f"a precision ({precision}) chooses the onnx backend's graphs; the {backend} backend runs model.pt"
        )
    if not model_dir.is_dir():
        raise FileNotFoundError(f"{model_dir}: no such model directory")
    directories, alignment, decoding = [model_dir, *map(Path, members)], 0, None
    if (model_dir / ENSEMBLE_FILE).is_file():
        if members:
            raise ValueError(f"{model_dir} is an ensemble already; name its members in its {ENSEMBLE_FILE}")
        spec = read_ensemble(model_dir)
        directories, alignment, decoding = list(spec.members), spec.alignment, spec.decoding
    loaded = [_load_model(d, backend, threads, precision, verify, streams) for d in directories]
    lead = loaded[alignment]
    if len(loaded) == 1:
        search_backend, stream_backend, tokenizer_path = lead.backend, lead.stream_backend, lead.tokenizer_path
    else:
        search_backend = EnsembleBackend([m.backend for m in loaded], alignment)
        stream_backend = None
        if lead.streams > 1:
            stream_backend = EnsembleBackend([m.stream_backend or m.backend for m in loaded], alignment)
        tokenizer_path = min(loaded, key=lambda m: m.backend.config.vocab_size).tokenizer_path
    return Translator(
        search_backend,
        Tokenizer(tokenizer_path),
        max_source_tokens,
        max_batch_tokens,
        lead.quality,
        quality_mode,
        decoding or lead.decoding,
        lead.streams,
        stream_backend,
        None if lead.dictionary is None else TermIndex.load(lead.dictionary),
    )


def _load_model(
    model_dir: Path, backend: str, threads: int, precision: str | None, verify: bool, streams: int
) -> LoadedModel:
    """One model directory on `backend` (see `load_translator`)."""
    if not model_dir.is_dir():
        raise FileNotFoundError(f"{model_dir}: no such model directory")
    if backend == "onnx":
        if not (model_dir / BUNDLE_FILE).is_file():
            raise FileNotFoundError(
                f"{model_dir}: no {BUNDLE_FILE}; export the model with `crossalign export` or use --backend torch"
            )
        bundle = load_bundle_manifest(model_dir, verify=verify)
        onnx_backend = OnnxBackend.from_bundle(bundle, precision, threads or None, streams or None)
        return LoadedModel(
            onnx_backend,
            onnx_backend.stream_backend,
            onnx_backend.streams,
            bundle.tokenizer_path,
            QualityThresholds() if bundle.quality_path is None else QualityThresholds.load(bundle.quality_path),
            bundle.decode_defaults,
            bundle.dictionary_path,
        )
    import torch  # only here: the onnx path must never import torch

    from seq2seq.training.torch_backend import TorchBackend

    if threads:
        torch.set_num_threads(threads)
    return LoadedModel(
        TorchBackend.from_directory(model_dir),
        None,
        1,
        model_dir / TOKENIZER_FILE,
        QualityThresholds.load(model_dir),  # defaults when it has none
        decode_defaults(model_dir),  # a bundle's on model.pt decodes as its graphs do
        model_dir / DICTIONARY_FILE if (model_dir / DICTIONARY_FILE).is_file() else None,
    )


def translate_file(
    model: Path,
    backend: str,
    sources: list[str],
    asked: dict[str, Any] | None = None,
    batch_size: int = 64,
    precision: str | None = None,
    channel: Path | None = None,
) -> tuple[list[str], DecodeConfig]:
    """The translations of `sources` with the search settings `asked` (name -> value, None or
    absent: the model's own, from its bundle.json), and the settings they were made with: what
    `crossalign eval` and the release gate (export/registers.py) score. `channel`: the reverse
    direction's model, which an `asked` reranking with a channel reads (`Translator.channel`)."""
    from tqdm import tqdm

    translator = load_translator(model, backend, precision=precision)
    if channel is not None:
        translator.channel = load_translator(channel, backend)
    config = replace(translator.decode_defaults, return_attention=False).override(**(asked or {}))
    log.info("decoding: %s", config.settings_text())
    out = []
    for start in tqdm(
        range(0, len(sources), batch_size),
        desc="translate",
        unit="batch",
        file=sys.stderr,
        disable=not sys.stderr.isatty(),
    ):
        out.extend(r.text for r in translator.translate_batch(sources[start : start + batch_size], config))
    return out, config
