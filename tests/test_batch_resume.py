"""`crossalign translate` across processes and interruptions: --workers keep the order and
match the torch backend, a run killed with SIGKILL resumes to the uninterrupted output,
and the windows follow --flush-seconds.

The tiny random model of tests/batch_toy.py (conftest's `batch_model_dir`) serves every
test, as in test_batch_cli.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from batch_toy import read_jsonl, toy_sentences, translate

from seq2seq.cli import batch
from seq2seq.cli import main as cli_main

REPO = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------- workers


def test_workers_keep_order_and_count(batch_model_dir: Path, tmp_path: Path) -> None:
    lines = toy_sentences(48, seed=3)
    lines[17] = "Der Hund \x07 ist klein ."  # a bad line among them
    lines[30] = ""  # and a blank one
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    outputs = {}
    for workers in (1, 2):
        outputs[workers] = tmp_path / f"out{workers}.tsv"
        status = translate(
            batch_model_dir,
            "-i",
            source,
            "-o",
            outputs[workers],
            "-f",
            "tsv",
            "--workers",
            workers,
            "--workers-min-lines",
            "0",  # 48 lines: fewer than the default's, which would translate them in this process
            "--batch-size",
            "4",
            "--beam-size",
            "1",
        )
        assert status == batch.EXIT_SOME_FAILED
    records = outputs[2].read_text(encoding="utf-8").splitlines()
    assert len(records) == len(lines)
    assert [r.split("\t")[:2] for r in records] == [[str(i), line] for i, line in enumerate(lines, start=1)]
    assert outputs[2].read_text() == outputs[1].read_text()  # same batches, same results


def test_onnx_backend_with_workers_matches_torch(batch_model_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from export.exporter import export_model

    bundle = tmp_path / "bundle"
    export_model(batch_model_dir, bundle, parity_sentences=["Der Hund ist klein ."])
    lines = toy_sentences(24, seed=5)
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    common = ["-i", source, "-f", "jsonl", "--alignment", "--beam-size", "2", "--batch-size", "4"]
    # torch on the bundle's own weights: the bundle stores them rounded to float16.
    assert translate(bundle, *common, "-o", tmp_path / "torch.jsonl") == batch.EXIT_OK
    status = cli_main(
        [
            "translate",
            "-m",
            str(bundle),
            "--backend",
            "onnx",
            "--workers",
            "2",
            "--workers-min-lines",
            "0",
            "--threads",
            "1",
            *map(str, common),
            "-o",
            str(tmp_path / "onnx.jsonl"),
        ]
    )
    assert status == batch.EXIT_OK
    expected, actual = read_jsonl(tmp_path / "torch.jsonl"), read_jsonl(tmp_path / "onnx.jsonl")
    assert [r["line"] for r in actual] == list(range(1, len(lines) + 1))
    assert [r["text"] for r in actual] == [r["text"] for r in expected]
    assert all(abs(a["score"] - e["score"]) < 1e-3 for a, e in zip(actual, expected))
    assert [r["alignment"]["links"] for r in actual] == [r["alignment"]["links"] for r in expected]


# --------------------------------------------------------------------------- resume


def test_resume_after_sigkill_equals_an_uninterrupted_run(
    batch_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = toy_sentences(240, seed=4)
    lines[5], lines[200] = "\x1b[1m", "Der Hund \x01 ist klein ."  # failures before and after the kill
    lines[6] = " "  # and a blank line before it: kept, counted apart
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    clean, resumed = tmp_path / "clean.jsonl", tmp_path / "resumed.jsonl"
    flush_lines = 16
    command = [
        sys.executable,
        "-m",
        "seq2seq.cli",
        "-v",
        "translate",
        "-m",
        str(batch_model_dir),
        "--backend",
        "torch",
        "-i",
        str(source),
        "-f",
        "jsonl",
        "--beam-size",
        "1",
        "--batch-size",
        "8",
        "--flush-lines",
        str(flush_lines),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}

    process = subprocess.Popen([*command, "-o", str(resumed)], env=env, cwd=REPO, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        if resumed.exists() and resumed.read_bytes().count(b"\n") >= 60:
            break
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    log_text = process.stderr.read().decode()
    assert process.returncode == -signal.SIGKILL, log_text
    written = resumed.read_bytes().count(b"\n")
    assert 60 <= written < len(lines), "the run should have been killed part-way"
    # The job logs its progress after each batch's write; the kill lost at most one window
    # of the lines done by then (the kill may also land between a write and its log line).
    done = int(re.findall(r"(\d+) lines done, \d+ written", log_text)[-1])
    assert written >= done - flush_lines, (done, written)
    with open(resumed, "ab") as stream:  # as if killed in the middle of a write
        stream.write(b'{"text":"half a rec')

    # Other options than the first run's would mix two kinds of records in one file: refused.
    job = resumed.with_name(resumed.name + ".job.json")
    assert json.loads(job.read_text())["beam_size"] == 1
    before = resumed.read_bytes()
    assert (
        translate(batch_model_dir, *command[command.index("-i") :], "-o", resumed, "--resume", "--beam-size", "2")
        == batch.EXIT_USAGE
    )
    assert "beam_size: 1 in the first run, 2 now" in capsys.readouterr().err
    assert resumed.read_bytes() == before  # nothing written, nothing truncated

    finished = subprocess.run(
        [*command, "-o", str(resumed), "--resume"], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert not job.exists(), "a finished job leaves nothing to resume"
    assert finished.returncode == batch.EXIT_SOME_FAILED, finished.stderr
    assert "2 of 240 lines failed" in finished.stderr
    assert re.search(r"240 lines \(237 translated, 1 blank, 2 failed, \d+ this run\)", finished.stderr)
    assert translate(batch_model_dir, *command[command.index("-i") :], "-o", clean) == batch.EXIT_SOME_FAILED

    expected, actual = read_jsonl(clean), read_jsonl(resumed)
    assert [r["line"] for r in actual] == list(range(1, len(lines) + 1))
    assert len(actual) == len(expected)
    for want, got in zip(expected, actual):
        # Batches after the resume point are composed differently; padding is masked, but
        # float sums may differ in the last bits, so the score gets a tolerance.
        assert {k: v for k, v in got.items() if k != "score"} == {k: v for k, v in want.items() if k != "score"}
        assert abs(got.get("score", 0.0) - want.get("score", 0.0)) < 1e-3


def test_resume_truncates_a_partial_record(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    path.write_bytes(b"one\ntwo\nthr")
    assert batch.prepare_resume(path) == 2
    assert path.read_bytes() == b"one\ntwo\n"
    assert batch.prepare_resume(tmp_path / "missing.txt") == 0


def test_windows_shrink_to_the_flush_seconds_at_the_measured_rate(tmp_path: Path) -> None:
    options = batch.JobOptions(batch_size=16, flush_lines=100, flush_seconds=2.0)
    job = batch.job._Job(None, None, options, None, 250)  # tokenizer and writer are not used here
    assert job.window_size() == 16  # nothing measured yet: one batch
    job.summary.lines, job.started = 50, time.monotonic() - 10  # 5 lines/s -> 10 lines in 2 s
    assert job.window_size() == 10
    job.summary.lines = 5000  # fast: the line bound holds
    assert job.window_size() == 100
    job.summary.lines, job.started = 1, time.monotonic() - 100  # very slow: one line at a time
    assert job.window_size() == 1
