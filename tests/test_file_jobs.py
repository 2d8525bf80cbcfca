"""File jobs over the scripted echo engine (fast; the same routes on a real server are in
test_file_jobs_server.py): a file over `file_sync_chars`, or one sent with `async=true` or
`Prefer: respond-async`, is answered 202 with a job to poll; small files keep the
synchronous answer. The model calls pass a gate the tests open one call at a time, so the
progress, the queue order, the bound (503), a job that fails and a shutdown with jobs
running are each seen in a known state."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from echo_backend import EchoBackend
from fastapi.testclient import TestClient
from test_documents_limits import client_for, upload

from data.tokenizer import Tokenizer
from seq2seq.core.config import DecodeConfig
from seq2seq.decoding.translator import Translator
from service.compute import batching
from service.compute.engine import TranslatorEngine
from service.shared.job_owners import Owner, process_start

TEN_LINES = "".join(f"{letter} b c\n" for letter in "abcdefghab").encode()  # 10 segments of 5 characters


@pytest.fixture
def files_dir(tmp_path: Path) -> Path:
    return tmp_path / "files"


class Gate(threading.Semaphore):
    """A semaphore of no permits that counts the model calls that came to wait at it."""

    def __init__(self) -> None:
        super().__init__(0)
        self.calls = 0


@pytest.fixture
def gated(toy_tokenizer_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[TranslatorEngine, Gate]]:
    """An echo engine whose every model call waits for a permit of the gate (`release()`).
    Its calls never step aside: the wait at the gate would count as running time, and a call
    let through after TURN_S would first run a waiting request's call, which waits at the gate."""
    monkeypatch.setattr(batching, "TURN_S", float("inf"))
    tokenizer = Tokenizer(toy_tokenizer_path)
    engine = TranslatorEngine(
        {("de", "en"): ("de-en", Translator(EchoBackend(tokenizer.vocab_size), tokenizer))}, window_s=0.002
    )
    batcher = engine.models["de", "en"].batcher
    gate, run = Gate(), batcher.run

    def gated_run(items: list, job: object, wanted: Callable[[], np.ndarray], observe: object) -> list:
        gate.calls += 1  # one batcher thread makes the calls
        if not gate.acquire(timeout=30):
            raise TimeoutError("the test never opened the gate")
        return run(items, job, wanted, observe)

    batcher.run = gated_run
    yield engine, gate
    gate.release(1000)
    engine.close()


def per_call(engine: TranslatorEngine, characters: int) -> int:
    """The `max_request_work` that makes a file's model calls `characters` long (at the model's beam)."""
    return characters * engine.models["de", "en"].decode_defaults.beam_size


def submit(client: TestClient, name: str, data: bytes, key: str = "", **fields: str) -> dict:
    """Upload as a job; its 202 answer (checked: Location and Retry-After)."""
    answer = upload(client, name, data, **({"api_key": key} if key else {}), **fields)
    assert answer.status_code == 202, answer.text
    body = answer.json()
    assert answer.headers["Location"] == body["status_url"] and int(answer.headers["Retry-After"]) >= 1
    assert body["status_url"].endswith("/translate_file/" + body["job_id"])
    return body


def status(client: TestClient, job: dict, key: str = "") -> dict:
    answer = client.get(job["status_url"], params={"api_key": key} if key else {})
    assert answer.status_code == 200, answer.text
    return answer.json()


def wait_for(client: TestClient, job: dict, ready: Callable[[dict], bool], key: str = "") -> dict:
    """The job's status once `ready(status)`, polled (at most 30 s)."""
    deadline = time.monotonic() + 30
    while True:
        found = status(client, job, key)
        if ready(found):
            return found
        assert time.monotonic() < deadline, f"the job never got there: {found}"
        time.sleep(0.01)


def finished(found: dict) -> bool:
    return found["state"] in ("done", "failed")


