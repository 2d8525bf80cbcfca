"""Inference benchmark: torch eager vs onnxruntime fp32 vs onnxruntime int8.

    python bench/inference.py --bundle models/de-en --checkpoint work/run/final \\
        --test work/data/test.tsv --n 1000

Runs the same N test sentences through every system, with greedy and beam-4 search, in
batches of 1 and 32, and prints sentences/s, target tokens/s, p50/p99 single-sentence
latency (batch 1 only) and sacreBLEU of each. All systems share one `Translator` and one
search, so the differences are the backends' alone. Alignment maps are computed as in
the product (DecodeConfig.return_attention). If the bundle has no int8 graphs, its fp32
graphs are quantized into a temporary directory first.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from data.tokenizer import Tokenizer
from seq2seq.bundle import load_bundle_manifest
from seq2seq.onnx_backend import OnnxBackend, default_threads
from seq2seq.config import DecodeConfig
from seq2seq.translator import Translator

log = logging.getLogger("crossalign.bench")
SYSTEMS = ("torch", "onnx-fp32", "onnx-int8")


@dataclass
class Row:
    system: str
    beam: int
    batch: int
    sentences_per_s: float
    tokens_per_s: float          # target tokens (EOS excluded) per second
    p50_ms: float | None         # single-sentence latency, batch 1 only
    p99_ms: float | None
    bleu: float


def read_test(path: Path, n: int) -> tuple[list[str], list[str]]:
    """First `n` rows of a `source<TAB>target[<TAB>kind]` file."""
    sources, references = [], []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 2:
                continue
            sources.append(fields[0])
            references.append(fields[1])
            if len(sources) == n:
                break
    return sources, references


def build_backends(bundle_dir: Path, checkpoint: Path | None, systems: list[str], threads: int,
                   scratch: Path) -> dict[str, object]:
    bundle = load_bundle_manifest(bundle_dir)
    backends: dict[str, object] = {}
    if "torch" in systems:
        import torch

        from seq2seq.torch_backend import TorchBackend
        torch.set_num_threads(threads)    # the same thread budget as onnxruntime, for a fair race
        backends["torch"] = TorchBackend.from_directory(checkpoint or bundle.directory)
    if "onnx-fp32" in systems:
        backends["onnx-fp32"] = OnnxBackend.from_bundle(bundle, "fp32", threads)
    if "onnx-int8" in systems:
        if "int8" in bundle.precisions:
            backends["onnx-int8"] = OnnxBackend.from_bundle(bundle, "int8", threads)
        else:
            from export.exporter import quantize_graphs
            log.info("bundle has no int8 graphs: quantizing into %s", scratch)
            files = quantize_graphs(bundle.directory, scratch)
            backends["onnx-int8"] = OnnxBackend(scratch / files["encoder"], scratch / files["decoder_step"],
                                                bundle.model_config, threads)
    return backends


def run_one(translator: Translator, sources: list[str], references: list[str], beam: int, batch: int) -> Row:
    import sacrebleu

    config = DecodeConfig(beam_size=beam)
    translator.translate_batch(sources[:2], config)            # warm-up: allocations, thread pools
    outputs, latencies, tokens = [], [], 0
    start = time.perf_counter()
    for first in range(0, len(sources), batch):
        began = time.perf_counter()
        results = translator.translate_batch(sources[first:first + batch], config)
        latencies.append(time.perf_counter() - began)
        outputs += [r.text for r in results]
        tokens += sum(len(r.target_ids) for r in results)
    elapsed = time.perf_counter() - start
    single = batch == 1
    return Row(system="", beam=beam, batch=batch, sentences_per_s=len(sources) / elapsed,
               tokens_per_s=tokens / elapsed,
               p50_ms=float(np.percentile(latencies, 50) * 1000) if single else None,
               p99_ms=float(np.percentile(latencies, 99) * 1000) if single else None,
               bleu=sacrebleu.corpus_bleu(outputs, [references]).score)


def format_table(rows: list[Row]) -> str:
    header = f"{'system':<10} {'beam':>4} {'batch':>5} {'sent/s':>9} {'tok/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'BLEU':>6}"
    lines = [header, "-" * len(header)]
    for r in rows:
        p50 = f"{r.p50_ms:8.1f}" if r.p50_ms is not None else f"{'-':>8}"
        p99 = f"{r.p99_ms:8.1f}" if r.p99_ms is not None else f"{'-':>8}"
        lines.append(f"{r.system:<10} {r.beam:>4} {r.batch:>5} {r.sentences_per_s:9.2f} {r.tokens_per_s:9.1f} "
                     f"{p50} {p99} {r.bleu:6.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--bundle", type=Path, default=Path("models/de-en"), help="bundle directory (default models/de-en)")
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help="model directory for torch eager (default: the bundle's own config.json + model.pt)")
    parser.add_argument("--test", type=Path, required=True, help="test TSV: source<TAB>reference[<TAB>kind]")
    parser.add_argument("--n", type=int, default=1000, help="sentences to translate (default 1000)")
    parser.add_argument("--threads", type=int, default=default_threads(),
                        help=f"intra-op threads for every system (default {default_threads()})")
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument("--beams", nargs="+", type=int, default=[1, 4], help="beam sizes (default 1 4; 1 = greedy)")
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 32], help="sentences per call (default 1 32)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    sources, references = read_test(args.test, args.n)
    if not sources:
        parser.error(f"{args.test}: no source<TAB>reference rows")
    tokenizer = Tokenizer(load_bundle_manifest(args.bundle).tokenizer_path)
    rows = []
    with tempfile.TemporaryDirectory(prefix="crossalign-int8-") as scratch:
        backends = build_backends(args.bundle, args.checkpoint, args.systems, args.threads, Path(scratch))
        for system, backend in backends.items():
            # No token budget: the batch size under test is the only thing that splits work.
            translator = Translator(backend, tokenizer, max_batch_tokens=sys.maxsize)  # type: ignore[arg-type]
            for beam in args.beams:
                for batch in args.batch_sizes:
                    log.info("%s beam %d batch %d: %d sentences", system, beam, batch, len(sources))
                    row = run_one(translator, sources, references, beam, batch)
                    row.system = system
                    rows.append(row)
    print(f"{len(sources)} sentences from {args.test}, {args.threads} threads")
    print(format_table(rows))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
