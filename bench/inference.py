"""Inference benchmark: torch eager vs onnxruntime fp32 vs onnxruntime int8.

    python bench/inference.py --bundle models/de-en --checkpoint work/run/final \\
        --test work/data/test.tsv --n 1000

Runs the same N test sentences through every system, with greedy and beam-4 search, in
batches of 1 and 32, and prints sentences/s, target tokens/s, p50/p99 single-sentence
latency (batch 1 only) and sacreBLEU of each. All systems share one `Translator` and one
search, so the differences are the backends' alone. Alignment maps are computed as in
the product (DecodeConfig.return_attention). If the bundle has no int8 graphs, its fp32
graphs are quantized into a temporary directory first.

    python bench/inference.py --test work/data/test.tsv --revisions 4616e16 HEAD~2 HEAD \
        --n 128 --pause-training

`--revisions` compares commits of this repository instead (the lever tables of docs/performance.md):
each revision is extracted with `git archive` into a temporary directory and runs in its
own worker process on its own code and its own `models/de-en`, and the workers take turns
on slices of the sentences (one at a time, round-robin), so a load change on a shared
machine hits every revision alike. Printed: greedy and beam-4 sentences/s at batch 32 and
beam-4 p50/p99 latency at batch 1, with each revision's ratio to the first and to the one
before it. `--pause-training` stops the processes listed in
~/.cache/crossalign/runs/TRAINING_PIDS (SIGSTOP) for the run and always resumes them.
`--revision-bundle` runs the revisions on a given bundle instead, or with one bundle per
revision each on its own (an exporter change: each bundle exported by its revision).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data.tokenizer import Tokenizer  # noqa: E402
from seq2seq.core.config import DecodeConfig  # noqa: E402
from seq2seq.decoding.translator import Translator  # noqa: E402
from seq2seq.runtime.bundle import PRECISIONS, load_bundle_manifest  # noqa: E402
from seq2seq.runtime.onnx_backend import OnnxBackend, default_threads  # noqa: E402

log = logging.getLogger("crossalign.bench")
SYSTEMS = ("torch", "onnx-fp32", "onnx-int8")


@dataclass
class Row:
    system: str
    beam: int
    batch: int
    sentences_per_s: float
    tokens_per_s: float  # target tokens (EOS excluded) per second
    p50_ms: float | None  # single-sentence latency, batch 1 only
    p99_ms: float | None
    bleu: float


def timing_parser(doc: str, sentences: int, sentences_help: str) -> argparse.ArgumentParser:
    """The parser the timing scripts over one bundle start from: `doc` (the script's docstring)
    as their help, and their --bundle, --test, --n (default `sentences`) and --pause-training."""
    parser = argparse.ArgumentParser(
        description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=doc
    )
    parser.add_argument("--bundle", type=Path, default=REPO / "models/de-en", help="bundle (default models/de-en)")
    parser.add_argument("--test", type=Path, required=True, help="test TSV: source<TAB>reference")
    parser.add_argument("--n", type=int, default=sentences, help=f"{sentences_help} (default {sentences})")
    parser.add_argument(
        "--pause-training",
        action="store_true",
        help="SIGSTOP the training runs (as bench/inference.py does) while timing; always resumed",
    )
    return parser


def timed_sources(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The first --n sources of --test; a usage error if it has none."""
    sources, _ = read_test(args.test, args.n)
    if not sources:
        parser.error(f"{args.test}: no source<TAB>reference rows")
    return sources


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


def build_backends(
    bundle_dir: Path, checkpoint: Path | None, systems: list[str], threads: int, scratch: Path
) -> dict[str, object]:
    bundle = load_bundle_manifest(bundle_dir)
    backends: dict[str, object] = {}
    if "torch" in systems:
        import torch

        from seq2seq.training.torch_backend import TorchBackend

        torch.set_num_threads(threads)  # the same thread budget as onnxruntime, for a fair race
        backends["torch"] = TorchBackend.from_directory(checkpoint or bundle.directory)
    if "onnx-fp32" in systems:
        backends["onnx-fp32"] = OnnxBackend.from_bundle(bundle, "fp32", threads)
    if "onnx-int8" in systems:
        if "int8" in bundle.precisions:
            backends["onnx-int8"] = OnnxBackend.from_bundle(bundle, "int8", threads)
        else:
            from export.quantize import quantize_graphs

            log.info("bundle has no int8 graphs: quantizing into %s", scratch)
            files = quantize_graphs(bundle.directory, scratch)
            backends["onnx-int8"] = OnnxBackend(
                scratch / files["encoder"], scratch / files["decoder_step"], bundle.model_config, threads
            )
    return backends


def run_one(translator: Translator, sources: list[str], references: list[str], beam: int, batch: int) -> Row:
    import sacrebleu

    config = DecodeConfig(beam_size=beam)
    translator.translate_batch(sources[:2], config)  # warm-up: allocations, thread pools
    outputs, latencies, tokens = [], [], 0
    start = time.perf_counter()
    for first in range(0, len(sources), batch):
        began = time.perf_counter()
        results = translator.translate_batch(sources[first : first + batch], config)
        latencies.append(time.perf_counter() - began)
        outputs += [r.text for r in results]
        tokens += sum(len(r.target_ids) for r in results)
    elapsed = time.perf_counter() - start
    single = batch == 1
    return Row(
        system="",
        beam=beam,
        batch=batch,
        sentences_per_s=len(sources) / elapsed,
        tokens_per_s=tokens / elapsed,
        p50_ms=float(np.percentile(latencies, 50) * 1000) if single else None,
        p99_ms=float(np.percentile(latencies, 99) * 1000) if single else None,
        bleu=sacrebleu.corpus_bleu(outputs, [references]).score,
    )


def format_table(rows: list[Row]) -> str:
    header = (
        f"{'system':<10} {'beam':>4} {'batch':>5} {'sent/s':>9} {'tok/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'BLEU':>6}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        p50 = f"{r.p50_ms:8.1f}" if r.p50_ms is not None else f"{'-':>8}"
        p99 = f"{r.p99_ms:8.1f}" if r.p99_ms is not None else f"{'-':>8}"
        lines.append(
            f"{r.system:<10} {r.beam:>4} {r.batch:>5} {r.sentences_per_s:9.2f} {r.tokens_per_s:9.1f} "
            f"{p50} {p99} {r.bleu:6.2f}"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- revisions

REPO = Path(__file__).resolve().parents[1]
TRAINING_PIDS = Path("~/.cache/crossalign/runs/TRAINING_PIDS").expanduser()
PAUSE_LIMIT_S = 330.0  # training runs are resumed after this even if the bench is still going
# (label, beam, batch): the columns of the lever table.
REVISION_RUNS = (("greedy b32", 1, 32), ("beam4 b32", 4, 32), ("beam4 b1", 4, 1))


class Revision:
    """A commit extracted into `directory`, with a worker process running its code."""

    def __init__(
        self,
        name: str,
        scratch: Path,
        threads: int,
        bundle: Path | None = None,
        precision: str | None = None,
        batch_tokens: int = 0,
    ):
        self.name = name
        commit = subprocess.run(
            ["git", "rev-parse", "--short", name], cwd=REPO, check=True, capture_output=True, text=True
        ).stdout.strip()
        self.directory = scratch / commit
        if not self.directory.exists():
            self.directory.mkdir()
            archive = subprocess.Popen(["git", "archive", commit], cwd=REPO, stdout=subprocess.PIPE)
            subprocess.run(["tar", "-x", "-C", str(self.directory)], stdin=archive.stdout, check=True)
            archive.wait()
        # The worker is this checkout's, the code it times is the revision's (its cwd).
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).resolve().parent / "revision_worker.py"),
                "--threads",
                str(threads),
                *(["--bundle", str(bundle.resolve())] if bundle else []),
                *(["--precision", precision] if precision else []),
                *(["--batch-tokens", str(batch_tokens)] if batch_tokens else []),
            ],
            cwd=self.directory,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._read()

    def _read(self) -> dict:
        line = self.process.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise RuntimeError(f"revision {self.name}: worker exited (see its error above)")
        return json.loads(line)

    def run(self, sources: list[str], beam: int, batch: int) -> dict:
        self.process.stdin.write(json.dumps({"beam": beam, "batch": batch, "sources": sources}) + "\n")  # type: ignore[union-attr]
        self.process.stdin.flush()  # type: ignore[union-attr]
        return self._read()

    def close(self) -> None:
        self.process.stdin.close()  # type: ignore[union-attr]
        self.process.wait()