def test_small_files_stay_synchronous_and_a_job_can_be_asked_for(
    echo_engine: TranslatorEngine, files_dir: Path
) -> None:
    with client_for(echo_engine, files_dir) as client:
        synchronous = upload(client, "a.txt", TEN_LINES)
        assert synchronous.status_code == 200 and "job_id" not in synchronous.json()
        expected = client.get(synchronous.json()["translatedFileUrl"]).content
        assert expected == TEN_LINES  # the echo model copies its source
        asked = [
            submit(client, "a.txt", TEN_LINES, **{"async": "true"}),
            client.post(
                "/translate_file",
                files={"file": ("a.txt", TEN_LINES)},
                data={"source": "de", "target": "en"},
                headers={"Prefer": "respond-async, wait=10"},
            ).json(),
        ]
        for job in asked:
            done = wait_for(client, job, finished)
            assert done["state"] == "done" and done["segments_done"] == done["segments_total"] == 10
            assert done["translatedFileUrl"].endswith("/download_file/" + job["job_id"])
            assert done["report"] == synchronous.json()["report"] and done["name"] == "a.en.txt"
            assert 0 < done["expires_in"] <= 1800
            assert client.get(done["translatedFileUrl"]).content == expected
            sidecar = client.get(done["translatedFileUrl"], params={"alignment": "true"}).text.splitlines()
            assert len(sidecar) == 10 and json.loads(sidecar[0])["links"] == "0-0 1-1 2-2"
        refused = upload(client, "a.txt", TEN_LINES, **{"async": "maybe"})
        assert refused.status_code == 400 and "async must be true or false" in refused.json()["error"]
        assert upload(client, "a.txt", TEN_LINES, **{"async": "false"}).status_code == 200
        assert client.get("/frontend/settings").json()["fileSyncChars"] == 20000


def test_a_file_over_the_synchronous_size_is_a_job_whose_progress_is_counted(
    gated: tuple[TranslatorEngine, Gate], files_dir: Path
) -> None:
    engine, gate = gated
    with client_for(engine, files_dir, file_sync_chars=49, max_request_work=per_call(engine, 10)) as client:
        gate.release(5)  # 45 characters are answered at once: five calls of two lines
        assert upload(client, "a.txt", TEN_LINES[:-6]).status_code == 200
        job = submit(client, "a.txt", TEN_LINES)  # 50 characters: a job
        running = wait_for(client, job, lambda found: found["state"] == "running")
        assert (running["segments_done"], running["segments_total"]) == (0, 10)
        assert 'crossalign_file_jobs{state="running"} 1.0' in client.get("/metrics").text
        seen = []
        for call in range(1, 6):
            gate.release()
            found = wait_for(client, job, lambda found, call=call: found["segments_done"] == 2 * call)
            seen.append((found["state"], found["segments_done"]))
        assert seen[:4] == [("running", 2), ("running", 4), ("running", 6), ("running", 8)]
        done = wait_for(client, job, finished)
        assert done["state"] == "done" and "position" not in done and "error" not in done
        assert client.get(done["translatedFileUrl"]).content == TEN_LINES
        answer = client.get(job["status_url"])
        assert "Retry-After" not in answer.headers  # nothing more to wait for
        assert 'crossalign_file_jobs{state="running"} 0.0' in client.get("/metrics").text


def test_status_and_download_need_the_uploads_key(echo_engine: TranslatorEngine, files_dir: Path) -> None:
    with client_for(echo_engine, files_dir, api_keys="k1,k2") as client:
        job = submit(client, "a.txt", TEN_LINES, key="k1", **{"async": "true"})
        nobody = client.get(job["status_url"])
        assert nobody.status_code == 403 and "API key" in nobody.json()["error"]
        other = client.get(job["status_url"], headers={"X-API-Key": "k2"})
        assert other.status_code == 403 and "another API key" in other.json()["error"]
        done = wait_for(client, job, finished, key="k1")
        assert done["state"] == "done"
        assert client.get(done["translatedFileUrl"], params={"api_key": "k2"}).status_code == 403
        assert client.get(done["translatedFileUrl"], headers={"Authorization": "Bearer k1"}).content == TEN_LINES
        unknown = client.get("/translate_file/" + "A" * 24, params={"api_key": "k1"})
        assert unknown.status_code == 404 and "no such job" in unknown.json()["error"]
        assert client.get("/translate_file/..%2Fsecret", params={"api_key": "k1"}).status_code == 404


