"""One bad request never hurts another; limits that hold; an OpenAPI document that tells the truth.

Against a real server (`python -m service.serve`, uvicorn, onnxruntime, a tiny toy model):

- a mixed batch: good requests sent together with a text that cannot be encoded (a lone
  surrogate) on every translating route: only the bad one fails (400), every good one gets
  its single-request answer, and every keep-alive connection stays open;
- a chunked body far over the byte limit: 413 while the server's memory stays flat; an
  oversize header: refused, and the server goes on;
- starvation: a one-sentence request sent behind four maximal requests is answered long
  before they are, within a bound;
- schemathesis with all checks against the live document: no failures;
- `serve` with a broken bundle beside a good one: one line names it, /health lists it,
  the good one is served; the access log never shows a key.

Hardening (issue 32), on a server with API keys and one-second read timeouts: junk methods
add no metric series; every 405 names the methods served and HEAD answers every GET; odd
JSON (huge integers, deep nesting, NaN, not UTF-8, ...) is a 400 on every route; the body
limit is exact, declared or chunked; a flood of 4000 x 4000 heatmaps leaves /health fast
and the memory near its baseline; abandoned requests leave the queue, and shutdown after
them is prompt; half-open heads and trickled bodies are closed within the timeout;
newcomers from other keys are not starved; no key reaches any log line.

And the scheduler itself (service.compute.batching), where timing is exact: fair turns (three
clients, newcomers in the next call), the queue bound, a failing batch retried request by
request, cancellation of queued and running rows.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import shutil
import socket
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
from test_service_server import free_port, serving, start_server
from toy import SENTENCES, toy_pairs

from seq2seq.core.config import DecodeConfig
from service.app import SERVED_METHODS
from service.compute.batching import CancelToken, MicroBatcher, QueueFull
from service.compute.engine import TranslatorEngine, model_call

REPO = Path(__file__).resolve().parents[1]
BAD = '"de \\ud800 klein"'  # JSON for a string with a lone surrogate: valid JSON, not UTF-8-encodable


@pytest.fixture(scope="module")
def models(tiny_bundle: Path) -> Path:
    """The directory holding the shared tiny bundle (tests/conftest.py), as `serve --models` takes it."""
    return tiny_bundle.parent


@pytest.fixture(scope="module")
def server(models: Path) -> tuple[str, subprocess.Popen]:
    # Small beam-row batches, so that a maximal request takes many model calls (as on the real
    # model, where each call is slow): the starvation case then has something to starve.
    # A long keep-alive: the test checks that no connection is closed for another's error, and
    # a loaded machine may leave one idle past the default 5 s between rounds.
    with serving(models, batch_window_ms="5", max_batch_rows="16", keep_alive_s="120") as running:
        yield running


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


# --------------------------------------------------------------------------- one bad request


def _requests(good: str, bad: bool) -> dict[str, tuple[str, str]]:
    """route -> (path, JSON body) with `good` text, or the unencodable one."""
    text = BAD if bad else json.dumps(good)
    return {
        "libre": ("/translate", f'{{"q": {text}, "source": "de", "target": "en"}}'),
        "native": ("/v1/translate", f'{{"text": {text}, "source": "de", "alignment": false}}'),
        "heatmap": ("/v1/heatmap", f'{{"q": {text}, "source": "de", "format": "svg"}}'),
        "attention": ("/v1/attention", f'{{"text": {text}, "source": "de"}}'),
        "align": ("/v1/align", f'{{"text": {text}, "translation": "the dog", "source": "de"}}'),
    }


def same_answer(got: bytes, alone: bytes) -> bool:
    """The same answer, up to float noise: a sentence batched with others is padded, which
    moves attention weights in their last digits. An SVG heatmap is compared by its text
    (tokens, caption); a JSON answer by its values, numbers to 1e-3."""
    if got.startswith(b"<?xml"):

        def texts(svg: bytes) -> list[str | None]:
            return [e.text for e in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}text")]

        return texts(got) == texts(alone)

    def close(a: object, b: object) -> bool:
        if isinstance(a, float) or isinstance(b, float):
            return isinstance(a, (int, float)) and isinstance(b, (int, float)) and abs(a - b) <= 1e-3
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
        return a == b

    return close(json.loads(got), json.loads(alone))


@pytest.mark.parametrize("route", ["libre", "native", "heatmap", "attention", "align"])
def test_a_bad_text_fails_alone_and_keeps_every_connection(server: tuple[str, subprocess.Popen], route: str) -> None:
    """11 good requests and 1 bad one, sent together on 12 keep-alive connections, 3 rounds."""
    url, _ = server
    host, port = url.removeprefix("http://").split(":")
    texts = [pair[0] for pair in toy_pairs(11, seed=7)]
    expected = {}
    for text in texts:  # each good request's answer when it is sent alone
        path, body = _requests(text, bad=False)[route]
        expected[text] = httpx.post(
            url + path, content=body, headers={"Content-Type": "application/json"}, timeout=60
        ).content
    connections = [http.client.HTTPConnection(host, int(port), timeout=60) for _ in range(12)]
    for connection in connections:
        connection.connect()
    sockets = [connection.sock for connection in connections]

    def send(index: int, barrier: threading.Barrier) -> tuple[int, bytes]:
        path, body = _requests(texts[index] if index < 11 else "", bad=index == 11)[route]
        barrier.wait()
        connections[index].request("POST", path, body, {"Content-Type": "application/json"})
        response = connections[index].getresponse()
        return response.status, response.read()

    with ThreadPoolExecutor(12) as pool:
        for _ in range(3):
            barrier = threading.Barrier(12)
            answers = list(pool.map(lambda i, barrier=barrier: send(i, barrier), range(12)))
            for index, (status, content) in enumerate(answers[:11]):
                assert status == 200, content
                assert same_answer(content, expected[texts[index]]), f"request {index} differs from its answer alone"
            status, content = answers[11]
            assert status == 400 and "lone surrogate U+D800" in json.loads(content)["error"]
    # Nobody's connection was closed: the same sockets still carry requests.
    assert [connection.sock for connection in connections] == sockets
    for connection in connections:
        connection.request("GET", "/health")
        assert connection.getresponse().read() and connection.sock in sockets
        connection.close()


# --------------------------------------------------------------------------- limits that hold


def test_a_chunked_body_over_the_limit_is_refused_without_memory_growth(server: tuple[str, subprocess.Popen]) -> None:
    url, process = server
    host, port = url.removeprefix("http://").split(":")
    before = peak = rss_mb(process.pid)
    chunk = b"a" * (1 << 20)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        sent = 0
        try:
            while sent < 64 << 20:  # 64 MiB (the benchmark sends 200 MB; this keeps the test quick)
                sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                sent += len(chunk)
                peak = max(peak, rss_mb(process.pid))
        except OSError:
            pass  # the server may stop reading: the answer is already there
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"exceeds the limit of 1048576 bytes" in answer
    assert peak - before < 20, f"server memory grew {peak - before:.0f} MB"
    assert httpx.get(url + "/health", timeout=10).status_code == 200


@pytest.mark.parametrize("size", [40_000, 10_000_000])
def test_an_oversize_header_is_refused(server: tuple[str, subprocess.Popen], size: int) -> None:
    url, _ = server
    host, port = url.removeprefix("http://").split(":")
    start = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        # Refused while still sending: the answer (or the reset) is what counts.
        with contextlib.suppress(OSError):
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Padding: " + b"a" * size + b"\r\n\r\n")
        try:
            answer = sock.recv(4096)
        except ConnectionResetError:
            answer = b"reset"
    assert answer.startswith((b"HTTP/1.1 431", b"HTTP/1.1 400")) or answer == b"reset", answer[:200]
    assert time.monotonic() - start < 10
    assert httpx.get(url + "/health", timeout=10).status_code == 200


def test_a_small_request_is_not_starved_by_maximal_ones(server: tuple[str, subprocess.Popen]) -> None:
    """Four requests at the work cap (64 texts, beam 8), then one sentence from the same address."""
    url, _ = server
    texts = [pair[0][:39] for pair in toy_pairs(64, seed=3)]  # 64 x <=39 characters x beam 8 <= 20,000
    heavy_body = {"texts": texts, "source": "de", "beam_size": 8, "alignment": False}
    finished: list[float] = []
    start = time.monotonic()

    def heavy() -> int:
        response = httpx.post(url + "/v1/translate", json=heavy_body, timeout=300)
        finished.append(time.monotonic() - start)
        return response.status_code if response.status_code == 200 else response.text

    with ThreadPoolExecutor(4) as pool:
        heavies = [pool.submit(heavy) for _ in range(4)]
        time.sleep(0.5)  # they are queued and running
        sent = time.monotonic()
        small = httpx.post(url + "/translate", json={"q": SENTENCES[0], "source": "de", "target": "en"}, timeout=300)
        latency = time.monotonic() - sent
        assert [h.result() for h in heavies] == [200] * 4
    assert small.status_code == 200 and small.json()["translatedText"]
    heavy_time = min(finished)
    # Fair turns: the sentence rides in the next model call instead of waiting for 256 sentences
    # at beam 8. The bound is generous for a loaded 2-core machine; FIFO would be heavy_time.
    assert latency <= 2.0, f"one sentence took {latency:.2f} s behind the maximal requests"
    assert latency < heavy_time / 3, f"one sentence took {latency:.2f} s, the first heavy one {heavy_time:.2f} s"


# --------------------------------------------------------------------------- the document


def test_schemathesis_finds_no_failures(models: Path, tmp_path: Path) -> None:
    """All checks, a fixed seed, bounded examples per operation (fuzzing phase; the slower
    boundary-value phase runs in bench/service_reliability.py)."""
    with serving(models, char_limit="200", batch_limit="4", max_beam_size="4", heatmap_max_tokens="40") as (url, _):
        result = subprocess.run(
            [
                str(Path(sys.executable).parent / "schemathesis"),
                "--config-file",
                str(REPO / "tests" / "schemathesis.toml"),
                "--no-color",
                "run",
                f"{url}/openapi.json",
                "--checks",
                "all",
                "--phases",
                "examples,fuzzing",
                "--max-examples",
                "25",
                "--seed",
                "1",
                "--generation-deterministic",
                "--workers",
                "1",
                "--request-timeout",
                "60",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=280,
        )
    assert result.returncode == 0 and "No issues found" in result.stdout, result.stdout[-6000:]


# --------------------------------------------------------------------------- serve


def test_serve_names_a_bad_bundle_and_serves_the_good_ones(models: Path, tmp_path: Path) -> None:
    root = tmp_path / "models"
    shutil.copytree(models / "de-en", root / "de-en")
    (root / "broken").mkdir()
    (root / "broken" / "bundle.json").write_text('{"format": "crossalign-bundle", ')
    port, log = free_port(), tmp_path / "serve.log"
    process = start_server(root, port, log=log, log_level="info", api_keys="sesame-key")
    try:
        health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).json()
        assert health["status"] == "degraded" and [m["name"] for m in health["models"]] == ["de-en"]
        (failed,) = health["failed"]
        assert failed["name"] == "broken" and "bundle.json" in failed["error"]
        answer = httpx.get(f"http://127.0.0.1:{port}/languages?api_key=sesame-key", timeout=10)
        assert answer.status_code == 200
    finally:
        process.terminate()
        process.wait(timeout=15)
    output = log.read_text()
    named = [line for line in output.splitlines() if "broken" in line]
    assert named and all("bundle.json: unreadable manifest" in line for line in named), output
    assert "Traceback" not in output
    assert "/languages?api_key=[redacted]" in output and "sesame-key" not in output


def test_serve_with_no_usable_bundle_says_so_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "bundle.json").write_text("not json")
    result = subprocess.run(
        [sys.executable, "-m", "service.serve", "--models", str(tmp_path), "--port", "9"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 2, result.stderr
    assert f"{tmp_path / 'broken' / 'bundle.json'}: unreadable manifest" in result.stderr


# --------------------------------------------------------------------------- the scheduler


def _recording_run(batches: list[list[str]], gate: threading.Event | None = None):
    def run(texts: list[str], config: DecodeConfig, wanted: Callable[[], np.ndarray], observe=None) -> list[str]:
        if gate is not None:
            gate.wait(10)
        batches.append(list(texts))
        if any("poison" in text for text in texts):
            raise RuntimeError("the model failed")
        return [text.upper() for text in texts]

    return run


def test_batches_are_dealt_fairly_between_clients_and_requests() -> None:
    batches: list[list[str]] = []
    gate = threading.Event()
    batcher = MicroBatcher(_recording_run(batches, gate), window_s=0.01, max_sentences=64, max_rows=16)
    config = DecodeConfig(beam_size=4)
    heavy = [batcher.submit([f"heavy{r}-{i}" for i in range(40)], config, client="a") for r in range(4)]
    small = batcher.submit(["small"], config, client="b")
    # The same client, another beam: it waits for its own batch, and nothing waits forever.
    other = batcher.submit(["other"], DecodeConfig(beam_size=2), client="a")
    gate.set()
    assert small.result(timeout=10) == ["SMALL"] and other.result(timeout=10) == ["OTHER"]
    assert [f.result(timeout=10) for f in heavy][0][:2] == ["HEAVY0-0", "HEAVY0-1"]
    batcher.close()
    assert all(len(batch) <= 4 for batch in batches)  # 16 beam rows / beam 4
    first_with_small = next(i for i, batch in enumerate(batches) if "small" in batch)
    assert first_with_small <= 1, batches[:3]  # not after 160 heavy sentences
    assert batches.index(["other"]) <= 2, batches[:4]  # its own beam size: the next call but one
    dealt = {text.split("-")[0] for text in batches[0] + batches[1] if text.startswith("heavy")}
    assert len(dealt) >= 3, batches[:2]  # a's requests take turns too


def test_a_failing_batch_is_retried_request_by_request() -> None:
    batches: list[list[str]] = []
    gate = threading.Event()
    batcher = MicroBatcher(_recording_run(batches, gate), window_s=0.01, max_sentences=64)
    config = DecodeConfig(beam_size=1)
    good = [batcher.submit([f"good{i}", f"fine{i}"], config, client=f"c{i}") for i in range(5)]
    bad = batcher.submit(["ok", "poison"], config, client="x")
    gate.set()
    assert [f.result(timeout=10) for f in good] == [[f"GOOD{i}", f"FINE{i}"] for i in range(5)]
    with pytest.raises(RuntimeError):
        bad.result(timeout=10)
    assert batcher.queued_work == 0
    batcher.close()


def test_the_queue_is_bounded_and_says_when_to_retry() -> None:
    gate = threading.Event()
    batcher = MicroBatcher(_recording_run([], gate), window_s=0.01, max_sentences=64, max_queue_work=100)
    config = DecodeConfig(beam_size=2)
    first = batcher.submit(["x" * 40], config)  # 80 units
    with pytest.raises(QueueFull) as full:
        batcher.submit(["y" * 20], config)  # 80 + 40 > 100
    assert full.value.retry_after >= 1
    gate.set()
    assert first.result(timeout=10) == ["X" * 40]
    assert batcher.submit(["y" * 20], config).result(timeout=10) == ["Y" * 20]
    batcher.close()


def test_newcomers_ride_in_the_next_call_however_many_clients_wait() -> None:
    """Three heavy clients share every call (a scheduler that fills a batch from one client
    fails here), and each of two newcomers, sent while a call runs, rides in the very next
    one: its wait is bounded by the call in progress, not by the clients ahead of it."""
    batches: list[list[str]] = []
    gate, started = threading.Event(), threading.Event()

    def run(texts: list[str], config: DecodeConfig, wanted: Callable[[], np.ndarray], observe=None) -> list[str]:
        batches.append(list(texts))
        started.set()
        gate.wait(10)
        return [text.upper() for text in texts]

    batcher = MicroBatcher(run, window_s=0.05, max_sentences=64, max_rows=16)  # 4 sentences at beam 4
    config = DecodeConfig(beam_size=4)
    heavy = [
        batcher.submit([f"{client}{r}-{i}" for i in range(12)], config, client=client)
        for client in ("a", "b", "c")
        for r in range(2)
    ]
    started.wait(10)  # the first call runs; the newcomers arrive now
    newcomers = [batcher.submit([name], config, client=name) for name in ("new1", "new2")]
    time.sleep(0.05)
    gate.set()
    assert [f.result(timeout=10) for f in newcomers] == [["NEW1"], ["NEW2"]]
    for future in heavy:
        future.result(timeout=10)
    batcher.close()
    assert {"new1", "new2"} <= set(batches[1]), batches[:3]  # the very next call
    for batch in batches[:6]:  # while all three wait, every call holds each of them
        if batch != batches[1]:
            assert {text[0] for text in batch} == {"a", "b", "c"}, batches[:6]


def test_cancelling_a_request_drops_its_rows_queued_and_running() -> None:
    """The cancellation API (service.compute.batching): cancelling a request's future, directly or
    through a `CancelToken`, takes its rows not yet dealt out of the queue and its work out of
    the bound at once, and marks its rows in the running call as no longer wanted (the search
    drops them at its next step); the other client's request is served whole."""
    seen: list[np.ndarray] = []
    gate, started = threading.Event(), threading.Event()

    def run(texts: list[str], config: DecodeConfig, wanted: Callable[[], np.ndarray], observe=None) -> list[str | None]:
        started.set()
        gate.wait(10)
        seen.append(wanted())
        return [text.upper() if keep else None for text, keep in zip(texts, wanted())]

    batcher = MicroBatcher(run, window_s=0.05, max_sentences=4)
    config = DecodeConfig(beam_size=1)
    token = CancelToken()
    gone = batcher.submit([f"gone{i}" for i in range(6)], config, client="a", token=token)
    kept = batcher.submit(["kept0", "kept1"], config, client="b")
    started.wait(10)  # the first call holds gone0, gone1, kept0, kept1 (dealt in turns, run by request)
    token.cancel()
    assert gone.cancelled() and batcher.queued_work == 10  # kept's two rows of 5 characters
    gate.set()
    assert kept.result(timeout=10) == ["KEPT0", "KEPT1"]
    with pytest.raises(CancelledError):
        gone.result(timeout=1)
    batcher.close()
    assert seen[0].tolist() == [False, False, True, True] and len(seen) == 1  # gone2..5 never ran
    assert batcher.queued_work == 0
    late = Future()
    token.bind(late)  # a token already cancelled cancels what is bound to it at once
    assert late.cancelled()