def pause_training() -> list[int]:
    """SIGSTOP the training runs listed in TRAINING_PIDS and their child processes (a listed
    pid may be the shell that runs the trainer); returns the pids stopped."""
    pids = [int(p) for p in TRAINING_PIDS.read_text().split()] if TRAINING_PIDS.is_file() else []
    pids += [child for pid in pids for child in _descendants(pid)]
    stopped = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        except ProcessLookupError:
            pass
    return stopped


def _descendants(pid: int) -> list[int]:
    children = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            children += [int(c) for c in (task / "children").read_text().split()]
    return children + [grandchild for child in children for grandchild in _descendants(child)]


def resume(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


@contextlib.contextmanager
def training_paused(enabled: bool = True) -> Iterator[bool]:
    """`pause_training` for the block (if `enabled`), always resumed, and resumed anyway after
    PAUSE_LIMIT_S; yields whether anything was paused."""
    stopped = pause_training() if enabled else []
    # Never leave the training runs stopped for long, whatever happens here.
    guard = threading.Timer(PAUSE_LIMIT_S, resume, (stopped,))
    guard.daemon = True
    guard.start()
    try:
        yield bool(stopped)
    finally:
        guard.cancel()
        resume(stopped)


def compare_revisions(
    names: list[str],
    sources: list[str],
    threads: int,
    slices: int,
    b1_sentences: int,
    bundles: list[Path] | None = None,
    precision: str | None = None,
    batch_tokens: int = 0,
) -> str:
    """Interleaved runs of every revision on the same sentences; returns the table. `bundles`:
    one for every revision, or one per revision (an export change needs its own graphs);
    `batch_tokens`: the translators' token budget (0: none, the batch size is the only split)."""
    bundles = bundles or []
    if len(bundles) not in (0, 1, len(names)):
        raise ValueError(f"{len(bundles)} bundles for {len(names)} revisions: give one, or one per revision")
    from tqdm import tqdm

    totals = {
        name: {label: {"sentences": 0, "seconds": 0.0, "latencies": []} for label, _, _ in REVISION_RUNS}
        for name in names
    }
    outputs: dict[str, dict[str, list]] = {name: {label: [] for label, _, _ in REVISION_RUNS} for name in names}
    with tempfile.TemporaryDirectory(prefix="crossalign-revisions-") as scratch:
        revisions = [
            Revision(
                name,
                Path(scratch),
                threads,
                bundles[index if len(bundles) > 1 else 0] if bundles else None,
                precision,
                batch_tokens,
            )
            for index, name in enumerate(names)
        ]
        try:
            size = -(-len(sources) // slices)
            work = [
                (start, label, beam, batch)
                for start in range(0, len(sources), size)
                for label, beam, batch in REVISION_RUNS
            ]
            for turn, (start, label, beam, batch) in enumerate(tqdm(work, desc="slices", unit="slice")):
                chunk = sources[start : start + size]
                if batch == 1:
                    chunk = chunk[:b1_sentences]
                # Rotate who goes first, so no revision always follows the same neighbour.
                for revision in revisions[turn % len(revisions) :] + revisions[: turn % len(revisions)]:
                    answer = revision.run(chunk, beam, batch)
                    total = totals[revision.name][label]
                    total["sentences"] += len(chunk)
                    total["seconds"] += answer["seconds"]
                    total["latencies"] += answer["latencies"]
                    outputs[revision.name][label] += answer["outputs"]
        finally:
            for revision in revisions:
                revision.close()
    return format_revisions(names, totals, outputs)


def format_revisions(names: list[str], totals: dict, outputs: dict) -> str:
    header = (
        f"{'revision':<12} {'greedy b32 sent/s':>22} {'beam4 b32 sent/s':>22} {'beam4 b1 p50 ms':>22} "
        f"{'b1 p99 ms':>9} {'same tokens':>11}"
    )
    lines = [header, "-" * len(header)]
    previous = None
    for name in names:
        cells = []
        for label, _, batch in REVISION_RUNS:
            total = totals[name][label]
            value = (
                float(np.percentile(total["latencies"], 50)) * 1000
                if batch == 1
                else total["sentences"] / total["seconds"]
            )
            first = totals[names[0]][label]
            base = (
                float(np.percentile(first["latencies"], 50)) * 1000
                if batch == 1
                else first["sentences"] / first["seconds"]
            )
            before = previous[label] if previous else value
            # Ratios read "x times better": rates divide, latencies divide the other way.
            vs_first, vs_before = (base / value, before / value) if batch == 1 else (value / base, value / before)
            cells.append(f"{value:8.1f} {vs_first:5.2f}x {vs_before:5.2f}x")
        previous = {
            label: (
                float(np.percentile(totals[name][label]["latencies"], 50)) * 1000
                if batch == 1
                else totals[name][label]["sentences"] / totals[name][label]["seconds"]
            )
            for label, _, batch in REVISION_RUNS
        }
        p99 = float(np.percentile(totals[name]["beam4 b1"]["latencies"], 99)) * 1000
        same = sum(
            a == b for label, _, _ in REVISION_RUNS for a, b in zip(outputs[name][label], outputs[names[0]][label])
        )
        count = sum(len(outputs[name][label]) for label, _, _ in REVISION_RUNS)
        lines.append(f"{name:<12} " + " ".join(f"{c:>22}" for c in cells) + f" {p99:9.1f} {same:>5}/{count:<5}")
    lines.append(
        "cells: value, ratio to the first revision, ratio to the previous row (>1 = faster); "
        "same tokens: outputs identical to the first revision's"
    )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    parser.add_argument(
        "--bundle", type=Path, default=Path("models/de-en"), help="bundle directory (default models/de-en)"
    )
    parser.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        help="model directory for torch eager (default: the bundle's own config.json + model.pt)",
    )
    parser.add_argument("--test", type=Path, help="test TSV: source<TAB>reference[<TAB>kind]")
    parser.add_argument("--n", type=int, default=1000, help="sentences to translate (default 1000)")
    parser.add_argument(
        "--threads",
        type=int,
        default=default_threads(),
        help=f"intra-op threads for every system (default {default_threads()})",
    )
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument("--beams", nargs="+", type=int, default=[1, 4], help="beam sizes (default 1 4; 1 = greedy)")
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 32], help="sentences per call (default 1 32)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    add_revision_arguments(parser)
    return parser


