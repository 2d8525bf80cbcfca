"""Load test of the HTTP service: throughput and p50/p99 latency, micro-batching on and off.

Starts `python -m service.serve` on a free 127.0.0.1 port once per batching mode, sends a
bounded number of LibreTranslate requests at each concurrency level from asyncio clients,
and prints one table (and JSON with --json). Loopback only.

    python bench/service_load.py --models models --requests 200
    python bench/service_load.py --models /tmp/tiny-models --concurrency 1 8 32 --window-ms 5
    python bench/service_load.py --concurrency 8 32 --requests 512 --rounds 3

With --rounds N the two modes run N times each, in turn (on, off, off, on, ...), and the
batching gain is printed per round: this machine's speed drifts by tens of percent within
minutes, so a gain is only a ratio of runs taken side by side.

Aims (issue 4): batching >= 2x the throughput of no batching at concurrency 32; p99 <=
250 ms at concurrency 8.
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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(
    models: Path, window_ms: float, threads: int, quality: str = "thorough", **settings: str
) -> tuple[subprocess.Popen, str]:
    """A server on a free loopback port; `settings` are more of service.settings.Settings's fields."""
    port = free_port()
    env = {
        **os.environ,
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
            str(models),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=REPO,
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


async def load(url: str, concurrency: int, requests: int, alignment: bool = False) -> dict[str, float]:
    latencies: list[float] = []
    counter = iter(range(requests))
    extra = {"alignment": True} if alignment else {}
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=httpx.Limits(max_connections=concurrency)) as client:

        async def worker() -> None:
            for index in counter:
                body = {"q": SENTENCES[index % len(SENTENCES)], "source": "de", "target": "en", **extra}
                start = time.perf_counter()
                response = await client.post("/translate", json=body)
                latencies.append(time.perf_counter() - start)
                response.raise_for_status()

        await client.post("/translate", json={"q": SENTENCES[0], "source": "de", "target": "en"})  # warm-up
        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    values = np.array(latencies) * 1000
    return {
        "concurrency": concurrency,
        "requests": requests,
        "throughput_rps": round(requests / elapsed, 1),
        "p50_ms": round(float(np.percentile(values, 50)), 1),
        "p99_ms": round(float(np.percentile(values, 99)), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=REPO / "models", help="models directory (default models/)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--requests", type=int, default=200, help="requests per concurrency level (default 200)")
    parser.add_argument("--window-ms", type=float, default=5.0, help="micro-batching window when on (default 5)")
    parser.add_argument("--threads", type=int, default=0, help="onnxruntime threads per model (0 = default)")
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
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    modes = [(m, w) for m, w in (("on", args.window_ms), ("off", 0.0)) if m in args.batching]
    results = []
    for round_ in range(args.rounds):
        # Each round runs the modes in turn, in the other order than the round before, so a
        # load change on the shared machine hits both alike (the gain is a ratio in one round).
        for mode, window in modes if round_ % 2 == 0 else modes[::-1]:
            process, url = start_server(args.models, window, args.threads, args.quality)
            try:
                for concurrency in args.concurrency:
                    row = {
                        "round": round_ + 1,
                        "batching": mode,
                        **asyncio.run(load(url, concurrency, args.requests, args.alignment)),
                    }
                    results.append(row)
                    print(
                        f"round {round_ + 1}  batching {mode:3}  c={concurrency:<3} "
                        f"{row['throughput_rps']:8.1f} req/s   "
                        f"p50 {row['p50_ms']:7.1f} ms   p99 {row['p99_ms']:7.1f} ms",
                        flush=True,
                    )
            finally:
                process.terminate()
                process.wait(timeout=30)
    top = max(args.concurrency)
    by = {(r["round"], r["batching"], r["concurrency"]): r for r in results}
    gains = [
        by[round_, "on", top]["throughput_rps"] / by[round_, "off", top]["throughput_rps"]
        for round_ in range(1, args.rounds + 1)
        if (round_, "on", top) in by and (round_, "off", top) in by
    ]
    if gains:
        print(
            f"batching speed-up at concurrency {top}: "
            + " / ".join(f"{gain:.2f}x" for gain in gains)
            + (f" (median {float(np.median(gains)):.2f}x)" if len(gains) > 1 else "")
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