def test_a_cancelled_request_leaves_the_running_search(echo_engine: TranslatorEngine) -> None:
    """End to end through the engine's translator: a client's long sentence, batched with
    another client's short one, stops at the search step after the cancel (the echo model
    would copy it for 40 steps), and the short one gets its full translation."""
    translator = echo_engine.models["de", "en"].translator
    steps, gate = [], threading.Event()
    step = translator.backend.step

    def gated(*args, **kwargs):
        steps.append(1)
        if len(steps) == 2:
            gate.wait(10)
        return step(*args, **kwargs)

    translator.backend.step = gated
    batcher = MicroBatcher(model_call(translator), window_s=0.05, max_sentences=8)
    try:
        token = CancelToken()
        long = batcher.submit([" ".join(["a", "b", "c", "d"] * 10)], DecodeConfig(beam_size=2), "x", token)
        short = batcher.submit(["a b c"], DecodeConfig(beam_size=2), "y")
        while len(steps) < 2:
            time.sleep(0.01)
        token.cancel()
        gate.set()
        assert short.result(timeout=10)[0].text == "a b c"
        assert long.cancelled() and len(steps) <= 6, len(steps)  # a b c and EOS: 4 steps, not 41
    finally:
        del translator.backend.step
        batcher.close()


# --------------------------------------------------------------------------- hardening, on a real server
#
# One server with API keys and short read timeouts; its log (info level) is read at the end
# for API keys. Each test names the issue-32 behaviour it holds.

