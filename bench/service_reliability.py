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

The hardening parts (issue 32):

- junk_methods: 1,000 requests whose methods are junk tokens of up to 60,000 characters
  (the metrics count a request before routing and before any key is checked). Aim:
  /metrics grows < 50 KB.
- render_flood: 48 concurrent 4000 x 4000 PNG heatmaps while /health is asked every 50 ms.
  Aim: /health p99 < 1 s; the server's RSS 30 s later within 1.5x of its baseline (after
  one warm-up heatmap); the heatmaps beyond the render bound get 503 with Retry-After.
- odd_json: every odd body (a 5,000-digit integer, arrays nested 2,000 deep, NaN, not
  UTF-8, ...) on every route that reads JSON, a bad percent-encoded query, a byte order mark.
  Aim: 400 for every odd body, the same answer with and without the mark.
- abandoned: eight maximal /v1/translate requests whose clients hang up after 0.5 s, then
  a maximal request 3 s later; and a second server stopped right after eight abandoned ones.
  Aim: 200 for the maximal request; queued work and requests in flight back to 0; shutdown
  within its graceful timeout (10 s).
- slow_clients: 300 connections holding an unfinished head, and a body trickled at a byte
  every 2 s. Aim: all closed within the documented timeouts (head_timeout_s, body_timeout_s).

The hostile files (issue 41, #1 and #6; the files from tests/hostile_documents.py, the
library's own figures in bench/hostile_documents.py):

- file_bombs: each uploaded to /translate_file on its own: a 1 MB ODT and DOCX whose entry
  says a few hundred bytes and inflates to 1 GiB, a 1 MB ODT that says as many bytes as it
  has compressed, an honest 2 MB DOCX of 150 MiB of XML, 400,000 ZIP entries, 2 MiB of `<b>`
  and of `<p>.</p>` as HTML. Aim: 413 for each, the server's peak RSS (VmHWM, reset before
  each) <= +100 MB over its RSS before, /health answered meanwhile.

Every part counts its answers' statuses; the last line sums them over the whole probe.
Aim: 0 answers >= 500 other than the 503 + Retry-After of admission control.

Loopback only; the server runs with the default settings except where a part says.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import multiprocessing
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np

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
STATUSES: Counter[int] = Counter()  # every answer of the probe, by status (-1: no answer)


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
                STATUSES.update(statuses)
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
    STATUSES[int(answer.split(b" ", 2)[1])] += 1
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
    STATUSES.update([small.status_code, *statuses])
    return {
        "part": "starvation",
        "heavy_texts": len(texts),
        "heavy_characters": sum(map(len, texts)),
        "small_status": small.status_code,
        "small_latency_s": round(latency, 2),
        "heavy_statuses": statuses,
        "heavy_done_s": [round(s, 1) for s in sorted(heavy_seconds)],
    }


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def _scrape(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=30).text
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line[:1] != "#"}


def _quantile(values: list[float], q: float) -> float:
    return round(float(np.quantile(values, q)), 3) if values else float("nan")


def junk_methods(url: str, pid: int, count: int) -> dict:
    """`count` requests with junk methods, one connection each; /metrics and RSS before and after."""
    host, port = _address(url)
    rng = random.Random(32)
    before, rss_before = len(httpx.get(url + "/metrics", timeout=30).content), rss_mb(pid)
    statuses: Counter[int] = Counter()
    start = time.perf_counter()
    for index in range(count):
        method = f"M{index}" + "A" * rng.choice([1, 10, 1000, 60_000])
        connection = http.client.HTTPConnection(host, port, timeout=60)
        try:
            connection.request(method, rng.choice(["/health", "/translate", "/v1/heatmap", "/nowhere"]))
            statuses[connection.getresponse().status] += 1
        except (OSError, http.client.HTTPException):
            statuses[-1] += 1
        finally:
            connection.close()
    after = len(httpx.get(url + "/metrics", timeout=30).content)
    STATUSES.update(statuses)
    return {
        "part": "junk_methods",
        "requests": count,
        "statuses": dict(statuses),
        "metrics_bytes_before": before,
        "metrics_growth_bytes": after - before,
        "rss_growth_mb": round(rss_mb(pid) - rss_before, 1),
        "seconds": round(time.perf_counter() - start, 1),
    }


def watch_health(url: str, stop: Any, latencies: Any) -> None:
    """Ask /health every 50 ms until `stop` is set, appending each latency to `latencies`. Run
    in a process of its own: in the process that sends the flood, its own threads would
    delay the measurement."""
    with httpx.Client(timeout=60) as client:
        while not stop.is_set():
            start = time.monotonic()
            status = client.get(url + "/health").status_code
            latencies.append((status, time.monotonic() - start))
            time.sleep(0.05)


