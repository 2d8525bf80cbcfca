"""The service's reliability aims (issue 12), measured against a real server on loopback.

    python bench/service_reliability.py --models models                       # every part
    python bench/service_reliability.py --models models --parts starvation    # one part

Parts, each printed as one line (and JSON with --json):

- mixed: rounds of 11 good requests and 1 with a lone surrogate, sent together on 12
  keep-alive connections, on each translating route. Aim: 0 server errors and 0 dropped
  connections for the good requests.
- chunked: a 200 MB chunked body to /translate. Aim: rejected (413) with the server's
  memory growing < 20 MB.
- starvation: a one-sentence request sent 0.5 s after four maximal requests (64 texts at
  beam 8, at the work cap). Aim: answered in <= 2 s on the shipped model.
- schemathesis: every check, boundary values and fuzzing (`--examples` per operation).
  Aim: 0 failures.

Loopback only; the server runs with the default settings except where a part says.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from service_load import SENTENCES, start_server  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ROUTES = {
    "/translate": '{{"q": {text}, "source": "de", "target": "en"}}',
    "/v1/translate": '{{"text": {text}, "source": "de", "alignment": false}}',
    "/v1/heatmap": '{{"q": {text}, "source": "de", "format": "svg"}}',
    "/v1/attention": '{{"text": {text}, "source": "de"}}',
    "/v1/align": '{{"text": {text}, "translation": "The house is small.", "source": "de"}}',
}
BAD_TEXT = '"Das Haus \\ud800 ist klein."'


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def mixed(url: str, rounds: int) -> dict:
    host, port = url.removeprefix("http://").split(":")
    errors = dropped = bad_rejected = good_ok = 0
    for path, template in ROUTES.items():
        connections = [http.client.HTTPConnection(host, int(port), timeout=300) for _ in range(12)]
        for connection in connections:
            connection.connect()
        sockets = [connection.sock for connection in connections]

        def send(
            index: int,
            barrier: threading.Barrier,
            path: str = path,
            template: str = template,
            connections: list = connections,
        ) -> int:
            text = BAD_TEXT if index == 11 else json.dumps(SENTENCES[index % len(SENTENCES)])
            barrier.wait()
            try:
                connections[index].request(
                    "POST", path, template.format(text=text), {"Content-Type": "application/json"}
                )
                response = connections[index].getresponse()
                response.read()
                return response.status
            except (OSError, http.client.HTTPException):
                return -1

        with ThreadPoolExecutor(12) as pool:
            for _ in range(rounds):
                barrier = threading.Barrier(12)
                statuses = list(pool.map(lambda i, barrier=barrier: send(i, barrier), range(12)))
                good = statuses[:11]
                good_ok += sum(s == 200 for s in good)
                errors += sum(s >= 500 for s in good)
                dropped += sum(s == -1 for s in good)
                bad_rejected += statuses[11] == 400
        dropped += sum(c.sock is not s for c, s in zip(connections, sockets))
        for connection in connections:
            connection.close()
    total = rounds * len(ROUTES)
    return {
        "part": "mixed",
        "good_requests": total * 11,
        "good_200": good_ok,
        "server_errors": errors,
        "dropped_connections": dropped,
        "bad_requests": total,
        "bad_400": bad_rejected,
    }


def chunked(url: str, pid: int, megabytes: int) -> dict:
    host, port = url.removeprefix("http://").split(":")
    before = peak = rss_mb(pid)
    chunk = b"a" * (1 << 20)
    start = time.perf_counter()
    sent = 0
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(
            b"POST /translate HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        try:
            while sent < megabytes * 1_000_000:
                sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                sent += len(chunk)
                peak = max(peak, rss_mb(pid))
            sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass
        answer = sock.recv(4096)
    return {
        "part": "chunked",
        "sent_mb": round(sent / 1e6),
        "status": answer.split(b" ", 2)[1].decode(),
        "rss_before_mb": round(before, 1),
        "rss_peak_mb": round(peak, 1),
        "growth_mb": round(peak - before, 1),
        "seconds": round(time.perf_counter() - start, 2),
    }


def maximal_texts(test: Path | None) -> list[str]:
    """64 texts at the work cap for beam 8 (20,000 units: 2,500 characters in all)."""
    pool = [line.split("\t")[0] for line in test.read_text(encoding="utf-8").splitlines()] if test else SENTENCES
    texts, used = [], 0
    for text in (t for t in pool * 64 if t):
        if len(texts) == 64:
            break
        if used + len(text) <= 2500 - (63 - len(texts)):
            texts.append(text)
            used += len(text)
    return texts


def starvation(url: str, test: Path | None) -> dict:
    texts = maximal_texts(test)
    body = {"texts": texts, "source": "de", "beam_size": 8, "alignment": False}
    heavy_seconds: list[float] = []
    start = time.monotonic()

    def heavy() -> int:
        status = httpx.post(url + "/v1/translate", json=body, timeout=600).status_code
        heavy_seconds.append(time.monotonic() - start)
        return status

    with ThreadPoolExecutor(4) as pool:
        heavies = [pool.submit(heavy) for _ in range(4)]
        time.sleep(0.5)
        sent = time.monotonic()
        small = httpx.post(
            url + "/translate", json={"q": "Das Haus ist klein.", "source": "de", "target": "en"}, timeout=600
        )
        latency = time.monotonic() - sent
        statuses = [h.result() for h in heavies]
    return {
        "part": "starvation",
        "heavy_texts": len(texts),
        "heavy_characters": sum(map(len, texts)),
        "small_status": small.status_code,
        "small_latency_s": round(latency, 2),
        "heavy_statuses": statuses,
        "heavy_done_s": [round(s, 1) for s in sorted(heavy_seconds)],
    }


def schemathesis(url: str, examples: int, seed: int) -> dict:
    command = [
        str(Path(sys.executable).parent / "schemathesis"),
        "--config-file",
        str(REPO / "tests" / "schemathesis.toml"),
        "--no-color",
        "run",
        f"{url}/openapi.json",
        "--checks",
        "all",
        "--phases",
        "examples,coverage,fuzzing",
        "--max-examples",
        str(examples),
        "--seed",
        str(seed),
        "--workers",
        "1",
        "--request-timeout",
        "120",
    ]
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    summary = [line.strip() for line in result.stdout.splitlines() if "generated" in line or "found" in line]
    return {
        "part": "schemathesis",
        "exit_status": result.returncode,
        "summary": summary[-2:] or result.stdout[-500:],
        "seconds": round(time.perf_counter() - start, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=Path("models"), help="model bundles to serve (default models)")
    parser.add_argument(
        "--test",
        type=Path,
        help="source<TAB>target file for the maximal requests' texts (default: a few built-in sentences)",
    )
    parser.add_argument(
        "--parts",
        nargs="+",
        default=["mixed", "chunked", "starvation", "schemathesis"],
        choices=["mixed", "chunked", "starvation", "schemathesis"],
        help="what to measure",
    )
    parser.add_argument("--rounds", type=int, default=3, help="mixed: rounds per route (default 3)")
    parser.add_argument("--megabytes", type=int, default=200, help="chunked: body size (default 200)")
    parser.add_argument("--examples", type=int, default=20, help="schemathesis: examples per operation (default 20)")
    parser.add_argument("--seed", type=int, default=1, help="schemathesis: seed (default 1)")
    parser.add_argument("--threads", type=int, default=0, help="onnxruntime threads (default: runtime's)")
    parser.add_argument("--json", action="store_true", help="print JSON lines instead of text")
    args = parser.parse_args()
    os.environ["CROSSALIGN_KEEP_ALIVE_S"] = "300"  # mixed: a slow round must not idle connections out
    process, url = start_server(args.models, 5.0, args.threads)
    try:
        for part in args.parts:
            if part == "mixed":
                row = mixed(url, args.rounds)
            elif part == "chunked":
                row = chunked(url, process.pid, args.megabytes)
            elif part == "starvation":
                row = starvation(url, args.test)
            else:
                row = schemathesis(url, args.examples, args.seed)
            print(json.dumps(row) if args.json else "  ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    finally:
        process.terminate()
        process.wait(timeout=30)


if __name__ == "__main__":
    main()
