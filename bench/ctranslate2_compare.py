"""Our onnxruntime (and torch) backends side by side with CTranslate2 on the same weights.

    pip install -e ".[bench]"          # ctranslate2: a benchmark dependency, never a serving one
    python bench/ctranslate2_compare.py --test work/data/test.tsv --n 256

1. Converts the bundle's `model.pt` into a CTranslate2 model (fp32; int8 is CTranslate2's
   own quantization of it at load time). Our graphs are the bundle's; a precision it lacks
   is made in a scratch directory: fp32 exported from its model.pt (a release ships int8
   only), int8 by the export's int8 step applied to its fp32 graphs. Our model maps onto
   CTranslate2's pre-norm Transformer one to one (fused QKV and KV projections, tied
   embeddings as the output projection); only the position table differs: ours interleaves
   sin and cos per frequency, CTranslate2's built-in one concatenates them, so ours is
   written into the model.
2. Checks token identity against our onnxruntime fp32 output, greedy and beam 4, on the
   first --check sentences. Beam 4 is checked without length penalty: CTranslate2 divides
   by length ** alpha, we by the GNMT ((5 + length) / 6) ** alpha, so with a penalty the
   n-best ranking may legitimately differ.
3. Times every system on the same sentences, greedy and beam 4 at batch 32 (sentences/s)
   and beam 4 at batch 1 (p50/p99 ms), with DecodeConfig's settings (length penalty 1.0,
   repetition guard 4, no coverage penalty: CTranslate2 computes its own differently;
   our alignment maps computed as in the service; CTranslate2 returns its attention
   vector too). The systems take turns on slices of the sentences, so a load change on a
   shared machine hits them alike; ratios are to CTranslate2 fp32 (>1 = faster).
4. With two threads or more, CTranslate2 also runs as two workers of half the threads each,
   a batch split between them: its own counterpart of our two search streams
   (`onnx_backend.default_streams`), so each side is timed at its best use of the cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from data.files import WEIGHTS_FILE

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.inference import timing_parser, training_paused  # noqa: E402
from data.tokenizer import Tokenizer  # noqa: E402
from seq2seq.core.config import DecodeConfig, ModelConfig  # noqa: E402
from seq2seq.decoding.search import max_target_length  # noqa: E402
from seq2seq.decoding.translator import Translator  # noqa: E402
from seq2seq.runtime.bundle import Bundle, load_bundle_manifest  # noqa: E402
from seq2seq.runtime.onnx_backend import OnnxBackend, default_threads  # noqa: E402

RUNS = (("greedy b32", 1, 32), ("beam4 b32", 4, 32), ("beam4 b1", 4, 1))


def convert(bundle_dir: Path, out_dir: Path) -> Path:
    """Write a CTranslate2 model of the bundle's weights into `out_dir`; returns it."""
    import ctranslate2

    # model.pt is the bundle's torch checkpoint, and the position table is the model's own.
    from seq2seq.training.model import load_weights, sinusoidal_table

    bundle = load_bundle_manifest(bundle_dir)
    config: ModelConfig = bundle.model_config
    if config.learned_positions:
        raise SystemExit("learned position tables are not mapped (the shipped model is sinusoidal)")
    weights = {k: v.float().numpy() for k, v in load_weights(bundle_dir / WEIGHTS_FILE).items()}
    spec = ctranslate2.specs.TransformerSpec.from_config(
        (config.encoder_layers, config.decoder_layers),
        config.n_heads,
        pre_norm=True,
        activation=ctranslate2.specs.Activation.RELU,
    )
    spec.config.layer_norm_epsilon = 1e-5  # torch's LayerNorm default

    def linear(target, *names: str) -> None:  # one or several nn.Linear, fused on the output axis
        target.weight = np.concatenate([weights[f"{n}.weight"] for n in names])
        target.bias = np.concatenate([weights[f"{n}.bias"] for n in names])

    def norm(target, name: str) -> None:
        target.gamma, target.beta = weights[f"{name}.weight"], weights[f"{name}.bias"]

    def self_attention_and_feed_forward(layer, prefix: str) -> None:
        norm(layer.self_attention.layer_norm, f"{prefix}.self_attention_norm")
        linear(layer.self_attention.linear[0], *(f"{prefix}.self_attention.w_{p}" for p in "qkv"))
        linear(layer.self_attention.linear[1], f"{prefix}.self_attention.w_o")
        norm(layer.ffn.layer_norm, f"{prefix}.feed_forward_norm")
        linear(layer.ffn.linear_0, f"{prefix}.feed_forward.up")
        linear(layer.ffn.linear_1, f"{prefix}.feed_forward.down")

    table = sinusoidal_table(config.max_positions, config.d_model).numpy()
    embedding = weights["embedding.weight"]
    spec.encoder.embeddings[0].weight = embedding
    spec.encoder.position_encodings.encodings = table
    norm(spec.encoder.layer_norm, "encoder_norm")
    for i, layer in enumerate(spec.encoder.layer):
        self_attention_and_feed_forward(layer, f"encoder_layers.{i}")
    spec.decoder.embeddings.weight = embedding
    spec.decoder.position_encodings.encodings = table
    spec.decoder.projection.weight = embedding  # tied output projection, no bias
    norm(spec.decoder.layer_norm, "decoder_norm")
    for i, layer in enumerate(spec.decoder.layer):
        prefix = f"decoder_layers.{i}"
        self_attention_and_feed_forward(layer, prefix)
        norm(layer.attention.layer_norm, f"{prefix}.cross_attention_norm")
        linear(layer.attention.linear[0], f"{prefix}.cross_attention.w_q")
        linear(layer.attention.linear[1], f"{prefix}.cross_attention.w_k", f"{prefix}.cross_attention.w_v")
        linear(layer.attention.linear[2], f"{prefix}.cross_attention.w_o")
    sp = Tokenizer(bundle.tokenizer_path).sp
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = (
        pieces[config.unk_id],
        pieces[config.bos_id],
        pieces[config.eos_id],
    )
    spec.validate()
    spec.optimize(quantization=None)
    out_dir.mkdir(parents=True, exist_ok=True)
    spec.save(str(out_dir))
    return out_dir