def render_flood(url: str, pid: int, count: int, settle_s: float) -> dict:
    """`count` concurrent 4000 x 4000 PNG heatmaps; /health every 50 ms meanwhile; RSS after `settle_s`."""
    body = {"q": SENTENCES[1], "source": "de", "format": "png", "width": 4000, "height": 4000}
    # The baseline: a server that has drawn a heatmap and loaded its language identifier
    # (loaded in the background at start; /detect waits for it), so that neither is counted as growth.
    warm = [
        httpx.post(url + "/detect", json={"q": SENTENCES[0]}, timeout=120),
        httpx.post(url + "/v1/heatmap", json={**body, "width": 600, "height": 500}, timeout=120),
    ]
    STATUSES.update(answer.status_code for answer in warm)
    time.sleep(1)
    baseline = peak = rss_mb(pid)
    spawn = multiprocessing.get_context("spawn")
    with spawn.Manager() as manager:
        stop, health = manager.Event(), manager.list()
        watcher = spawn.Process(target=watch_health, args=(url, stop, health))
        watcher.start()
        while not health:  # the watcher is up
            time.sleep(0.05)

        def heatmap() -> tuple[int, float, str | None]:
            start = time.monotonic()
            answer = httpx.post(url + "/v1/heatmap", json=body, timeout=300)
            return answer.status_code, time.monotonic() - start, answer.headers.get("retry-after")

        start = time.monotonic()
        with ThreadPoolExecutor(count + 1) as pool:
            flood = [pool.submit(heatmap) for _ in range(count)]
            while not all(f.done() for f in flood):
                peak = max(peak, rss_mb(pid))
                time.sleep(0.05)
            answers = [f.result() for f in flood]
        flood_s = time.monotonic() - start
        stop.set()
        watcher.join()
        health_statuses = [status for status, _ in health]
        latencies = [seconds for _, seconds in health]
    statuses = Counter(status for status, _, _ in answers)
    STATUSES.update([*statuses.elements(), *health_statuses])
    time.sleep(settle_s)
    after = rss_mb(pid)
    return {
        "part": "render_flood",
        "heatmaps": count,
        "statuses": dict(statuses),
        "busy_with_retry_after": sum(status == 503 and retry is not None for status, _, retry in answers),
        "last_answer_s": round(max(seconds for _, seconds, _ in answers), 1),
        "flood_s": round(flood_s, 1),
        "health_requests": len(latencies),
        "health_p50_s": _quantile(latencies, 0.5),
        "health_p99_s": _quantile(latencies, 0.99),
        "health_max_s": round(max(latencies), 3) if latencies else float("nan"),
        "rss_baseline_mb": round(baseline, 1),
        "rss_peak_mb": round(peak, 1),
        f"rss_after_{settle_s:g}s_mb": round(after, 1),
        "rss_ratio": round(after / baseline, 2),
    }


ODD_BODIES = {
    "integer of 5,000 digits": b'{"q": ' + b"7" * 5000 + b"}",
    "arrays nested 2,000 deep": b"[" * 2000 + b"]" * 2000,
    "objects nested 900 deep": b'{"a":' * 900 + b"1" + b"}" * 900,
    "NaN": b'{"q": NaN}',
    "-Infinity": b'{"q": -Infinity}',
    "1e999": b'{"q": 1e999}',
    "not UTF-8": b'{"q": "Haus \xff"}',
    "UTF-16": '{"q": "Haus"}'.encode("utf-16"),
    "lone surrogate bytes": b'{"q": "\xed\xa0\x80"}',
    "empty": b"",
    "truncated": b'{"q": "Haus", ',
    "trailing data": b'{"q": "Haus"} {}',
}
JSON_ROUTES = ["/translate", "/detect", "/v1/translate", "/v1/align", "/v1/heatmap", "/v1/attention"]


