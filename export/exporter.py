"""Checkpoint -> ONNX graphs that keep cross-attention -> release bundle (`crossalign export`,
export/cli.py, is its command line).

A template in four steps (after the CTranslate2 converters): load the checkpoint, validate
it (every problem collected, raised once), write the bundle, then check the written graphs
against torch (export/parity.py): tokens of greedy and beam-4 search identical, log-probs
and cross-attention within 1e-4. The bundle is written to a staging directory beside
`out_dir` and only moved into place once the parity check passes, so a failed export never
leaves a half bundle.

Two graphs, mapping one-to-one onto `Transformer.encode` and `Transformer.decode` (their
interface is listed in seq2seq/runtime/onnx_backend.py):

    encoder.onnx       src_ids, src_mask -> cross_k, cross_v, self_weights
    decoder_step.onnx  tokens, src_mask, cross_k_l, cross_v_l, past_k_l, past_v_l (per layer l), top_k
                    -> log_probs, new_past_k_l, new_past_v_l (per layer l), cross_weights, self_weights,
                       top_log_probs, top_ids (the search's TopK, appended after tracing: export/topk.py)

The attention weights are always-present outputs rather than a second graph variant: the
cross-attention is the product and is needed at every step anyway, and the legacy exporter
decomposes scaled_dot_product_attention into MatMul, Softmax, MatMul in any case, so exposing
the self-attention Softmax outputs costs only copying them out. One graph per role keeps
the bundle small and means the explorer and the search can never disagree. A caller that
does not want an output simply does not fetch it. The decoder's cross K/V and KV cache are
one tensor per layer, the keys transposed (see `DecoderStepGraph`).

The decoder graph takes any number T of new tokens after P >= 0 cached ones: the search
calls it with T = 1, the attention explorer with the whole target and P = 0. On the first
step the past is an empty (N, H, Dh, 0) / (N, H, 0, Dh) tensor per layer; onnxruntime
handles the zero-length Concat, so there is no special first-step graph.

The fp32 graphs' weight MatMuls and their bias Adds become one Gemm each (export/gemm.py),
after the int8 graphs are made from them (the quantizer quantizes MatMuls).

The legacy TorchScript exporter (dynamo=False) is used: it traces `Tensor.size()` as graph
values, so the position slice `positions[P:P+T]` and the causal mask built with arange
comparisons stay dynamic in P and T without any change to the model. It traces the head
splits and merges the same way, as Shape -> Gather -> Concat chains run at every step; those
targets are then made constants (`[0, 0, H, Dh]`, `[0, 0, D]`: export/shapes.py).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from data.files import (
    BUNDLE_FILE,
    CONFIG_FILE,
    DICTIONARY_FILE,
    DICTIONARY_RECORD_FILE,
    QUALITY_FILE,
    TOKENIZER_FILE,
    WEIGHTS_FILE,
)
from data.tokenizer import Tokenizer
from export.calibrate import DEFAULT_SOURCE, Calibration, calibrate_graphs
from export.gemm import fuse_graph_file
from export.parity import PARITY_SENTENCES, run_parity_checks
from export.precisions import keep_graphs, precision_problems
from export.quantize import quantize_graphs
from export.shapes import fold_reshape_targets
from export.topk import add_search_top_k
from seq2seq.core.config import DecodeConfig, ModelConfig, load_config, save_config
from seq2seq.runtime.bundle import GRAPH_FILES, BundleError, decode_defaults, write_bundle_manifest
from seq2seq.runtime.onnx_backend import decoder_graph_io, decoder_io, encoder_io
from seq2seq.training.model import Transformer, load_model

log = logging.getLogger("crossalign.export")

DATA_MANIFEST_FILE = "data_manifest.json"
DEFAULT_OPSET = 17


class ExportError(ValueError):
    """The checkpoint or the export settings have problems; the message lists all of them."""


# --------------------------------------------------------------------------- graph adapters


class EncoderGraph(nn.Module):
    """`Transformer.encode` with tensor outputs: the encoder.onnx graph."""

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def forward(self, src_ids: Tensor, src_mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(B, S) int64, (B, S) bool -> cross_k (L, B, H, Dh, S), cross_v (L, B, H, S, Dh),
        self_weights (E, B, H, S, S). The keys leave transposed (see `DecoderStepGraph`)."""
        encoded = self.model.encode(src_ids, src_mask, need_weights=True)
        return encoded.cross_k.transpose(-1, -2), encoded.cross_v, torch.stack(encoded.self_weights)


