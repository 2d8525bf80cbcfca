"""How many search streams: one bundle's translation rate with 2, 3, 4 ... streams, in turns.

    python bench/streams.py --bundle STAGE6_BOTH --test ~/.cache/crossalign/data/ding8k-all/test.tsv \
        --precision int8 --beam 4 --streams 2 3 4 --rounds 3 --pause-training

Each round translates the first --n test sources in batches of 32 once per stream count
(`load_translator(..., streams=N)`, two threads each), and prints each rate as a ratio to
the first count's in the same round: the machine is shared, so compare within a round.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.inference import timed_sources, timing_parser, training_paused  # noqa: E402
from seq2seq.core.config import DecodeConfig  # noqa: E402
from seq2seq.decoding.translator import Translator  # noqa: E402
from seq2seq.loading import load_translator  # noqa: E402


def rate(translator: Translator, sources: list[str], config: DecodeConfig, batch: int = 32) -> float:
    """Sentences per second over `sources` in batches of `batch`."""
    began = time.perf_counter()
    for first in range(0, len(sources), batch):
        translator.translate_batch(sources[first : first + batch], config)
    return len(sources) / (time.perf_counter() - began)


def main(argv: list[str] | None = None) -> int:
    parser = timing_parser(__doc__, 640, "sentences per run")
    parser.add_argument("--precision", choices=("fp32", "int8"), default=None, help="graphs (default: the bundle's)")
    parser.add_argument("--beam", type=int, default=4, help="beam size (default 4; 1 = greedy)")
    parser.add_argument("--streams", type=int, nargs="+", default=[2, 3, 4], help="stream counts (default 2 3 4)")
    parser.add_argument("--threads", type=int, default=2, help="onnxruntime threads of each translator (default 2)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    args = parser.parse_args(argv)
    sources = timed_sources(parser, args)
    translators = {
        count: load_translator(
            args.bundle, precision=args.precision, threads=args.threads, streams=count, max_batch_tokens=sys.maxsize
        )
        for count in args.streams
    }
    config = DecodeConfig(beam_size=args.beam, coverage_penalty=0.0)
    with training_paused(args.pause_training) as paused:
        for translator in translators.values():  # warm-up
            rate(translator, sources[:64], config)
        for round_ in range(args.rounds):
            rates = {count: rate(translator, sources, config) for count, translator in translators.items()}
            first = rates[args.streams[0]]
            cells = "  ".join(f"{n} streams {value:6.1f} sent/s ({value / first:.2f}x)" for n, value in rates.items())
            print(f"round {round_ + 1}: {cells}", flush=True)
    print(f"{len(sources)} sentences, beam {args.beam}, {args.threads} threads, training paused: {paused}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