def odd_json(url: str) -> dict:
    """Every odd body on every route that reads JSON; a bad GET query; a byte order mark."""
    statuses: Counter[int] = Counter()
    not_400 = []
    with httpx.Client(base_url=url, timeout=120, headers={"Content-Type": "application/json"}) as client:
        for kind, body in ODD_BODIES.items():
            for path in JSON_ROUTES:
                status = client.post(path, content=body).status_code
                statuses[status] += 1
                if status != 400:
                    not_400.append(f"{kind} {path}: {status}")
        for query in ("q=Das%FFHaus&format=svg", "q=%ED%A0%80", "q=Das+Haus&api_key=%C3"):
            status = client.get(f"/v1/heatmap?{query}").status_code
            statuses[status] += 1
            if status != 400:
                not_400.append(f"GET ?{query}: {status}")
        bom = b"\xef\xbb\xbf"
        libre = client.post("/translate", content=bom + b'{"q": "Das Haus ist klein.", "source": "de", "target": "en"}')
        native = client.post("/v1/translate", content=bom + b'{"text": "Das Haus ist klein.", "source": "de"}')
    statuses.update([libre.status_code, native.status_code])
    STATUSES.update(statuses)
    return {
        "part": "odd_json",
        "requests": sum(statuses.values()),
        "statuses": dict(statuses),
        "not_400": not_400,
        "byte_order_mark": [libre.status_code, native.status_code],
        "same_translation": libre.status_code == native.status_code == 200
        and libre.json()["translatedText"] == native.json()["translations"][0]["text"],
    }


def _abandon(url: str, body: bytes, count: int, after_s: float) -> None:
    """`count` requests of `body` to /v1/translate whose clients hang up after `after_s`."""
    head = b"POST /v1/translate HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    sockets = [socket.create_connection(_address(url)) for _ in range(count)]
    for sock in sockets:
        sock.sendall(head % len(body) + body)
    time.sleep(after_s)
    for sock in sockets:
        sock.close()


def abandoned(url: str, test: Path | None, models: Path, threads: int) -> dict:
    """Eight maximal requests abandoned after 0.5 s, then a maximal one 3 s later; then, on a
    second server, eight abandoned ones and a stop right after."""
    body = json.dumps({"texts": maximal_texts(test), "source": "de", "beam_size": 8, "alignment": False}).encode()
    _abandon(url, body, 8, 0.5)  # no answers: the server counts them as 499 (client closed request)
    closed = time.monotonic()
    time.sleep(max(0.0, 3.0 - (time.monotonic() - closed)))
    metrics = _scrape(url)
    start = time.monotonic()
    maximal = httpx.post(url + "/v1/translate", content=body, headers={"Content-Type": "application/json"}, timeout=600)
    latency = time.monotonic() - start
    STATUSES[maximal.status_code] += 1
    process, second = start_server(models, 5.0, threads)
    _abandon(second, body, 8, 0.5)
    stop = time.monotonic()
    process.terminate()
    process.wait(timeout=60)
    return {
        "part": "abandoned",
        "maximal_status_3s_after": maximal.status_code,
        "maximal_latency_s": round(latency, 2),
        "queued_work_3s_after": metrics.get('crossalign_queued_work{model="de-en"}'),
        "in_flight_3s_after": metrics.get("crossalign_requests_in_flight", 0) - 1,  # less the scrape itself
        "dropped_499": metrics.get('crossalign_requests_total{method="POST",route="/v1/translate",status="499"}'),
        "shutdown_s": round(time.monotonic() - stop, 2),
    }


