"""Start-up time and memory of `crossalign serve`, one models directory against another.

    python bench/startup.py --models models /tmp/one-model --rounds 3

For each directory in turn (alternating, `--rounds` times): start the server, time until
/health answers ok with every bundle loaded, translate one sentence per served pair (the
first request loads the language identifier and warms the graphs), and read the server's
resident memory (VmRSS) before and after; then stop it. Prints the median of each per
directory: what a second bundle costs to start and to hold.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
SENTENCES = {"de": "Das Haus ist klein.", "en": "The house is small."}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def one_start(models: Path, port: int) -> dict[str, float]:
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "seq2seq.cli", "serve", "--models", str(models), "--port", str(port)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                health = httpx.get(url + "/health", timeout=1).json()
                if health.get("status") == "ok":
                    break
            except (httpx.HTTPError, ValueError):
                pass
            if process.poll() is not None or time.perf_counter() - started > 300:
                raise RuntimeError(f"the server on {models} did not start")
            time.sleep(0.1)
        ready = time.perf_counter() - started
        loaded = rss_mb(process.pid)
        for pair in health["models"]:
            text = SENTENCES.get(pair["source"], SENTENCES["en"])
            body = {"q": text, "source": pair["source"], "target": pair["target"]}
            httpx.post(url + "/translate", json=body, timeout=60).raise_for_status()
        return {"ready_s": ready, "rss_loaded_mb": loaded, "rss_after_first_mb": rss_mb(process.pid)}
    finally:
        process.terminate()
        process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=Path, nargs="+", required=True, help="models directories to compare")
    parser.add_argument("--rounds", type=int, default=3, help="starts per directory, alternating (default 3)")
    parser.add_argument("--port", type=int, default=5098)
    args = parser.parse_args()
    results: dict[Path, list[dict[str, float]]] = {m: [] for m in args.models}
    for round_ in range(args.rounds):
        for models in args.models if round_ % 2 == 0 else list(reversed(args.models)):
            results[models].append(one_start(models, args.port))
    for models, runs in results.items():
        medians = {key: round(statistics.median(r[key] for r in runs), 2) for key in runs[0]}
        print(f"{models}: {medians}", flush=True)


if __name__ == "__main__":
    main()
