"""File jobs: an upload too large to answer at once, translated in the background, on a board
every process of every replica can read (the records live in the shared file store).

`JobBoard`: an upload too large to answer at once (`file_sync_chars`), or one that asks for
it, becomes a `FileJob`: its work is the very translation the synchronous answer waits for
(service/routes/files.py), run on one of `file_job_workers` threads instead of the request's. A
job waits `queued` (at most `file_max_jobs` queued or running per process, `file_client_max_jobs`
of them one client's: beyond, 503 or 429 with Retry-After), is `running` while its segments go
through the fair scheduler on its uploader's turns (its record counts the segments done
after every model call), and ends `done` (its file stored under the job's id), `failed` (the
message and the status the synchronous answer would have had) or `cancelled`. One job's
failure is its own: the board goes on with the next. Stopping the server cancels every job:
running ones stop at their next model step, queued ones never start, and each record says so.

Several processes, several servers. A job's record (service/shared/file_store.py) names its
owner (service/shared/job_owners.py) and carries its heartbeat, rewritten every quarter of
`file_job_stale_s`; any process answers its status from it. A cancellation is left in the
store for the owner, which sees it at its next model call or heartbeat, and meanwhile every
status says `cancelled`. Each process's upkeep thread beats for its own jobs, sweeps the
store every `file_sweep_s` (from its start: what a previous life left is settled at once),
and marks `failed` the unfinished jobs whose owner is gone; a status read does the same for
the job it reads, so a client learns of it at its next poll.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from service.compute.batching import CancelToken
from service.http.errors import APIError, internal_error_message
from service.settings import Settings
from service.shared.file_store import FileStore, new_id
from service.shared.job_owners import Owner, why_dead

log = logging.getLogger("crossalign.service")
QUEUED, RUNNING, DONE, FAILED, CANCELLED = "queued", "running", "done", "failed", "cancelled"
UNFINISHED = (QUEUED, RUNNING)

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
    token: CancelToken = field(default_factory=CancelToken)  # what stops it: the server stopping, a cancel
    id: str = field(default_factory=new_id)  # the job's, and its file's
    state: str = QUEUED
    done: int = 0  # segments translated (or kept, refused by the input rules) so far
    position: int = 0  # while queued: jobs that arrived before it and wait too
    created: float = field(default_factory=time.time)
    started: float = 0.0
    error: str = ""
    error_status: int = 0  # the status the synchronous answer would have had
    answer: dict[str, Any] | None = None
    cancel_asked: bool = False  # its client cancelled it (not the server stopping)
    settled: bool = False  # another process recorded its end, taking this one for dead: that record stands

    def record(self, expires: float, owner: Owner) -> dict[str, Any]:
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
            "owner": owner.to_dict(),
            "heartbeat": time.time(),
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
    """File jobs of this process: at most `max_jobs` queued or running, `client_max_jobs` of
    them one client's, `workers` of them running at once (each on its own thread, started
    when there is a job to run; its model calls take the fair turns beside every request's).
    The next job to run is the earliest queued one whose client has no job running, else the
    earliest. Its upkeep thread (`start`) beats, sweeps and settles (module doc)."""

    def __init__(
        self,
        store: FileStore,
        workers: int,
        max_jobs: int,
        unfinished_ttl: float,
        client_max_jobs: int | None = None,
        stale_s: float = 60.0,
        sweep_s: float = 60.0,
    ):
        """`unfinished_ttl`: how long a queued or running job's record outlives its last
        update (a longer time than any wait between two updates: should every server on the
        store die, the record expires); `stale_s`: a record's heartbeat older than this is a
        dead owner's (job_owners.why_dead)."""
        self.store, self.workers, self.max_jobs, self.unfinished_ttl = store, workers, max_jobs, unfinished_ttl
        self.client_max_jobs = client_max_jobs or max_jobs
        self.stale_s, self.sweep_s = stale_s, sweep_s
        self.owner = Owner.current()
        self._lock = threading.Lock()
        self._queued: list[FileJob] = []
        self._running: list[FileJob] = []
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._stop = threading.Event()
        self._upkeep = threading.Thread(target=self._keep_up, name="file-store-upkeep", daemon=True)

    @classmethod
    def for_settings(cls, store: FileStore, settings: Settings) -> JobBoard:
        # A record outlives its last update by more than any wait between two updates (a
        # running job's model call, or the whole of the job ahead of a queued one).
        unfinished_ttl = settings.file_ttl + settings.file_timeout + settings.request_timeout
        return cls(
            store,
            settings.file_job_workers,
            settings.file_max_jobs,
            unfinished_ttl,
            settings.file_client_max_jobs,
            settings.file_job_stale_s,
            settings.file_sweep_s,
        )

    def start(self) -> None:
        """Start the upkeep thread: a sweep and a settling at once, then on their schedules."""
        self._upkeep.start()

    def count(self, state: str) -> int:
        return len(self._queued if state == QUEUED else self._running if state == RUNNING else ())

    def submit(self, job: FileJob) -> None:
        """Queue `job` (its record written before this returns); 429 with Retry-After when
        its client has `client_max_jobs` queued or running here, 503 when `max_jobs` are, or
        the server is stopping."""
        with self._lock:
            if self._closed:
                raise APIError(503, "the server is shutting down", headers={"Retry-After": "5"})
            theirs = sum(other.client == job.client for other in self._queued + self._running)
            if theirs >= self.client_max_jobs:
                wait = self._retry_after(job.client)
                raise APIError(
                    429,
                    f"you have {theirs} file jobs queued or running here, at most {self.client_max_jobs} per "
                    f"client (file_client_max_jobs); retry in {wait} s",
                    headers={"Retry-After": str(wait)},
                )
            unfinished = len(self._queued) + len(self._running)
            if unfinished >= self.max_jobs:
                wait = self._retry_after()
                raise APIError(
                    503,
                    f"the server is busy: {unfinished} file jobs are queued or running, at most "
                    f"{self.max_jobs} (file_max_jobs); retry in {wait} s",
                    headers={"Retry-After": str(wait)},
                )
            self._queued.append(job)
            self._save_queue()
            if len(self._threads) < self.workers:
                thread = threading.Thread(target=self._work, name=f"file-jobs-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
        log.info("file job %s queued: %s, %d segments", job.id, job.name, job.total)

    def _retry_after(self, client: str | None = None) -> int:
        """Seconds until a running job (of `client`, if given) likely ends, from its pace so
        far, within 1..600; 30 when none has made progress yet (lock held)."""
        now = time.time()
        ends = [
            (now - job.started) * (job.total - job.done) / job.done
            for job in self._running
            if job.done and job.started and client in (None, job.client)
        ]
        return max(1, min(600, round(min(ends)))) if ends else 30

    # ----------------------------------------------------------------------- what a status says

    def status(self, record: dict[str, Any], now: float | None = None) -> dict[str, Any]:
        """The job of `record` as it stands: `failed` if it was unfinished and its owner is
        gone (recorded so), `cancelled` if that was asked (a done job's file deleted)."""
        now = time.time() if now is None else now
        asked = self.store.cancel_asked(record["id"])
        if record["state"] in UNFINISHED:
            why = why_dead(record, self.owner, self.stale_s, now)
            if why is not None:
                return self._settle(record, CANCELLED if asked else FAILED, why, now)
            if asked:  # its owner records it at its next model call or heartbeat
                return {**record, "state": CANCELLED}
        elif record["state"] == DONE and asked:
            self.store.delete(record["id"])
            return self._settle(record, CANCELLED, "", now)
        return record

    def _settle(self, record: dict[str, Any], state: str, why: str, now: float) -> dict[str, Any]:
        """Record the end of a job that its owner cannot record (it is gone, or it finished):
        `why` for the operator (the record's `reason`, the log), not for the client."""
        failed = state == FAILED
        settled = {
            **record,
            "state": state,
            "position": 0,
            "error": "the server running the job stopped before it ended; upload the file again" if failed else "",
            "error_status": 503 if failed else 0,
            "reason": why,
            "expires": now + self.store.ttl,
        }
        self.store.put_job(settled)
        log.warning("file job %s %s: %s", record["id"], state, why or "cancelled")
        return settled

    def cancel(self, record: dict[str, Any]) -> dict[str, Any]:
        """Cancel the job of `record`, whichever process runs it: one of this board's stops
        now (queued) or at its next model step (running); another's, when its owner sees the
        request (every status says `cancelled` meanwhile); a done job's file is deleted."""
        self.store.ask_cancel(record["id"])
        with self._lock:
            job = next((job for job in self._queued + self._running if job.id == record["id"]), None)
            if job is not None:
                self._cancel(job)
                return job.record(record["expires"], self.owner) | {"state": CANCELLED}
        return self.status(self.store.job_record(record["id"]) or record)

    def _cancel(self, job: FileJob) -> None:
        """Cancel one of this board's jobs (lock held)."""
        job.cancel_asked = True
        if job in self._queued:
            self._queued.remove(job)
            job.state, job.position = CANCELLED, 0
            self._save(job)
            self._save_queue()
        else:
            job.token.cancel()  # its worker records it when the model call stops

    # ----------------------------------------------------------------------- upkeep

    def beat(self) -> None:
        """Rewrite the records of this board's unfinished jobs (their heartbeat), cancelling
        those whose cancellation was asked on another server."""
        with self._lock:
            for job in self._queued + self._running:
                if not job.cancel_asked and self.store.cancel_asked(job.id):
                    self._cancel(job)
                elif job.state in UNFINISHED:
                    self._save(job)

    def reap(self, now: float | None = None) -> int:
        """Mark `failed` every unfinished job on the store whose owner is gone; how many."""
        with self._lock:
            mine = {job.id for job in self._queued + self._running}
        settled = 0
        for job_id in self.store.unfinished_jobs():
            record = self.store.job_record(job_id) if job_id not in mine else None
            if record is not None and record.get("state") in UNFINISHED:
                settled += self.status(record, now)["state"] not in UNFINISHED
        return settled

    def _keep_up(self) -> None:
        """The upkeep thread: a heartbeat every quarter of `stale_s`, a sweep and a settling
        every `sweep_s`, the first of each at once; until `close`."""
        next_beat = next_sweep = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            if next_sweep <= now:
                self._safely(self.store.sweep)
                self._safely(self.reap)
                next_sweep = now + self.sweep_s
            if next_beat <= now:
                self._safely(self.beat)
                next_beat = now + self.stale_s / 4
            self._stop.wait(max(0.0, min(next_beat, next_sweep) - time.monotonic()))

    @staticmethod
    def _safely(task: Callable[[], object]) -> None:
        try:
            task()
        except Exception:  # noqa: BLE001 - a failed sweep (a full disk, a lost volume) is tried again later
            log.exception("file store upkeep: %s failed", getattr(task, "__name__", task))

    # ----------------------------------------------------------------------- running jobs

    def _save(self, job: FileJob) -> None:
        if job.settled or (job.state in UNFINISHED and self._settled_elsewhere(job)):
            return
        ttl = self.unfinished_ttl if job.state in UNFINISHED else self.store.ttl
        try:
            self.store.put_job(job.record(time.time() + ttl, self.owner))
        except OSError:  # a full disk must not stop the board; the job runs on, its record stale
            log.exception("could not write the record of file job %s", job.id)

    def _settled_elsewhere(self, job: FileJob) -> bool:
        """Whether another process marked this unfinished job failed, its heartbeat having come
        too late (a pause longer than `stale_s`); if so the job stops, and stays as marked."""
        record = self.store.job_record(job.id)
        if record is None or record.get("state") in UNFINISHED or not record.get("reason"):
            return False
        log.warning("file job %s was marked %s by another server: %s", job.id, record["state"], record["reason"])
        job.settled = True
        job.token.cancel()
        return True

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
        busy = {job.client for job in self._running}
        while True:
            if self._closed or not self._queued:
                return None
            job = next((job for job in self._queued if job.client not in busy), self._queued[0])
            if not self.store.cancel_asked(job.id):
                break
            self._cancel(job)  # cancelled on another server while it waited
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
            if self.store.cancel_asked(job.id):  # asked on another server: stop at the next model call
                job.cancel_asked = True
                job.token.cancel()
            self._save(job)

        try:
            job.answer = job.work(job.id, progress)
            job.state = DONE
        except Exception as error:  # noqa: BLE001 - a job's failure is its own: recorded, and the board goes on
            job.state = FAILED
            if job.cancel_asked:
                job.state = CANCELLED
            elif job.settled:
                job.error = "marked failed by another server"  # its record, written there, stands
            elif job.token.cancelled:  # the board was closed: the server is stopping
                job.error, job.error_status = "the server shut down while the job ran; upload the file again", 503
            elif isinstance(error, APIError):
                job.error, job.error_status = error.message, error.status
            else:
                log.exception("file job %s failed", job.id)
                job.error, job.error_status = internal_error_message(error), 500
        if job.state == DONE and (job.settled or job.cancel_asked or self.store.cancel_asked(job.id)):
            self.store.delete(job.id)  # cancelled, or settled elsewhere, as it ended: nobody wants the file
            job.state, job.answer = CANCELLED, None
        log.info("file job %s %s: %d of %d segments %s", job.id, job.state, job.done, job.total, job.error)
        with self._lock:
            self._running.remove(job)
            self._save(job)

    def close(self, timeout: float = 5.0) -> None:
        """Stop: queued jobs fail at once, running ones are cancelled (their model calls stop
        at the next step) and waited for up to `timeout` seconds; every record says so."""
        self._stop.set()
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
        for thread in [*threads, self._upkeep]:
            if thread.is_alive():
                thread.join(max(0.0, deadline - time.monotonic()))
        if queued or running:
            log.info("file jobs stopped: %d queued, %d running", len(queued), len(running))