class DecoderStepGraph(nn.Module):
    """`Transformer.decode` over T new tokens after a (possibly empty) cache: decoder_step.onnx.

    The cross K/V and the KV cache go in and out one tensor per layer: a stacked (L, ...)
    cache would be split on the way in and re-stacked on the way out, copying all of it
    every step (a quarter of the step's kernel time at 128 rows). The caller keeps its
    stacked arrays and hands the graph per-layer views of them, which costs nothing.

    The keys, cross and cached, go in and out transposed, (N, H, Dh, S|P): the model's
    `q @ k.transpose(-1, -2)` then meets the transpose taken here and onnxruntime cancels the
    two, so every score is a plain MatMul. With (N, H, S, Dh) keys it multiplies by a
    transposed operand, about twice as slow for these batched (1, Dh) x (Dh, S) products:
    a decoder step 1.02-1.08x faster (docs/performance.md, lever 22). Each step's new
    keys are concatenated along the last axis instead, which costs the same.

    The source mask and cross K/V have one row per sentence, and the N rows of tokens and
    cache are its beams, G = N / B consecutive rows each: each sentence's K/V are read once
    for all its beams (`seq2seq.training.model._grouped_by_source`; docs/performance.md,
    lever 23).
    """

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model
        self.layers = model.config.decoder_layers

    def forward(self, tokens: Tensor, src_mask: Tensor, *states: Tensor) -> tuple[Tensor, ...]:
        """tokens (N, T), src_mask (B, S), then per layer l: cross_k_l (B, H, Dh, S), cross_v_l
        (B, H, S, Dh), past_k_l (N, H, Dh, P), past_v_l (N, H, P, Dh) -> log_probs (N, T, V),
        new_past_k_l (N, H, Dh, P+T) and new_past_v_l (N, H, P+T, Dh) per layer,
        cross_weights (L, N, H, T, S), self_weights (L, N, H, T, P+T)."""
        cross_kt, cross_v, past_kt, past_v = (states[i * self.layers : (i + 1) * self.layers] for i in range(4))
        out = self.model.decode(
            tokens,
            [k.transpose(-1, -2) for k in cross_kt],
            cross_v,
            src_mask,
            [k.transpose(-1, -2) for k in past_kt],
            past_v,
            need_cross_weights=True,
            need_self_weights=True,
        )
        new_kt = [k.transpose(-1, -2) for k in out.layer_k]
        return (out.log_probs, *new_kt, *out.layer_v, out.cross_weights, out.self_weights)


_FIXED_AXES = {"decoder_layers", "encoder_layers", "heads", "head_dim", "vocab"}


def _dynamic_axes(io: dict[str, dict[str, tuple[str, ...]]]) -> dict[str, dict[int, str]]:
    names = {**io["inputs"], **io["outputs"]}
    return {
        name: {axis: label for axis, label in enumerate(labels) if label not in _FIXED_AXES}
        for name, labels in names.items()
    }


