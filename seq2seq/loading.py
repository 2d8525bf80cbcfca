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
from dataclasses import replace
from pathlib import Path
from typing import Any

from data.dictionary import TermIndex
from data.files import BUNDLE_FILE, DICTIONARY_FILE, TOKENIZER_FILE
from data.tokenizer import Tokenizer
from seq2seq.analysis.quality import DEFAULT_QUALITY_MODE, QUALITY_MODES, QualityThresholds
from seq2seq.core.backend import SearchBackend
from seq2seq.core.config import DecodeConfig
from seq2seq.decoding.translator import Translator
from seq2seq.runtime.bundle import decode_defaults, load_bundle_manifest
from seq2seq.runtime.onnx_backend import OnnxBackend

log = logging.getLogger("crossalign.loading")

BACKENDS = ("onnx", "torch")
DEFAULT_BACKEND = "onnx"  # serving never needs torch


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
    Raises ValueError for an unknown backend or quality mode, FileNotFoundError for a
    missing directory or bundle, BundleError for a corrupted bundle or one without graphs
    of `precision`.
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
    search_backend: SearchBackend
    if backend == "onnx":
        if not (model_dir / BUNDLE_FILE).is_file():
            raise FileNotFoundError(
                f"{model_dir}: no {BUNDLE_FILE}; export the model with `crossalign export` or use --backend torch"
            )
        bundle = load_bundle_manifest(model_dir, verify=verify)
        onnx_backend = OnnxBackend.from_bundle(bundle, precision, threads or None, streams or None)
        search_backend, stream_backend, streams = onnx_backend, onnx_backend.stream_backend, onnx_backend.streams
        tokenizer_path = bundle.tokenizer_path
        quality = QualityThresholds() if bundle.quality_path is None else QualityThresholds.load(bundle.quality_path)
        decoding = bundle.decode_defaults
        dictionary = bundle.dictionary_path
    else:
        import torch  # only here: the onnx path must never import torch

        from seq2seq.training.torch_backend import TorchBackend

        if threads:
            torch.set_num_threads(threads)
        search_backend = TorchBackend.from_directory(model_dir)
        stream_backend, streams = None, 1
        tokenizer_path = model_dir / TOKENIZER_FILE
        quality = QualityThresholds.load(model_dir)  # defaults when it has none
        decoding = decode_defaults(model_dir)  # a bundle's on model.pt decodes as its graphs do
        dictionary = model_dir / DICTIONARY_FILE if (model_dir / DICTIONARY_FILE).is_file() else None
    return Translator(
        search_backend,
        Tokenizer(tokenizer_path),
        max_source_tokens,
        max_batch_tokens,
        quality,
        quality_mode,
        decoding,
        streams,
        stream_backend,
        None if dictionary is None else TermIndex.load(dictionary),
    )


def translate_file(
    model: Path,
    backend: str,
    sources: list[str],
    asked: dict[str, Any] | None = None,
    batch_size: int = 64,
    precision: str | None = None,
) -> tuple[list[str], DecodeConfig]:
    """The translations of `sources` with the search settings `asked` (name -> value, None or
    absent: the model's own, from its bundle.json), and the settings they were made with: what
    `crossalign eval` and the release gate (export/registers.py) score."""
    from tqdm import tqdm

    translator = load_translator(model, backend, precision=precision)
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
