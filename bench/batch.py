"""Throughput of `crossalign translate` on a test split, against a plain loop over the Translator.

    python bench/batch.py --model models/de-en --test work/data/test.tsv            # 5,000 lines
    python bench/batch.py --model tiny/ --backend torch --test test.tsv -n 200      # a quick look

For greedy and beam 4 (--beams), and 1 and 2 workers (--workers), the first N source lines
of `--test` (a `source<TAB>target` TSV) go through the CLI as a subprocess, as a user would
run it; the plain loop translates the same lines one by one with `Translator.translate` in
this process. Rates exclude start-up (interpreter, imports, model load): that is measured
separately, once per worker count, as a run over an empty input, and shown on its own.
Target tokens are SentencePiece pieces of the translations.
"""

from __future__ import annotations

import argparse
import os
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


def run_cli(args: argparse.Namespace, input_path: Path, output_path: Path, beam: int, workers: int) -> float:
    """Wall seconds of one `crossalign translate` run over `input_path`."""
    command = [
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
        "--workers",
        str(workers),
        "--batch-size",
        str(args.batch_size),
        "--threads",
        str(args.threads),
    ]
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
    startup = {w: run_cli(args, empty, workdir / "empty.out", 1, w) for w in args.workers}
    rows = []
    for beam in args.beams:
        for workers in args.workers:
            output = workdir / f"out.b{beam}.w{workers}"
            wall = run_cli(args, input_path, output, beam, workers)
            translations = output.read_text(encoding="utf-8").splitlines()
            assert len(translations) == len(sources), "the CLI must write one line per input line"
            tokens = sum(len(ids) for ids in tokenizer.encode_batch(translations))
            rows.append(
                Row("cli", beam, workers, len(sources), max(wall - startup[workers], 1e-9), startup[workers], tokens)
            )
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
    parser.add_argument("--no-loop", action="store_true", help="skip the plain-loop baseline")
    args = parser.parse_args(argv)

    sources = read_sources(args.test, args.lines)
    if not sources:
        parser.error(f"{args.test}: no source lines")
    tokenizer = Tokenizer(args.model / TOKENIZER_FILE)
    print(
        f"{len(sources)} lines from {args.test}, model {args.model}, backend {args.backend}, {os.cpu_count()} CPUs",
        file=sys.stderr,
    )
    with tempfile.TemporaryDirectory(prefix="bench-batch-") as workdir:
        rows = bench_cli(args, sources, tokenizer, Path(workdir))
    if not args.no_loop:
        rows += bench_loop(args, sources)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