def export_graphs(
    model: Transformer, out_dir: Path, opset: int = DEFAULT_OPSET, cross_per_sentence: bool = True
) -> dict[str, str]:
    """Write encoder.onnx and decoder_step.onnx for `model` into `out_dir`; returns role -> file.

    `cross_per_sentence`: the decoder step reads one cross K/V and source mask per sentence
    for its rows, a sentence's beams being consecutive rows (docs/performance.md, lever 23);
    False gives the graph of earlier exports, one copy per row (kept to test that those
    still run)."""
    model = model.eval()
    config = model.config
    layers, heads, head_dim = config.decoder_layers, config.n_heads, config.head_dim
    # Example inputs with distinct sizes on the dynamic axes (B=2 sentences, N=6 rows, S=5,
    # P=3, T=2), so no size can be mistaken for another and baked into the graph as a
    # constant. Rows that are not the sentences are what traces the grouped cross-attention
    # (`seq2seq.training.model._grouped_by_source`).
    src_ids = torch.full((2, 5), config.eos_id, dtype=torch.long)
    src_mask = torch.ones(2, 5, dtype=torch.bool)
    src_mask[1, -1] = False
    with torch.no_grad():
        encoded = model.encode(src_ids, src_mask)
    rows = 6 if cross_per_sentence else 2
    past_k = [torch.zeros(rows, heads, head_dim, 3) for _ in range(layers)]
    past_v = [torch.zeros(rows, heads, 3, head_dim) for _ in range(layers)]
    cross_kt = [k.transpose(-1, -2) for k in encoded.cross_k]
    tokens = torch.full((rows, 2), config.bos_id, dtype=torch.long)
    files = GRAPH_FILES["fp32"]
    jobs = [
        (EncoderGraph(model), (src_ids, src_mask), files["encoder"], encoder_io()),
        (
            DecoderStepGraph(model),
            (tokens, src_mask, *cross_kt, *encoded.cross_v, *past_k, *past_v),
            files["decoder_step"],
            decoder_io(layers, cross_per_sentence=cross_per_sentence),
        ),
    ]
    for module, example, name, io in jobs:
        log.info("exporting %s", name)
        with warnings.catch_warnings(), torch.no_grad():
            # The tracer warns that √Dh in the attention scale becomes a constant, which is
            # right (the head size is fixed); torch warns that this exporter is the legacy one.
            # The dynamo exporter also handles these graphs, but the legacy one is quieter and
            # proven by the parity check; switch when torch drops it.
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.onnx.export(
                module,
                example,
                str(out_dir / name),
                dynamo=False,
                opset_version=opset,
                input_names=list(io["inputs"]),
                output_names=list(io["outputs"]),
                # No constant folding: it would store the tied output
                # projection as a second, transposed copy of the embedding
                # (8 MB at the release size). onnxruntime folds the Transpose
                # in memory when the session loads, so runtime is the same.
                dynamic_axes=_dynamic_axes(io),
                do_constant_folding=False,
            )
        _fold_shapes(out_dir / name, search_top_k=name == files["decoder_step"])
    return dict(files)


def build_graphs(
    model: Transformer, directory: Path, int8: Calibration | None, tokenizer_path: Path, opset: int = DEFAULT_OPSET
) -> tuple[dict[str, dict[str, str]], dict[str, Any] | None]:
    """Write the fp32 graphs of `model` into `directory` and, when `int8` names calibration
    sentences, the int8 graphs made from them and calibrated on those; then fuse the fp32
    graphs' bias Gemms (export/gemm.py; after the quantizer, which quantizes MatMuls).
    Returns precision -> role -> file, and what bundle.json records of the calibration."""
    graphs = {"fp32": export_graphs(model, directory, opset)}
    calibrated = None
    if int8 is not None:
        graphs["int8"] = quantize_graphs(directory, directory)
        int8_paths = {role: directory / name for role, name in graphs["int8"].items()}
        calibrated = calibrate_graphs(directory, int8_paths, int8, model.config, tokenizer_path)
    # Every linear layer's input shares its leading dims with these inputs (export/gemm.py).
    for role, leading_input in (("encoder", "src_ids"), ("decoder_step", "tokens")):
        fused = fuse_graph_file(directory / graphs["fp32"][role], leading_input)
        log.info("%s: %d MatMul + Add pairs made Gemms", graphs["fp32"][role], fused)
    return graphs, calibrated


