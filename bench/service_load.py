"""Load test of the HTTP service: throughput and p50/p99 latency, micro-batching on and off.

Starts `python -m service.serve` on a free 127.0.0.1 port once per batching mode, sends a
bounded number of LibreTranslate requests at each concurrency level from asyncio clients,
and prints one table (and JSON with --json). Loopback only.

    python bench/service_load.py --models models --requests 200
    python bench/service_load.py --models /tmp/tiny-models --concurrency 1 8 32 --window-ms 5
    python bench/service_load.py --concurrency 8 32 --requests 512 --rounds 3
    python bench/service_load.py --stream --concurrency 1 8 --requests 200 --rounds 2
    python bench/service_load.py --glossaries 8 --concurrency 8 32 --requests 256 --rounds 3 \
        --batching on --trees /tmp/base-layout .

With --rounds N the two modes run N times each, in turn (on, off, off, on, ...), and the
batching gain is printed per round: this machine's speed drifts by tens of percent within
minutes, so a gain is only a ratio of runs taken side by side.

With --glossaries N every request carries one of N glossaries in turn (two entries each,
terms of the sentences; per direction with --mix): a mixed-glossary load, whose requests
share a micro-batch only where the glossary rides with each sentence (issue 40). With
--trees DIR ... the servers are started from those checkouts (e.g. `git worktree add
/tmp/base-layout BASE`), in turn within every round (the order flips every round), so two
commits' service is measured side by side on one machine.

With --stream (issue 31) one server (batching on) takes, at each concurrency, greedy
`POST /v1/translate` requests and the same bodies streamed by `POST /v1/translate/stream`,
in turn (the order flips every round): the stream's time to its first step event (the
first piece of the translation) and to its end, its step events per second, and its
throughput against the plain route's, the cost of streaming.

Aims (issue 4): batching >= 2x the throughput of no batching at concurrency 32; p99 <=
250 ms at concurrency 8; with both directions served and `--mix` (issue 30), p99 <= 250 ms
at concurrency 8 still. Issue 31: streaming costs <= 20% of the throughput of greedy
/v1/translate at concurrency 8.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
SENTENCES = [
    "Das Haus ist klein.",
    "Der Hund ist sehr alt und schön.",
    "Ich habe heute keine Zeit.",
    "Die Katze schläft auf dem Sofa.",
    "Wo ist der Bahnhof?",
    "Das Auto ist rot und neu.",
    "Er wohnt seit drei Jahren in München.",
    "Guten Morgen!",
]
# With --mix, every other request goes the other way (a models directory serving both).
ENGLISH_SENTENCES = [
    "The house is small.",
    "The dog is very old and beautiful.",
    "I have no time today.",
    "The cat is sleeping on the sofa.",
    "Where is the station?",
    "The car is red and new.",
    "He has been living in Munich for three years.",
    "Good morning!",
]

# --glossaries: each glossary two entries of its direction's pool, each a word of a sentence.
GLOSSARY_TERMS = {
    "de": [("Haus", "home"), ("Hund", "hound"), ("Zeit", "while"), ("Katze", "kitty"), ("Bahnhof", "depot")]
    + [("Auto", "motorcar"), ("München", "Munich"), ("Morgen", "morn")],
    "en": [("house", "Gebäude"), ("dog", "Köter"), ("time", "Weile"), ("cat", "Mieze"), ("station", "Station")]
    + [("car", "Wagen"), ("Munich", "München"), ("morning", "Vormittag")],
}


def glossary(source: str, index: int, count: int) -> dict[str, str]:
    """The `index`-th of `count` glossaries of a `source`-language request (none for count 0)."""
    if not count:
        return {}
    pool = GLOSSARY_TERMS[source]
    k = index % count
    return dict([pool[k % len(pool)], pool[(k + 1) % len(pool)]])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(
    models: Path, window_ms: float, threads: int, quality: str = "thorough", tree: Path = REPO, **settings: str
) -> tuple[subprocess.Popen, str]:
    """A server on a free loopback port, from the checkout `tree`; `settings` are more of
    service.settings.Settings's fields."""
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "CROSSALIGN_BATCH_WINDOW_MS": str(window_ms),
        "CROSSALIGN_THREADS": str(threads),
        "CROSSALIGN_RATE_LIMIT": "0",
        "CROSSALIGN_API_KEYS": "",
        "CROSSALIGN_QUALITY": quality,
        **{f"CROSSALIGN_{name.upper()}": value for name, value in settings.items()},
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "service.serve",
            "--models",
            str(models.resolve()),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=tree,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited with {process.returncode}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.2)
    process.terminate()
    raise SystemExit("the server did not start within 120 s")


