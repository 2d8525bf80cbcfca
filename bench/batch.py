"""Throughput of `crossalign translate` on a test split, against a plain loop over the Translator.

    python bench/batch.py --model models/de-en --test work/data/test.tsv            # 5,000 lines
    python bench/batch.py --model tiny/ --backend torch --test test.tsv -n 200      # a quick look
    python bench/batch.py --test work/data/test.tsv --beams 4 --workers 1 --rerank none auto channel  # reranking's cost

For greedy and beam 4 (--beams), and 1 and 2 workers (--workers), the first N source lines
of `--test` (a `source<TAB>target` TSV) go through the CLI as a subprocess, as a user would
run it; the plain loop translates the same lines one by one with `Translator.translate` in
this process. Rates exclude start-up (interpreter, imports, model load): that is measured
separately, once per worker count and --rerank mode, as a run over an empty input, and shown on its own.
Target tokens are SentencePiece pieces of the translations.

The break-even of workers: the input size from which N workers finish sooner than one
process, start-up included, (startup_N - startup_1) / (s_1 - s_N) with s the seconds per
line; "never" when N workers translate no faster. On a shared machine the start-ups vary
by seconds from run to run, so `--break-even 6 50 100 200 400` measures it directly instead:
whole runs (start-up included) over the first LINES lines, one process and N workers
alternated, `--rounds` times, their medians side by side and the smallest size at which the
workers were faster. `crossalign translate` starts workers only from `--workers-min-lines`
lines (seq2seq/cli/batch/engines.py, WORKER_MIN_LINES), set from this figure; the runs here
force them (`--workers-min-lines 0`).

    python bench/batch.py --test work/data/test.tsv --beams 4 --break-even 6 50 100 200 400 --rounds 3

The cluster mode (`--cluster`): `crossalign translate --ray` on this machine, its actors as many
as the largest --workers, against `--workers N`, the first --beams. One local Ray of N CPUs is
started for the bench and every cluster run joins it (as on a real cluster, where Ray runs
before the job); each run still starts its actors and loads the model in each. Each mode runs
over the first fifth of -n lines and over all -n (the test split's lines repeated to reach it),
alternated `--rounds` times; the rate is the marginal one, the lines between the two sizes over
the seconds between their median runs, so the start-ups (the actors', the workers') cancel out
and show as the intercept; the ratio cluster / workers is the aim (>= 0.8: Ray's overhead is
small), and the cluster's output is compared with the workers' line for line.

    python bench/batch.py --test work/data/test.tsv -n 4000 --beams 4 --workers 2 --cluster --rounds 2
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from data.files import TOKENIZER_FILE  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from data.tokenizer import Tokenizer  # noqa: E402
from seq2seq.core.config import DecodeConfig  # noqa: E402
from seq2seq.loading import BACKENDS, load_translator  # noqa: E402


@dataclass
class Row:
    mode: str
    beam: int
    workers: int
    lines: int
    seconds: float  # translation time, start-up excluded
    startup: float
    target_tokens: int

    def cells(self) -> list[str]:
        rate = self.lines / self.seconds if self.seconds > 0 else float("nan")
        tokens = self.target_tokens / self.seconds if self.seconds > 0 else float("nan")
        return [
            self.mode,
            str(self.beam),
            str(self.workers),
            str(self.lines),
            f"{self.seconds:.2f}",
            f"{self.startup:.2f}",
            f"{rate:.1f}",
            f"{tokens:.0f}",
        ]


def read_sources(path: Path, count: int) -> list[str]:
    """The first `count` non-empty source columns of a `source<TAB>target` file."""
    sources = []
    with open(path, encoding="utf-8") as stream:
        for line in stream:
            source = line.rstrip("\n").split("\t", 1)[0].strip()
            if source:
                sources.append(source)
                if len(sources) == count:
                    break
    return sources


def run_cli(
    args: argparse.Namespace, input_path: Path, output_path: Path, beam: int, workers: int, rerank: str = "none"
) -> float:
    """Wall seconds of one `crossalign translate` run over `input_path`."""
    return timed(
        translate_command(args, input_path, output_path, beam, rerank)
        + ["--workers", str(workers), "--workers-min-lines", "0"]  # workers started whatever the input's size
    )


def run_cluster(args: argparse.Namespace, input_path: Path, output_dir: Path, beam: int, address: str) -> float:
    """Wall seconds of one `crossalign translate --ray ADDRESS` run (as many actors as the
    largest --workers) into a fresh `output_dir`."""
    shutil.rmtree(output_dir, ignore_errors=True)
    actors = max(args.workers)
    return timed(translate_command(args, input_path, output_dir, beam) + ["--ray", address, "--actors", str(actors)])


def translate_command(
    args: argparse.Namespace, input_path: Path, output_path: Path, beam: int, rerank: str = "none"
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "seq2seq.cli",
        "translate",
        "-m",
        str(args.model),
        "--backend",
        args.backend,
        "-i",
        str(input_path),
        "-o",
        str(output_path),
        "--beam-size",
        str(beam),
        "--batch-size",
        str(args.batch_size),
        "--threads",
        str(args.threads),
        "--rerank",
        rerank,
    ]


def timed(command: list[str]) -> float:
    """Wall seconds of `command`, which must succeed."""
    started = time.perf_counter()
    finished = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    elapsed = time.perf_counter() - started
    if finished.returncode != 0:
        raise SystemExit(f"translate failed ({finished.returncode}):\n{finished.stderr}")
    return elapsed


def bench_cli(args: argparse.Namespace, sources: list[str], tokenizer: Tokenizer, workdir: Path) -> list[Row]:
    input_path, empty = workdir / "input.de", workdir / "empty.de"
    input_path.write_text("\n".join(sources) + "\n", encoding="utf-8")
    empty.write_text("", encoding="utf-8")
    beam = max(args.beams)  # a beam of 1 reranks nothing (auto reads no channel): start-up with the widest
    startup = {
        (w, rerank): run_cli(args, empty, workdir / "empty.out", beam, w, rerank)
        for w in args.workers
        for rerank in args.rerank
    }
    rows = []
    for beam in args.beams:
        for rerank in args.rerank:
            for workers in args.workers:
                output = workdir / f"out.b{beam}.w{workers}"
                wall = run_cli(args, input_path, output, beam, workers, rerank)
                translations = output.read_text(encoding="utf-8").splitlines()
                assert len(translations) == len(sources), "the CLI must write one line per input line"
                tokens = sum(len(ids) for ids in tokenizer.encode_batch(translations))
                begun = startup[workers, rerank]
                mode = "cli" if rerank == "none" else f"cli, rerank {rerank}"
                rows.append(Row(mode, beam, workers, len(sources), max(wall - begun, 1e-9), begun, tokens))
                print(" | ".join(rows[-1].cells()), file=sys.stderr)
    return rows


def bench_loop(args: argparse.Namespace, sources: list[str]) -> list[Row]:
    """One sentence at a time through `Translator.translate`: what a naive script does."""
    started = time.perf_counter()
    translator = load_translator(args.model, args.backend, args.threads)
    startup = time.perf_counter() - started
    rows = []
    for beam in args.beams:
        config = DecodeConfig(beam_size=beam, return_attention=False)
        started, tokens = time.perf_counter(), 0
        for source in sources:
            tokens += len(translator.translate(source, config).target_ids)
        rows.append(Row("loop", beam, 1, len(sources), time.perf_counter() - started, startup, tokens))
        print(" | ".join(rows[-1].cells()), file=sys.stderr)
    return rows


def break_even(rows: list[Row]) -> list[str]:
    """Per beam and worker count above one: the lines from which those workers pay for their
    start-up against one process, or "never"."""
    out = []
    for one in (r for r in rows if r.mode == "cli" and r.workers == 1):
        for many in (r for r in rows if r.mode == "cli" and r.beam == one.beam and r.workers > 1):
            saved = one.seconds / one.lines - many.seconds / many.lines  # seconds per line
            extra = many.startup - one.startup
            lines = "never" if saved <= 0 else f"{max(extra, 0.0) / saved:.0f} lines"
            out.append(f"beam {one.beam}: {many.workers} workers break even at {lines} (start-up +{extra:.2f} s)")
    return out


def bench_break_even(args: argparse.Namespace, sources: list[str], workdir: Path) -> str:
    """Median wall seconds of whole runs over each size of `args.break_even`, one process and
    each worker count alternated round by round; the smallest size where workers won."""
    workers = [w for w in args.workers if w > 1]
    lines = ["lines | " + " | ".join(f"{w} worker{'s' * (w > 1)} s" for w in [1, *workers])]
    first_win: dict[int, int | None] = dict.fromkeys(workers)
    for size in args.break_even:
        input_path = workdir / f"input{size}.de"
        input_path.write_text("\n".join(sources[:size]) + "\n", encoding="utf-8")
        walls: dict[int, list[float]] = {w: [] for w in [1, *workers]}
        for _ in range(args.rounds):
            for count in walls:
                walls[count].append(run_cli(args, input_path, workdir / "out", args.beams[0], count))
        median = {count: statistics.median(times) for count, times in walls.items()}
        lines.append(f"{size} | " + " | ".join(f"{median[count]:.2f}" for count in walls))
        print(lines[-1], file=sys.stderr)
        for count in workers:
            if first_win[count] is None and median[count] < median[1]:
                first_win[count] = size
    for count, size in first_win.items():
        lines.append(f"{count} workers faster from {size} lines" if size else f"{count} workers never faster here")
    return "\n".join(lines)


def bench_cluster(args: argparse.Namespace, sources: list[str], workdir: Path) -> str:
    """The cluster mode against --workers N on this machine: median whole runs over two sizes,
    the marginal rates, their ratio, and how many output lines differ."""
    import ray

    workers, beam = max(args.workers), args.beams[0]
    lines = [sources[i % len(sources)] for i in range(args.lines)]
    sizes = [max(1, len(lines) // 5), len(lines)]
    inputs = {}
    for size in sizes:
        inputs[size] = workdir / f"input{size}.de"
        inputs[size].write_text("\n".join(lines[:size]) + "\n", encoding="utf-8")
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths have a length limit
    context = ray.init(address="local", num_cpus=workers, include_dashboard=False, _temp_dir=temp)
    address = context.address_info["gcs_address"]
    walls: dict[tuple[str, int], list[float]] = {}
    try:
        for _ in range(args.rounds):
            for size in sizes:
                walls.setdefault(("workers", size), []).append(
                    run_cli(args, inputs[size], workdir / "workers.out", beam, workers)
                )
                walls.setdefault(("cluster", size), []).append(
                    run_cluster(args, inputs[size], workdir / "cluster", beam, address)
                )
                last = {mode: walls[mode, size][-1] for mode in ("workers", "cluster")}
                print(
                    f"{size} lines: workers {last['workers']:.2f} s, cluster {last['cluster']:.2f} s", file=sys.stderr
                )
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
    median = {key: statistics.median(times) for key, times in walls.items()}
    small, large = sizes
    rate = {
        mode: (large - small) / max(median[mode, large] - median[mode, small], 1e-9) for mode in ("workers", "cluster")
    }
    intercept = {mode: median[mode, small] - small / rate[mode] for mode in rate}
    cluster_lines = b"".join(p.read_bytes() for p in sorted((workdir / "cluster").glob("*.txt"))).splitlines()
    workers_lines = (workdir / "workers.out").read_bytes().splitlines()
    assert len(cluster_lines) == len(workers_lines) == large, "one output line per input line"
    differ = sum(a != b for a, b in zip(cluster_lines, workers_lines))
    out = [f"beam {beam}, {workers} workers against {workers} actors, median of {args.rounds} runs (s)"]
    out += [
        f"{size} lines | workers {median['workers', size]:.2f} | cluster {median['cluster', size]:.2f}"
        for size in sizes
    ]
    out += [
        f"marginal rate: workers {rate['workers']:.1f} lines/s, cluster {rate['cluster']:.1f} lines/s, "
        f"ratio cluster/workers {rate['cluster'] / rate['workers']:.2f}x",
        f"start-up (intercept): workers {intercept['workers']:.1f} s, cluster {intercept['cluster']:.1f} s",
        f"output lines that differ: {differ} of {large}",
    ]
    return "\n".join(out)


def table(rows: list[Row]) -> str:
    header = ["mode", "beam", "workers", "lines", "seconds", "startup s", "lines/s", "target tok/s"]
    cells = [header] + [r.cells() for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    lines = [" | ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=REPO / "models" / "de-en", help="model directory")
    parser.add_argument("--test", type=Path, required=True, help="source<TAB>target test split")
    parser.add_argument("-n", "--lines", type=int, default=5000, help="lines to translate (default 5000)")
    parser.add_argument("--backend", choices=BACKENDS, default="onnx", help="(default onnx)")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 4], help="beam sizes (default 1 4)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="CLI worker counts (default 1 2)")
    parser.add_argument("--batch-size", type=int, default=32, help="CLI --batch-size (default 32)")
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="inference threads (0 = default; the CLI shares the cores out between workers)",
    )
    parser.add_argument(
        "--rerank",
        nargs="+",
        default=["none"],
        choices=("none", "auto", "channel", "mbr", "mbr+channel"),
        help="CLI --rerank modes to run (default none: the search alone; auto is the CLI's default, the channel "
        "over the beam's own candidates when the reverse bundle is beside --model)",
    )
    parser.add_argument("--no-loop", action="store_true", help="skip the plain-loop baseline")
    parser.add_argument(
        "--break-even",
        type=int,
        nargs="+",
        metavar="LINES",
        help="instead of the table: whole runs over inputs of these sizes, 1 and N workers alternated "
        "(the first --beams), their median seconds, and the size from which the workers are faster",
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="instead of the table: the cluster mode (--ray, a local Ray) against the largest --workers, "
        "over a fifth of -n and all of it, their marginal rates and ratio (the first --beams)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="runs of each size and worker count (default 3)")
    args = parser.parse_args(argv)

    sources = read_sources(args.test, args.lines)
    if not sources:
        parser.error(f"{args.test}: no source lines")
    tokenizer = Tokenizer(args.model / TOKENIZER_FILE)
    print(
        f"{len(sources)} lines from {args.test}, model {args.model}, backend {args.backend}, {os.cpu_count()} CPUs",
        file=sys.stderr,
    )
    if args.cluster:
        with tempfile.TemporaryDirectory(prefix="bench-batch-") as workdir:
            print(bench_cluster(args, sources, Path(workdir)))
        return 0
    if args.break_even:
        with tempfile.TemporaryDirectory(prefix="bench-batch-") as workdir:
            print(bench_break_even(args, sources, Path(workdir)))
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-batch-") as workdir:
        rows = bench_cli(args, sources, tokenizer, Path(workdir))
    if not args.no_loop:
        rows += bench_loop(args, sources)
    print(table(rows))
    print("\n".join(break_even(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
