"""Replicas of the service on one shared `files_dir` (issue 43, part 2): two real servers
(`python -m service.serve`, the tiny onnxruntime bundle, API keys on) on two loopback ports
stand for N servers behind a load balancer on a network volume. A job created on one is
polled, downloaded and cancelled on the other; a file stored through one counts against its
client's quota on the other, and one server's sweep deletes what the other stored once it
expired; a server killed mid-job leaves no job `running`: the other marks its jobs failed."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest
from test_file_jobs_server import KEYS, long_text, poll, upload
from test_service_server import serving

SETTINGS = {"file_sync_chars": "300", "max_request_work": "100", "api_keys": "k1,k2"}


@contextmanager
def replicas(models: Path, files: Path, *each: dict[str, str]) -> Iterator[list[httpx.Client]]:
    """A client of each server, every one on `files` with SETTINGS and its own settings."""
    with ExitStack() as stack:
        clients = []
        for settings in each:
            url, process = stack.enter_context(serving(models, files_dir=str(files), **{**SETTINGS, **settings}))
            client = stack.enter_context(httpx.Client(base_url=url, timeout=120, headers=KEYS))
            client.process = process  # type: ignore[attr-defined]
            clients.append(client)
        yield clients


@pytest.fixture(scope="module")
def pair(tiny_bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, ...]]:
    files = tmp_path_factory.mktemp("shared")
    with replicas(tiny_bundle.parent, files, {}, {}) as (a, b):
        yield a, b, files


def on(client: httpx.Client, url: str) -> str:
    """`url` (a status or download URL a server answered) as the path to ask `client` for."""
    return "/" + url.split("/", 3)[3]


def eventually(condition: Callable[[], bool], message: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, message
        time.sleep(0.05)


def test_a_job_made_on_one_server_is_polled_and_downloaded_on_the_other(pair: tuple) -> None:
    a, b, _ = pair
    answer = upload(a, "lang.txt", long_text(150))
    assert answer.status_code == 202, answer.text
    job = answer.json()
    from_b = {**job, "status_url": on(b, job["status_url"])}
    refused = b.get(from_b["status_url"], headers={"X-API-Key": "k2"})
    assert refused.status_code == 403 and "another API key" in refused.json()["error"]
    seen: list[dict] = []
    done = poll(b, from_b, seen)
    assert done["state"] == "done" and done["segments_done"] == 150, done
    assert done["translatedFileUrl"].startswith(str(b.base_url))  # B's own URL for A's file
    assert any(found["state"] == "running" for found in seen)  # B saw A's progress
    download = b.get(on(b, done["translatedFileUrl"]))
    assert download.status_code == 200 and download.content == a.get(on(a, done["translatedFileUrl"])).content
    assert len(download.text.splitlines()) == 150
    once = upload(b, "short.txt", long_text(3), delete_after_download="true").json()["translatedFileUrl"]
    assert a.get(on(a, once)).status_code == 200  # stored by B, downloaded (and deleted) through A
    assert b.get(on(b, once)).status_code == 404


def test_a_job_running_on_one_server_is_cancelled_from_the_other(pair: tuple) -> None:
    a, b, files = pair
    job = upload(a, "lang.txt", long_text(2000)).json()
    status_a, status_b = on(a, job["status_url"]), on(b, job["status_url"])
    eventually(lambda: b.get(status_b).json()["segments_done"] > 0, "the job never started")
    cancelled = b.post(status_b + "/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled", cancelled.text
    assert a.get(status_a).json()["state"] == "cancelled"  # at once, on both
    record = files / f"{job['job_id']}.job.json"
    eventually(lambda: json.loads(record.read_text())["state"] == "cancelled", "A never stopped the job")
    stopped = json.loads(record.read_text())["segments_done"]
    time.sleep(0.5)
    assert json.loads(record.read_text())["segments_done"] == stopped < 2000  # no model call after
    assert not (files / job["job_id"]).exists()


def test_quotas_and_expiry_hold_across_servers(tiny_bundle: Path, tmp_path: Path) -> None:
    """A's sweep waits an hour: B's deletes what A stored. The quota counts A's file on B."""
    files = tmp_path / "shared"
    # One line to translate among wordless ones (kept as they are): a file of ~3 KB, stored
    # with its one-line sidecar; two of them pass the client's 5,000 bytes.
    data = long_text(1) + (b"-" * 60 + b"\n") * 49
    limits = {"file_ttl": "6", "file_client_max_bytes": "5000"}
    each = ({**limits, "file_sweep_s": "3600"}, {**limits, "file_sweep_s": "0.3"})
    with replicas(tiny_bundle.parent, files, *each) as (a, b):
        stored = upload(a, "page.txt", data)
        assert stored.status_code == 200, stored.text
        time.sleep(1.1)  # a quota check trusts a listing up to a second old (file_store.LISTING_S)
        over = upload(b, "page.txt", data)
        assert over.status_code == 507 and "file_client_max_bytes" in over.json()["error"]
        file_id = stored.json()["translatedFileUrl"].rsplit("/", 1)[1]
        eventually(lambda: not (files / f"{file_id}.json").exists(), "B never swept A's expired file", 30)
        assert not (files / file_id).exists() and not (files / f"{file_id}.alignment.jsonl").exists()
        assert upload(b, "page.txt", data).status_code == 200  # room again


def test_a_killed_servers_jobs_are_failed_by_the_other(tiny_bundle: Path, tmp_path: Path) -> None:
    files = tmp_path / "shared"
    with replicas(tiny_bundle.parent, files, {"file_job_workers": "1"}, {"file_sweep_s": "0.3"}) as (a, b):
        running, queued = (upload(a, "lang.txt", long_text(2000)).json() for _ in range(2))
        status_b = on(b, running["status_url"])
        eventually(lambda: b.get(status_b).json()["segments_done"] > 0, "the job never started")
        assert b.get(on(b, queued["status_url"])).json()["state"] == "queued"
        a.process.send_signal(signal.SIGKILL)  # type: ignore[attr-defined]
        a.process.wait(timeout=30)  # type: ignore[attr-defined]
        records = [files / f"{job['job_id']}.job.json" for job in (running, queued)]
        # B's sweep finds them (nobody polls), then each status says so.
        eventually(lambda: all(json.loads(path.read_text())["state"] == "failed" for path in records), "still running")
        for job in (running, queued):
            found = b.get(on(b, job["status_url"])).json()
            assert found["state"] == "failed" and found["error_status"] == 503, found
            assert found["error"] == "the server running the job stopped before it ended; upload the file again"
            reason = json.loads((files / f"{job['job_id']}.job.json").read_text())["reason"]
            assert reason.startswith(f"the server running it (process {a.process.pid} on ")  # type: ignore[attr-defined]
