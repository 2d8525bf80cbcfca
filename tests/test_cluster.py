"""`crossalign translate --ray`: the cluster mode on a real local Ray (2 CPUs, loopback).

One Ray is started for the module (it is slow to start), after the tests without it, and
every run joins it; its teardown checks that no Ray process is left. The tiny bundle of
conftest translates: the cluster's output equals the single-process CLI's byte for byte
(text and JSONL, text and Parquet inputs, bad and blank lines among them) while an actor is
killed mid-task (Ray restarts it and retries its window: nothing lost), and a run killed
part-way resumes by writing only the shards it had not written. Each Ray run starts its
actors afresh (the library imported, the model loaded), hence two runs only. The planning,
the output directory's rules, the flags' checks and the errors are tested without Ray.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from toy import toy_pairs

from seq2seq.cli import batch
from seq2seq.cli import main as cli_main
from seq2seq.cli.cluster.inputs import InputError, InputFile, Shard, cut_windows, find_inputs, plan_shards, read_shard
from seq2seq.cli.cluster.inputs import shard_windows as windows_per_shard
from seq2seq.cli.cluster.shards import JOB_RECORD, MARKER, OutputError, Plan, load_plan, write_record

REPO = Path(__file__).resolve().parents[1]
# Windows of 16 lines from each file's start: the CLI cuts the same ones whenever its
# --flush-lines is at most its --batch-size (and the rate over 1.6 lines/s), so the two
# modes batch every sentence alike and agree to the last digit.
WINDOWS = ["--flush-lines", "16", "--batch-size", "16"]
ACTOR = b"ray::MapWorker(MapBatches(TranslateWindows))"


@pytest.fixture(scope="module")
def ray_address():
    """A local Ray of 2 CPUs on loopback for the module; its GCS address for other drivers."""
    import ray

    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths have a length limit
    context = ray.init(
        address="local", num_cpus=2, include_dashboard=False, _temp_dir=temp, _node_ip_address="127.0.0.1"
    )
    try:
        yield context.address_info["gcs_address"]
    finally:
        ray.shutdown()
    deadline = time.monotonic() + 15
    while processes_of(temp) and time.monotonic() < deadline:
        time.sleep(0.2)
    shutil.rmtree(temp, ignore_errors=True)
    assert not processes_of(temp), "Ray left processes behind"


def processes_of(temp: str) -> list[int]:
    """Pids of the processes of the Ray whose session lives in `temp` (its GCS, raylet, agents)."""
    return [pid for pid, cmdline in command_lines() if temp.encode() in cmdline]


def command_lines() -> list[tuple[int, bytes]]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit():
                found.append((int(entry.name), (entry / "cmdline").read_bytes()))
        except OSError:
            continue  # ended meanwhile
    return found


def lines_with_trouble(count: int, seed: int) -> list[bytes]:
    """Toy sentences (some lines of two), a control character, a blank line, invalid UTF-8
    and a CRLF line among them; the last line has no newline."""
    sources = [source for source, _ in toy_pairs(count, seed=seed)]
    lines = [
        (f"{s} {sources[(i * 7) % count]}" if i % 9 == 0 else s).encode("utf-8") + b"\n" for i, s in enumerate(sources)
    ]
    lines[5] = b"der Hund \x01 ist klein .\n"
    lines[40] = b"\n"
    lines[77] = b"das Haus \xff ist rot .\n"
    lines[90] = b"die Katze ist alt .\r\n"
    lines[-1] = lines[-1].rstrip(b"\n")
    return lines


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """in/a.txt (text), in/c.parquet (rows with ids, a null text), and c.jsonl beside the
    directory: the Parquet rows as the JSONL lines the cluster mode reads them as."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("cluster_inputs")
    (root / "in").mkdir()
    (root / "in" / "a.txt").write_bytes(b"".join(lines_with_trouble(192, seed=11)))
    (root / "in" / ".hidden.txt").write_text("not an input\n")
    rows = [{"id": f"r{i}", "text": source} for i, (source, _) in enumerate(toy_pairs(40, seed=12))]
    rows[7]["text"] = None
    pq.write_table(pa.Table.from_pylist(rows), root / "in" / "c.parquet", row_group_size=12)
    (root / "c.jsonl").write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    return root


