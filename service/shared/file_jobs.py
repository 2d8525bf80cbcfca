"""Translated files and the jobs that make them: the store both live in, and the job board.

`FileStore`: one directory of the service's own (`files_dir`, mode 0700) holds, under random
24-character ids that nothing the client sends can name, each translated file (`<id>`), its
metadata (`<id>.json`: name, media type, expiry, the uploader's key hash), its alignment
sidecar (`<id>.alignment.jsonl`), and each file job's record (`<id>.job.json`: its state and
progress). Every uvicorn worker process sees the same directory, so a job's status and its
file can be read whichever process answers; whatever expired is deleted as files come and go.

`JobBoard`: an upload too large to answer at once (`file_sync_chars`), or one that asks for
it, becomes a `FileJob`: its work is the very translation the synchronous answer waits for
(service/routes/files.py), run on one of `file_job_workers` threads instead of the request's. A
job waits `queued` (at most `file_max_jobs` queued or running per process: beyond, 503 with
Retry-After), is `running` while its segments go through the fair scheduler on its
uploader's turns (its record counts the segments done after every model call), and ends
`done` (its file stored under the job's id) or `failed` (the message and the status the
synchronous answer would have had). One job's failure is its own: the board goes on with
the next. Stopping the server cancels every job: running ones stop at their next model
step, queued ones never start, and each record says so.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.compute.batching import CancelToken
from service.http.errors import APIError, internal_error_message

log = logging.getLogger("crossalign.service")
FILE_ID = re.compile(r"[A-Za-z0-9_-]{24}")
QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
JOB_RECORD = ".job.json"


def new_id() -> str:
    return secrets.token_urlsafe(18)  # 24 characters of FILE_ID


def write_json(path: Path, value: dict[str, Any]) -> None:
    """Write `path` whole or not at all (a reader in another process never sees half of it)."""
    partial = path.with_name(path.name + f".{secrets.token_hex(4)}.tmp")
    partial.write_text(json.dumps(value), encoding="utf-8")
    os.replace(partial, path)


# --------------------------------------------------------------------------- the store


class FileStore:
    """Translated files waiting for their download and the records of file jobs (module doc)."""

    def __init__(self, directory: Path, ttl: float):
        self.directory, self.ttl = Path(directory), ttl
        self._lock = threading.Lock()

    def _ready(self) -> Path:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        return self.directory

    def put(self, data: bytes, meta: dict[str, Any], sidecar: list[dict], file_id: str | None = None) -> str:
        """Keep a translated file for `ttl` seconds, under `file_id` (a job's) or a new id; the id."""
        directory = self._ready()
        self.sweep()
        file_id = file_id or new_id()
        (directory / file_id).write_bytes(data)
        lines = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in sidecar)
        (directory / f"{file_id}.alignment.jsonl").write_text(lines, encoding="utf-8")
        write_json(directory / f"{file_id}.json", {**meta, "expires": time.time() + self.ttl})  # last: complete
        return file_id

    def get(self, file_id: str) -> tuple[dict[str, Any], Path]:
        """The metadata and path of a file that is there and not expired; 404 otherwise."""
        meta = self._read(file_id, ".json", "file")
        return meta, self.directory / file_id

    def put_job(self, record: dict[str, Any]) -> None:
        """Write a job's record (its `id` names it; its `expires` says until when it is kept)."""
        write_json(self._ready() / (record["id"] + JOB_RECORD), record)

    def get_job(self, job_id: str) -> dict[str, Any]:
        """A job's record that is there and not expired; 404 otherwise."""
        return self._read(job_id, JOB_RECORD, "job")

    def _read(self, file_id: str, suffix: str, kind: str) -> dict[str, Any]:
        self.sweep()
        if not FILE_ID.fullmatch(file_id):
            raise APIError(404, f"no such {kind} (ids are 24 letters, digits, - or _)")
        try:
            record = json.loads((self.directory / (file_id + suffix)).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise APIError(404, f"no such {kind}, or it expired ({kind}s are kept {self.ttl:g} s)") from None
        if record["expires"] < time.time():
            raise APIError(404, f"the {kind} expired ({kind}s are kept {self.ttl:g} s)")
        return record

    def sweep(self) -> None:
        """Delete every expired file (and its companions) and job record."""
        if not self.directory.is_dir():
            return
        now = time.time()
        with self._lock:
            for path in self.directory.glob("*.json"):
                try:
                    expired = json.loads(path.read_text(encoding="utf-8"))["expires"] < now
                except (OSError, ValueError, KeyError):
                    expired = path.stat().st_mtime + self.ttl < now if path.exists() else False
                if not expired:
                    continue
                if path.name.endswith(JOB_RECORD):
                    path.unlink(missing_ok=True)
                    continue
                file_id = path.name[: -len(".json")]
                for companion in (self.directory / file_id, self.directory / f"{file_id}.alignment.jsonl", path):
                    companion.unlink(missing_ok=True)


# --------------------------------------------------------------------------- jobs

# (file id, progress) -> the answer: the translation a synchronous upload waits for; it calls
# progress(segments done) after each model call and stores the file under the id it is given.
Work = Callable[[str, Callable[[int], None]], dict[str, Any]]


@dataclass(eq=False)
class FileJob:
    """One upload translated in the background: its work, and what its status says."""

    work: Work
    client: str  # whose fair turns its model calls take (an API key, or an address)
    key: str | None  # the hash of the upload's API key, when keys are on: status and download need it
    name: str  # the translated file's name
    total: int  # segments to translate
    token: CancelToken = field(default_factory=CancelToken)  # what stops it: the server stopping
    id: str = field(default_factory=new_id)  # the job's, and its file's
    state: str = QUEUED
    done: int = 0  # segments translated (or kept, refused by the input rules) so far
    position: int = 0  # while queued: jobs that arrived before it and wait too
    created: float = field(default_factory=time.time)
    started: float = 0.0
    error: str = ""
    error_status: int = 0  # the status the synchronous answer would have had
    answer: dict[str, Any] | None = None

    def record(self, expires: float) -> dict[str, Any]:
        return {
            "id": self.id,
            "state": self.state,
            "name": self.name,
            "key": self.key,
            "segments_done": self.done,
            "segments_total": self.total,
            "position": self.position,
            "created": self.created,
            "started": self.started,
            "error": self.error,
            "error_status": self.error_status,
            "answer": self.answer,
            "expires": expires,
        }


def poll_after(record: dict[str, Any], now: float | None = None) -> int:
    """Seconds a client should wait before asking again about an unfinished job: a quarter of
    a running job's remaining time (from its pace so far), within 1..10; 2 otherwise."""
    done, total, started = record["segments_done"], record["segments_total"], record["started"]
    if record["state"] != RUNNING or not done or not started:
        return 2
    remaining = ((now or time.time()) - started) * (total - done) / done
    return max(1, min(10, round(remaining / 4)))


class JobBoard:
    """File jobs of this process: at most `max_jobs` queued or running, `workers` of them
    running at once (each on its own thread, started when there is a job to run; its model
    calls take the fair turns beside every request's). The next job to run is the earliest
    queued one whose client has no job running, else the earliest."""

    def __init__(self, store: FileStore, workers: int, max_jobs: int, unfinished_ttl: float):
        """`unfinished_ttl`: how long a queued or running job's record outlives its last
        update (a longer time than any wait between two updates: the record of a job whose
        process died expires with it)."""
        self.store, self.workers, self.max_jobs, self.unfinished_ttl = store, workers, max_jobs, unfinished_ttl
        self._lock = threading.Lock()
        self._queued: list[FileJob] = []
        self._running: list[FileJob] = []
        self._threads: list[threading.Thread] = []
        self._closed = False

    def count(self, state: str) -> int:
        return len(self._queued if state == QUEUED else self._running if state == RUNNING else ())

    def submit(self, job: FileJob) -> None:
        """Queue `job` (its record written before this returns); 503 with Retry-After when
        `max_jobs` are queued or running, or the server is stopping."""
        with self._lock:
            if self._closed:
                raise APIError(503, "the server is shutting down", headers={"Retry-After": "5"})
            unfinished = len(self._queued) + len(self._running)
            if unfinished >= self.max_jobs:
                wait = self._retry_after()
                raise APIError(
                    503,
                    f"the server is busy: {unfinished} file jobs are queued or running (at most "
                    f"{self.max_jobs}); retry in {wait} s",
                    headers={"Retry-After": str(wait)},
                )
            self._queued.append(job)
            self._save_queue()
            if len(self._threads) < self.workers:
                thread = threading.Thread(target=self._work, name=f"file-jobs-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
        log.info("file job %s queued: %s, %d segments", job.id, job.name, job.total)

    def _retry_after(self) -> int:
        """Seconds until a running job likely ends (from its pace so far), within 1..600; 30
        when none has made progress yet (lock held)."""
        now = time.time()
        ends = [
            (now - job.started) * (job.total - job.done) / job.done for job in self._running if job.done and job.started
        ]
        return max(1, min(600, round(min(ends)))) if ends else 30

    def _save(self, job: FileJob) -> None:
        finished = job.state in (DONE, FAILED)
        ttl = self.store.ttl if finished else self.unfinished_ttl
        try:
            self.store.put_job(job.record(time.time() + ttl))
        except OSError:  # a full disk must not stop the board; the job runs on, its record stale
            log.exception("could not write the record of file job %s", job.id)

    def _save_queue(self) -> None:
        """Every queued job's record, with its position (lock held)."""
        for position, job in enumerate(self._queued):
            job.position = position
            self._save(job)

    def _work(self) -> None:
        """A worker thread: run jobs until none is queued, then end."""
        while True:
            with self._lock:
                job = self._take()
                if job is None:
                    self._threads.remove(threading.current_thread())
                    return
            self._run(job)

    def _take(self) -> FileJob | None:
        """The next job to run, now running (lock held); None if none is queued or the board closed."""
        if self._closed or not self._queued:
            return None
        busy = {job.client for job in self._running}
        job = next((job for job in self._queued if job.client not in busy), self._queued[0])
        self._queued.remove(job)
        self._running.append(job)
        job.state, job.started, job.position = RUNNING, time.time(), 0
        self._save(job)
        self._save_queue()
        return job

    def _run(self, job: FileJob) -> None:
        log.info("file job %s running", job.id)

        def progress(done: int) -> None:
            job.done = done
            self._save(job)

        try:
            job.answer = job.work(job.id, progress)
            job.state = DONE
            log.info("file job %s done: %d segments", job.id, job.total)
        except Exception as error:  # noqa: BLE001 - a job's failure is its own: recorded, and the board goes on
            job.state = FAILED
            if job.token.cancelled:  # the board was closed: the server is stopping
                job.error, job.error_status = "the server shut down while the job ran; upload the file again", 503
            elif isinstance(error, APIError):
                job.error, job.error_status = error.message, error.status
            else:
                log.exception("file job %s failed", job.id)
                job.error, job.error_status = internal_error_message(error), 500
            log.info("file job %s failed: %s", job.id, job.error)
        with self._lock:
            self._running.remove(job)
            self._save(job)

    def close(self, timeout: float = 5.0) -> None:
        """Stop: queued jobs fail at once, running ones are cancelled (their model calls stop
        at the next step) and waited for up to `timeout` seconds; every record says so."""
        with self._lock:
            self._closed = True
            queued, self._queued = self._queued, []
            running, threads = list(self._running), list(self._threads)
            for job in queued:
                job.state, job.position = FAILED, 0
                job.error, job.error_status = "the server shut down before the job started; upload the file again", 503
                self._save(job)
        for job in running:
            job.token.cancel()
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if queued or running:
            log.info("file jobs stopped: %d queued, %d running", len(queued), len(running))
