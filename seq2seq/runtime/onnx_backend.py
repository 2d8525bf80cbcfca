"""onnxruntime behind the search's `SearchBackend`: the serving backend of a release bundle.

Torch-free, even indirectly: serving needs onnxruntime, numpy and sentencepiece only
(`seq2seq.loading.load_translator` builds a `Translator` over it).

Graph interface (written by export/exporter.py; shapes: B sentences, N search rows, S
source length, P cached target length, T new target positions, L decoder layers, E encoder
layers, H heads, Dh head size, V vocabulary):

    encoder.onnx       src_ids (B, S) int64, src_mask (B, S) bool (True = real token)
                    -> cross_k (L, B, H, Dh, S), cross_v (L, B, H, S, Dh) float32,
                       self_weights (E, B, H, S, S) float32
    decoder_step.onnx  tokens (N, T) int64, src_mask (B, S) bool, and per decoder layer l:
                       cross_k_l (B, H, Dh, S), cross_v_l (B, H, S, Dh), past_k_l (N, H, Dh, P),
                       past_v_l (N, H, P, Dh), P >= 0, and top_k (1,) int64 = C >= 0
                    -> log_probs (N, T, V), per layer new_past_k_l (N, H, Dh, P+T),
                       new_past_v_l (N, H, P+T, Dh),
                       cross_weights (L, N, H, T, S), self_weights (L, N, H, T, P+T),
                       top_log_probs (N, T, C), top_ids (N, T, C) int64: each position's C
                       largest log-probs, largest first (the search's candidates; bundles
                       exported before them lack top_k and these two, and still run)

The keys are transposed, (.., Dh, S) and (.., Dh, P), so that each attention score is a
plain MatMul: with the keys as (.., S, Dh) onnxruntime multiplies by a transposed operand,
about twice as slow for these batched (1, Dh) x (Dh, S) products (docs/performance.md,
lever 22). Bundles exported before that take them as (.., S, Dh) and still run
(`keys_transposed`).

The source mask and cross K/V have one row per sentence, and the N = B·G rows of tokens and
cache are its beams, G consecutive rows each (G = 1 greedy, or where the rows are the
sentences): a sentence's K/V are read once per step for all its beams, and held once
(docs/performance.md, lever 23). Bundles exported before that take one per row, N, and
still run (`cross_per_sentence`).

The search keeps the cross K/V and the cache stacked, (L, N, H, ·, Dh), as one array each
(`seq2seq.core.backend.DecoderCache`); the graph takes and gives them per layer, so the backend
binds per-layer views of the stacked arrays as inputs and has the graph write its per-layer outputs straight into the
slices of a stacked array (onnxruntime's I/O binding): no split, stack or copy around a step.
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

from seq2seq.core.backend import DecoderCache, StepOutput, TeacherForced, length_groups
from seq2seq.core.config import ModelConfig
from seq2seq.runtime.bundle import Bundle, BundleError

ENCODER_OUTPUTS = ("cross_k", "cross_v", "self_weights")
# The decoder's outputs as the backend returns them: the per-layer caches stacked (L, ...).
DECODER_OUTPUTS = ("log_probs", "new_past_k", "new_past_v", "cross_weights", "self_weights")
PER_LAYER = ("new_past_k", "new_past_v")
# int8 decoder runs of at most this many rows (one sentence at beam 4) use a one-thread
# session: their quantized MatMuls are too small to split, and each of the ~200 kernels of
# a step would wake the pool's sleeping threads (see `session_options`) for nothing; on a
# loaded machine a step split over two threads also waits for the one that is descheduled.
# Measured (docs/performance.md, lever 7): int8 beam-4 batch-1 p50 1.14-1.18x faster;
# fp32 0.98x (its float MatMuls, the 8,000-wide output projection above all, still gain
# from a second thread), so fp32 keeps one session.
SMALL_STEP_ROWS = 4
# Runs of at most this many rows go through `InferenceSession.run` and stack their per-layer
# caches afterwards: at 4-8 rows the stacking copies less than binding ~25 inputs and outputs
# one by one costs through onnxruntime's Python wrappers (docs/performance.md, lever 20:
# batch 1 1.05x).
# Larger runs are bound in place (no copy of megabytes of cache).
PLAIN_RUN_ROWS = 8
# The fixed cost of one encoder run, in source positions (`length_groups`): fitted once to
# timed encoder runs of 1-32 sentences, about 10 positions on one thread for fp32, 4 for int8,
# and 30 on two threads for fp32; 16 is between them (docs/performance.md, lever 21).
ENCODE_RUN_POSITIONS = 16.0


def encoder_io() -> dict[str, dict[str, tuple[str, ...]]]:
    """The encoder graph's inputs and outputs (name -> axes), in order, the cross K transposed
    (see `decoder_io`)."""
    return {
        "inputs": {"src_ids": ("batch", "source"), "src_mask": ("batch", "source")},
        "outputs": {
            "cross_k": ("decoder_layers", "batch", "heads", "head_dim", "source"),
            "cross_v": ("decoder_layers", "batch", "heads", "source", "head_dim"),
            "self_weights": ("encoder_layers", "batch", "heads", "source", "source"),
        },
    }


def decoder_io(layers: int, cross_per_sentence: bool = True) -> dict[str, dict[str, tuple[str, ...]]]:
    """The decoder-step graph's inputs and outputs (name -> axes), in order, for L = `layers`,
    the keys transposed: (.., head_dim, length). Graphs exported before lever 22
    (docs/performance.md) have them as (.., length, head_dim) and still run
    (`OnnxBackend.keys_transposed`). With `cross_per_sentence` (the exporter's layout since
    lever 23), the source mask and
    cross K/V have one row per sentence, whose beams are consecutive rows; graphs exported
    before have one per row and still run (`OnnxBackend.cross_per_sentence`).

    The one declaration of the interface: the exporter names the graph's tensors from it and
    this backend checks a bundle's input names against it.
    """
    sources = "sentences" if cross_per_sentence else "rows"

    def per_layer(prefix: str, length: str) -> dict[str, tuple[str, ...]]:
        first = sources if prefix.startswith("cross") else "rows"
        keys = prefix.endswith("_k")
        axes = (first, "heads", "head_dim", length) if keys else (first, "heads", length, "head_dim")
        return {f"{prefix}_{layer}": axes for layer in range(layers)}

    return {
        "inputs": {
            "tokens": ("rows", "new"),
            "src_mask": (sources, "source"),
            **per_layer("cross_k", "source"),
            **per_layer("cross_v", "source"),
            **per_layer("past_k", "past"),
            **per_layer("past_v", "past"),
        },
        "outputs": {
            "log_probs": ("rows", "new", "vocab"),
            **per_layer("new_past_k", "past+new"),
            **per_layer("new_past_v", "past+new"),
            "cross_weights": ("decoder_layers", "rows", "heads", "new", "source"),
            "self_weights": ("decoder_layers", "rows", "heads", "new", "past+new"),
        },
    }


# What the exporter appends to the decoder-step graph for the search (export/topk.py): the
# C = top_k largest log-probs of each new position and their ids. A graph without them (an
# older bundle) still runs: the search then ranks from log_probs in numpy. A graph's nodes
# all run whatever outputs are fetched, so a run that wants none feeds C = 0 (greedy search,
# teacher forcing): the TopK then costs nothing (at C = 1 it was ~3% of a greedy step).
SEARCH_TOP_IO: dict[str, dict[str, tuple[str, ...]]] = {
    "inputs": {"top_k": ("one",)},
    "outputs": {"top_log_probs": ("rows", "new", "top"), "top_ids": ("rows", "new", "top")},
}


def decoder_graph_io(layers: int) -> dict[str, dict[str, tuple[str, ...]]]:
    """The whole decoder-step graph's interface: the traced `decoder_io` plus the search's TopK."""
    io = decoder_io(layers)
    return {part: {**io[part], **SEARCH_TOP_IO[part]} for part in ("inputs", "outputs")}


def default_threads() -> int:
    """Intra-op threads when none are given: the cores, at most 4.

    A decoder step multiplies a few (N, D) rows by (D, V) and (D, D) matrices; past ~4
    threads the split costs more than it saves, and a service runs several requests side by
    side, each on its own pool.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(4, cores))