def slow_clients(url: str, heads: int, trickle_interval_s: float) -> dict:
    """`heads` connections holding an unfinished head, and one body trickled a byte at a time."""
    from service.settings import Settings

    limits = Settings()
    start = time.monotonic()
    holders = [socket.create_connection(_address(url), timeout=120) for _ in range(heads)]
    for sock in holders:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: bench\r\n")
    trickler = socket.create_connection(_address(url), timeout=120)
    trickler.sendall(
        b"POST /translate HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
    )
    trickled_at = time.monotonic()

    def trickle() -> None:  # until the server has closed the connection (a send then fails)
        with contextlib.suppress(OSError):
            while True:
                time.sleep(trickle_interval_s)
                trickler.sendall(b" ")

    def closed(sock: socket.socket) -> tuple[bytes, float]:
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := sock.recv(4096):
                answer += chunk
        return answer, time.monotonic() - start

    feeder = threading.Thread(target=trickle)
    feeder.start()
    with ThreadPoolExecutor(64) as pool:
        outcomes = list(pool.map(closed, holders))
        body_answer, body_closed = pool.submit(closed, trickler).result()
    feeder.join()
    for sock in [*holders, trickler]:
        sock.close()
    statuses = Counter(int(answer.split(b" ", 2)[1]) if answer else -1 for answer, _ in outcomes)
    body_status = int(body_answer.split(b" ", 2)[1]) if body_answer else -1
    STATUSES.update([*statuses.elements(), body_status])
    return {
        "part": "slow_clients",
        "head_timeout_s": limits.head_timeout_s,
        "body_timeout_s": limits.body_timeout_s,
        "half_open_heads": heads,
        "heads_closed_by_s": round(max(seconds for _, seconds in outcomes), 2),
        "heads_answered": dict(statuses),
        "trickled_body_closed_by_s": round(body_closed - (trickled_at - start), 2),  # after its head
        "trickled_body_answer": body_status,
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


FILE_BOMBS = {  # name -> how tests/hostile_documents.py (`h`) builds it
    "odt_1mb_liar.odt": lambda h: h.odt_bomb(1),
    "docx_1mb_liar.docx": lambda h: h.docx_bomb(1),
    "odt_1mb_plausible.odt": lambda h: h.odt_bomb(1, plausible=True),
    "docx_150mib_xml.docx": lambda h: h.docx_xml_bomb(150),
    "entries_400k.docx": lambda h: h.many_entries(400_000),
    "tags_2mib.html": lambda h: h.open_tags(2),
    "paragraphs_2mib.html": lambda h: h.empty_paragraphs(2),
}


def file_bombs(url: str, pid: int) -> dict:
    """Each hostile file uploaded alone: its status, seconds, the server's peak RSS growth."""
    sys.path.insert(0, str(REPO / "tests"))
    import hostile_documents as hostile

    rows, slowest_health = [], 0.0
    with httpx.Client(base_url=url, timeout=300) as client:
        for name, build in FILE_BOMBS.items():
            data = build(hostile)
            before = rss_mb(pid)
            Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM from here
            start = time.perf_counter()
            with ThreadPoolExecutor(1) as pool:
                sent = pool.submit(
                    client.post,
                    "/translate_file",
                    files={"file": (name, data)},
                    data={"source": "de", "target": "en"},
                )
                while not sent.done():
                    asked = time.perf_counter()
                    client.get("/health")
                    slowest_health = max(slowest_health, time.perf_counter() - asked)
                    time.sleep(0.05)
                answer = sent.result()
            STATUSES[answer.status_code] += 1
            peak = next(
                int(line.split()[1]) / 1024
                for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                if line.startswith("VmHWM:")
            )
            rows.append(f"{name}:{answer.status_code}/{time.perf_counter() - start:.2f}s/+{peak - before:.0f}MB")
    return {"part": "file_bombs", "files": " ".join(rows), "health_slowest_s": round(slowest_health, 3)}


PARTS = [
    "mixed",
    "chunked",
    "starvation",
    "junk_methods",
    "render_flood",
    "odd_json",
    "abandoned",
    "slow_clients",
    "schemathesis",
    "file_bombs",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=Path("models"), help="model bundles to serve (default models)")
    parser.add_argument(
        "--test",
        type=Path,
        help="source<TAB>target file for the maximal requests' texts (default: a few built-in sentences)",
    )
    parser.add_argument("--parts", nargs="+", default=PARTS, choices=PARTS, help="what to measure (default: all)")
    parser.add_argument("--junk", type=int, default=1000, help="junk_methods: requests (default 1000)")
    parser.add_argument("--heatmaps", type=int, default=48, help="render_flood: concurrent heatmaps (default 48)")
    parser.add_argument(
        "--settle", type=float, default=30.0, help="render_flood: seconds before RSS is read again (default 30)"
    )
    parser.add_argument("--heads", type=int, default=300, help="slow_clients: half-open heads (default 300)")
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
            elif part == "junk_methods":
                row = junk_methods(url, process.pid, args.junk)
            elif part == "render_flood":
                row = render_flood(url, process.pid, args.heatmaps, args.settle)
            elif part == "odd_json":
                row = odd_json(url)
            elif part == "abandoned":
                row = abandoned(url, args.test, args.models, args.threads)
            elif part == "slow_clients":
                row = slow_clients(url, args.heads, 2.0)
            elif part == "file_bombs":
                row = file_bombs(url, process.pid)
            else:
                row = schemathesis(url, args.examples, args.seed)
            show(row, args.json)
    finally:
        process.terminate()
        process.wait(timeout=30)
    errors = {status: n for status, n in STATUSES.items() if status >= 500 and status != 503}
    show(
        {
            "part": "probe",
            "answers": sum(STATUSES.values()),
            "statuses": dict(sorted(STATUSES.items())),
            "server_errors": sum(errors.values()),
            "busy_503": STATUSES[503],
        },
        args.json,
    )


def show(row: dict, as_json: bool) -> None:
    print(json.dumps(row) if as_json else "  ".join(f"{k}={v}" for k, v in row.items()), flush=True)


if __name__ == "__main__":
    main()