KEYS = ["key-one-7f3a", "key-two-91bc", "key-three-c4d2", "key-four-0e5f", "key-five-b8a6"]
HEAD_TIMEOUT_S = BODY_TIMEOUT_S = 1.0
BODY_LIMIT = 8192


@pytest.fixture(scope="module")
def hardened(models: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, subprocess.Popen, Path]:
    log = tmp_path_factory.mktemp("hardened") / "serve.log"
    port = free_port()
    process = start_server(
        models,
        port,
        log=log,
        log_level="info",
        api_keys=",".join(KEYS),
        head_timeout_s=str(HEAD_TIMEOUT_S),
        body_timeout_s=str(BODY_TIMEOUT_S),
        max_body_bytes=str(BODY_LIMIT),
        max_batch_rows="16",  # a maximal request takes many model calls, as on the real model
        max_render_pixels="32000000",  # two 4000 x 4000 heatmaps
        keep_alive_s="30",
    )
    yield f"http://127.0.0.1:{port}", process, log
    process.terminate()
    process.wait(timeout=15)


def key(index: int = 0) -> dict[str, str]:
    return {"X-API-Key": KEYS[index]}


def scrape(url: str) -> dict[str, float]:
    """The server's metrics: `name{labels}` -> value."""
    text = httpx.get(url + "/metrics", timeout=10).text
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line[:1] != "#"}


