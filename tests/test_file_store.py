"""The file store under the routes (service/shared/file_store.py) and the owners of jobs
(service/shared/job_owners.py), without a server: the sweep from the index by expiry (an
expired record goes at the first sweep after its time, not a moment before; a record another
process renewed stays; what a crash left goes once it is old), the quotas counted from the
directory (pinned at N and N + 1 bytes), a download that deletes its file given to one
taker, reads that never see half a record, and when a job's owner counts as dead."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from service.http.errors import APIError
from service.shared import file_store
from service.shared.file_store import LEFTOVER_S, FileStore, read_json, write_json
from service.shared.job_owners import Owner, process_start, this_kernel, why_dead

DATA, SIDECAR = b"x" * 100, [{"segment": 0}]
STORED = len(DATA) + len(json.dumps(SIDECAR[0]) + "\n")  # what one put counts: the file and its sidecar


def put(store: FileStore, client: str = "key:a", data: bytes = DATA) -> str:
    return store.put(data, {"name": "a.en.txt", "media_type": "text/plain", "key": None}, SIDECAR, client)


def job_record(store: FileStore, job_id: str, expires: float, state: str = "done") -> None:
    store.put_job({"id": job_id, "state": state, "expires": expires})


def names(directory: Path) -> set[str]:
    return {path.name for path in directory.iterdir()}


def test_the_sweep_deletes_what_expired_and_nothing_sooner(tmp_path: Path) -> None:
    store = FileStore(tmp_path, ttl=100)
    kept, gone = put(store), put(store)
    expires = store.get(gone)["expires"]
    job_record(store, "J" * 24, expires)
    store.ask_cancel("J" * 24)
    meta = tmp_path / f"{kept}.json"
    write_json(meta, {**json.loads(meta.read_text()), "expires": expires + 1})  # as another process renews it
    assert store.sweep(now=expires) == 0  # at its expiry a record still reads (a read 404s only after)
    assert len(names(tmp_path)) == 8
    assert store.sweep(now=expires + 0.001) == 2  # the file and the job's record, with their companions
    assert names(tmp_path) == {kept, f"{kept}.json", f"{kept}.alignment.jsonl"}
    assert store.sweep(now=expires + 0.5) == 0  # renewed on disk: the index learns it, the file stays
    assert store.sweep(now=expires + 1.001) == 1 and names(tmp_path) == set()


def test_the_sweep_learns_what_other_processes_wrote_and_deleted(tmp_path: Path) -> None:
    mine, other = FileStore(tmp_path, ttl=100, listing_s=0), FileStore(tmp_path, ttl=100)
    theirs = put(other)
    expires = other.get(theirs)["expires"]
    assert mine.sweep(now=expires + 1) == 1 and names(tmp_path) == set()  # read once, from the listing
    again = put(mine)
    other.delete(again)  # deleted elsewhere: forgotten here, its bytes no longer counted
    mine.client_max_bytes = STORED
    put(mine)


def test_leftovers_of_a_crash_go_once_they_are_old(tmp_path: Path) -> None:
    store = FileStore(tmp_path, ttl=100)
    kept = put(store)
    crash = {
        "partial": "K" * 24 + ".json.1a2b3c4d.tmp",  # a write never renamed into place
        "orphan": "O" * 24,  # a file whose metadata never came
        "sidecar": "O" * 24 + ".alignment.jsonl",
        "torn": "T" * 24 + ".job.json",  # a record that does not read
        "cancel": "C" * 24 + ".cancel",  # a cancellation without its job
    }
    for name in crash.values():
        (tmp_path / name).write_text("{" if name.endswith("json") else "")
    (tmp_path / "notes.txt").write_text("not ours")
    now = time.time()
    for name in crash.values():
        os.utime(tmp_path / name, (now - LEFTOVER_S, now - LEFTOVER_S))
    store.sweep(now=now)  # exactly as old as the grace: kept (a write may still be under way)
    assert set(crash.values()) <= names(tmp_path)
    store.sweep(now=now + 0.01)
    assert names(tmp_path) == {kept, f"{kept}.json", f"{kept}.alignment.jsonl", "notes.txt"}


@pytest.mark.parametrize(("limit", "fits"), [(2 * STORED, 2), (2 * STORED - 1, 1)])
def test_a_clients_bytes_are_bounded_at_n_and_n_plus_one(tmp_path: Path, limit: int, fits: int) -> None:
    store = FileStore(tmp_path, ttl=100, client_max_bytes=limit)
    for _ in range(fits):
        put(store)
    with pytest.raises(APIError) as refused:
        put(store)
    assert refused.value.status == 507 and "file_client_max_bytes" in refused.value.message
    assert f"at most {limit:,} bytes per client" in refused.value.message
    put(store, client="key:b")  # another client's room is its own
    left = limit - fits * STORED
    store.check_room("key:a", left)  # an upload of the bytes left fits, one more does not
    with pytest.raises(APIError):
        store.check_room("key:a", left + 1)


@pytest.mark.parametrize(("limit", "fits"), [(2 * STORED, 2), (2 * STORED - 1, 1)])
def test_the_stores_bytes_are_bounded_at_n_and_n_plus_one(tmp_path: Path, limit: int, fits: int) -> None:
    store = FileStore(tmp_path, ttl=100, max_bytes=limit, listing_s=60)
    for client in ("key:a", "key:b")[:fits]:
        put(store, client)
    with pytest.raises(APIError) as refused:
        put(store, "key:c")
    assert refused.value.status == 503 and "file_store_max_bytes" in refused.value.message
    assert 1 <= int(refused.value.headers["Retry-After"]) <= 100
    FileStore(tmp_path, ttl=100).delete(next(iter(names(tmp_path))).split(".")[0])  # another process frees room
    with pytest.raises(APIError):
        put(store, "key:c")  # not seen until the directory is listed again (listing_s after the last listing)
    store.listing_s = 0
    put(store, "key:c")


def test_a_download_that_deletes_its_file_is_given_to_one_taker(tmp_path: Path) -> None:
    stores = [FileStore(tmp_path, ttl=100) for _ in range(8)]  # as many processes
    file_id = put(stores[0])
    got: list[bytes | int] = []
    barrier = threading.Barrier(len(stores))

    def take(store: FileStore) -> None:
        barrier.wait()
        try:
            got.append(store.take(file_id))
        except APIError as error:
            got.append(error.status)

    threads = [threading.Thread(target=take, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(got, key=str) == [404] * 7 + [DATA] and names(tmp_path) == set()


def test_a_record_is_never_read_half_written(tmp_path: Path) -> None:
    path, stop, seen = tmp_path / ("R" * 24 + ".job.json"), threading.Event(), []
    write_json(path, {"n": 0, "pad": "a" * 200_000})

    def rewrite() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            write_json(path, {"n": n, "pad": "ab"[n % 2] * (100_000 + 100_000 * (n % 2))})

    writer = threading.Thread(target=rewrite)
    writer.start()
    try:
        for _ in range(300):
            seen.append(read_json(path))
    finally:
        stop.set()
        writer.join()
    assert all(record is not None and len(record["pad"]) in (100_000, 200_000) for record in seen)
    assert len({record["n"] for record in seen}) > 1  # it was being replaced while read


def test_a_record_replaced_under_a_reader_on_a_network_volume_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / ("R" * 24 + ".job.json")
    write_json(path, {"id": "R" * 24, "expires": time.time() + 100})
    real, failures = Path.read_bytes, [OSError(errno.ESTALE, "Stale file handle")]

    def flaky(self: Path) -> bytes:
        if failures:
            raise failures.pop()
        return real(self)

    monkeypatch.setattr(file_store.Path, "read_bytes", flaky)
    assert FileStore(tmp_path, ttl=100).get_job("R" * 24)["id"] == "R" * 24  # not a 404


def test_a_record_from_a_dead_process_on_this_kernel_is_dead_at_once() -> None:
    me = Owner.current()
    assert me.kernel == this_kernel() and me.start == process_start(os.getpid()) and me.start
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    owner = Owner(me.host, me.kernel, child.pid, process_start(child.pid))
    record = {"owner": owner.to_dict(), "heartbeat": 0.0}  # however old its heartbeat: the process tells
    assert why_dead(record, me, stale_s=60, now=time.time()) is None
    reused = {"owner": {**owner.to_dict(), "start": "1"}, "heartbeat": time.time()}
    assert "stopped" in why_dead(reused, me, stale_s=60, now=time.time())  # the pid is another process's now
    child.kill()
    child.wait()
    assert why_dead(record, me, stale_s=60, now=time.time()) == f"the server running it ({owner}) stopped"
    assert why_dead({"heartbeat": 0.0}, me, stale_s=60, now=time.time()) is None  # no owner named: its expiry
    assert why_dead({"owner": me.to_dict()}, me, stale_s=60, now=time.time()) is None


def test_a_record_from_another_machine_is_dead_once_its_heartbeat_is_stale() -> None:
    me = Owner.current()
    other = Owner("elsewhere", "another-boot/pid:[1]", me.pid, me.start)  # its pid means nothing here
    record = {"owner": other.to_dict(), "heartbeat": 1000.0}
    assert why_dead(record, me, stale_s=60, now=1060.0) is None
    why = why_dead(record, me, stale_s=60, now=1060.001)
    heard = "has not been heard of for 60 s (file_job_stale_s: 60)"
    assert why == f"the server running it (process {me.pid} on elsewhere) {heard}"
