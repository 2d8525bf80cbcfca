"""Who runs a file job, and whether it still can: the owner a job's record names.

A job runs in one process of one server; its record (service/shared/file_jobs.py) names that
process, so any process reading the record on the shared store can tell a job that will
still finish from one whose server died (killed, out of memory, the machine gone):

- under the same kernel and in the same PID namespace (the same boot id and namespace: a
  restart on the same machine or container, another worker process of the same server), the
  owner is alive exactly when its pid runs and started when the owner did (a pid reused by
  another process started at another time); nothing to wait for;
- anywhere else (another machine, another container), the owner's heartbeat tells: it
  rewrites its unfinished jobs' records every quarter of `stale_s`, and a record not
  rewritten for longer than `stale_s` is a dead owner's. This compares the two servers'
  clocks, which must agree (NTP) within a small part of `stale_s`.
"""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, dataclass
from typing import Any


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as file:
            return file.read().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def process_start(pid: int) -> str:
    """When process `pid` started, in clock ticks since boot (/proc/<pid>/stat, field 22); ""
    if there is no such process (or no /proc to tell)."""
    stat = _read(f"/proc/{pid}/stat")
    fields = stat.rsplit(")", 1)[-1].split()  # after the command's name, which may hold spaces
    return fields[19] if len(fields) > 19 else ""


def this_kernel() -> str:
    """The boot id and PID namespace of this process: two processes see each other's pids
    exactly when theirs are equal ("" where /proc does not say)."""
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""
    return f"{boot}/{namespace}" if boot else ""


@dataclass(frozen=True)
class Owner:
    """A process that runs file jobs, as a record names it."""

    host: str  # the machine's (or container's) name: for people reading the record
    kernel: str  # this_kernel(): where `pid` means this process
    pid: int
    start: str  # process_start(pid) when it took its first job

    @classmethod
    def current(cls) -> Owner:
        pid = os.getpid()
        return cls(socket.gethostname(), this_kernel(), pid, process_start(pid))

    @classmethod
    def of(cls, record: dict[str, Any]) -> Owner | None:
        """The owner a job's record names; None for a record written before owners were
        named (left to its expiry, as then)."""
        owner = record.get("owner")
        if not isinstance(owner, dict):
            return None
        try:
            return cls(str(owner["host"]), str(owner["kernel"]), int(owner["pid"]), str(owner["start"]))
        except (KeyError, TypeError, ValueError):
            return None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        return f"process {self.pid} on {self.host}"


def why_dead(record: dict[str, Any], me: Owner, stale_s: float, now: float) -> str | None:
    """Why the unfinished job of `record` will never finish (its owner is gone), or None if
    it may (its owner runs, or `me` cannot tell yet)."""
    owner = Owner.of(record)
    if owner is None or owner == me:
        return None
    if owner.kernel and owner.kernel == me.kernel:
        if process_start(owner.pid) == owner.start:
            return None
        return f"the server running it ({owner}) stopped"
    silent = now - float(record.get("heartbeat", 0))
    if silent <= stale_s:
        return None
    return f"the server running it ({owner}) has not been heard of for {silent:.0f} s (file_job_stale_s: {stale_s:g})"
