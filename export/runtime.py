"""onnxruntime behind the search's `SearchBackend`, and `load_translator` for bundles.

Torch-free, even indirectly: serving needs onnxruntime, numpy and sentencepiece only. The
torch backend is imported lazily, and only when asked for.

Graph interface (written by export/exporter.py; shapes: B sentences, N search rows, S
source length, P cached target length, T new target positions, L decoder layers, E encoder
layers, H heads, Dh head size, V vocabulary):

    encoder.onnx       src_ids (B, S) int64, src_mask (B, S) bool (True = real token)
                    -> cross_k, cross_v (L, B, H, S, Dh) float32,
                       self_weights (E, B, H, S, S) float32
    decoder_step.onnx  tokens (N, T) int64, cross_k, cross_v (L, N, H, S, Dh),
                       src_mask (N, S) bool, past_k, past_v (L, N, H, P, Dh), P >= 0
                    -> log_probs (N, T, V), new_past_k, new_past_v (L, N, H, P+T, Dh),
                       cross_weights (L, N, H, T, S), self_weights (L, N, H, T, P+T)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from data.tokenizer import Tokenizer
from export.bundle import Bundle, load_bundle_manifest
from seq2seq.config import ModelConfig
from seq2seq.search import StepOutput
from seq2seq.translator import Translator

ENCODER_OUTPUTS = ("cross_k", "cross_v", "self_weights")
DECODER_INPUTS = ("tokens", "cross_k", "cross_v", "src_mask", "past_k", "past_v")
DECODER_OUTPUTS = ("log_probs", "new_past_k", "new_past_v", "cross_weights", "self_weights")


def default_threads() -> int:
    """Intra-op threads when none are given: the cores, at most 4.

    A decoder step multiplies a few (N, D) rows by (D, V) and (D, D) matrices; past ~4
    threads the split costs more than it saves, and a service runs several requests side by
    side, each on its own pool.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(4, cores))


def session_options(threads: int | None = None) -> ort.SessionOptions:
    """The options both graphs run with, chosen deliberately:

    - intra_op_num_threads: see `default_threads`; a fixed number rather than ORT's "all
      cores" so that concurrent requests do not oversubscribe the CPU.
    - graph_optimization_level ORT_ENABLE_ALL: constant folding plus the layer-norm, GELU
      and MatMul+Add fusions; our graphs are plain ops, so they all apply.
    - execution_mode ORT_SEQUENTIAL: each graph is a chain of layers with no independent
      branches worth running in parallel; the parallel executor would only add hand-offs.
      inter_op_num_threads is therefore 1.
    - session.intra_op.allow_spinning 0: by default a pool's threads spin for a while after
      each run, waiting for more work. After the encoder returns they would take a core
      from the decoder steps that follow, and between decoder steps from the search's own
      numpy work, which runs on the calling thread; on a small machine that is a core the
      translation needs. Without spinning, threads sleep as soon as a run ends.
    """
    options = ort.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.intra_op_num_threads = threads or default_threads()
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3                     # errors only: no per-session chatter
    return options


