"""Step 4 of the cluster mode: the output directory, its shards written atomically, and --resume.

    OUT/job.json                  the options that decide the records, and the plan (windows, shard size)
    OUT/NAME.00000.jsonl          a shard: the records of its lines, in input order
    OUT/NAME.00000.jsonl.done     its completion marker: input file, first line, lines, bytes, failed lines

A shard is written through the batch CLI's `RecordWriter` into `NAME...jsonl.part`, renamed
into place, and only then marked; a kill leaves at worst a `.part` file or an unmarked shard,
which --resume writes again. Joining back: a shard's line k (from 0) is its input's line
`first_line + k`, and JSONL records carry their `line` (and `id`).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from seq2seq.cli import batch
from seq2seq.cli.cluster.inputs import Shard

JOB_RECORD = "job.json"
MARKER = ".done"
PARTIAL = ".part"


class OutputError(ValueError):
    """The output directory cannot take this run (a usage error, named with its fix)."""


@dataclass(frozen=True)
class Plan:
    """How the inputs are cut: a resumed run must cut them the same way."""

    first_window: int  # lines of a file's first window
    window: int  # lines of every later window
    windows_per_shard: int


def load_plan(directory: Path, options: dict, resume: bool) -> Plan | None:
    """The plan of the run that `directory` holds, when resuming it; None for a new run.

    Refuses (OutputError) a new run into a directory that holds an earlier run's shards, and
    a resume whose options differ from the first run's, naming them."""
    record = directory / JOB_RECORD
    if not resume:
        if record.exists() or any(directory.rglob(f"*{MARKER}")):
            raise OutputError(
                f"{directory} holds the shards of an earlier run: add --resume to continue it, or give another -o"
            )
        return None
    if not record.is_file():
        return None
    try:
        before = json.loads(record.read_text(encoding="utf-8"))
        plan = Plan(**before["plan"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise OutputError(f"{record}: unreadable ({error}); remove {directory} to start over") from error
    now = json.loads(json.dumps(options))
    differences = [
        f"{name}: {before['options'].get(name)!r} in the first run, {now.get(name)!r} now"
        for name in sorted(set(before["options"]) | set(now))
        if before["options"].get(name) != now.get(name)
    ]
    if differences:
        raise OutputError(
            f"cannot resume {directory} with other options ({'; '.join(differences)}); rerun with the first "
            f"run's options, or remove {directory} to start over"
        )
    return plan


def write_record(directory: Path, options: dict, plan: Plan) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    _replace(directory / JOB_RECORD, json.dumps({"options": options, "plan": asdict(plan)}, indent=1) + "\n")


def completed(directory: Path, shard: Shard, output_format: str) -> list[int] | None:
    """The failed lines of `shard` when its output is complete (marked, and the size the
    marker says); None when it is still to do."""
    path = directory / shard.output_name(output_format)
    try:
        marker = json.loads((directory / (shard.output_name(output_format) + MARKER)).read_text(encoding="utf-8"))
        size = path.stat().st_size
    except (OSError, ValueError):
        return None
    expected = {"input": str(shard.file.path), "first_line": shard.first_line, "lines": shard.lines, "bytes": size}
    if any(marker.get(key) != value for key, value in expected.items()):
        return None
    return list(marker.get("failed", []))


def write_shard(directory: Path, shard: Shard, output_format: str, records: str, failed: list[int]) -> None:
    """Write `records` (the shard's, in input order) atomically, then mark the shard complete."""
    path = directory / shard.output_name(output_format)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + PARTIAL)
    writer = batch.RecordWriter(partial, output_format)  # flushed and fsynced
    try:
        writer.write([records])
    finally:
        writer.close()
    partial.replace(path)
    marker = {
        "input": str(shard.file.path),
        "first_line": shard.first_line,
        "lines": shard.lines,
        "bytes": path.stat().st_size,
        "failed": failed,
    }
    _replace(path.with_name(path.name + MARKER), json.dumps(marker) + "\n")


def remove_partials(directory: Path) -> int:
    """Remove what a killed run left half-written; returns how many files."""
    partials = list(directory.rglob(f"*{PARTIAL}")) if directory.is_dir() else []
    for path in partials:
        path.unlink(missing_ok=True)
    return len(partials)


def _replace(path: Path, text: str) -> None:
    partial = path.with_name(path.name + PARTIAL)
    with open(partial, "w", encoding="utf-8") as stream:
        stream.write(text)
        stream.flush()
        os.fsync(stream.fileno())
    partial.replace(path)