def default_streams(threads: int) -> int:
    """Search streams when none are given: two once there are two threads, each stream then
    running its graphs on half of them.

    The search's own work (ranking, the cache's reorder, back-pointers: about a quarter of a
    beam-4 batch) runs in Python on one core while the graphs' pool waits; a second stream,
    searching the other half of the batch, runs its graphs meanwhile. Measured
    (docs/performance.md, lever 19). More than two streams would split a batch into
    sub-batches too small for the graphs' MatMuls to pay off, and a service runs several
    requests side by side anyway.
    """
    return 2 if threads >= 2 else 1


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
    options.log_severity_level = 3  # errors only: no per-session chatter
    return options


# glibc's mallopt parameters (malloc.h) and the values `keep_freed_memory` gives them.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest: blocks up to 32 MiB come from the heap
TRIM_THRESHOLD = 256 << 20  # free memory kept at the heap's top before it is returned


def keep_freed_memory() -> None:
    """Let glibc's malloc reuse freed memory for the search's per-step arrays instead of
    handing it back to the kernel and faulting fresh zeroed pages in at the next step.

    Each decoder step allocates megabytes that die at the next one (the log-probs, N x V;
    the self K/V, (L, N, H, P, Dh), and their reordered copy). glibc serves blocks above
    its adaptive mmap threshold with fresh mmaps and trims the heap's free top, so every
    step page-faulted them in again: ~140 minor faults a step at beam 4, batch 32. A
    process-wide setting, made once; elsewhere than on glibc it does nothing.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # another C library (musl): its own allocator, nothing to set
        return
    libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)


class OnnxBackend:
    """`SearchBackend` over the encoder and decoder-step graphs; sessions are created once.

    Holds no per-request state (the KV cache is a value the search passes in and out), so
    one backend serves concurrent requests: `InferenceSession.run` is thread-safe.

    `streams`: how many sub-batches of one batch the translator searches at once
    (`seq2seq.decoding.translator.Translator`; None: `default_streams`). With more than one,
    `stream_backend` runs the same graphs on threads // streams intra-op threads each, so
    the streams together use the threads one batch would; otherwise it is this backend.
    """

    def __init__(
        self,
        encoder_path: Path,
        decoder_path: Path,
        config: ModelConfig,
        threads: int | None = None,
        precision: str = "fp32",
        streams: int | None = None,
    ):
        keep_freed_memory()
        self.config = config
        self.precision = precision  # which graphs these are: "fp32" or "int8"
        self.bos_id, self.eos_id, self.pad_id = config.bos_id, config.eos_id, config.pad_id
        options = session_options(threads)
        providers = ["CPUExecutionProvider"]
        self.encoder = ort.InferenceSession(str(encoder_path), options, providers=providers)
        self.decoder = ort.InferenceSession(str(decoder_path), options, providers=providers)
        threads = options.intra_op_num_threads
        self.streams = default_streams(threads) if streams is None else streams
        if self.streams < 1:
            raise ValueError(f"streams must be at least 1, not {self.streams}")
        stream_threads = max(1, threads // self.streams)
        self.stream_backend = (
            self
            if self.streams == 1
            else OnnxBackend(encoder_path, decoder_path, config, stream_threads, precision, streams=1)
        )
        if threads == 1 or precision != "int8":
            self.small_decoder = self.decoder
        elif self.stream_backend is not self and stream_threads == 1:
            # The streams' one-thread session of the same graph (sessions are thread-safe):
            # one session fewer to load and hold.
            self.small_decoder = self.stream_backend.decoder
        else:
            self.small_decoder = ort.InferenceSession(str(decoder_path), session_options(1), providers=providers)
        expected = list(decoder_io(config.decoder_layers)["inputs"])
        found = [graph_input.name for graph_input in self.decoder.get_inputs()]
        self.keys_transposed = self._keys_transposed(config)
        # One cross K/V and source mask per sentence for its beams' rows (docs/performance.md,
        # lever 23), or, in bundles exported before, one per row.
        cross_v = next((i.shape for i in self.decoder.get_inputs() if i.name == "cross_v_0"), ["rows"])
        self.cross_per_sentence = cross_v[0] == "sentences"
        # Whether the graph ranks the search's candidates itself (export/topk.py).
        self.has_top_k = found == expected + list(SEARCH_TOP_IO["inputs"])
        if found != expected and not self.has_top_k:
            raise BundleError(
                f"{decoder_path}: decoder inputs {found}, this version expects {expected} "
                "(per-layer caches); re-export the bundle with `crossalign export`"
            )

    def _keys_transposed(self, config: ModelConfig) -> bool:
        """Whether the graphs take and give K as (.., Dh, S|P) (the exporter's layout since
        lever 22, docs/performance.md) rather than (.., S|P, Dh): read from the graphs' own
        shapes, where the head size is the only fixed last axis."""
        head_dim = config.d_model // config.n_heads
        encoder_k = next(o.shape for o in self.encoder.get_outputs() if o.name == "cross_k")
        decoder_k = next((i.shape for i in self.decoder.get_inputs() if i.name == "cross_k_0"), encoder_k)
        transposed = encoder_k[-1] != head_dim
        if (decoder_k[-1] != head_dim) != transposed:
            raise BundleError("the encoder and decoder graphs disagree on the keys' layout; re-export the bundle")
        return transposed

    def keys_in_rows(self, keys: np.ndarray) -> np.ndarray:
        """K as this backend's graphs give it -> (.., S|P, Dh), the model's own layout (a view):
        for comparisons with the torch model."""
        return keys.swapaxes(-1, -2) if self.keys_transposed else keys

    @classmethod
    def from_bundle(
        cls, bundle: Bundle, precision: str | None = None, threads: int | None = None, streams: int | None = None
    ) -> OnnxBackend:
        """The bundle's graphs of `precision` (None: the default precision its bundle.json names)."""
        precision = precision or bundle.default_precision
        encoder, decoder = bundle.graph_paths(precision)
        return cls(encoder, decoder, bundle.model_config, threads, precision, streams)

    def encode(self, src_ids: np.ndarray, src_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """src_ids (B, S) int64, src_mask (B, S) bool -> cross K (L, B, H, Dh, S) (or
        (L, B, H, S, Dh) from graphs without `keys_transposed`) and V (L, B, H, S, Dh).

        Sentences of similar length are encoded together, each group padded only to its own
        longest (`seq2seq.core.backend.length_groups`; docs/performance.md, lever 21); the
        groups' K/V are then written into arrays of the whole batch's S. Every real position
        gets the values a whole-batch run gives, up to float rounding (the encoder masks
        padding, so no sentence reads another's length; tested: the same search). Padded
        positions hold zeros or their group's padding, and the decoder masks them out of
        every score.
        """
        lengths = np.where(src_mask.any(axis=1), src_mask.shape[1] - np.argmax(src_mask[:, ::-1], axis=1), 0)
        groups = length_groups(lengths, ENCODE_RUN_POSITIONS)
        if len(groups) == 1:
            cross_k, cross_v = self.encoder.run(["cross_k", "cross_v"], self._source_feed(src_ids, src_mask))
            return cross_k, cross_v
        config = self.config
        shape = (
            config.decoder_layers,
            len(src_ids),
            config.n_heads,
            src_ids.shape[1],
            config.d_model // config.n_heads,
        )
        cross_k, cross_v = np.zeros(shape, dtype=np.float32), np.zeros(shape, dtype=np.float32)
        if self.keys_transposed:
            cross_k = np.ascontiguousarray(cross_k.swapaxes(-1, -2))
        rows_k = self.keys_in_rows(cross_k)  # a view: writes land in cross_k
        for rows in groups:
            length = max(1, int(lengths[rows].max()))
            feed = self._source_feed(src_ids[rows, :length], src_mask[rows, :length])
            group_k, group_v = self.encoder.run(["cross_k", "cross_v"], feed)
            rows_k[:, rows, :, :length] = self.keys_in_rows(group_k)
            cross_v[:, rows, :, :length] = group_v
        return cross_k, cross_v

    def step(
        self,
        tokens: np.ndarray,
        src_mask: np.ndarray,
        cache: DecoderCache,
        need_attention: bool,
        top_k: int = 0,
        need_self_attention: bool = False,
    ) -> StepOutput:
        """tokens (N, 1) at position P = cache.past_length (see `SearchBackend.step`). With
        `top_k` > 0 and a graph that has the search's TopK, the output carries each row's
        `top_k` best log-probs and their ids; with `need_self_attention`, the graph's
        self-attention output, which it computes on every run anyway.

        The first step feeds the empty (N, H, 0, Dh) past of `DecoderCache.start` per layer:
        the graph concatenates it with the new keys, and onnxruntime handles the zero-length
        axis (tested).
        """
        names = DECODER_OUTPUTS[:4] if need_attention else DECODER_OUTPUTS[:3]
        top_k = min(top_k, self.config.vocab_size) if self.has_top_k else 0
        if top_k:
            names += tuple(SEARCH_TOP_IO["outputs"])
        if need_self_attention:
            names += ("self_weights",)
        out = self.run_decoder(tokens, src_mask, cache, names, top_k=top_k)
        return StepOutput(
            out["log_probs"][:, -1],
            DecoderCache(cache.cross_k, cache.cross_v, out["new_past_k"], out["new_past_v"]),
            out["cross_weights"][:, :, :, -1] if need_attention else None,
            (out["top_log_probs"][:, -1], out["top_ids"][:, -1]) if top_k else None,
            out["self_weights"][:, :, :, -1] if need_self_attention else None,
        )

    def run_decoder(
        self,
        tokens: np.ndarray,
        src_mask: np.ndarray,
        cache: DecoderCache,
        names: tuple[str, ...] = DECODER_OUTPUTS,
        top_k: int = 0,
    ) -> dict[str, np.ndarray]:
        """One run of the decoder-step graph on stacked arrays; returns the outputs in `names`.

        tokens (N, T), src_mask (N, S), cache with cross K/V (L, N, H, S, Dh) (one row per
        sentence, B, with `cross_per_sentence`) and self K/V (L, N, H, P, Dh), the keys
        (.., Dh, S|P) with `keys_transposed` -> log_probs
        (N, T, V), new_past_k/v (L, N, H, P+T, Dh) (new_past_k (L, N, H, Dh, P+T) likewise),
        cross_weights (L, N, H, T, S), self_weights (L, N, H, T, P+T) and, from a graph with
        the search's TopK, top_log_probs and top_ids (N, T, top_k). Every output is
        allocated here and written in place by the graph (I/O binding), the caches layer by
        layer into one stacked array, so nothing is copied or stacked after the run; a run of
        at most `PLAIN_RUN_ROWS` rows is cheaper unbound, its caches stacked after it. At most
        `SMALL_STEP_ROWS` rows of int8 graphs run on one thread.
        """
        layers, _, heads, source, head_dim = cache.cross_v.shape
        rows, new, past = tokens.shape[0], tokens.shape[1], cache.past_length
        # Held until the run ends: the binding points into these arrays' memory.
        inputs = self.decoder_feed(tokens, src_mask, cache, top_k)
        session = self.small_decoder if rows <= SMALL_STEP_ROWS else self.decoder
        if rows <= PLAIN_RUN_ROWS:
            return self._run_and_stack(session, inputs, names, layers)
        key_axes = (head_dim, past + new) if self.keys_transposed else (past + new, head_dim)
        shapes = {
            "log_probs": (rows, new, self.config.vocab_size),
            "new_past_k": (layers, rows, heads, *key_axes),
            "new_past_v": (layers, rows, heads, past + new, head_dim),
            "cross_weights": (layers, rows, heads, new, source),
            "self_weights": (layers, rows, heads, new, past + new),
            "top_log_probs": (rows, new, top_k),
            "top_ids": (rows, new, top_k),
        }
        binding = session.io_binding()
        for name, value in inputs.items():
            binding.bind_cpu_input(name, value)
        outputs = {name: np.empty(shapes[name], dtype=np.int64 if name == "top_ids" else np.float32) for name in names}
        for name, array in outputs.items():
            for graph_name, part in (
                [(f"{name}_{layer}", array[layer]) for layer in range(layers)] if name in PER_LAYER else [(name, array)]
            ):
                binding.bind_output(graph_name, "cpu", 0, part.dtype.type, list(part.shape), part.ctypes.data)
        session.run_with_iobinding(binding)
        return outputs

    def decoder_feed(
        self, tokens: np.ndarray, src_mask: np.ndarray, cache: DecoderCache, top_k: int = 0
    ) -> dict[str, np.ndarray]:
        """The decoder-step graph's inputs for `run_decoder`'s arguments: the stacked caches
        as per-layer arrays. The search's cache may be a view whose layers are each
        contiguous but not adjacent (`seq2seq.core.backend.move_rows`); such a layer is fed as
        it is, no copy. The empty past of `DecoderCache.start` is fed in the graph's layout.

        With `cross_per_sentence`, the cache's cross K/V have one row per sentence and
        tokens and src_mask (N, S) G = N / B consecutive rows each (the search's beams); the
        graph gets every G-th row of src_mask."""
        if self.cross_per_sentence:
            sentences = cache.cross_v.shape[1]
            if len(tokens) % sentences:
                raise ValueError(f"{len(tokens)} rows are not whole beams of {sentences} sentences")
            src_mask = src_mask[:: len(tokens) // sentences]
        inputs = {
            "tokens": np.ascontiguousarray(tokens, dtype=np.int64),
            "src_mask": np.ascontiguousarray(src_mask, dtype=np.bool_),
        }
        if self.has_top_k:
            inputs["top_k"] = np.array([top_k], dtype=np.int64)
        self_k = cache.self_k
        if self.keys_transposed and cache.past_length == 0:
            self_k = self_k.swapaxes(-1, -2)  # (L, N, H, 0, Dh) -> (L, N, H, Dh, 0)
        for name, stacked in (
            ("cross_k", cache.cross_k),
            ("cross_v", cache.cross_v),
            ("past_k", self_k),
            ("past_v", cache.self_v),
        ):
            for layer in range(len(stacked)):
                inputs[f"{name}_{layer}"] = np.ascontiguousarray(stacked[layer], dtype=np.float32)
        return inputs

    @staticmethod
    def _run_and_stack(
        session: ort.InferenceSession, inputs: dict[str, np.ndarray], names: tuple[str, ...], layers: int
    ) -> dict[str, np.ndarray]:
        """`run_decoder`'s outputs from a plain run (`PLAIN_RUN_ROWS`): onnxruntime allocates
        them, and the per-layer caches are stacked here."""
        graph_names = [
            graph_name
            for name in names
            for graph_name in ([f"{name}_{layer}" for layer in range(layers)] if name in PER_LAYER else [name])
        ]
        found = iter(session.run(graph_names, inputs))
        outputs = {}
        for name in names:
            if name in PER_LAYER:
                first = next(found)
                # Written into one array (np.stack's wrapper costs more than the copy here).
                stacked = outputs[name] = np.empty((layers, *first.shape), dtype=first.dtype)
                stacked[0] = first
                for layer in range(1, layers):
                    stacked[layer] = next(found)
            else:
                outputs[name] = next(found)
        return outputs

    def teacher_force(self, src_ids: np.ndarray, src_mask: np.ndarray, target_ids: np.ndarray) -> TeacherForced:
        """Every attention map of given translations: one encoder and one decoder run over the
        whole batch (see `SearchBackend.teacher_force`). Padded target positions only affect
        rows after them (the mask is causal)."""
        cross_k, cross_v, encoder_self = self.encoder.run(list(ENCODER_OUTPUTS), self._source_feed(src_ids, src_mask))
        bos = np.full((target_ids.shape[0], 1), self.bos_id, dtype=np.int64)
        tokens = np.concatenate([bos, target_ids.astype(np.int64)], axis=1)
        out = self.run_decoder(
            tokens, src_mask, DecoderCache.start(cross_k, cross_v), ("log_probs", "cross_weights", "self_weights")
        )
        return TeacherForced(
            log_probs=out["log_probs"],
            cross=out["cross_weights"],
            encoder_self=encoder_self,
            decoder_self=out["self_weights"],
        )

    def _source_feed(self, src_ids: np.ndarray, src_mask: np.ndarray) -> dict[str, np.ndarray]:
        return {
            "src_ids": np.ascontiguousarray(src_ids, dtype=np.int64),
            "src_mask": np.ascontiguousarray(src_mask, dtype=np.bool_),
        }