def translate(bundle: Path, *arguments: str | Path) -> int:
    return cli_main(["translate", "-m", str(bundle), *map(str, arguments)])


@pytest.fixture(scope="module")
def expected(tiny_bundle: Path, inputs: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The single-process CLI's outputs, to hold the cluster's to."""
    out = tmp_path_factory.mktemp("cluster_expected")
    runs = {
        "a.jsonl": [inputs / "in" / "a.txt", "-f", "jsonl", "--alignment"],
        "c.jsonl": [inputs / "c.jsonl", "--input-format", "jsonl", "-f", "jsonl", "--alignment"],
        "a.txt": [inputs / "in" / "a.txt"],
    }
    for name, arguments in runs.items():
        assert translate(tiny_bundle, "-i", *arguments, *WINDOWS, "-o", out / name) == batch.EXIT_SOME_FAILED
    return {name: (out / name).read_bytes() for name in runs}


def markers(directory: Path) -> list[Path]:
    return sorted(directory.glob(f"*{MARKER}"))


def joined(directory: Path, name: str) -> bytes:
    """An input's complete output shards, concatenated in order."""
    shards = [Path(str(marker).removesuffix(MARKER)) for marker in markers(directory)]
    return b"".join(shard.read_bytes() for shard in shards if shard.name.startswith(f"{name}."))


# --------------------------------------------------------------------------- without Ray


def test_the_single_machine_cli_never_imports_ray(tiny_bundle: Path, tmp_path: Path) -> None:
    """Ray is imported only when --ray runs: every other run of `translate` leaves it alone."""
    output = tmp_path / "out.txt"
    code = (
        "import sys\nfrom seq2seq.cli import main\n"
        f"status = main(['translate', '-m', {str(tiny_bundle)!r}, '-o', {str(output)!r}, 'der Hund ist klein .'])\n"
        "assert status == 0, status\nassert 'ray' not in sys.modules, 'translate imported Ray'\n"
    )
    finished = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert output.read_text().count("\n") == 1


def test_windows_are_the_clis_and_shards_hold_whole_windows(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_bytes(b"".join(lines_with_trouble(95, seed=1)))  # the last line without newline
    file = InputFile(path, "a.txt", parquet=False)
    windows = cut_windows(file, 4, 16)
    assert [w.lines for w in windows] == [4, 16, 16, 16, 16, 16, 11]
    assert [w.first_line for w in windows] == [1, 5, 21, 37, 53, 69, 85]
    assert windows[-1].end == path.stat().st_size
    shards = plan_shards([file], [windows], 3)
    assert [(s.number, s.first_line, s.lines) for s in shards] == [(0, 1, 36), (1, 37, 48), (2, 85, 11)]
    read = [raw for shard in shards for _, raw in read_shard(Shard.from_json(shard.to_json()))]
    assert b"".join(read) == path.read_bytes()
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert cut_windows(InputFile(empty, "empty", False), 4, 16) == []
    # Unset, a small input is cut finer (about 8 shards per actor), a large one at 10,000 lines.
    assert windows_per_shard(1600, actors=2, shard_lines=None, window=16) == 6
    assert windows_per_shard(10**7, actors=2, shard_lines=None, window=128) == 78
    assert windows_per_shard(10, actors=4, shard_lines=None, window=128) == 1
    assert windows_per_shard(1600, actors=2, shard_lines=48, window=16) == 3  # as asked


def test_parquet_rows_are_read_as_jsonl_lines(inputs: Path) -> None:
    file = InputFile(inputs / "in" / "c.parquet", "c.parquet", parquet=True)
    windows = cut_windows(file, 5, 16)
    assert [(w.first_line, w.lines) for w in windows] == [(1, 5), (6, 16), (22, 16), (38, 3)]
    [shard] = plan_shards([file], [windows], 4)
    assert b"".join(raw for _, raw in read_shard(shard)) == (inputs / "c.jsonl").read_bytes()


def test_inputs_are_a_file_a_directory_or_a_glob(inputs: Path, tmp_path: Path) -> None:
    directory = inputs / "in"
    assert [f.name for f in find_inputs(directory)] == ["a.txt", "c.parquet"]  # the hidden file left out
    assert [f.name for f in find_inputs(directory / "a.txt")] == ["a.txt"]
    assert [(f.name, f.parquet) for f in find_inputs(Path(f"{inputs}/**/*.parquet"))] == [("in/c.parquet", True)]
    assert [f.name for f in find_inputs(inputs, exclude=directory)] == ["c.jsonl"]
    for missing in (tmp_path / "nothing", Path(f"{tmp_path}/*.txt")):
        with pytest.raises(InputError, match="nothing|no input files"):
            find_inputs(missing)
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 not really")
    with pytest.raises(InputError, match="not a readable Parquet file"):
        cut_windows(InputFile(bad, "bad.parquet", True), 4, 16)


def test_source_auto_samples_the_first_input_file(inputs: Path) -> None:
    from seq2seq.cli.cluster.run import sample

    def args(where: Path) -> argparse.Namespace:
        return argparse.Namespace(input=where, output=inputs / "out", input_format="text", max_chars=batch.MAX_CHARS)

    raw = lines_with_trouble(192, seed=11)[:8]
    texts = sample(args(inputs / "in"), 8)  # a.txt: its bad line 5 left out
    assert texts == [line.decode().strip() for n, line in enumerate(raw) if n != 5]
    rows = [source for source, _ in toy_pairs(40, seed=12)][:8]
    assert sample(args(Path(f"{inputs}/in/*.parquet")), 8) == rows[:7]  # row 7's text is null


def test_the_output_directory_is_resumed_only_with_the_same_options(tmp_path: Path) -> None:
    options = {"model": "/m", "beam_size": 4, "format": "jsonl"}
    assert load_plan(tmp_path / "new", options, resume=False) is None
    write_record(tmp_path, options, Plan(16, 128, 4))
    assert (tmp_path / JOB_RECORD).is_file()
    with pytest.raises(OutputError, match="add --resume"):
        load_plan(tmp_path, options, resume=False)
    assert load_plan(tmp_path, options, resume=True) == Plan(16, 128, 4)
    with pytest.raises(OutputError, match="beam_size: 4 in the first run, 2 now"):
        load_plan(tmp_path, options | {"beam_size": 2}, resume=True)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--ray", "auto", "-i", "x"], "give -o DIRECTORY"),
        (["--ray", "auto", "-o", "out"], "give -i FILE"),
        (["--ray", "auto", "-i", "x", "-o", "out", "--workers", "2"], "--actors sets the translators"),
        (["--ray", "auto", "-i", "x", "-o", "out", "--actors", "0"], "--actors must be at least 1"),
        (["--ray", "auto", "-i", "x", "-o", "out", "--heatmaps", "maps"], "--heatmaps is not available"),
        (["-i", "x", "--shard-lines", "10"], "--shard-lines needs --ray"),
    ],
)
def test_the_cluster_flags_are_checked(
    tiny_bundle: Path, arguments: list[str], message: str, capsys: pytest.CaptureFixture
) -> None:
    assert translate(tiny_bundle, *arguments) == batch.EXIT_USAGE
    error = capsys.readouterr().err
    assert error.startswith("crossalign translate: error: ") and error.count("\n") == 1
    assert message in error


