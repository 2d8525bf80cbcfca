"""The file store: translated files and file-job records in one directory (`files_dir`, mode
0700) that every worker process, and every replica of the service, may share (a network volume).

Names (nothing the client sends names a path: ids are 24 random URL-safe characters):

    <id>                   a translated file
    <id>.alignment.jsonl   its alignment sidecar
    <id>.json              its metadata (name, media type, expiry, the uploader's key and client
                           hashed, its bytes), written last: a file exists once this exists
    <id>.job.json          a file job's record (service/shared/file_jobs.py)
    <id>.cancel            a job's cancellation, asked on whichever server (created once, never rewritten)
    *.tmp                  a write under way, or a file its download has claimed

Every write is whole or not at all: a temporary file renamed over its name, so a reader in
another process or on another machine sees the old content or the new one, never half of
either; it reads again when the volume says the file it opened was replaced meanwhile (NFS:
ESTALE). A file is deleted metadata first, so nobody finds a file whose data is going.

Expiry. Each process keeps an index of the records it knows, by expiry; a background sweep
(service/shared/file_jobs.py runs it every `file_sweep_s`) lists the directory, so it learns what
other processes wrote or deleted (reading only records new to it), deletes what expired, and
what a crash left half-written. No request reads more than its own record, and reads check
the expiry themselves: an expired file is a 404 whether or not it was swept yet.

Quotas. The bytes of stored files (a file and its sidecar), in the whole directory
(`max_bytes`) and per client (`client_max_bytes`: an API key, or an address without keys),
are counted from the directory: the index is brought up to date with a listing before each
check, so the files other replicas stored count too. Two files stored at the same instant on
two servers may both pass, so the directory can pass a bound by one file per server at most.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import heapq
import json
import os
import re
import secrets
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.http.errors import APIError

FILE_ID = re.compile(r"[A-Za-z0-9_-]{24}")
META, JOB_RECORD, SIDECAR, CANCEL, PARTIAL = ".json", ".job.json", ".alignment.jsonl", ".cancel", ".tmp"
RECORD_NAME = re.compile(r"([A-Za-z0-9_-]{24})(\.json|\.job\.json)")
COMPANION_NAME = re.compile(r"([A-Za-z0-9_-]{24})(\.alignment\.jsonl|\.cancel)?")
UNFINISHED = ("queued", "running")
# A quota check trusts a listing this recent: with 10,000 records one takes ~20-120 ms here.
LISTING_S = 1.0
# What a crash can leave behind (a write never renamed into place, a file without its
# metadata, a claimed download) is deleted once it is this old: far longer than any write takes.
LEFTOVER_S = 600.0


def new_id() -> str:
    return secrets.token_urlsafe(18)  # 24 characters of FILE_ID


def client_hash(client: str) -> str:
    """Who stored a file, as the store keeps it (an API key is never written in clear)."""
    return hashlib.sha256(client.encode()).hexdigest()[:32]


def write_whole(path: Path, data: bytes) -> None:
    """Write `path` whole or not at all: a reader anywhere sees the old content or the new one."""
    partial = path.with_name(f"{path.name}.{secrets.token_hex(4)}{PARTIAL}")
    try:
        partial.write_bytes(data)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def write_json(path: Path, value: dict[str, Any]) -> None:
    write_whole(path, json.dumps(value).encode())


def read_json(path: Path, tries: int = 3) -> dict[str, Any] | None:
    """The record at `path`, or None if there is none. A record replaced while it is read (on
    NFS the old file's handle goes stale) or not yet readable is read again."""
    for attempt in range(tries):
        try:
            value = json.loads(path.read_bytes())
            return value if isinstance(value, dict) else None
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:  # ESTALE and the like; a record this code did not write
            if isinstance(error, OSError) and error.errno not in (errno.ESTALE, errno.EIO, errno.EAGAIN):
                return None
            time.sleep(0.005 * (attempt + 1))
    return None


@dataclass
class Entry:
    """What the index knows of one record."""

    expires: float
    size: int = 0  # a file's bytes, its sidecar's included; 0 for a job's record
    client: str = ""  # a file's uploader (client_hash)
    state: str = ""  # a job's state, as last read or written here


def entry_of(record: dict[str, Any]) -> Entry:
    expires, size = float(record.get("expires", 0)), int(record.get("bytes", 0))
    return Entry(expires, size, str(record.get("client", "")), str(record.get("state", "")))


class FileStore:
    """Translated files waiting for their download, and the records of file jobs (module doc)."""

    def __init__(
        self, directory: Path, ttl: float, max_bytes: int = 0, client_max_bytes: int = 0, listing_s: float = LISTING_S
    ):
        """`listing_s`: how recent a listing of the directory a quota check trusts."""
        self.directory, self.ttl = Path(directory), ttl
        self.max_bytes, self.client_max_bytes, self.listing_s = max_bytes, client_max_bytes, listing_s
        self._lock = threading.Lock()  # the index, and a quota's check with the write it admits
        self._entries: dict[str, Entry] = {}
        self._expiries: list[tuple[float, str]] = []  # a heap; an item whose entry changed since is skipped
        self._used = 0
        self._used_by: Counter[str] = Counter()
        self._unreadable: set[str] = set()  # record names the last listing could not read
        self._listed = 0.0  # when the directory was last listed (time.monotonic)

    def _ready(self) -> Path:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        return self.directory

    # ----------------------------------------------------------------------- files

    def check_room(self, client: str, size: int) -> None:
        """507 if `client`'s stored files and `size` more bytes would pass `client_max_bytes`,
        503 (with Retry-After) if the directory's would pass `max_bytes`."""
        if self.max_bytes or self.client_max_bytes:
            with self._lock:
                self._refresh(self.listing_s)
                self._check_room(client_hash(client), size)

    def put(
        self, data: bytes, meta: dict[str, Any], sidecar: list[dict], client: str, file_id: str | None = None
    ) -> str:
        """Keep a translated file for `ttl` seconds, under `file_id` (a job's) or a new id; the
        id. Within the quotas (`check_room`), counting the file and its sidecar."""
        lines = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in sidecar).encode()
        who, size = client_hash(client), len(data) + len(lines)
        directory = self._ready()
        with self._lock:
            if self.max_bytes or self.client_max_bytes:
                self._refresh(self.listing_s)
                self._check_room(who, size)
            file_id = file_id or new_id()
            write_whole(directory / file_id, data)
            write_whole(directory / f"{file_id}{SIDECAR}", lines)
            record = {**meta, "client": who, "bytes": size, "expires": time.time() + self.ttl}
            write_json(directory / f"{file_id}{META}", record)  # last: the file is complete
            self._index(f"{file_id}{META}", entry_of(record))
        return file_id

    def get(self, file_id: str) -> dict[str, Any]:
        """The metadata of a file that is there and not expired; 404 otherwise."""
        return self._read(file_id, META, "file")

    def read(self, file_id: str, alignment: bool = False) -> bytes:
        """A file's bytes (or its sidecar's); 404 if it went meanwhile."""
        try:
            return (self.directory / (file_id + (SIDECAR if alignment else ""))).read_bytes()
        except FileNotFoundError:
            raise APIError(404, self._gone("file")) from None

    def take(self, file_id: str) -> bytes:
        """A file's bytes, the file deleted: one download gets it (its metadata is claimed by a
        rename first, which one process on one server wins); 404 for the others."""
        claimed = self.directory / f"{file_id}{META}.{secrets.token_hex(4)}{PARTIAL}"
        try:
            os.rename(self.directory / f"{file_id}{META}", claimed)
        except FileNotFoundError:
            raise APIError(404, self._gone("file")) from None
        try:
            return self.read(file_id)
        finally:
            self._forget(f"{file_id}{META}")
            for path in (self.directory / file_id, self.directory / f"{file_id}{SIDECAR}", claimed):
                path.unlink(missing_ok=True)

    def delete(self, file_id: str) -> None:
        """Delete a file, its sidecar and its metadata (metadata first: nobody finds it going)."""
        self._forget(f"{file_id}{META}")
        for suffix in (META, "", SIDECAR):
            (self.directory / (file_id + suffix)).unlink(missing_ok=True)

    # ----------------------------------------------------------------------- job records

    def put_job(self, record: dict[str, Any]) -> None:
        """Write a job's record (its `id` names it; its `expires` says until when it is kept)."""
        write_json(self._ready() / (record["id"] + JOB_RECORD), record)
        with self._lock:
            self._index(record["id"] + JOB_RECORD, entry_of(record))

    def get_job(self, job_id: str) -> dict[str, Any]:
        """A job's record that is there and not expired; 404 otherwise."""
        return self._read(job_id, JOB_RECORD, "job")

    def job_record(self, job_id: str) -> dict[str, Any] | None:
        """A job's record as it is on disk, expired or not (the index learns its state); None if there is none."""
        record = read_json(self.directory / (job_id + JOB_RECORD))
        if record is not None and isinstance(record.get("expires"), int | float):
            with self._lock:
                self._index(job_id + JOB_RECORD, entry_of(record))
        return record

    def ask_cancel(self, job_id: str) -> None:
        """Leave the job's cancellation where its server, whichever it is, will see it."""
        with contextlib.suppress(FileExistsError):  # asked already
            os.close(os.open(self._ready() / (job_id + CANCEL), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))

    def cancel_asked(self, job_id: str) -> bool:
        return (self.directory / (job_id + CANCEL)).exists()

    def unfinished_jobs(self) -> list[str]:
        """The ids of the jobs whose records were `queued` or `running` when last read here."""
        with self._lock:
            return [name[: -len(JOB_RECORD)] for name, entry in self._entries.items() if entry.state in UNFINISHED]

    def _read(self, file_id: str, suffix: str, kind: str) -> dict[str, Any]:
        if not FILE_ID.fullmatch(file_id):
            raise APIError(404, f"no such {kind} (ids are 24 letters, digits, - or _)")
        record = read_json(self.directory / (file_id + suffix))
        if record is None:
            raise APIError(404, self._gone(kind))
        if record["expires"] < time.time():
            raise APIError(404, f"the {kind} expired ({kind}s are kept {self.ttl:g} s)")
        return record

    def _gone(self, kind: str) -> str:
        return f"no such {kind}: it expired ({kind}s are kept {self.ttl:g} s), was deleted, or never was"

    # ----------------------------------------------------------------------- the index

    def _index(self, name: str, entry: Entry) -> None:
        """Know `name` as `entry` (lock held). A record renewed keeps its place in the heap,
        moved on when it comes up (a job's record is rewritten after every model call)."""
        old = self._forget_locked(name)
        self._entries[name] = entry
        self._used += entry.size
        self._used_by[entry.client] += entry.size
        if old is None or entry.expires < old.expires:
            heapq.heappush(self._expiries, (entry.expires, name))

    def _forget(self, name: str) -> None:
        with self._lock:
            self._forget_locked(name)

    def _forget_locked(self, name: str) -> Entry | None:
        old = self._entries.pop(name, None)
        if old is not None:
            self._used -= old.size
            self._used_by[old.client] -= old.size
            if not self._used_by[old.client]:
                del self._used_by[old.client]
        return old

    def _refresh(self, max_age: float = 0.0) -> list[str]:
        """Bring the index up to the directory, unless it was listed less than `max_age`
        seconds ago (lock held): forget the records gone, read only those new here. The
        directory's names (none when the listing was recent enough)."""
        if self._listed and time.monotonic() - self._listed < max_age:
            return []
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            names = []
        self._listed = time.monotonic()
        records = {name for name in names if name.endswith(META) and RECORD_NAME.fullmatch(name)}
        for name in self._entries.keys() - records:
            self._forget_locked(name)
        self._unreadable.clear()
        for name in records - self._entries.keys():
            record = read_json(self.directory / name)
            if record is None or not isinstance(record.get("expires"), int | float):
                self._unreadable.add(name)
            else:
                self._index(name, entry_of(record))
        return names

    def _leftover(self, name: str) -> bool:
        """Whether `name` is what a crash may leave: a write never renamed into place, a
        record that does not read, a file or a cancellation without its record (lock held)."""
        if name.endswith(PARTIAL) or name in self._unreadable:
            return True
        match = COMPANION_NAME.fullmatch(name)
        if match is None:
            return False  # a record, or not a name of ours: left alone
        return match.group(1) + (JOB_RECORD if match.group(2) == CANCEL else META) not in self._entries

    def _check_room(self, who: str, size: int) -> None:
        """The quotas (lock held, index fresh)."""
        used = self._used_by[who]
        if self.client_max_bytes and used + size > self.client_max_bytes:
            mine = [entry.expires for entry in self._entries.values() if entry.client == who and entry.size]
            next_s = f", the next in {max(1, round(min(mine) - time.time()))} s" if mine else ""
            raise APIError(
                507,
                f"your translated files waiting for their download take {used:,} bytes and this one {size:,}: "
                f"at most {self.client_max_bytes:,} bytes per client (file_client_max_bytes); download them "
                f"(delete_after_download=true deletes each once downloaded) or wait until they expire{next_s}",
            )
        if self.max_bytes and self._used + size > self.max_bytes:
            wait = self._room_in(self._used + size - self.max_bytes)
            raise APIError(
                503,
                f"the file store is full: {self._used:,} bytes of translated files wait for their download, "
                f"at most {self.max_bytes:,} (file_store_max_bytes); retry in {wait} s",
                headers={"Retry-After": str(wait)},
            )

    def _room_in(self, needed: int) -> int:
        """Seconds until files expire that free `needed` bytes, within 1..ttl (lock held)."""
        now, freed = time.time(), 0
        for entry in sorted((entry for entry in self._entries.values() if entry.size), key=lambda e: e.expires):
            freed += entry.size
            if freed >= needed:
                return max(1, min(round(self.ttl), round(entry.expires - now)))
        return max(1, round(self.ttl))

    # ----------------------------------------------------------------------- the sweep

    def sweep(self, now: float | None = None) -> int:
        """Delete what expired by `now` (its record read again first: another process may have
        renewed it), and what a crash left behind; the number of records deleted."""
        now = time.time() if now is None else now
        deleted = 0
        with self._lock:
            names = self._refresh()
            leftovers = [name for name in names if self._leftover(name)]
            due: list[str] = []
            while self._expiries and self._expiries[0][0] < now:  # expired: as a read has it
                expires, name = heapq.heappop(self._expiries)
                entry = self._entries.get(name)
                if entry is not None and entry.expires < now:
                    due.append(name)
                elif entry is not None and entry.expires > expires:
                    heapq.heappush(self._expiries, (entry.expires, name))  # renewed since it was pushed
            for name in dict.fromkeys(due):  # a record whose expiry came nearer is in the heap twice
                record = read_json(self.directory / name)
                if record is not None and record.get("expires", 0) >= now:
                    self._forget_locked(name)  # renewed by its owner since it was read: back in the heap
                    self._index(name, entry_of(record))
                    continue
                self._forget_locked(name)
                file_id = name.split(".", 1)[0]
                suffixes = (JOB_RECORD, CANCEL) if name.endswith(JOB_RECORD) else (META, "", SIDECAR)
                for suffix in suffixes:
                    (self.directory / (file_id + suffix)).unlink(missing_ok=True)
                deleted += 1
        for name in leftovers:
            with contextlib.suppress(FileNotFoundError):
                if (self.directory / name).stat().st_mtime + LEFTOVER_S < now:
                    (self.directory / name).unlink(missing_ok=True)
        return deleted