def _fold_shapes(path: Path, search_top_k: bool = False) -> None:
    """Rewrite the graph at `path` with constant Reshape targets (export/shapes.py): the
    decoder step loses ~60 of its ~200 kernels, outputs unchanged. With `search_top_k`, also
    append the search's TopK (export/topk.py)."""
    import onnx

    graph = onnx.load(str(path))
    before = len(graph.graph.node)
    folded = fold_reshape_targets(graph)
    if search_top_k:
        add_search_top_k(graph)
    onnx.save(graph, str(path))
    log.info("%s: %d Reshape targets made constant, %d -> %d nodes", path.name, folded, before, len(graph.graph.node))


# --------------------------------------------------------------------------- load, validate


@dataclass
class LoadedCheckpoint:
    checkpoint_dir: Path
    tokenizer_path: Path
    config: ModelConfig | None = None
    model: Transformer | None = None
    tokenizer: Tokenizer | None = None
    data_manifest_path: Path | None = None
    data_manifest: dict[str, Any] | None = None  # its parsed content
    # The serving decoding the bundle records: DecodeConfig's, or that of the bundle being
    # re-exported (the settings its figures were measured with travel with its weights).
    decoding: DecodeConfig = field(default_factory=DecodeConfig)
    problems: list[str] = field(default_factory=list)


def load_checkpoint(
    checkpoint_dir: Path, tokenizer_path: Path | None = None, data_manifest: Path | None = None
) -> LoadedCheckpoint:
    """Load what can be loaded; failures become problems for `validate`, not exceptions."""
    checkpoint_dir = Path(checkpoint_dir)
    loaded = LoadedCheckpoint(checkpoint_dir, Path(tokenizer_path or checkpoint_dir / TOKENIZER_FILE))
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        if not (checkpoint_dir / name).is_file():
            loaded.problems.append(f"{checkpoint_dir / name}: missing")
    if (checkpoint_dir / CONFIG_FILE).is_file():
        try:
            loaded.config = load_config(ModelConfig, checkpoint_dir / CONFIG_FILE)
        except (ValueError, TypeError) as error:
            loaded.problems.append(f"{checkpoint_dir / CONFIG_FILE}: {error}")
    if loaded.config is not None and (checkpoint_dir / WEIGHTS_FILE).is_file():
        try:
            loaded.model = load_model(checkpoint_dir)
        except (RuntimeError, ValueError, OSError, KeyError) as error:
            loaded.problems.append(
                f"{checkpoint_dir / WEIGHTS_FILE}: does not load into the config's model: {str(error).splitlines()[0]}"
            )
    if not loaded.tokenizer_path.is_file():
        loaded.problems.append(f"{loaded.tokenizer_path}: tokenizer missing (pass --tokenizer)")
    else:
        try:
            loaded.tokenizer = Tokenizer(loaded.tokenizer_path)
        except (RuntimeError, OSError, AssertionError) as error:
            loaded.problems.append(f"{loaded.tokenizer_path}: {error}")
    if data_manifest is not None:
        loaded.data_manifest_path = Path(data_manifest)
        try:
            loaded.data_manifest = json.loads(Path(data_manifest).read_text())
        except (OSError, json.JSONDecodeError) as error:
            loaded.problems.append(f"{data_manifest}: unreadable data manifest: {error}")
    try:
        loaded.decoding = decode_defaults(checkpoint_dir)
    except BundleError as error:
        loaded.problems.append(str(error))
    return loaded