class OnnxBackend:
    """`SearchBackend` over the encoder and decoder-step graphs; sessions are created once.

    Holds no per-request state (the KV cache is a value the search passes in and out), so
    one backend serves concurrent requests: `InferenceSession.run` is thread-safe.
    """

    def __init__(self, encoder_path: Path, decoder_path: Path, config: ModelConfig, threads: int | None = None):
        self.config = config
        self.bos_id, self.eos_id, self.pad_id = config.bos_id, config.eos_id, config.pad_id
        options = session_options(threads)
        providers = ["CPUExecutionProvider"]
        self.encoder = ort.InferenceSession(str(encoder_path), options, providers=providers)
        self.decoder = ort.InferenceSession(str(decoder_path), options, providers=providers)

    @classmethod
    def from_bundle(cls, bundle: Bundle, precision: str | None = None, threads: int | None = None) -> "OnnxBackend":
        encoder, decoder = bundle.graph_paths(precision)
        return cls(encoder, decoder, bundle.model_config, threads)

    def encode(self, src_ids: np.ndarray, src_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """src_ids (B, S) int64, src_mask (B, S) bool -> cross K and V, each (L, B, H, S, Dh)."""
        cross_k, cross_v = self.encoder.run(["cross_k", "cross_v"], self._source_feed(src_ids, src_mask))
        return cross_k, cross_v

    def step(self, tokens: np.ndarray, cross_k: np.ndarray, cross_v: np.ndarray, src_mask: np.ndarray,
             past_k: np.ndarray | None, past_v: np.ndarray | None, need_attention: bool) -> StepOutput:
        """tokens (N, 1) at position P; past_k/v (L, N, H, P, Dh) or None when P = 0.

        The first step feeds an empty (L, N, H, 0, Dh) past: the graph concatenates it with
        the new keys, and onnxruntime handles the zero-length axis (checked in the tests).
        """
        names = list(DECODER_OUTPUTS[:4] if need_attention else DECODER_OUTPUTS[:3])
        outputs = self.decoder.run(names, self._decoder_feed(tokens, cross_k, cross_v, src_mask, past_k, past_v))
        log_probs, new_k, new_v = outputs[:3]
        return StepOutput(log_probs[:, -1], new_k, new_v, outputs[3][:, :, :, -1] if need_attention else None)

    def attention_maps(self, src_ids: np.ndarray, src_mask: np.ndarray, target_ids: np.ndarray) -> dict[str, np.ndarray]:
        """Every attention map of a given translation, by teacher forcing (for the explorer).

        src_ids (B, S) with the source EOS, src_mask (B, S), target_ids (B, T) without BOS
        or EOS (right-padded with pad_id when B > 1). The decoder reads BOS + target, so its
        T+1 rows are the steps that produced target token i, the last one producing EOS,
        as in `TranslationResult.attention`. Returns
            encoder_self (E, B, H, S, S), decoder_self (L, B, H, T+1, T+1),
            cross (L, B, H, T+1, S), log_probs (B, T+1, V).
        Padded target positions only affect rows after them (the mask is causal).
        """
        cross_k, cross_v, encoder_self = self.encoder.run(list(ENCODER_OUTPUTS), self._source_feed(src_ids, src_mask))
        bos = np.full((target_ids.shape[0], 1), self.bos_id, dtype=np.int64)
        tokens = np.concatenate([bos, target_ids.astype(np.int64)], axis=1)
        log_probs, _, _, cross, decoder_self = self.decoder.run(
            list(DECODER_OUTPUTS), self._decoder_feed(tokens, cross_k, cross_v, src_mask, None, None))
        return {"encoder_self": encoder_self, "decoder_self": decoder_self, "cross": cross, "log_probs": log_probs}

    def _source_feed(self, src_ids: np.ndarray, src_mask: np.ndarray) -> dict[str, np.ndarray]:
        return {"src_ids": np.ascontiguousarray(src_ids, dtype=np.int64),
                "src_mask": np.ascontiguousarray(src_mask, dtype=np.bool_)}

    def _decoder_feed(self, tokens: np.ndarray, cross_k: np.ndarray, cross_v: np.ndarray, src_mask: np.ndarray,
                      past_k: np.ndarray | None, past_v: np.ndarray | None) -> dict[str, np.ndarray]:
        if past_k is None or past_v is None:
            layers, rows, heads, _, head_dim = cross_k.shape
            past_k = past_v = np.zeros((layers, rows, heads, 0, head_dim), dtype=np.float32)
        values = (tokens.astype(np.int64, copy=False), cross_k, cross_v, src_mask.astype(np.bool_, copy=False),
                  past_k, past_v)
        return {name: np.ascontiguousarray(value) for name, value in zip(DECODER_INPUTS, values)}


def load_translator(bundle_dir: Path | str, backend: str = "onnx", threads: int | None = None,
                    precision: str | None = None, verify: bool = True, **translator_options: Any) -> Translator:
    """Verify the bundle and return the shared `Translator` over the chosen backend.

    backend "onnx" runs the bundle's graphs of `precision` (default: the bundle's export
    precision); "torch" imports torch lazily and runs `config.json` + `model.pt` from the
    bundle in eager mode (`threads` then sets torch's process-wide thread count).
    `translator_options` go to `Translator` (max_source_tokens, max_batch_tokens).
    Raises BundleError if a file is missing or corrupted.
    """
    bundle = load_bundle_manifest(Path(bundle_dir), verify=verify)
    tokenizer = Tokenizer(bundle.tokenizer_path)
    if backend == "onnx":
        search_backend: Any = OnnxBackend.from_bundle(bundle, precision, threads)
    elif backend == "torch":
        import torch  # lazy: the onnx path must never import torch

        from seq2seq.torch_backend import TorchBackend
        if threads:
            torch.set_num_threads(threads)
        search_backend = TorchBackend.from_directory(bundle.directory)
    else:
        raise ValueError(f"unknown backend {backend!r}: expected 'onnx' or 'torch'")
    return Translator(search_backend, tokenizer, **translator_options)