# One request: (client, sentence index) -> its timings in seconds ("latency", and for a stream
# "first_step" and "steps").
Send = Callable[[httpx.AsyncClient, int], Awaitable[dict[str, float]]]


async def drive(url: str, concurrency: int, requests: int, send: Send) -> dict[str, float]:
    """`requests` calls of `send` from `concurrency` clients at once, after one warm-up:
    throughput and latency percentiles, and each timing's median."""
    timings: list[dict[str, float]] = []
    counter = iter(range(requests))
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=httpx.Limits(max_connections=concurrency)) as client:

        async def worker() -> None:
            for index in counter:
                timings.append(await send(client, index))

        await send(client, 0)  # warm-up
        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    values = np.array([t["latency"] for t in timings]) * 1000
    return {
        "concurrency": concurrency,
        "requests": requests,
        "throughput_rps": round(requests / elapsed, 1),
        "p50_ms": round(float(np.percentile(values, 50)), 1),
        "p99_ms": round(float(np.percentile(values, 99)), 1),
        **({} if "steps" not in timings[0] else stream_figures(timings, elapsed)),
    }


def stream_figures(timings: list[dict[str, float]], elapsed: float) -> dict[str, float]:
    """Time to the first step event (p50/p99), step events per second of one stream while it
    streams (median), and of all streams together."""
    first = np.array([t["first_step"] for t in timings]) * 1000
    per_stream = [t["steps"] / max(t["latency"] - t["first_step"], 1e-6) for t in timings]
    return {
        "first_step_p50_ms": round(float(np.percentile(first, 50)), 1),
        "first_step_p99_ms": round(float(np.percentile(first, 99)), 1),
        "events_per_s_per_stream": round(float(np.median(per_stream)), 1),
        "events_per_s": round(sum(t["steps"] for t in timings) / elapsed, 1),
    }