def validate(loaded: LoadedCheckpoint, out_dir: Path, opset: int = DEFAULT_OPSET, force: bool = False) -> list[str]:
    """Every reason the export cannot go ahead, on top of the loading problems."""
    problems = list(loaded.problems)
    config, model, tokenizer = loaded.config, loaded.model, loaded.tokenizer
    if opset < 17:
        problems.append(f"opset {opset}: need >= 17 (LayerNormalization)")
    if config is not None and tokenizer is not None:
        if tokenizer.vocab_size != config.vocab_size:
            problems.append(
                f"{loaded.tokenizer_path}: {tokenizer.vocab_size} pieces, but the model's "
                f"vocab_size is {config.vocab_size}"
            )
        sp = tokenizer.sp
        for name, expected in (
            ("pad", config.pad_id),
            ("unk", config.unk_id),
            ("bos", config.bos_id),
            ("eos", config.eos_id),
        ):
            actual = getattr(sp, f"{name}_id")()
            if actual != expected:
                problems.append(f"{loaded.tokenizer_path}: {name} id {actual}, the model's is {expected}")
    if model is not None:
        bad = [
            name
            for name, tensor in model.state_dict().items()
            if tensor.is_floating_point() and not torch.isfinite(tensor).all()
        ]
        if bad:
            problems.append(
                f"{loaded.checkpoint_dir / WEIGHTS_FILE}: non-finite values in {', '.join(bad[:5])}"
                + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
            )
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        if not (out_dir / BUNDLE_FILE).is_file():
            problems.append(f"{out_dir}: exists and is not an (empty) bundle directory; refusing to overwrite it")
        elif not force:
            problems.append(f"{out_dir}: a bundle is already there (pass --force to replace it)")
    if out_dir.resolve() == loaded.checkpoint_dir.resolve():
        problems.append(f"{out_dir}: the output directory cannot be the checkpoint directory")
    return problems


# --------------------------------------------------------------------------- the template


@dataclass
class ExportResult:
    out_dir: Path
    precision: str
    parity: dict[str, Any]