def test_without_ray_the_error_names_the_extra(
    tiny_bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "a.txt").write_text("das Haus .\n")
    import seq2seq.cli.cluster

    # As if Ray were not installed: the module that imports it cannot be imported.
    monkeypatch.setitem(sys.modules, "seq2seq.cli.cluster.run", None)
    monkeypatch.delattr(seq2seq.cli.cluster, "run", raising=False)
    assert translate(tiny_bundle, "-i", tmp_path / "a.txt", "-o", tmp_path / "out", "--ray", "auto") == 2
    error = capsys.readouterr().err
    assert "pip install 'crossalign[cluster]'" in error and error.count("\n") == 1


@pytest.mark.parametrize(
    ("where", "message"),
    [("nothing", "no such file or directory"), ("empty/*.txt", "no input files there")],
)
def test_missing_inputs_are_a_usage_error(
    tiny_bundle: Path, tmp_path: Path, where: str, message: str, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "empty").mkdir()
    status = translate(tiny_bundle, "-i", tmp_path / where, "-o", tmp_path / "out", "--ray", "auto")
    assert status == batch.EXIT_USAGE  # before Ray is started
    error = capsys.readouterr().err
    assert message in error and "give -i" in error and error.count("\n") == 1


# --------------------------------------------------------------------------- on Ray