def add_revision_arguments(parser: argparse.ArgumentParser) -> None:
    """--revisions and the flags that only matter with it (and --pause-training)."""
    parser.add_argument(
        "--revisions",
        nargs="+",
        default=None,
        metavar="REV",
        help="compare these git revisions (each on its own code and models/de-en), interleaved; "
        "they always time greedy b32, beam-4 b32 and beam-4 b1 (--beams and --batch-sizes do not apply)",
    )
    parser.add_argument("--slices", type=int, default=4, help="with --revisions: turns the sentences are split into")
    parser.add_argument(
        "--b1-sentences",
        type=int,
        default=8,
        help="with --revisions: sentences per slice for the batch-1 latency (default 8)",
    )
    parser.add_argument(
        "--revision-bundle",
        type=Path,
        nargs="+",
        default=None,
        help="with --revisions: run every revision on this bundle instead of its own models/de-en, "
        "or each on its own (one bundle per revision, in order)",
    )
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default=None,
        help="with --revisions: the graphs to run (default: the bundle's)",
    )
    parser.add_argument(
        "--revision-batch-tokens",
        type=int,
        default=0,
        help="with --revisions: the translators' token budget, (longest source) x (sentences) x "
        "(beams) per search run, as `Translator.max_batch_tokens` (default 0: none, the batch "
        "size under test is the only split; 4096 is the library's default)",
    )
    parser.add_argument(
        "--pause-training",
        action="store_true",
        help=f"SIGSTOP the pids in {TRAINING_PIDS} while measuring (always resumed)",
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.test is None:
        parser.error("--test is required")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.revisions:
        return main_revisions(args)
    return main_systems(parser, args)


def main_revisions(args: argparse.Namespace) -> int:
    """--revisions: the revisions compared, interleaved, and their table printed."""
    sources, _ = read_test(args.test, args.n)
    with training_paused(args.pause_training) as paused:
        table = compare_revisions(
            args.revisions,
            sources,
            args.threads,
            args.slices,
            args.b1_sentences,
            args.revision_bundle,
            args.precision,
            args.revision_batch_tokens,
        )
    print(f"{len(sources)} sentences from {args.test}, {args.threads} threads, training paused: {paused}")
    print(table)
    return 0


def main_systems(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Every system x beam x batch size on this checkout's bundle, as a table (and JSON)."""
    sources, references = read_test(args.test, args.n)
    if not sources:
        parser.error(f"{args.test}: no source<TAB>reference rows")
    tokenizer = Tokenizer(load_bundle_manifest(args.bundle).tokenizer_path)
    rows = []
    with tempfile.TemporaryDirectory(prefix="crossalign-int8-") as scratch:
        backends = build_backends(args.bundle, args.checkpoint, args.systems, args.threads, Path(scratch))
        for system, backend in backends.items():
            # No token budget: the batch size under test is the only thing that splits work
            # (besides an onnx backend's search streams, as in the product).
            translator = Translator(
                backend,  # type: ignore[arg-type]
                tokenizer,
                max_batch_tokens=sys.maxsize,
                streams=getattr(backend, "streams", 1),
                stream_backend=getattr(backend, "stream_backend", None),
            )
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