def raw(url: str, request: bytes, timeout: float = 10) -> bytes:
    """Send `request` as it is on a fresh connection; what came back before the server closed it."""
    host, port = url.removeprefix("http://").split(":")
    answer = b""
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(request)
        with contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                answer += chunk
                if b"\r\n\r\n" in answer and _complete(answer):
                    break
    return answer


def _complete(answer: bytes) -> bool:
    head, _, body = answer.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False


def test_junk_methods_add_no_metric_series(hardened: tuple[str, subprocess.Popen, Path]) -> None:
    """Issue 32, 1: every method outside the served ones is labelled "other"."""
    url, _, _ = hardened
    host, port = url.removeprefix("http://").split(":")
    before = len(httpx.get(url + "/metrics", timeout=10).content)
    statuses = set()
    for index in range(120):
        method = f"M{index}" + "A" * (10_000 if index % 4 == 0 else index)
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        connection.request(method, ("/health", "/translate", "/nowhere")[index % 3])
        statuses.add(connection.getresponse().status)
        connection.close()
    text = httpx.get(url + "/metrics", timeout=10).text
    assert statuses <= {404, 405}, statuses
    methods = {line.split('method="')[1].split('"')[0] for line in text.splitlines() if 'method="' in line}
    assert methods <= SERVED_METHODS | {"other"} and "other" in methods, methods
    assert len(text.encode()) - before < 20_000, f"/metrics grew {len(text.encode()) - before} bytes"