class CTranslate2System:
    """Text in, token ids out, through CTranslate2 with our tokenizer and our length limit.

    `workers` > 1: CTranslate2's own way of spreading a batch over cores, the one our search
    streams match: that many translators (`inter_threads`) of threads // workers threads
    each, a batch split among them (`max_batch_size`)."""

    def __init__(
        self,
        model_dir: Path,
        tokenizer: Tokenizer,
        config: ModelConfig,
        compute_type: str,
        threads: int,
        workers: int = 1,
    ):
        import ctranslate2

        self.workers = workers
        self.translator = ctranslate2.Translator(
            str(model_dir),
            device="cpu",
            compute_type=compute_type,
            inter_threads=workers,
            intra_threads=max(1, threads // workers),
        )
        self.tokenizer, self.config = tokenizer, config
        self.banned = [[tokenizer.sp.id_to_piece(config.pad_id)], [tokenizer.sp.id_to_piece(config.bos_id)]]
        self.eos = tokenizer.sp.id_to_piece(config.eos_id)

    def translate(self, texts: list[str], decode: DecodeConfig, num_hypotheses: int = 1) -> list[list[int]]:
        """The best translation of each text; `num_hypotheses` > 1 makes CTranslate2 finish that
        many before it stops a sentence (docs/performance.md, "Stopping rule")."""
        sources = [self.tokenizer.sp.encode(t, out_type=str) + [self.eos] for t in texts]
        limit = max(max_target_length(len(s), decode) for s in sources) + 1  # + EOS
        results = self.translator.translate_batch(
            sources,
            beam_size=decode.beam_size,
            num_hypotheses=num_hypotheses,
            length_penalty=decode.length_penalty,
            max_batch_size=0 if self.workers == 1 else -(-len(sources) // self.workers),
            max_decoding_length=limit,
            suppress_sequences=self.banned,
            no_repeat_ngram_size=decode.no_repeat_ngram_size,
            return_attention=decode.return_attention,
        )
        outputs = []
        for result in results:
            ids = [self.tokenizer.sp.piece_to_id(p) for p in result.hypotheses[0]]
            self.tokenizer.sp.decode(ids)  # detokenize, as our translator does
            outputs.append(ids)
        return outputs


class OurSystem:
    def __init__(self, translator: Translator):
        self.translator = translator

    def translate(self, texts: list[str], decode: DecodeConfig) -> list[list[int]]:
        return [r.target_ids for r in self.translator.translate_batch(texts, decode)]


def check_identity(systems: dict, reference: str, sources: list[str]) -> list[str]:
    lines = []
    # No coverage penalty: CTranslate2's is computed differently, so both run the plain search
    # (and no repetition guard, as these counts were taken before it).
    plain = DecodeConfig(coverage_penalty=0.0, no_repeat_ngram_size=0)
    for label, decode in (
        ("greedy", dataclasses.replace(plain, beam_size=1)),
        ("beam 4, no length penalty", dataclasses.replace(plain, beam_size=4, length_penalty=0.0)),
    ):
        expected = [
            ids
            for first in range(0, len(sources), 32)
            for ids in systems[reference].translate(sources[first : first + 32], decode)
        ]
        for name, system in systems.items():
            if name == reference:
                continue
            actual = [
                ids
                for first in range(0, len(sources), 32)
                for ids in system.translate(sources[first : first + 32], decode)
            ]
            same = sum(a == b for a, b in zip(actual, expected))
            lines.append(f"{label:<26} {name:<18} {same:>4}/{len(sources)} token-identical to {reference}")
    return lines


def measure(systems: dict, sources: list[str], slices: int, b1_sentences: int) -> dict:
    times = {name: {label: [] for label, _, _ in RUNS} for name in systems}
    size = -(-len(sources) // slices)
    work = [(start, run) for start in range(0, len(sources), size) for run in RUNS]
    names = list(systems)
    for turn, (start, (label, beam, batch)) in enumerate(tqdm(work, desc="slices", unit="slice")):
        chunk = sources[start : start + size][: b1_sentences if batch == 1 else None]
        decode = DecodeConfig(beam_size=beam, coverage_penalty=0.0)
        for name in names[turn % len(names) :] + names[: turn % len(names)]:
            for first in range(0, len(chunk), batch):
                began = time.perf_counter()
                systems[name].translate(chunk[first : first + batch], decode)
                times[name][label].append((time.perf_counter() - began, len(chunk[first : first + batch])))
    return times


def format_table(times: dict, reference: str) -> str:
    def rate(name: str, label: str) -> float:
        return sum(n for _, n in times[name][label]) / sum(t for t, _ in times[name][label])

    def p(name: str, q: int) -> float:
        return float(np.percentile([t for t, _ in times[name]["beam4 b1"]], q)) * 1000

    header = f"{'system':<18} {'greedy b32 sent/s':>20} {'beam4 b32 sent/s':>20} {'beam4 b1 p50 / p99 ms':>26}"
    lines = [header, "-" * len(header)]
    for name in times:
        greedy, beam = rate(name, "greedy b32"), rate(name, "beam4 b32")
        lines.append(
            f"{name:<18} {greedy:9.1f} ({greedy / rate(reference, 'greedy b32'):4.2f}x) "
            f"{beam:9.1f} ({beam / rate(reference, 'beam4 b32'):4.2f}x) "
            f"{p(name, 50):7.1f} / {p(name, 99):5.0f} ({p(reference, 50) / p(name, 50):4.2f}x)"
        )
    lines.append(f"ratios: to {reference} (>1 = faster; for latency, its p50 over ours)")
    return "\n".join(lines)


def build_systems(args: argparse.Namespace, bundle: Bundle, tokenizer: Tokenizer, scratch: Path) -> dict:
    """CTranslate2 (one worker, and two of half the threads) and ours, by name."""
    model_dir = convert(args.bundle, scratch / "ct2")
    systems: dict = {}
    for compute_type, name in (("float32", "fp32"), ("int8", "int8")):
        systems[f"ctranslate2 {name}"] = CTranslate2System(
            model_dir, tokenizer, bundle.model_config, compute_type, args.threads
        )
        if args.threads >= 2 and not args.no_ct2_workers:
            systems[f"ctranslate2 {name} 2x{args.threads // 2}"] = CTranslate2System(
                model_dir, tokenizer, bundle.model_config, compute_type, args.threads, workers=2
            )
    bundles = dict.fromkeys(bundle.precisions, bundle)
    if "fp32" not in bundles:  # a release that ships int8 only: fp32 graphs from its own weights
        from export.regraph import regraph_bundle

        print(f"exporting fp32 graphs of {args.bundle} into {scratch}", file=sys.stderr)
        shutil.copytree(bundle.directory, scratch / "fp32")
        regraph_bundle(scratch / "fp32", ("fp32",))
        bundles["fp32"] = load_bundle_manifest(scratch / "fp32")
    backends = {
        precision: OnnxBackend.from_bundle(graphs, precision, args.threads, args.streams or None)
        for precision, graphs in bundles.items()
    }
    if "int8" not in backends:
        from export.quantize import quantize_graphs  # the export's own int8 step

        files = quantize_graphs(bundle.directory, scratch / "int8")
        backends["int8"] = OnnxBackend(
            scratch / "int8" / files["encoder"],
            scratch / "int8" / files["decoder_step"],
            bundle.model_config,
            args.threads,
            "int8",
            args.streams or None,
        )
    for precision, backend in backends.items():
        translator = Translator(
            backend,
            tokenizer,
            max_batch_tokens=sys.maxsize,
            streams=backend.streams,
            stream_backend=backend.stream_backend,
        )
        systems[f"crossalign ort {precision}"] = OurSystem(translator)
    if not args.no_torch:
        import torch

        from seq2seq.training.torch_backend import TorchBackend

        torch.set_num_threads(args.threads)
        systems["crossalign torch"] = OurSystem(
            Translator(TorchBackend.from_directory(bundle.directory), tokenizer, max_batch_tokens=sys.maxsize)
        )
    return systems


def main(argv: list[str] | None = None) -> int:
    parser = timing_parser(__doc__, 256, "sentences to time")
    parser.add_argument("--check", type=int, default=200, help="sentences checked for token identity (default 200)")
    parser.add_argument("--threads", type=int, default=default_threads(), help="threads for every system")
    parser.add_argument(
        "--slices",
        type=int,
        default=4,
        help="turns the timed sentences are split into (default 4). Keep each turn several batches "
        "long: with one batch per turn CTranslate2's OpenMP threads are woken for every call, "
        "which flatters us (docs/performance.md, after lever 24)",
    )
    parser.add_argument("--b1-sentences", type=int, default=16, help="sentences per slice timed at batch 1")
    parser.add_argument("--no-torch", action="store_true", help="leave our torch backend out")
    parser.add_argument(
        "--streams", type=int, default=0, help="our search streams (default 0: the backend's, two from two threads)"
    )
    parser.add_argument(
        "--no-ct2-workers",
        action="store_true",
        help="leave out CTranslate2 with two workers of threads/2 each (its batch split among them)",
    )
    args = parser.parse_args(argv)
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        parser.error("ctranslate2 is not installed: pip install -e '.[bench]'")

    lines = [line.rstrip("\n").split("\t") for line in args.test.read_text(encoding="utf-8").splitlines()]
    sources = [fields[0] for fields in lines if len(fields) >= 2 and fields[0]]
    if not sources:
        parser.error(f"{args.test}: no source<TAB>reference rows")
    bundle = load_bundle_manifest(args.bundle)
    tokenizer = Tokenizer(bundle.tokenizer_path)
    with tempfile.TemporaryDirectory(prefix="crossalign-ct2-") as scratch:
        print(f"converting {args.bundle} to CTranslate2 in {scratch}", file=sys.stderr)
        systems = build_systems(args, bundle, tokenizer, Path(scratch))
        for system in systems.values():
            system.translate(sources[:2], DecodeConfig())  # warm-up
        identity = check_identity(systems, "crossalign ort fp32", sources[: args.check])
        with training_paused(args.pause_training) as paused:
            times = measure(systems, sources[: args.n], args.slices, args.b1_sentences)
    print(
        f"{min(args.n, len(sources))} sentences from {args.test}, {args.threads} threads each, "
        f"training paused: {paused}"
    )
    print("\n".join(identity))
    print(format_table(times, "ctranslate2 fp32"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