def test_jobs_expire_with_their_files(echo_engine: TranslatorEngine, files_dir: Path) -> None:
    with client_for(echo_engine, files_dir, file_ttl=1.5, file_sweep_s=0.2) as client:
        job = submit(client, "a.txt", TEN_LINES, **{"async": "true"})
        done = wait_for(client, job, finished)
        assert done["state"] == "done" and len(list(files_dir.iterdir())) == 4  # file, meta, sidecar, record
        time.sleep(1.7)
        gone = client.get(job["status_url"])
        assert gone.status_code == 404 and "expired" in gone.json()["error"]
        assert client.get(done["translatedFileUrl"]).status_code == 404
        eventually(lambda: list(files_dir.iterdir()) == [], "the sweep never deleted what expired")


def eventually(condition: Callable[[], bool], message: str, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, message
        time.sleep(0.02)


def test_jobs_are_bounded_and_a_clients_second_job_waits_for_others_first(
    gated: tuple[TranslatorEngine, Gate], files_dir: Path
) -> None:
    engine, gate = gated
    with client_for(
        engine, files_dir, file_sync_chars=0, file_max_jobs=4, file_job_workers=2, api_keys="a,b"
    ) as client:
        # The second job only once the first one's model call waits at the gate: submitted
        # together, a batch would deal both jobs' sentences and one permit would end neither.
        first = submit(client, "a.txt", TEN_LINES, key="a")
        eventually(lambda: gate.calls == 1, "the first job's model call never came to the gate")
        second = submit(client, "a.txt", TEN_LINES, key="a")
        for job in (first, second):
            wait_for(client, job, lambda found: found["state"] == "running", key="a")
        third, other = submit(client, "a.txt", TEN_LINES, key="a"), submit(client, "a.txt", TEN_LINES, key="b")
        assert status(client, third, "a")["position"] == 0 and status(client, other, "b")["position"] == 1
        full = upload(client, "a.txt", TEN_LINES, api_key="b")
        assert full.status_code == 503 and "4 file jobs are queued or running" in full.json()["error"]
        assert 1 <= int(full.headers["Retry-After"]) <= 600
        gate.release()  # the first job's one model call
        assert wait_for(client, first, finished, key="a")["state"] == "done"
        assert status(client, second, "a")["state"] == "running"
        # The freed worker takes the other client's job, though the third arrived before it.
        wait_for(client, other, lambda found: found["state"] == "running", key="b")
        assert status(client, third, "a")["state"] == "queued"
        gate.release(10)
        for job, key in ((second, "a"), (third, "a"), (other, "b")):
            assert wait_for(client, job, finished, key=key)["state"] == "done"
        assert upload(client, "a.txt", TEN_LINES, api_key="b").status_code == 202  # room again


def test_a_failing_job_says_why_and_the_next_one_runs(gated: tuple[TranslatorEngine, Gate], files_dir: Path) -> None:
    engine, gate = gated
    settings = {"file_sync_chars": 0, "file_job_workers": 1, "max_request_work": per_call(engine, 10)}
    with client_for(engine, files_dir, file_timeout=1.0, **settings) as client:
        slow = submit(client, "a.txt", TEN_LINES)  # passes every check at the upload, then takes too long
        small = submit(client, "b.txt", TEN_LINES[:10])  # one call: within its time whenever it starts
        wait_for(client, slow, lambda found: found["state"] == "running")
        assert status(client, small)["state"] == "queued"
        time.sleep(1.1)
        gate.release(10)
        failed = wait_for(client, slow, finished)
        assert failed["state"] == "failed" and failed["error_status"] == 503, failed
        assert failed["error"] == "the file took longer than 1 s; send a smaller one"
        assert failed["segments_done"] == 2 and "translatedFileUrl" not in failed
        done = wait_for(client, small, finished)
        assert done["state"] == "done" and client.get(done["translatedFileUrl"]).content == TEN_LINES[:10]


def test_shutdown_stops_running_and_queued_jobs_and_their_records_say_so(
    gated: tuple[TranslatorEngine, Gate], files_dir: Path
) -> None:
    engine, _ = gated
    settings = {"file_sync_chars": 0, "file_job_workers": 1}
    with client_for(engine, files_dir, **settings) as client:
        running, queued = submit(client, "a.txt", TEN_LINES), submit(client, "b.txt", TEN_LINES)
        wait_for(client, running, lambda found: found["state"] == "running")
        stopping = time.monotonic()
    assert time.monotonic() - stopping < 3  # the running call is dropped, not waited for
    with client_for(engine, files_dir, **settings) as client:  # the next server reads the records
        stopped = status(client, running)
        assert stopped["state"] == "failed" and stopped["error_status"] == 503
        assert stopped["error"] == "the server shut down while the job ran; upload the file again"
        never = status(client, queued)
        assert never["state"] == "failed" and "shut down before the job started" in never["error"]


def test_a_files_calls_wait_for_room_in_a_full_queue(gated: tuple[TranslatorEngine, Gate], files_dir: Path) -> None:
    """An ordinary request meeting a full queue gets 503 at once; a file, uploaded already,
    waits for room (within `file_timeout`) and is translated."""
    engine, gate = gated
    work, batcher = per_call(engine, 10), engine.models["de", "en"].batcher
    batcher.max_queue_work = work  # the engine's bound (a given engine is not built from the settings)
    with client_for(engine, files_dir, max_request_work=work, max_queue_work=work) as client:
        heavy = batcher.submit(["a b c d e"], DecodeConfig(beam_size=4))
        busy = client.post("/translate", json={"q": "a b", "source": "de", "target": "en"})
        assert busy.status_code == 503 and "queue is full" in busy.json()["error"]
        answers: dict = {}
        waiting = threading.Thread(target=lambda: answers.update(file=upload(client, "a.txt", TEN_LINES[:12])))
        waiting.start()
        time.sleep(0.3)
        assert waiting.is_alive()  # waiting for room, not refused
        gate.release(2)  # the heavy call, then the file's
        waiting.join(30)
        assert heavy.result(timeout=30)[0].text == "a b c d e"
        assert answers["file"].status_code == 200, answers["file"].text
        assert client.get(answers["file"].json()["translatedFileUrl"]).content == TEN_LINES[:12]


# --------------------------------------------------------------------------- issue 41: 7, 8, 12, 13


def plant_expired(directory: Path, count: int) -> list[str]:
    """`count` stored files that expired a minute ago, as another process would have left them."""
    ids = [f"{index:024d}" for index in range(count)]
    for file_id in ids:
        (directory / file_id).write_bytes(b"x")
        (directory / f"{file_id}.alignment.jsonl").write_text("")
        meta = {"name": "a.en.txt", "media_type": "text/plain", "key": None, "expires": time.time() - 60}
        (directory / f"{file_id}.json").write_text(json.dumps(meta))
    return ids


def test_requests_leave_the_sweep_to_the_background(echo_engine: TranslatorEngine, files_dir: Path) -> None:
    """Every upload, poll and download used to sweep the whole store under one lock (1-1.9 s
    with 10,000 records: bench/file_jobs.py --store); now none reads another record, and the
    background sweep, at start and then every `file_sweep_s`, deletes what expired."""
    files_dir.mkdir()
    first = plant_expired(files_dir, 1)[0]
    with client_for(echo_engine, files_dir, file_sweep_s=3600) as client:
        eventually(lambda: not (files_dir / first).exists(), "no sweep at start")
        planted = plant_expired(files_dir, 50)
        job = submit(client, "a.txt", TEN_LINES, **{"async": "true"})
        done = wait_for(client, job, finished)
        assert client.get(done["translatedFileUrl"]).status_code == 200
        assert upload(client, "a.txt", TEN_LINES).status_code == 200
        assert all((files_dir / f"{file_id}.json").exists() for file_id in planted)  # not swept by requests
    sweeps: list[float] = []
    with client_for(echo_engine, files_dir, file_sweep_s=0.5) as client:
        sweep = client.app.state.files.sweep
        client.app.state.files.sweep = lambda: sweeps.append(time.monotonic()) or sweep()
        eventually(lambda: not any(files_dir.glob("000*")), "the sweep never came")
        time.sleep(1.0)
    assert all(later - earlier >= 0.45 for earlier, later in zip(sweeps, sweeps[1:])), sweeps  # at most every N s


def stored_bytes(directory: Path) -> int:
    """The bytes a quota counts in `directory`: files and their sidecars."""
    return sum(path.stat().st_size for path in directory.iterdir() if path.is_file() and path.suffix != ".json")


def test_stored_bytes_are_bounded_per_client_and_in_all(echo_engine: TranslatorEngine, files_dir: Path) -> None:
    with client_for(echo_engine, files_dir.parent / "probe") as client:
        assert upload(client, "a.txt", TEN_LINES).status_code == 200
    size = stored_bytes(files_dir.parent / "probe")  # what one upload of TEN_LINES stores
    limits = {"file_client_max_bytes": size, "file_store_max_bytes": 2 * size, "api_keys": "a,b,c"}
    with client_for(echo_engine, files_dir, **limits) as client:
        assert upload(client, "a.txt", TEN_LINES, api_key="a").status_code == 200
        mine = upload(client, "a.txt", TEN_LINES, api_key="a")
        assert mine.status_code == 507, mine.text
        assert f"at most {size:,} bytes per client (file_client_max_bytes)" in mine.json()["error"]
        assert upload(client, "a.txt", TEN_LINES, api_key="b").status_code == 200
        full = upload(client, "a.txt", TEN_LINES, api_key="c")
        assert full.status_code == 503 and "(file_store_max_bytes)" in full.json()["error"]
        assert 1 <= int(full.headers["Retry-After"]) <= 1800
        assert stored_bytes(files_dir) == 2 * size


def test_a_file_over_the_quota_is_refused_before_it_is_translated(
    gated: tuple[TranslatorEngine, Gate], files_dir: Path
) -> None:
    engine, gate = gated  # closed: a translation would wait for it
    with client_for(engine, files_dir, file_client_max_bytes=len(TEN_LINES) - 1) as client:
        refused = upload(client, "a.txt", TEN_LINES)
        assert refused.status_code == 507 and "file_client_max_bytes" in refused.json()["error"]


def test_a_job_whose_file_passes_the_quota_fails_with_507(
    gated: tuple[TranslatorEngine, Gate], files_dir: Path
) -> None:
    engine, gate = gated
    with client_for(engine, files_dir.parent / "probe") as client:
        gate.release(1)
        assert upload(client, "a.txt", TEN_LINES).status_code == 200
    size = stored_bytes(files_dir.parent / "probe")
    with client_for(engine, files_dir, file_client_max_bytes=size, file_sync_chars=0) as client:
        first, second = submit(client, "a.txt", TEN_LINES), submit(client, "a.txt", TEN_LINES)  # nothing stored yet
        gate.release(2)
        ends = sorted((wait_for(client, job, finished) for job in (first, second)), key=lambda found: found["state"])
        assert [found["state"] for found in ends] == ["done", "failed"]
        assert ends[1]["error_status"] == 507 and "file_client_max_bytes" in ends[1]["error"]


def test_a_file_can_be_deleted_by_its_first_download(echo_engine: TranslatorEngine, files_dir: Path) -> None:
    with client_for(echo_engine, files_dir) as client:
        kept = upload(client, "a.txt", TEN_LINES).json()["translatedFileUrl"]
        once = upload(client, "a.txt", TEN_LINES, delete_after_download="true").json()["translatedFileUrl"]
        assert client.head(once).status_code == 200  # a HEAD is no download
        assert client.get(once, params={"alignment": "true"}).status_code == 200  # nor is the sidecar's
        assert client.get(once).content == TEN_LINES
        gone = client.get(once)
        assert gone.status_code == 404 and "was deleted" in gone.json()["error"]
        assert client.get(once, params={"alignment": "true"}).status_code == 404  # gone with its file
        assert [client.get(kept).status_code for _ in range(2)] == [200, 200]  # by default a file stays
        assert len(list(files_dir.iterdir())) == 3  # only the kept file, its sidecar and metadata
        job = submit(client, "a.txt", TEN_LINES, **{"async": "true", "delete_after_download": "1"})
        done = wait_for(client, job, finished)
        assert [client.get(done["translatedFileUrl"]).status_code for _ in range(2)] == [200, 404]
        bad = upload(client, "a.txt", TEN_LINES, delete_after_download="soon")
        assert bad.status_code == 400 and "delete_after_download must be true or false" in bad.json()["error"]
    with client_for(echo_engine, files_dir, file_delete_after_download=True) as client:
        deleted = upload(client, "a.txt", TEN_LINES).json()["translatedFileUrl"]
        assert [client.get(deleted).status_code for _ in range(2)] == [200, 404]
        asked = upload(client, "a.txt", TEN_LINES, delete_after_download="false").json()["translatedFileUrl"]
        assert [client.get(asked).status_code for _ in range(2)] == [200, 200]


def test_a_client_has_a_share_of_the_job_slots(gated: tuple[TranslatorEngine, Gate], files_dir: Path) -> None:
    engine, gate = gated
    settings = {"file_sync_chars": 0, "file_max_jobs": 4, "file_client_max_jobs": 2, "api_keys": "a,b,c"}
    with client_for(engine, files_dir, **settings) as client:
        for _ in range(2):
            submit(client, "a.txt", TEN_LINES, key="a")
        over = upload(client, "a.txt", TEN_LINES, api_key="a")
        assert over.status_code == 429 and "at most 2 per client (file_client_max_jobs)" in over.json()["error"]
        assert 1 <= int(over.headers["Retry-After"]) <= 600
        for _ in range(2):
            submit(client, "a.txt", TEN_LINES, key="b")  # another client's share is its own
        full = upload(client, "a.txt", TEN_LINES, api_key="c")
        assert full.status_code == 503 and "at most 4 (file_max_jobs)" in full.json()["error"]


def cancel(client: TestClient, job: dict, key: str = "") -> dict:
    answer = client.post(job["status_url"] + "/cancel", params={"api_key": key} if key else {})
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_job_is_cancelled_queued_running_or_done(gated: tuple[TranslatorEngine, Gate], files_dir: Path) -> None:
    engine, gate = gated
    settings = {"file_sync_chars": 0, "file_job_workers": 1, "max_request_work": per_call(engine, 10)}
    with client_for(engine, files_dir, api_keys="a,b", **settings) as client:
        running, queued = submit(client, "a.txt", TEN_LINES, key="a"), submit(client, "b.txt", TEN_LINES, key="a")
        wait_for(client, running, lambda found: found["state"] == "running", key="a")
        refused = client.post(queued["status_url"] + "/cancel", params={"api_key": "b"})
        assert refused.status_code == 403 and "another API key" in refused.json()["error"]
        assert cancel(client, queued, "a")["state"] == "cancelled"
        gate.release()  # the running job's first model call
        wait_for(client, running, lambda found: found["segments_done"] == 2, key="a")
        assert cancel(client, running, "a")["state"] == "cancelled"
        gate.release(10)
        record = files_dir / f"{running['job_id']}.job.json"
        eventually(lambda: json.loads(record.read_text())["state"] == "cancelled", "the job never stopped")
        assert json.loads(record.read_text())["segments_done"] == 2
        for job in (running, queued):
            found = status(client, job, "a")
            assert found["state"] == "cancelled" and "translatedFileUrl" not in found and "Retry-After" not in found
        assert not (files_dir / running["job_id"]).exists()  # no file stored
        done = wait_for(client, submit(client, "c.txt", TEN_LINES, key="a"), finished, key="a")
        assert client.get(done["translatedFileUrl"], params={"api_key": "a"}).status_code == 200
        assert cancel(client, done, "a")["state"] == "cancelled"  # a done job's file is deleted
        assert client.get(done["translatedFileUrl"], params={"api_key": "a"}).status_code == 404


def dead_owner() -> dict:
    """The owner a record of a process that ran on this machine and is gone would name."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    start = process_start(child.pid)
    child.wait()
    me = Owner.current()
    return Owner(me.host, me.kernel, child.pid, start).to_dict()


def running_record(job_id: str, owner: dict | None, heartbeat: float) -> dict:
    record = {"id": job_id, "state": "running", "name": "a.en.txt", "key": None, "segments_done": 3}
    record.update(segments_total=10, position=0, created=0.0, started=time.time() - 5, error="", error_status=0)
    record.update(answer=None, expires=time.time() + 3000, heartbeat=heartbeat)
    return record | ({"owner": owner} if owner else {})


def test_a_dead_servers_jobs_fail_at_start_up_and_when_polled(echo_engine: TranslatorEngine, files_dir: Path) -> None:
    """A killed server's jobs used to stay `running` until their records expired (42 minutes)."""
    files_dir.mkdir()
    elsewhere = {**Owner.current().to_dict(), "host": "elsewhere", "kernel": "another-boot/pid:[1]"}
    records = {
        "local": running_record("L" * 24, dead_owner(), time.time()),  # its process is gone
        "stale": running_record("S" * 24, elsewhere, time.time() - 61),
        "alive": running_record("A" * 24, elsewhere, time.time()),
        "unnamed": running_record("U" * 24, None, 0.0),  # written before owners: left to its expiry
    }
    for record in records.values():
        (files_dir / f"{record['id']}.job.json").write_text(json.dumps(record))

    def on_disk(name: str) -> dict:
        return json.loads((files_dir / f"{records[name]['id']}.job.json").read_text())

    with client_for(echo_engine, files_dir, file_sweep_s=3600, file_job_stale_s=60) as client:
        eventually(lambda: on_disk("local")["state"] == on_disk("stale")["state"] == "failed", "not settled at start")
        assert on_disk("local")["reason"] == f"the server running it ({Owner.of(records['local'])}) stopped"
        assert "has not been heard of for 61 s" in on_disk("stale")["reason"]
        job = {"status_url": "http://testserver/translate_file/" + records["alive"]["id"]}
        assert status(client, job)["state"] == "running"
        assert on_disk("unnamed")["state"] == "running"
        (files_dir / f"{'A' * 24}.job.json").write_text(json.dumps({**records["alive"], "heartbeat": time.time() - 61}))
        failed = status(client, job)  # the poll settles it, without waiting for a sweep
        assert failed["state"] == "failed" and failed["error_status"] == 503
        assert failed["error"] == "the server running the job stopped before it ended; upload the file again"
        assert "elsewhere" not in failed["error"] and on_disk("alive")["state"] == "failed"  # no host names told


def test_a_job_beats_while_its_model_call_takes_long(gated: tuple[TranslatorEngine, Gate], files_dir: Path) -> None:
    engine, _ = gated  # closed: the job's first model call never ends
    with client_for(engine, files_dir, file_sync_chars=0, file_job_stale_s=0.4) as client:
        job = submit(client, "a.txt", TEN_LINES)
        wait_for(client, job, lambda found: found["state"] == "running")
        record = files_dir / f"{job['job_id']}.job.json"
        first = json.loads(record.read_text())
        assert first["owner"] == Owner.current().to_dict()
        eventually(lambda: json.loads(record.read_text())["heartbeat"] > first["heartbeat"], "no heartbeat")
        assert status(client, job)["state"] == "running"


def test_a_job_taken_for_dead_elsewhere_stays_failed(gated: tuple[TranslatorEngine, Gate], files_dir: Path) -> None:
    """A server whose heartbeat came too late (a pause longer than `file_job_stale_s`) finds its
    job marked failed by another: it stops it, and never writes it back to `running` or `done`."""
    engine, gate = gated
    with client_for(engine, files_dir, file_sync_chars=0, max_request_work=per_call(engine, 10)) as client:
        job = submit(client, "a.txt", TEN_LINES)
        wait_for(client, job, lambda found: found["state"] == "running")
        record = files_dir / f"{job['job_id']}.job.json"
        verdict = {**json.loads(record.read_text()), "state": "failed", "reason": "not heard of for 61 s"}
        verdict.update(error="the server running the job stopped before it ended; upload the file again")
        record.write_text(json.dumps(verdict))
        gate.release(10)
        eventually(lambda: client.app.state.jobs.count("running") == 0, "the job never stopped")
        assert json.loads(record.read_text()) == verdict and status(client, job)["state"] == "failed"
        assert not (files_dir / job["job_id"]).exists()