def test_every_405_names_the_methods_served_and_head_answers_every_get(
    hardened: tuple[str, subprocess.Popen, Path],
) -> None:
    """Issue 32, 5: `Allow` on a 405 lists what the routes serve at that path (HEAD with
    GET), and HEAD answers wherever GET does, with its status and headers and no body."""
    url, _, _ = hardened
    document = httpx.get(url + "/openapi.json", timeout=10).json()["paths"]
    served = {path: {method.upper() for method in operations} for path, operations in document.items()}
    served |= {path: {"GET"} for path in ("/", "/favicon.ico", "/static/explorer.js", "/docs")}
    assert set().union(*served.values()) <= SERVED_METHODS  # the metrics' method labels cover the routes
    with httpx.Client(base_url=url, headers=key(), timeout=30) as client:
        for path, methods in served.items():
            allowed = methods | ({"HEAD"} if "GET" in methods else set())
            for method in {"GET", "POST", "PUT", "DELETE", "PATCH"} - methods:
                refused = client.request(method, path)
                assert refused.status_code == 405, (method, path, refused.text)
                assert set(refused.headers["allow"].split(", ")) == allowed, (method, path, refused.headers)
            if "GET" in methods:
                get, head = client.get(path), client.head(path)
                assert head.status_code == get.status_code and head.content == b"", path
                assert head.headers["content-type"] == get.headers["content-type"], path
                if path != "/metrics":  # the rest answer the same bytes twice
                    assert int(head.headers["content-length"]) == len(get.content), path
        assert client.head("/v1/heatmap", params={"q": "der Hund", "format": "svg"}).status_code == 200


ODD_JSON = {
    # kind: (body bytes, what the 400 says)
    "huge integer": (b'{"q": ' + b"7" * 5000 + b"}", "digits"),
    "nested 2,000 deep": (b"[" * 2000 + b"]" * 2000, "nested deeper"),
    "nested 200 deep": (b'{"q": ' + b"[" * 200 + b"]" * 200 + b"}", "nested deeper"),
    "NaN": (b'{"q": NaN}', "NaN is not JSON"),
    "Infinity": (b'{"q": -Infinity}', "-Infinity is not JSON"),
    "out of range": (b'{"q": 1e999}', "out of range"),
    "not UTF-8": (b'{"q": "Haus \xff"}', "not valid UTF-8"),
    "UTF-16": ('{"q": "Haus"}'.encode("utf-16"), "not valid UTF-8"),
    "empty": (b"", "empty body"),
    "truncated": (b'{"q": "Haus", ', "malformed JSON"),
    "trailing data": (b'{"q": "Haus"} {}', "malformed JSON"),
    "not an object": (b'["Haus"]', ""),
}
ROUTES_READING_JSON = ["/translate", "/detect", "/v1/translate", "/v1/align", "/v1/heatmap", "/v1/attention"]


@pytest.mark.parametrize("kind", list(ODD_JSON))
def test_odd_json_is_a_400_on_every_route(hardened: tuple[str, subprocess.Popen, Path], kind: str) -> None:
    """Issue 32, 3: one JSON reader behind every route; each parse failure is a 400 that says why."""
    url, _, _ = hardened
    body, message = ODD_JSON[kind]
    for path in ROUTES_READING_JSON:
        answer = httpx.post(url + path, content=body, headers={**key(), "Content-Type": "application/json"})
        assert answer.status_code == 400, (path, answer.status_code, answer.text[:300])
        assert message in answer.json()["error"], (path, answer.text[:300])


