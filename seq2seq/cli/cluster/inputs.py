"""Step 1 of the cluster mode: input files -> windows -> shards, and a shard's windows read back.

A *window* is a run of consecutive lines that the batch job sorts by length and cuts into
batches together (seq2seq.cli.batch.job). The cluster mode cuts every file into the windows
the single-machine CLI cuts at a steady rate (the first `min(--flush-lines, --batch-size)`
lines, then `--flush-lines` each), so whichever actor translates a window batches its lines
as the CLI would, and the output is the CLI's. A *shard* is a run of whole windows of one
file: one output file, the unit of --resume.

Text, TSV and JSONL files are cut at line ends (a final line without newline counts), by
byte offsets; Parquet files (`.parquet`, a string column `text` and optionally `id`) by
rows, each row read as the JSONL line `{"id": ..., "text": ...}`, so that one decoder
(`seq2seq.cli.batch.decode_line`) checks every input. Line numbers are 1-based within each
file (a Parquet row's is its row number), as the records' `line` says.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from seq2seq.cli.cluster.options import DEFAULT_SHARD_LINES, SHARDS_PER_ACTOR

PARQUET = ".parquet"
EXTENSIONS = {"text": "txt", "tsv": "tsv", "jsonl": "jsonl"}  # an output shard's, by --format


class InputError(ValueError):
    """The inputs cannot be read as asked (a fatal error, named with its fix)."""


@dataclass(frozen=True)
class InputFile:
    path: Path  # absolute
    name: str  # relative to the input directory or glob: output shards are named after it
    parquet: bool


@dataclass(frozen=True)
class Window:
    first_line: int  # 1-based number of its first line (row) in the file
    lines: int
    start: int  # byte offset of its first line, or its first row's index
    end: int  # byte offset after its last line, or the row index after it


@dataclass(frozen=True)
class Shard:
    index: int  # among all of the job's shards
    file: InputFile
    number: int  # among its file's shards: 0, 1, ...
    windows: tuple[Window, ...]

    @property
    def first_line(self) -> int:
        return self.windows[0].first_line

    @property
    def lines(self) -> int:
        return sum(window.lines for window in self.windows)

    def output_name(self, output_format: str) -> str:
        """`NAME.00003.jsonl`: the input's relative name, the shard's number, the format."""
        return f"{self.file.name}.{self.number:05d}.{EXTENSIONS[output_format]}"

    def to_json(self) -> str:
        """The shard as one row of the dataset (Ray Data's blocks want plain columns)."""
        return json.dumps(
            {
                "index": self.index,
                "path": str(self.file.path),
                "name": self.file.name,
                "parquet": self.file.parquet,
                "number": self.number,
                "windows": [[w.first_line, w.lines, w.start, w.end] for w in self.windows],
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Shard:
        value = json.loads(text)
        file = InputFile(Path(value["path"]), value["name"], value["parquet"])
        return cls(value["index"], file, value["number"], tuple(Window(*w) for w in value["windows"]))


def find_inputs(spec: Path, exclude: Path | None = None) -> list[InputFile]:
    """The files `-i` names: a file, every file under a directory, or a glob's matches (`**`
    included), sorted; hidden files and those under `exclude` (the output) left out."""
    text = str(spec)
    if glob.has_magic(text):
        base, paths = Path(*_parts_before_magic(spec)), [Path(p) for p in sorted(glob.glob(text, recursive=True))]
    elif spec.is_dir():
        base, paths = spec, sorted(spec.rglob("*"))
    elif spec.is_file():
        base, paths = spec.parent, [spec]
    else:
        raise InputError(f"{spec}: no such file or directory, and no glob characters to match files with")
    base = Path(os.path.abspath(base))
    skipped = Path(os.path.abspath(exclude)) if exclude is not None else None
    found = []
    for path in paths:
        absolute = Path(os.path.abspath(path))
        name = absolute.relative_to(base).as_posix() if absolute.is_relative_to(base) else path.name
        hidden = any(part.startswith((".", "_")) for part in Path(name).parts)
        if not path.is_file() or hidden or (skipped is not None and absolute.is_relative_to(skipped)):
            continue
        found.append(InputFile(absolute, name, path.suffix == PARQUET))
    if not found:
        raise InputError(f"{spec}: no input files there")
    return found


def _parts_before_magic(spec: Path) -> list[str]:
    parts = []
    for part in spec.parts:
        if glob.has_magic(part):
            break
        parts.append(part)
    return parts or ["."]


def window_sizes(first: int, size: int) -> Iterator[int]:
    """The CLI's windows at a steady rate: `first` lines, then `size` each."""
    yield first
    while True:
        yield size


def cut_windows(file: InputFile, first: int, size: int) -> list[Window]:
    """Every line (row) of `file` in windows of `window_sizes(first, size)`."""
    sizes = window_sizes(first, size)
    if file.parquet:
        rows, windows, start = parquet_rows(file.path), [], 0
        while start < rows:
            lines = min(next(sizes), rows - start)
            windows.append(Window(start + 1, lines, start, start + lines))
            start += lines
        return windows
    windows, limit, count, start, position = [], next(sizes), 0, 0, 0
    with open(file.path, "rb") as stream:
        for raw in stream:
            count, position = count + 1, position + len(raw)
            if count == limit:
                first_line = windows[-1].first_line + windows[-1].lines if windows else 1
                windows.append(Window(first_line, count, start, position))
                limit, count, start = next(sizes), 0, position
    if count:
        first_line = windows[-1].first_line + windows[-1].lines if windows else 1
        windows.append(Window(first_line, count, start, position))
    return windows


def shard_windows(total_lines: int, actors: int, shard_lines: int | None, window: int) -> int:
    """Windows per shard: `shard_lines` lines' worth when given; else DEFAULT_SHARD_LINES,
    fewer for a small input (about SHARDS_PER_ACTOR shards per actor); one at least."""
    if shard_lines is None:
        shard_lines = min(DEFAULT_SHARD_LINES, -(-total_lines // (SHARDS_PER_ACTOR * actors)))
    return max(1, round(shard_lines / window))


def plan_shards(files: list[InputFile], windows: list[list[Window]], per_shard: int) -> list[Shard]:
    """Each file's windows grouped `per_shard` at a time into shards, numbered in order."""
    shards: list[Shard] = []
    for file, cut in zip(files, windows):
        for number, start in enumerate(range(0, len(cut), per_shard)):
            shards.append(Shard(len(shards), file, number, tuple(cut[start : start + per_shard])))
    return shards


def read_shard(shard: Shard) -> Iterator[tuple[Window, bytes]]:
    """Each window of `shard` with its raw lines (Parquet rows as JSONL lines)."""
    first, last = shard.windows[0], shard.windows[-1]
    if shard.file.parquet:
        rows = parquet_lines(shard.file.path, first.start, last.end)
        for window in shard.windows:
            yield window, b"".join(rows[window.start - first.start : window.end - first.start])
        return
    with open(shard.file.path, "rb") as stream:
        stream.seek(first.start)
        data = stream.read(last.end - first.start)
    if len(data) != last.end - first.start:
        raise InputError(f"{shard.file.path} is shorter than when it was planned: it changed during the job")
    for window in shard.windows:
        yield window, data[window.start - first.start : window.end - first.start]


def sample_lines(file: InputFile, count: int) -> list[bytes]:
    """The first `count` raw lines of `file` (Parquet rows as JSONL lines), fewer at its end."""
    if file.parquet:
        return parquet_lines(file.path, 0, min(count, parquet_rows(file.path)))
    with open(file.path, "rb") as stream:
        return [line for line, _ in zip(stream, range(count))]


def parquet_rows(path: Path) -> int:
    """Rows of a Parquet input, after checking it has a string column `text`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as error:
        raise InputError(f"{path}: not a readable Parquet file ({error})") from error
    schema = parquet.schema_arrow
    kind = schema.field("text").type if "text" in schema.names else None
    if kind is None or not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise InputError(f'{path}: a Parquet input needs a string column "text" (and may have an "id" column)')
    return parquet.metadata.num_rows


def parquet_lines(path: Path, start: int, end: int) -> list[bytes]:
    """Rows `start` to `end` (exclusive) as JSONL lines `{"id": ..., "text": ...}`, newline included."""
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path)
    columns = [name for name in ("id", "text") if name in parquet.schema_arrow.names]
    groups, offset, first = [], 0, None
    for group in range(parquet.metadata.num_row_groups):
        rows = parquet.metadata.row_group(group).num_rows
        if offset < end and offset + rows > start:
            groups.append(group)
            first = offset if first is None else first
        offset += rows
    table = parquet.read_row_groups(groups, columns=columns).slice(start - (first or 0), end - start)
    return [(json.dumps(row, ensure_ascii=False, default=str) + "\n").encode("utf-8") for row in table.to_pylist()]