def portable_path(path: Path) -> str:
    """`path` relative to the working directory when it lies inside it (e.g. work/run/final),
    else its name: a bundle should not carry the exporting machine's directory layout."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return Path(path).name


def export_model(
    checkpoint_dir: Path,
    out_dir: Path,
    precisions: tuple[str, ...] = ("fp32",),
    tokenizer: Path | None = None,
    data_manifest: Path | None = None,
    opset: int = DEFAULT_OPSET,
    force: bool = False,
    parity_sentences: list[str] | None = None,
    calibration: Calibration | None = None,
) -> ExportResult:
    """Checkpoint directory (config.json, model.pt, spm.model) -> verified bundle in `out_dir`.

    load -> validate (raises ExportError listing every problem) -> write (to a staging
    directory) -> parity check (raises ParityError, leaving the staging directory for
    inspection) -> move into `out_dir`. `precisions` are the graphs the bundle carries, the
    first its default: the fp32 graphs are always exported and checked against torch (the
    int8 ones are made from them), and left out at the end if not asked for; int8 graphs
    are checked for agreement with torch and reported, not held to the fp32 tolerance.
    Their activation scales are calibrated on `calibration` (default: the parity sentences;
    export/calibrate.py).
    """
    out_dir = Path(out_dir)
    loaded = load_checkpoint(Path(checkpoint_dir), tokenizer, data_manifest)
    problems = validate(loaded, out_dir, opset, force) + precision_problems(precisions)
    if problems:
        raise ExportError(f"cannot export {checkpoint_dir}:\n  - " + "\n  - ".join(problems))

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".staging", dir=out_dir.parent))
    try:
        calibration = calibration or Calibration(tuple(parity_sentences or PARITY_SENTENCES), DEFAULT_SOURCE)
        write_bundle(loaded, staging, calibration if "int8" in precisions else None, opset)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)  # nothing worth inspecting in a half-written bundle
        raise
    parity = run_parity_checks(
        staging,
        loaded.model,
        parity_sentences or list(PARITY_SENTENCES),  # type: ignore[arg-type]
        "int8" in precisions,
    )
    keep_graphs(staging, precisions)

    if out_dir.exists():
        shutil.rmtree(out_dir)  # validate() allowed this only for an existing bundle with force
    staging.replace(out_dir)
    log.info("wrote %s (default precision %s)", out_dir, precisions[0])
    return ExportResult(out_dir, precisions[0], parity)


def write_bundle(
    loaded: LoadedCheckpoint, directory: Path, int8: Calibration | None, opset: int = DEFAULT_OPSET
) -> str:
    """Write weights, config, tokenizer, graphs and bundle.json into `directory`, with int8
    graphs calibrated on `int8` when given; returns the precision."""
    assert loaded.model is not None and loaded.config is not None, "validate() first"
    umask = os.umask(0)
    os.umask(umask)
    directory.chmod(0o777 & ~umask)  # mkdtemp makes it private; a bundle is meant to be read
    save_config(loaded.config, directory / CONFIG_FILE)
    # The bundle keeps the torch weights in float16 (half the size, no measurable quality
    # change at this model size). The model is rounded to those values *before* the graphs
    # are exported, so the torch backend on the bundle and the fp32 graphs compute with the
    # same weights and stay in exact parity.
    with torch.no_grad():
        for tensor in loaded.model.state_dict().values():
            if tensor.is_floating_point():
                tensor.copy_(tensor.half().float())
    torch.save(
        {
            name: tensor.half() if tensor.is_floating_point() else tensor
            for name, tensor in loaded.model.state_dict().items()
        },
        directory / WEIGHTS_FILE,
    )
    shutil.copyfile(loaded.tokenizer_path, directory / TOKENIZER_FILE)
    files = [CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE]
    if loaded.data_manifest_path is not None:
        shutil.copyfile(loaded.data_manifest_path, directory / DATA_MANIFEST_FILE)
        files.append(DATA_MANIFEST_FILE)
    # Thresholds chosen for these weights (a re-export of a released model) travel with them.
    quality_file = None
    if (loaded.checkpoint_dir / QUALITY_FILE).is_file():
        shutil.copyfile(loaded.checkpoint_dir / QUALITY_FILE, directory / QUALITY_FILE)
        quality_file = QUALITY_FILE
    # The dictionary of automatic hints (a model trained with hints: `crossalign data hints`) travels too.
    if (loaded.checkpoint_dir / DICTIONARY_FILE).is_file():
        shutil.copyfile(loaded.checkpoint_dir / DICTIONARY_FILE, directory / DICTIONARY_FILE)
        files.append(DICTIONARY_FILE)
    graphs, calibrated = build_graphs(loaded.model, directory, int8, directory / TOKENIZER_FILE, opset)
    precision = "int8" if int8 is not None else "fp32"
    extra = {
        "weights_dtype": "float16 (fp32 graphs exported from the same float16-rounded values)",
        "interface": {
            "encoder": encoder_io(),
            "decoder_step": decoder_graph_io(loaded.config.decoder_layers),
            "opset": opset,
        },
        "exporter": _versions(),
        "source_checkpoint": portable_path(loaded.checkpoint_dir),
        **({"int8_calibration": calibrated} if calibrated else {}),
    }
    if DICTIONARY_FILE in files and (record := dictionary_record(loaded.checkpoint_dir)) is not None:
        extra["dictionary"] = record
    write_bundle_manifest(
        directory,
        model_config=loaded.config,
        tokenizer_file=TOKENIZER_FILE,
        graphs=graphs,
        precision=precision,
        files=files,
        data_manifest=loaded.data_manifest,
        quality_file=quality_file,
        decoding=loaded.decoding,
        extra=extra,
    )
    return precision


def dictionary_record(checkpoint_dir: Path) -> dict | None:
    """How the term index an export copies was built, where the checkpoint says: a bundle's
    manifest `dictionary` (a bundle re-exported in place, its index rebuilt by `crossalign data
    hints --dictionary-only --bundle`), or the same record kept beside a soup of such a bundle
    (DICTIONARY_RECORD_FILE, written by export/soup.py)."""
    sidecar = checkpoint_dir / DICTIONARY_RECORD_FILE
    if sidecar.is_file():
        return json.loads(sidecar.read_text())
    manifest = checkpoint_dir / BUNDLE_FILE
    return json.loads(manifest.read_text()).get("dictionary") if manifest.is_file() else None


def _versions() -> dict[str, str]:
    import onnx
    import onnxruntime

    return {"torch": torch.__version__, "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}