def test_a_byte_order_mark_is_read_alike_and_a_bad_query_is_a_400(hardened: tuple[str, subprocess.Popen, Path]) -> None:
    """Issue 32, 8: a UTF-8 BOM before the JSON is skipped on /translate and /v1/translate alike;
    a GET query that is not UTF-8 once percent-decoded gets the 400 a form gets."""
    url, _, _ = hardened
    headers = {**key(), "Content-Type": "application/json"}
    bom = b"\xef\xbb\xbf"
    libre = httpx.post(
        url + "/translate", content=bom + b'{"q": "der Hund", "source": "de", "target": "en"}', headers=headers
    )
    native = httpx.post(url + "/v1/translate", content=bom + b'{"text": "der Hund", "source": "de"}', headers=headers)
    assert libre.status_code == native.status_code == 200, (libre.text, native.text)
    assert libre.json()["translatedText"] == native.json()["translations"][0]["text"]
    for query in ("q=der%FFHund", "q=der+Hund&format=svg&x=%C3", "q=%ED%A0%80"):
        answer = httpx.get(f"{url}/v1/heatmap?{query}", headers=key())
        assert answer.status_code == 400 and "not valid UTF-8 after percent-decoding" in answer.json()["error"], query
    form = httpx.post(
        url + "/translate",
        content=b"q=der%FFHund&source=de&target=en",
        headers={**key(), "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert form.status_code == 400 and "not valid UTF-8 after percent-decoding" in form.json()["error"]


def test_the_body_limit_is_exact_declared_and_chunked(hardened: tuple[str, subprocess.Popen, Path]) -> None:
    """Issue 32, the Content-Length gap: a body of exactly `max_body_bytes` is read, one byte
    more is 413, whether its length is declared or it comes chunked."""
    url, _, _ = hardened
    request = b'{"q": "der Hund", "source": "de", "target": "en"}'
    for size, status in ((BODY_LIMIT, 200), (BODY_LIMIT + 1, 413)):
        body = request + b" " * (size - len(request))
        declared = httpx.post(url + "/translate", content=body, headers={**key(), "Content-Type": "application/json"})
        assert declared.status_code == status, (size, declared.text)
        head = (
            b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-API-Key: "
            + KEYS[0].encode()
            + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        halves = (body[: size // 2], body[size // 2 :])
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in halves) + b"0\r\n\r\n"
        chunked = raw(url, head + chunks)
        assert chunked.startswith(b"HTTP/1.1 %d" % status), (size, chunked[:300])


# Asks URL/health every 50 ms until the file STOP exists, printing each answer's seconds (a 200's).
HEALTH_WATCH = """
import os, sys, time, httpx
url, stop = sys.argv[1], sys.argv[2]
with httpx.Client(timeout=30) as client:
    while not os.path.exists(stop):
        start = time.monotonic()
        assert client.get(url + "/health").status_code == 200
        print(time.monotonic() - start, flush=True)
        time.sleep(0.05)
"""


def test_a_render_flood_leaves_health_fast_and_memory_near_its_baseline(
    hardened: tuple[str, subprocess.Popen, Path], tmp_path: Path
) -> None:
    """Issue 32, 2: 16 concurrent 4000 x 4000 PNG heatmaps. They are drawn one at a time on the
    render thread, within the pixel bound (two here); the rest get 503 with Retry-After before
    translating. /health (on the event loop) and a translation (in the request pool) answer
    meanwhile, and 3 s after the flood the server's memory is within 1.5x of its baseline
    (the figures are collected and the heap trimmed after every render)."""
    url, process, _ = hardened
    # Warm: a heatmap drawn, the language identifier loaded (in the background since the start).
    httpx.get(url + "/v1/heatmap", params={"q": "der Hund", "format": "svg"}, headers=key(), timeout=60)
    httpx.post(url + "/detect", json={"q": SENTENCES[0]}, headers=key(), timeout=60)
    baseline = rss_mb(process.pid)
    body = {"q": SENTENCES[1], "source": "de", "format": "png", "width": 4000, "height": 4000}
    # /health is asked from a process of its own: from a thread of this one, its times would
    # hold this process's 16 flooding threads' turns on the interpreter, not the server's answer.
    stop = tmp_path / "stop"
    watcher = subprocess.Popen([sys.executable, "-c", HEALTH_WATCH, url, str(stop)], stdout=subprocess.PIPE, text=True)
    with ThreadPoolExecutor(16) as pool:
        flood = [
            pool.submit(httpx.post, url + "/v1/heatmap", json=body, headers=key(i % 5), timeout=120) for i in range(16)
        ]
        time.sleep(0.5)
        start = time.monotonic()
        translated = httpx.post(
            url + "/translate", json={"q": "der Hund", "source": "de", "target": "en"}, headers=key(), timeout=60
        )
        translation_s = time.monotonic() - start
        answers = [f.result() for f in flood]
    stop.touch()
    output, _ = watcher.communicate(timeout=60)
    latencies = [float(line) for line in output.split()]
    statuses = [a.status_code for a in answers]
    assert set(statuses) <= {200, 503} and statuses.count(200) >= 2, statuses
    assert all(int(a.headers["Retry-After"]) >= 1 for a in answers if a.status_code == 503)
    assert all(a.content[:8] == b"\x89PNG\r\n\x1a\n" for a in answers if a.status_code == 200)
    assert translated.status_code == 200 and translation_s < 5, translation_s
    # The aim is a p99 under 1 s (issue 32): one answer of a hundred may meet a loaded machine's stall.
    assert latencies and float(np.quantile(latencies, 0.99)) < 1.0, f"/health p99 {np.quantile(latencies, 0.99):.2f} s"
    time.sleep(3)
    after = rss_mb(process.pid)
    assert after <= 1.5 * baseline, f"RSS {after:.0f} MB after the flood, {baseline:.0f} MB before"


def test_abandoned_requests_leave_the_queue_and_the_next_is_served(
    hardened: tuple[str, subprocess.Popen, Path],
) -> None:
    """Issue 32, 4: eight maximal requests (they fill the queue bound) whose clients hang up
    after 0.5 s: their rows leave the scheduler and the running search, in-flight requests and
    queued work return to zero, the model stops working for them, and a maximal request
    sent 3 s later is answered 200."""
    url, _, _ = hardened
    texts = [pair[0][:39] for pair in toy_pairs(64, seed=5)]  # 64 x <=39 characters x beam 8 <= 20,000
    body = json.dumps({"texts": texts, "source": "de", "beam_size": 8, "alignment": False}).encode()
    head = (
        b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"X-API-Key: %s\r\nContent-Length: %d\r\n\r\n"
    )
    host, port = url.removeprefix("http://").split(":")
    sockets = [socket.create_connection((host, int(port))) for _ in range(8)]
    for index, sock in enumerate(sockets):
        sock.sendall(head % (KEYS[index % 5].encode(), len(body)) + body)
    time.sleep(0.5)
    for sock in sockets:
        sock.close()
    deadline, metrics = time.monotonic() + 3, {}
    while time.monotonic() < deadline:
        metrics = scrape(url)
        if metrics['crossalign_queued_work{model="de-en"}'] == 0 and metrics["crossalign_requests_in_flight"] == 1:
            break
        time.sleep(0.1)
    assert metrics['crossalign_queued_work{model="de-en"}'] == 0, metrics
    assert metrics["crossalign_requests_in_flight"] == 1  # the scrape itself
    calls = metrics['crossalign_batch_sentences_count{model="de-en"}']
    time.sleep(0.5)
    assert scrape(url)['crossalign_batch_sentences_count{model="de-en"}'] == calls  # no model call for them
    dropped = scrape(url)['crossalign_requests_total{method="POST",route="/v1/translate",status="499"}']
    assert dropped >= 8
    maximal = httpx.post(
        url + "/v1/translate", content=body, headers={**key(), "Content-Type": "application/json"}, timeout=120
    )
    assert maximal.status_code == 200 and len(maximal.json()["translations"]) == 64


def test_half_open_heads_and_trickled_bodies_are_closed_within_the_timeout(
    hardened: tuple[str, subprocess.Popen, Path],
) -> None:
    """Issue 32, 7: connections that hold an unfinished head, send nothing, or trickle a body
    are closed once `head_timeout_s` / `body_timeout_s` has passed (408 where a request had
    begun); a head that arrives slowly but in time is served."""
    url, _, _ = hardened
    host, port = url.removeprefix("http://").split(":")
    heads = [socket.create_connection((host, int(port)), timeout=10) for _ in range(100)]
    for sock in heads:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Waiting: ")
    silent = [socket.create_connection((host, int(port)), timeout=10) for _ in range(20)]
    trickled = [socket.create_connection((host, int(port)), timeout=10) for _ in range(5)]
    for sock in trickled:
        sock.sendall(
            b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\nX-API-Key: " + KEYS[0].encode() + b"\r\n\r\n{"
        )
    start = time.monotonic()

    # A byte every 0.2 s on each, for 5 s: five times the body timeout, so a timeout that
    # restarted on every byte would close them after 5 s or more, far past the limit below
    # (issue 41: for 2 s, such a timeout was caught at 2.81 s against 2.5, a 0.3 s margin).
    def trickle() -> None:
        for _ in range(25):
            for sock in trickled:
                with contextlib.suppress(OSError):
                    sock.sendall(b" ")
            time.sleep(0.2)

    slow = threading.Thread(target=trickle)
    slow.start()

    def closed(sock: socket.socket) -> tuple[bytes, float]:
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := sock.recv(4096):
                answer += chunk
        return answer, time.monotonic() - start

    with ThreadPoolExecutor(32) as pool:
        outcomes = list(pool.map(closed, heads + silent + trickled))
    slow.join()
    limit = max(HEAD_TIMEOUT_S, BODY_TIMEOUT_S) + 1.5  # the timeout, and a loaded machine's slack
    assert max(seconds for _, seconds in outcomes) < limit, max(seconds for _, seconds in outcomes)
    assert all(answer.startswith(b"HTTP/1.1 408") for answer, _ in outcomes[:100])
    assert all(answer == b"" for answer, _ in outcomes[100:120])
    assert all(answer.startswith(b"HTTP/1.1 408") and b"body came slower" in answer for answer, _ in outcomes[120:])
    for sock in heads + silent + trickled:
        sock.close()
    with socket.create_connection((host, int(port)), timeout=10) as sock:  # slow, but whole within the timeout
        for part in (b"GET /health HTTP/1.1\r\n", b"Host: x\r\n", b"\r\n"):
            sock.sendall(part)
            time.sleep(0.25)
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    # A body slower than the body timeout, but faster than body_min_rate (500 B/s): each 600
    # bytes buy it 1.2 s more, and it is read whole after 1.5 s.
    body = json.dumps({"q": "der Hund " * 300, "source": "de", "target": "en"}).encode()
    head = b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-API-Key: %s\r\n"
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head % KEYS[0].encode() + b"Content-Length: %d\r\n\r\n" % len(body))
        for start in range(0, len(body), 600):
            time.sleep(0.3)
            sock.sendall(body[start : start + 600])
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")


def test_a_body_refused_before_it_is_read_is_never_invited(hardened: tuple[str, subprocess.Popen, Path]) -> None:
    """The hang-up watch reads a body only once the app asks for it: a request without a key
    that expects `100 Continue` gets its 403 at once, and no invitation to send the body."""
    url, _, _ = hardened
    answer = raw(
        url,
        b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Expect: 100-continue\r\nContent-Length: 5000\r\n\r\n",
    )
    assert answer.startswith(b"HTTP/1.1 403"), answer[:200]
    invited = raw(
        url,
        b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-API-Key: "
        + KEYS[0].encode()
        + b"\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n",
        timeout=3,
    )
    assert invited.startswith(b"HTTP/1.1 100"), invited[:200]  # a caller the app would read: invited


def test_shutdown_after_abandoned_requests_is_prompt(models: Path, tmp_path: Path) -> None:
    """Issue 32, 4: stopping the server while eight abandoned maximal requests would keep the
    model busy: their work is dropped, so shutdown is prompt, far within its graceful
    timeout (10 s), instead of waiting for work nobody will read."""
    port, log = free_port(), tmp_path / "serve.log"
    process = start_server(models, port, log=log, log_level="info", max_batch_rows="16")
    texts = [pair[0][:39] for pair in toy_pairs(64, seed=9)]
    body = json.dumps({"texts": texts, "source": "de", "beam_size": 8, "alignment": False}).encode()
    sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(8)]
    for sock in sockets:
        sock.sendall(
            b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
    time.sleep(0.5)
    for sock in sockets:
        sock.close()
    start = time.monotonic()
    process.terminate()
    process.wait(timeout=30)
    seconds = time.monotonic() - start
    output = log.read_text()
    assert seconds < 2, f"shutdown took {seconds:.1f} s"  # 0.2 s measured; 5 s with the work left running
    assert "graceful shutdown exceeded" not in output and "Finished server process" in output, output[-2000:]


def test_newcomers_from_other_keys_are_not_starved(hardened: tuple[str, subprocess.Popen, Path]) -> None:
    """Issue 32, the fairness gap on a real server: three clients (keys) with maximal requests;
    two newcomers, each with its own key, are each answered within a bound."""
    url, _, _ = hardened
    texts = [pair[0][:39] for pair in toy_pairs(64, seed=3)]
    heavy_body = {"texts": texts, "source": "de", "beam_size": 8, "alignment": False}
    with ThreadPoolExecutor(8) as pool:
        heavies = [
            pool.submit(httpx.post, url + "/v1/translate", json=heavy_body, headers=key(i % 3), timeout=300)
            for i in range(6)
        ]
        time.sleep(0.5)

        def newcomer(index: int) -> float:
            start = time.monotonic()
            answer = httpx.post(
                url + "/translate",
                json={"q": SENTENCES[0], "source": "de", "target": "en"},
                headers=key(index),
                timeout=300,
            )
            assert answer.status_code == 200
            return time.monotonic() - start

        waits = list(pool.map(newcomer, (3, 4)))
        statuses = [h.result().status_code for h in heavies]
    assert set(statuses) <= {200, 503} and 200 in statuses, statuses
    assert max(waits) <= 2.0, f"newcomers waited {waits} s behind three clients' maximal requests"


def test_no_api_key_reaches_any_log_line(hardened: tuple[str, subprocess.Popen, Path]) -> None:
    """Issue 32, 6: a key in the query is redacted however its name is spelled (it is compared
    percent-decoded, in any case), on every kind of answer; headers and bodies are never
    logged. Runs last on the hardened server, whose log holds every test's lines."""
    url, process, log = hardened
    secret = KEYS[4]
    spellings = ["api_key", "api%5Fkey", "%61pi_key", "%61%70%69%5F%6B%65%79", "API_KEY", "Api_Key", "api_key%20"]
    for name in spellings:
        for path in ("/languages", "/nowhere", "/v1/heatmap", "/health"):
            httpx.get(f"{url}{path}?{name}={secret}&q=der+Hund&format=svg", timeout=60)
        httpx.post(f"{url}/translate?{name}={secret}", json={"q": 3}, timeout=60)
        httpx.request("BREW", f"{url}/health?{name}={secret}", timeout=60)
    encoded = "".join(f"%{b:02X}" for b in secret.encode())
    httpx.get(f"{url}/languages?api_key={encoded}", timeout=60)  # the value percent-encoded
    httpx.get(f"{url}/languages?x=%FF&api_key={secret}", timeout=60)  # a query the app refuses
    raw(url, f"GET /health?api_key={secret} HTTP/1.1\r\nHost: x\r\n".encode())  # a head that never ends
    raw(url, f"POST /translate?api_key={secret} HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{{".encode())
    time.sleep(HEAD_TIMEOUT_S)
    process.terminate()  # flush and close the log: this test runs last
    process.wait(timeout=15)
    text = log.read_text()
    assert "[redacted]" in text
    for candidate in KEYS + [encoded, encoded.lower()]:
        lines = [line for line in text.splitlines() if candidate in line]
        assert not lines, lines[:3]