def actors_running_a_task() -> list[int]:
    """Pids of the pool's actors in the middle of a task (their process title says so)."""
    return [pid for pid, cmdline in command_lines() if cmdline.startswith(ACTOR + b".submit")]


def test_the_cluster_writes_what_the_cli_writes_though_an_actor_is_killed(
    tiny_bundle, inputs, expected, ray_address, tmp_path
) -> None:
    """A directory of a text file and a Parquet file, JSONL records with their maps; one actor
    SIGKILLed in the middle of a task, once a shard is written: Ray restarts it and retries
    its window, and nothing is lost or doubled."""
    out = tmp_path / "out"
    killed: list[tuple[int, int]] = []  # (pid, shards written by then)
    finished = threading.Event()

    def kill_one_mid_task() -> None:
        while not finished.is_set() and not killed:
            busy = actors_running_a_task()
            if busy and markers(out):  # under way: a shard written, an actor in a task
                os.kill(busy[0], signal.SIGKILL)
                killed.append((busy[0], len(markers(out))))
            time.sleep(0.01)

    killer = threading.Thread(target=kill_one_mid_task, daemon=True)
    killer.start()
    try:
        status = translate(
            tiny_bundle, "-i", inputs / "in", "-o", out, "-f", "jsonl", "--alignment", *WINDOWS,
            "--shard-lines", "16", "--ray", ray_address,
        )  # fmt: skip
    finally:
        finished.set()
        killer.join()
    assert status == batch.EXIT_SOME_FAILED  # the bad lines are records with their error
    assert joined(out, "a.txt") == expected["a.jsonl"]
    assert joined(out, "c.parquet") == expected["c.jsonl"]
    assert not list(out.glob(".hidden*"))
    shards = markers(out)
    assert len(shards) == 12 + 3  # 192 lines in windows of 16, one a shard; 40 rows
    assert killed, "no actor was caught in a task"
    assert killed[0][1] < len(shards)  # killed before the end
    # Every shard's marker says where its lines come from, so the output joins back.
    for marker in shards:
        record = json.loads(marker.read_text())
        lines = Path(str(marker).removesuffix(MARKER)).read_text().splitlines()
        assert len(lines) == record["lines"]
        assert [json.loads(line)["line"] for line in lines] == list(
            range(record["first_line"], record["first_line"] + record["lines"])
        )
        assert all(
            bool(json.loads(line).get("error")) == (json.loads(line)["line"] in record["failed"]) for line in lines
        )
    errors = [json.loads(line).get("error") for line in expected["a.jsonl"].decode().splitlines()]
    assert errors[5] and errors[77] and sum(map(bool, errors)) <= 3  # control character, invalid UTF-8 (+ blank)


def test_a_resumed_run_writes_only_the_missing_shards(tiny_bundle, inputs, expected, ray_address, tmp_path) -> None:
    out = tmp_path / "out"
    pattern = str(inputs / "in" / "*.txt")  # a glob of shards (here one file)
    command = ["translate", "-m", str(tiny_bundle), "-i", pattern, "-o", str(out), *WINDOWS, "--shard-lines", "16"]
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    process = subprocess.Popen(
        [sys.executable, "-m", "seq2seq.cli", *command, "--ray", ray_address], cwd=REPO, env=env,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None and len(markers(out)) < 3:
        time.sleep(0.01)
    process.kill()  # SIGKILL: no chance to tidy up
    _, stderr = process.communicate()
    before = {path.name: path.stat() for path in markers(out)}
    assert 3 <= len(before) < 12, stderr.decode()[-2000:]

    status = cli_main([*command, "--resume", "--ray", ray_address])
    assert status == batch.EXIT_SOME_FAILED
    assert joined(out, "a.txt") == expected["a.txt"]
    after = {path.name: path.stat() for path in markers(out)}
    assert len(after) == 12
    for name, stat in before.items():  # kept as they were: neither marker nor shard rewritten
        assert (after[name].st_ino, after[name].st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns)
        shard = out / name.removesuffix(MARKER)
        assert shard.stat().st_mtime_ns <= stat.st_mtime_ns
    assert not list(out.rglob("*.part"))
    # Again without --resume: refused, naming the fix, before Ray is asked for anything.
    assert cli_main([*command, "--ray", ray_address]) == batch.EXIT_USAGE
