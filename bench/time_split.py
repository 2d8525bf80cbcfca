"""Where a translation's time goes: the graphs, the search's Python, the translator's Python.

    python bench/time_split.py --test ~/.cache/crossalign/data/ding8k-all/test.tsv --precision fp32 \
        --beam 1 4 --batch 32 --threads 1 --streams 1
    python bench/time_split.py --test ... --precision int8 --beam 4 --batch 1 --threads 1 --n 200

Translates the first --n test sources in batches of --batch with the onnxruntime backend
(`load_translator`, one batch per `translate_batch` call, no token budget split), timing every
graph run and the search's calls by wrapping them, and prints core-milliseconds per part:

- encoder graph, decoder graph: inside `InferenceSession.run` / `run_with_iobinding`;
- step Python: the rest of `OnnxBackend.step` (the feed, the bindings, the outputs);
- search Python: the rest of `beam_search` (ranking, finishing, the cache's reorder, ...);
  the encoder's own Python (length groups) is counted here too;
- translator Python: the rest of `translate_batch` (tokenizing, detokenizing, case, results);
- with two streams or more, idle: the time a stream's core waits for the others to finish
  their share of a batch (each batch's search time on each of its streams, less what they
  searched; a lone sentence is searched whole, on one stream).

Per step: each part over the decoder runs. Wrapping costs about a microsecond a call, so
the Python parts read a little high. The machine is shared: compare parts within a run.
Issue #13 used it to show what separates us from CTranslate2 (docs/performance.md, "Where
the time goes"): our graphs run at its speed, the search's Python does not.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.inference import timed_sources, timing_parser, training_paused  # noqa: E402
from seq2seq.core.config import DecodeConfig  # noqa: E402
from seq2seq.decoding import translator as translator_module  # noqa: E402
from seq2seq.decoding.translator import Translator  # noqa: E402
from seq2seq.loading import load_translator  # noqa: E402
from seq2seq.runtime.onnx_backend import OnnxBackend  # noqa: E402


class Clock:
    """Seconds and calls per part, from any thread."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.lock = threading.Lock()

    def wrap(self, function: Callable[..., Any], part: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent = time.perf_counter() - began
                with self.lock:
                    self.seconds[part] += spent
                    self.calls[part] += 1

        return timed

    def clear(self) -> None:
        self.seconds.clear()
        self.calls.clear()


def instrument(translator: Translator, clock: Clock) -> None:
    """Time every graph run and backend step of `translator`, each search share (one `beam_search`
    call per stream) and each batch's search as a whole."""
    backends = {id(b): b for b in (translator.backend, translator.stream_backend)}.values()
    decoders = {}  # a session may serve two backends (`OnnxBackend.small_decoder`): wrapped once
    for backend in backends:
        if not isinstance(backend, OnnxBackend):
            raise SystemExit("time_split times the onnxruntime backend only")
        decoders.update({id(s): s for s in (backend.decoder, backend.small_decoder)})
        backend.encoder.run = clock.wrap(backend.encoder.run, "encoder graph")
        backend.step = clock.wrap(backend.step, "step")
    for session in decoders.values():
        session.run = clock.wrap(session.run, "decoder graph")
        session.run_with_iobinding = clock.wrap(session.run_with_iobinding, "decoder graph")
    # Each stream's share is one beam_search call: its seconds are core-seconds of searching.
    translator_module.beam_search = clock.wrap(translator_module.beam_search, "search")
    search = translator._search

    def batch_search(sources: list[list[int]], config: DecodeConfig) -> Any:
        """A batch's search; its time on each of the streams it is split into (a lone
        sentence is not split) is what they could have searched in it."""
        began = time.perf_counter()
        try:
            return search(sources, config)
        finally:
            spent = time.perf_counter() - began
            with clock.lock:
                clock.seconds["batch search"] += spent
                clock.seconds["stream capacity"] += spent * min(translator.streams, len(sources))

    translator._search = batch_search


def report(clock: Clock, wall: float) -> list[tuple[str, float]]:
    """Core-seconds per part of a run that took `wall` seconds."""
    s = clock.seconds
    parts = [
        ("encoder graph", s["encoder graph"]),
        ("decoder graph", s["decoder graph"]),
        ("step Python", s["step"] - s["decoder graph"]),
        ("search Python", s["search"] - s["step"] - s["encoder graph"]),
        ("translator Python", wall - s["batch search"]),
    ]
    if s["stream capacity"] > s["batch search"]:  # some batch was split into streams
        parts.append(("idle (streams waiting)", s["stream capacity"] - s["search"]))
    return parts


def main(argv: list[str] | None = None) -> int:
    parser = timing_parser(__doc__, 640, "sentences")
    parser.add_argument("--precision", choices=("fp32", "int8"), default=None, help="graphs (default: the bundle's)")
    parser.add_argument("--beam", type=int, nargs="+", default=[1, 4], help="beam sizes (default 1 4; 1 = greedy)")
    parser.add_argument("--batch", type=int, default=32, help="sentences per translate_batch call (default 32)")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime threads (default 1)")
    parser.add_argument("--streams", type=int, default=0, help="search streams (default 0: the backend's)")
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds per beam size (default 2)")
    args = parser.parse_args(argv)
    sources = timed_sources(parser, args)
    translator = load_translator(
        args.bundle, precision=args.precision, threads=args.threads, streams=args.streams, max_batch_tokens=sys.maxsize
    )
    clock = Clock()
    instrument(translator, clock)
    print(
        f"{args.bundle} {translator.backend.precision}, {args.threads} thread(s), {translator.streams} stream(s), "
        f"batches of {args.batch}, {len(sources)} sentences"
    )
    with training_paused(args.pause_training):
        for beam in args.beam:
            config = DecodeConfig(beam_size=beam, coverage_penalty=0.0)
            translator.translate_batch(sources[: args.batch], config)  # warm-up
            for round_ in range(1, args.rounds + 1):
                clock.clear()
                began = time.perf_counter()
                for first in range(0, len(sources), args.batch):
                    translator.translate_batch(sources[first : first + args.batch], config)
                wall = time.perf_counter() - began
                steps = clock.calls["decoder graph"]
                print(f"\nbeam {beam}, round {round_}: {len(sources) / wall:.1f} sent/s, {steps} decoder runs")
                print(f"  {'part':24s} {'core ms':>9s} {'share':>6s} {'per step':>9s}")
                parts = report(clock, wall)
                total = sum(seconds for _, seconds in parts)
                for part, seconds in parts:
                    print(
                        f"  {part:24s} {seconds * 1e3:9.0f} {100 * seconds / total:5.1f}% "
                        f"{seconds / max(1, steps) * 1e3:7.3f} ms"
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