async def load(
    url: str, concurrency: int, requests: int, alignment: bool = False, mix: bool = False, glossaries: int = 0
) -> dict:
    """LibreTranslate's /translate, the model's default search; with `mix`, every other request
    English -> German; with `glossaries`, each request one of that many glossaries in turn."""
    extra = {"alignment": True} if alignment else {}

    async def send(client: httpx.AsyncClient, index: int) -> dict[str, float]:
        if mix and index % 2:
            body = {"q": ENGLISH_SENTENCES[index // 2 % len(ENGLISH_SENTENCES)], "source": "en", "target": "de"}
        else:
            body = {"q": SENTENCES[index % len(SENTENCES)], "source": "de", "target": "en"}
        body |= extra
        if glossaries:
            body["glossary"] = glossary(body["source"], index // (2 if mix else 1), glossaries)
        start = time.perf_counter()
        response = await client.post("/translate", json=body)
        latency = time.perf_counter() - start
        response.raise_for_status()
        return {"latency": latency}

    return await drive(url, concurrency, requests, send)


def greedy_body(index: int) -> dict:
    """The body both native routes get: one sentence, greedy search, its word map (the default)."""
    return {"text": SENTENCES[index % len(SENTENCES)], "source": "de", "target": "en", "beam_size": 1}


async def native_load(url: str, concurrency: int, requests: int) -> dict[str, float]:
    async def send(client: httpx.AsyncClient, index: int) -> dict[str, float]:
        start = time.perf_counter()
        response = await client.post("/v1/translate", json=greedy_body(index))
        latency = time.perf_counter() - start
        response.raise_for_status()
        return {"latency": latency}

    return await drive(url, concurrency, requests, send)


async def stream_load(url: str, concurrency: int, requests: int) -> dict[str, float]:
    async def send(client: httpx.AsyncClient, index: int) -> dict[str, float]:
        start, first, steps, ended = time.perf_counter(), 0.0, 0, False
        async with client.stream("POST", "/v1/translate/stream", json=greedy_body(index)) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if line == "event: step":
                    steps += 1
                    first = first or time.perf_counter() - start
                elif line == "event: error":
                    raise RuntimeError(f"the stream failed: {await response.aread()!r}")
                ended = ended or line == "event: done"
        if not ended:
            raise RuntimeError("the stream ended without its done event")
        return {"latency": time.perf_counter() - start, "first_step": first, "steps": steps}

    return await drive(url, concurrency, requests, send)


def model_calls(url: str) -> tuple[float, float]:
    """(sentences, model calls) the server has run so far, every model's (its /metrics)."""
    totals = {"_sum": 0.0, "_count": 0.0}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        for suffix in totals:
            if line.startswith(f"crossalign_batch_sentences{suffix}{{"):
                totals[suffix] += float(line.rsplit(" ", 1)[1])
    return totals["_sum"], totals["_count"]


def row_line(label: str, row: dict) -> str:
    """One result as a line of the table."""
    calls = f"   {row['sentences_per_call']:5.1f} sentences a call" if "sentences_per_call" in row else ""
    return (
        f"round {row['round']}  {label} c={row['concurrency']:<3} {row['throughput_rps']:8.1f} req/s   "
        f"p50 {row['p50_ms']:7.1f} ms   p99 {row['p99_ms']:7.1f} ms{calls}"
    )


def compare_streaming(args: argparse.Namespace) -> list[dict]:
    """Greedy /v1/translate and its stream on one server, in turn at every concurrency."""
    results = []
    process, url = start_server(args.models, args.window_ms, args.threads, args.quality)
    try:
        for round_ in range(args.rounds):
            for concurrency in args.concurrency:
                order = [("translate", native_load), ("stream", stream_load)]
                for route, run in order if round_ % 2 == 0 else order[::-1]:
                    row = {"round": round_ + 1, "route": route, **asyncio.run(run(url, concurrency, args.requests))}
                    results.append(row)
                    extra = ""
                    if route == "stream":
                        extra = (
                            f"   first step p50 {row['first_step_p50_ms']:6.1f} ms p99 {row['first_step_p99_ms']:6.1f}"
                            f" ms   {row['events_per_s_per_stream']:7.1f} events/s a stream,"
                            f" {row['events_per_s']:7.1f} in all"
                        )
                    print(row_line(f"{route:9}", row) + extra, flush=True)
    finally:
        process.terminate()
        process.wait(timeout=30)
    by = {(r["round"], r["route"], r["concurrency"]): r for r in results}
    for concurrency in args.concurrency:
        costs = [
            1
            - by[round_, "stream", concurrency]["throughput_rps"]
            / by[round_, "translate", concurrency]["throughput_rps"]
            for round_ in range(1, args.rounds + 1)
        ]
        print(
            f"streaming's throughput cost at concurrency {concurrency}: "
            + " / ".join(f"{cost:+.1%}" for cost in costs)
            + (f" (median {float(np.median(costs)):+.1%})" if len(costs) > 1 else "")
        )
    return results


def compare_load(args: argparse.Namespace) -> list[dict]:
    """/translate at every concurrency, for each batching mode and each checkout (`--trees`), in
    turn within a round, the order flipped every round; the ratios printed per round."""
    modes = [(m, w) for m, w in (("on", args.window_ms), ("off", 0.0)) if m in args.batching]
    runs = [(tree, mode, window) for tree in args.trees for mode, window in modes]
    results = []
    for round_ in range(args.rounds):
        # A load change on the shared machine hits every run alike (a gain is a ratio in one round).
        for tree, mode, window in runs if round_ % 2 == 0 else runs[::-1]:
            process, url = start_server(args.models, window, args.threads, args.quality, tree)
            try:
                for concurrency in args.concurrency:
                    before = model_calls(url)
                    figures = asyncio.run(
                        load(url, concurrency, args.requests, args.alignment, args.mix, args.glossaries)
                    )
                    sentences, calls = (now - then for now, then in zip(model_calls(url), before))
                    figures["sentences_per_call"] = round(sentences / max(calls, 1), 2)  # warm-up included
                    row = {"round": round_ + 1, "tree": str(tree), "batching": mode, **figures}
                    results.append(row)
                    where = f"{tree.resolve().name:>12} " if len(args.trees) > 1 else ""
                    label = f"batching {mode:3} {where}"
                    print(row_line(label, row), flush=True)
            finally:
                process.terminate()
                process.wait(timeout=30)
    print_ratios(args, results)
    return results


def print_ratios(args: argparse.Namespace, results: list[dict]) -> None:
    """Batching on against off at the top concurrency; with several trees, each against the
    first at every concurrency (throughput, p99), per round and their median."""
    by = {(r["round"], r["tree"], r["batching"], r["concurrency"]): r for r in results}
    rounds = range(1, args.rounds + 1)
    first = str(args.trees[0])
    top = max(args.concurrency)
    gains = [
        by[r, first, "on", top]["throughput_rps"] / by[r, first, "off", top]["throughput_rps"]
        for r in rounds
        if (r, first, "on", top) in by and (r, first, "off", top) in by
    ]
    if gains:
        print(f"batching speed-up at concurrency {top}: {ratios(gains, 'x')}")
    for other in map(str, args.trees[1:]):
        for mode in args.batching:
            for concurrency in args.concurrency:
                pairs = [(by[r, first, mode, concurrency], by[r, other, mode, concurrency]) for r in rounds]
                speed = [b["throughput_rps"] / a["throughput_rps"] for a, b in pairs]
                p99 = [b["p99_ms"] / a["p99_ms"] for a, b in pairs]
                print(
                    f"{other} against {first}, batching {mode}, concurrency {concurrency}: "
                    f"throughput {ratios(speed, 'x')}, p99 {ratios(p99, 'x')}"
                )


def ratios(values: list[float], unit: str) -> str:
    text = " / ".join(f"{value:.2f}{unit}" for value in values)
    return text + (f" (median {float(np.median(values)):.2f}{unit})" if len(values) > 1 else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=REPO / "models", help="models directory (default models/)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--requests", type=int, default=200, help="requests per concurrency level (default 200)")
    parser.add_argument("--window-ms", type=float, default=5.0, help="micro-batching window when on (default 5)")
    parser.add_argument("--threads", type=int, default=0, help="onnxruntime threads (0 = the cores, at most 4)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON")
    parser.add_argument(
        "--alignment", action="store_true", help="every request asks for the alignment (and its quality block)"
    )
    parser.add_argument(
        "--quality", choices=("thorough", "fast"), default="thorough", help="the server's quality mode (--alignment)"
    )
    parser.add_argument(
        "--batching", nargs="+", choices=("on", "off"), default=["on", "off"], help="micro-batching runs (default both)"
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="runs of every mode, in turn (default 1); one gain per round"
    )
    parser.add_argument(
        "--stream",
        action="store_true",
        help="compare greedy /v1/translate with its stream (/v1/translate/stream) on one batching server",
    )
    parser.add_argument(
        "--mix",
        action="store_true",
        help="every other request English -> German (a models directory with both directions' bundles)",
    )
    parser.add_argument(
        "--glossaries", type=int, default=0, help="every request carries one of this many glossaries (default 0: none)"
    )
    parser.add_argument(
        "--trees",
        type=Path,
        nargs="+",
        default=[REPO],
        help="checkouts whose servers are measured in turn (default: this one); each against the first",
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.stream:
        results = compare_streaming(args)
        if args.json:
            args.json.write_text(json.dumps(results, indent=2) + "\n")
        return 0

    results = compare_load(args)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
