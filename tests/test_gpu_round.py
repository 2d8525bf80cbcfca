"""The GPU round (seq2seq/training/gpu_round.py) on the CPU: every phase with tiny models (the
same code a lent GPU runs, in a fresh interpreter that cannot import what the device lacks),
a failure recorded where it happened, what comes back held to the device's limits with
real-size states, the schedule sized on the clock, batches from worker processes, and the
prepare step's count of the tree that travels."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import textwrap
import time
from dataclasses import replace
from itertools import islice
from pathlib import Path

import pytest
import torch
from test_train import write_toy_data
from toy import toy_model_config

from data.tokenizer import Tokenizer
from seq2seq.core.config import ModelConfig, TrainConfig
from seq2seq.training import gpu_round, round_files, round_prepare
from seq2seq.training.model import Transformer, load_model, load_weights, save_model
from seq2seq.training.round_files import MAX_FILES, PART_BYTES, RoundFiles, check_return, model_record, unpack
from seq2seq.training.train import ClockSchedule, learning_rate, load_training_data
from seq2seq.training.train_data import BatchPlan, BatchPreparer, prepared_batches

REPO = Path(__file__).resolve().parents[1]
# What the device's Python lacks and the round must not import: the serving stack and the
# other extras (pyproject.toml). The run also checks every module it did import below.
BLOCKED = (
    "onnxruntime", "onnx", "onnxscript", "fastapi", "fastapi_offline", "starlette", "uvicorn", "h11", "multipart",
    "pydantic", "pydantic_settings", "matplotlib", "prometheus_client", "py3langid", "docx", "pptx",
    "markdown_it", "httpx", "PIL", "playwright", "schemathesis", "odfdo", "eflomal", "ctranslate2", "service",
)  # fmt: skip
# What the device has of ours to import (docs/training.md, "The GPU round").
DEVICE_PACKAGES = ("torch", "numpy", "sentencepiece", "sacrebleu", "tqdm")


def make_student(directory: Path, tokenizer_path: Path) -> Path:
    torch.manual_seed(3)
    vocab = Tokenizer(tokenizer_path).vocab_size
    save_model(Transformer(toy_model_config(vocab_size=vocab, max_positions=64, d_model=24)), directory)
    (directory / "spm.model").write_bytes(tokenizer_path.read_bytes())
    return directory


def make_pack(tmp_path: Path, tokenizer_path: Path, train_count: int = 300) -> Path:
    """Toy data with word links (the student's guided alignment) and a student, packed."""
    data = tmp_path / "data"
    write_toy_data(data, tokenizer_path, train_count=train_count, held_out_count=4)
    sources = [line.split("\t")[0].split() for line in (data / "train.tsv").read_text().splitlines()]
    diagonal = [" ".join(f"{i}-{i}" for i in range(len(words))) + "\n" for words in sources]
    (data / "eflomal.train.pharaoh").write_text("".join(diagonal))
    (data / "manifest.json").write_text(json.dumps({"languages": {"source": "en", "target": "de"}}))
    return round_files.pack(data, tmp_path / "pack", make_student(tmp_path / "student", tokenizer_path))


def tiny_run(pack: Path, out: Path, work: Path, *extra: str) -> list[str]:
    return ["run", "--pack", str(pack), "--out", str(out), "--work", str(work), "--device", "cpu", "--tiny"] + [
        "--minutes", "0.05", "--distill-minutes", "0.02", "--batch-workers", "2", *extra,
    ]  # fmt: skip


def normalised(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def allowed_distributions() -> set[str]:
    """DEVICE_PACKAGES and everything they require, as installed here (normalised names)."""
    from importlib import metadata

    seen: set[str] = set()
    todo = list(DEVICE_PACKAGES)
    while todo:
        name = normalised(todo.pop())
        if name in seen:
            continue
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue
        seen.add(name)
        todo += [re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0] for r in requires]
    return seen


def test_the_round_runs_every_phase_with_only_what_the_device_has(tmp_path: Path, toy_tokenizer_path: Path) -> None:
    packed = make_pack(tmp_path, toy_tokenizer_path)
    out, modules = tmp_path / "OUT", tmp_path / "modules.json"
    driver = tmp_path / "driver.py"
    driver.write_text(
        textwrap.dedent(f"""
        import json, sys

        # As if not installed: `import x` raises ModuleNotFoundError, find_spec("x") is None.
        sys.modules.update(dict.fromkeys({BLOCKED!r}))
        from seq2seq.training import gpu_round

        code = gpu_round.main({tiny_run(packed, out, tmp_path / "work", "--distill", "always")!r})
        loaded = {{name.split(".")[0] for name, module in sys.modules.items() if module is not None}}
        open({str(modules)!r}, "w").write(json.dumps(sorted(loaded)))
        sys.exit(code)
    """)
    )
    result = subprocess.run(
        [sys.executable, str(driver)],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "round.json").read_text())
    assert summary["status"] == "done" and summary["return_check"] == [] and "error" not in summary
    phases = summary["phases"]
    assert list(phases) == ["preflight", "teacher", "compare", "distil", "student"]
    assert phases["preflight"]["versions"]["torch"] == torch.__version__ and phases["preflight"]["smoke"]["steps"] >= 2
    train_lines = len((tmp_path / "data" / "train.tsv").read_text().splitlines())
    assert (
        phases["preflight"]["lines"]["eflomal.train.pharaoh"]
        == phases["preflight"]["lines"]["train.tsv"]
        == train_lines
    )
    # The teacher's schedule sized on the clock: a warm-up and a cooldown, run to its end or the deadline.
    schedule = phases["teacher"]["schedule"]
    assert 0 < phases["teacher"]["steps"] <= schedule["max_steps"] < 10**7, phases["teacher"]
    assert schedule["warmup_steps"] >= 1 and 1 <= schedule["cooldown_steps"] < schedule["max_steps"]
    for name, asked in (("teacher", 0.05), ("student", 0.02)):
        assert 0 < phases[name]["steps"] <= phases[name]["schedule"]["max_steps"]
        assert phases[name]["minutes_asked"] == asked and phases[name]["minutes_given"] <= asked
    assert phases["compare"]["decision"] == "distil (always)"
    assert phases["distil"]["sentences"] == train_lines
    assert "guided_loss" in phases["student"]["last_validation"]  # the student kept its alignment head's links
    assert [r["name"] for r in summary["stream"]["records"]] == ["teacher", "student"]
    assert sorted(p.name for p in out.iterdir()) == ["round.json", "stream.00"]
    # Only the device's packages were imported (besides the standard library and our own).
    from importlib import metadata

    owners, allowed = metadata.packages_distributions(), allowed_distributions()
    imported = set(json.loads(modules.read_text())) - set(sys.stdlib_module_names) - {"data", "seq2seq"}
    imported -= {m for m in imported if m.startswith("_") or m == "cython_runtime"}  # interpreter and C runtimes
    foreign = {m: owners.get(m) for m in imported if not {normalised(d) for d in owners.get(m, [])} & allowed}
    assert foreign == {}
    teacher, student = unpack(out, tmp_path / "final", tmp_path / "data" / "spm.model")
    model = load_model(teacher)
    assert model.config.d_model == gpu_round.TINY["d_model"] and model.config.decoder_layers == 2
    assert (model.config.source_lang, model.config.target_lang) == ("en", "de")  # the data's direction
    assert load_model(student).config.d_model == 24
    before, after = load_weights(tmp_path / "student" / "model.pt"), load_weights(student / "model.pt")
    assert not torch.equal(before["embedding.weight"].half(), after["embedding.weight"])  # it trained


def test_a_failed_phase_leaves_its_traceback_and_the_models_before_it(
    tmp_path: Path, toy_tokenizer_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    packed = make_pack(tmp_path, toy_tokenizer_path, train_count=100)

    def planted(*args: object, **kwargs: object) -> dict:
        raise RuntimeError("planted in the distillation")

    monkeypatch.setattr(gpu_round, "write_distilled_data", planted)
    out = tmp_path / "OUT"
    assert gpu_round.main(tiny_run(packed, out, tmp_path / "work", "--distill", "always", "--minutes", "0.01")) == 1
    summary = json.loads((out / "round.json").read_text())
    assert summary["status"] == "failed" and summary["phase"] == "distil"
    assert "planted in the distillation" in summary["error"] and "planted" in summary["phases"]["distil"]["error"]
    assert summary["phases"]["teacher"]["record"]["packing"] == "int8" and summary["return_check"] == []
    assert [path.name for path in unpack(out, tmp_path / "final", tmp_path / "data" / "spm.model")] == ["teacher"]


def test_a_round_terminated_by_a_time_limit_says_where_it_stopped(tmp_path: Path, toy_tokenizer_path: Path) -> None:
    packed = make_pack(tmp_path, toy_tokenizer_path, train_count=100)
    out = tmp_path / "OUT"
    command = [sys.executable, "-m", "seq2seq.training.gpu_round", *tiny_run(packed, out, tmp_path / "work")]
    command += ["--minutes", "1"]  # far longer than the test waits
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    with open(tmp_path / "log", "w") as log:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.time() + 120
            while time.time() < deadline and process.poll() is None:
                if (out / "round.json").is_file() and '"teacher"' in (out / "round.json").read_text():
                    break
                time.sleep(0.2)
            process.terminate()  # SIGTERM, as a time limit sends
            assert process.wait(timeout=60) == 128 + 15
        finally:
            process.kill()
    summary = json.loads((out / "round.json").read_text())
    said = (tmp_path / "log").read_text()[-3000:]
    assert summary["status"] == "failed" and summary["phase"] == "teacher" and "SIGTERM" in summary["error"], said
    assert "SIGTERM" in summary["phases"]["teacher"]["error"] and ", in teacher\n" in summary["error"]  # where
    assert summary["phases"]["preflight"]["smoke"]["steps"] >= 2 and summary["return_check"] == []


def test_the_preflight_fails_in_seconds_where_there_is_no_gpu(tmp_path: Path, toy_tokenizer_path: Path) -> None:
    packed = make_pack(tmp_path, toy_tokenizer_path, train_count=20)
    out = tmp_path / "OUT"
    command = tiny_run(packed, out, tmp_path / "work")
    command[command.index("cpu")] = "cuda:99"  # no such device, here or on the lent GPU
    assert gpu_round.main(command) == 1
    summary = json.loads((out / "round.json").read_text())
    assert summary["status"] == "failed" and summary["phase"] == "preflight" and "teacher" not in summary["phases"]
    assert "torch" in summary["phases"]["preflight"]["versions"] and "cuda:99" in summary["error"]
    assert summary["phases"]["preflight"]["seconds"] < 30 and sorted(p.name for p in out.iterdir()) == ["round.json"]


def test_the_preflight_refuses_data_whose_files_do_not_line_up(tmp_path: Path, toy_tokenizer_path: Path) -> None:
    packed = make_pack(tmp_path, toy_tokenizer_path, train_count=20)
    data = tmp_path / "unpacked"
    with tarfile.open(packed / round_files.DATA_ARCHIVE) as archive:
        archive.extractall(data, filter="data")
    assert gpu_round.check_data(data) == {"train.tsv": 20, "valid.tsv": 4, "eflomal.train.pharaoh": 20}
    links = data / "eflomal.train.pharaoh"
    links.write_text(links.read_text() + "0-0\n")  # one line too many
    with pytest.raises(ValueError, match="eflomal.train.pharaoh: 21 lines for the 20 lines of train.tsv"):
        gpu_round.check_data(data)


def test_pack_refuses_a_student_with_another_tokenizer(tmp_path: Path, toy_tokenizer_path: Path) -> None:
    data = tmp_path / "data"
    write_toy_data(data, toy_tokenizer_path, train_count=10, held_out_count=4)
    student = make_student(tmp_path / "student", toy_tokenizer_path)
    (student / "spm.model").write_bytes(b"another")
    with pytest.raises(ValueError, match="not the tokenizer"):
        round_files.pack(data, tmp_path / "pack", student)


def random_state(config: ModelConfig) -> dict[str, torch.Tensor]:
    with torch.device("meta"):
        shapes = {name: value.shape for name, value in Transformer(config).state_dict().items()}
    generator = torch.Generator().manual_seed(0)
    return {name: torch.randn(shape, generator=generator) * 0.05 for name, shape in shapes.items()}


def model_dir(directory: Path, config: ModelConfig) -> Path:
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps({"d_model": config.d_model}))
    (directory / "history.json").write_text("[]\n")
    (directory / "train_config.json").write_text(json.dumps({"max_steps": 1}))
    return directory


def test_real_size_models_come_back_within_the_device_s_limits(tmp_path: Path, toy_tokenizer_path: Path) -> None:
    """The round's largest return: the d 512, 6 + 6 teacher as int8 and the served size (d 256,
    4 + 3 layers, 8,002 pieces: models/de-en) as float16, both in one stream."""
    teacher_config = ModelConfig(**dict(gpu_round.LARGE, vocab_size=8002))
    student_config = ModelConfig(vocab_size=8002)
    teacher, student = random_state(teacher_config), random_state(student_config)
    out = tmp_path / "OUT"
    files = RoundFiles(out)
    files.append("teacher", model_record(teacher, model_dir(tmp_path / "t", teacher_config), "int8"), packing="int8")
    packing = round_files.packing_for(student, files.stream_bytes_left)
    assert packing == "float16"  # both fit: the student need not lose precision
    files.append("student", model_record(student, model_dir(tmp_path / "s", student_config), packing), packing=packing)
    files.write()
    back = sorted(out.rglob("*"))
    assert all(p.parent == out and p.is_file() for p in back)  # no folder at all
    assert [p.name for p in back] == ["round.json"] + [f"stream.{i:02d}" for i in range(len(back) - 1)]
    assert len(back) <= MAX_FILES <= round_files.DEVICE_LIMITS["files"]
    assert all(p.stat().st_size <= PART_BYTES < round_files.DEVICE_LIMITS["file_bytes"] for p in back)
    assert sum(p.stat().st_size for p in back) <= round_files.DEVICE_LIMITS["total_bytes"]
    assert check_return(out) == []
    teacher_dir, student_dir = unpack(out, tmp_path / "final", toy_tokenizer_path)
    restored = load_weights(teacher_dir / "model.pt")
    assert set(restored) == set(teacher)
    for name, value in teacher.items():
        # int8: within half a step of its row's scale (and float16's rounding of the result)
        step = value.abs().amax(dim=1, keepdim=True) / 127 if value.dim() == 2 else torch.zeros(())
        tolerance = step * 0.5 + value.abs() * 2**-10 + 1e-6
        assert ((restored[name].float() - value).abs() <= tolerance).all(), name
    restored = load_weights(student_dir / "model.pt")
    assert all(torch.equal(restored[name], value.half()) for name, value in student.items())


def test_the_stream_takes_records_up_to_its_budget_and_leaves_out_a_damaged_one(
    tmp_path: Path, toy_tokenizer_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(round_files, "PART_BYTES", 1000)
    config = toy_model_config(vocab_size=12)
    state = random_state(config)
    first = model_record(state, model_dir(tmp_path / "a", config), "float16")
    second = model_record(state, model_dir(tmp_path / "b", config), "int8")
    monkeypatch.setattr(round_files, "STREAM_BYTES", len(first) + len(second))
    files = RoundFiles(tmp_path / "OUT")
    files.append("first", first)
    with pytest.raises(ValueError, match="left in the stream"):
        files.append("second", second + b"x")  # one byte over the budget
    files.append("second", second)  # exactly the budget
    sizes = [part["bytes"] for part in files.summary["stream"]["parts"]]
    assert sum(sizes) == len(first) + len(second) and max(sizes) == 1000 and len(sizes) == -(-sum(sizes) // 1000)
    assert len(first) > 1000  # so the first part holds none of the second record
    (tmp_path / "OUT" / "stream.00").unlink()  # a part that did not come back
    made = unpack(tmp_path / "OUT", tmp_path / "final", toy_tokenizer_path)
    assert [path.name for path in made] == ["second"]


def test_check_return_names_what_the_device_would_not_return(tmp_path: Path) -> None:
    out = tmp_path / "OUT"
    (out / "a" / "b").mkdir(parents=True)
    (out / "a" / "b" / "deep.txt").write_bytes(b"x")  # two folders down: comes back
    assert check_return(out) == []
    (out / "a" / "b" / "c").mkdir()
    (out / "a" / "b" / "c" / "deeper").write_bytes(b"x")
    (out / "bad name").write_bytes(b"x")
    with open(out / "big", "wb") as handle:
        handle.truncate(round_files.DEVICE_LIMITS["file_bytes"] + 1)
    problems = " | ".join(check_return(out))
    assert "deeper: more than 2 folders down" in problems and "bad name: a name outside" in problems
    assert f"big: {round_files.DEVICE_LIMITS['file_bytes'] + 1} bytes" in problems
    (out / "big").unlink()
    with open(out / "big", "wb") as handle:
        handle.truncate(round_files.DEVICE_LIMITS["file_bytes"])  # exactly the limit
    assert "big" not in " ".join(check_return(out))
    for index in range(MAX_FILES - 4):  # deep.txt, deeper, bad name, big: MAX_FILES in all
        (out / f"f{index}").write_bytes(b"x")
    assert not any("files" in problem for problem in check_return(out))
    (out / "one-more").write_bytes(b"x")
    assert any(f"{MAX_FILES + 1} files" in problem for problem in check_return(out))


def test_int8_weights_come_back_within_half_a_step() -> None:
    torch.manual_seed(0)
    state = {"w": torch.randn(8, 16), "b": torch.randn(16), "steps": torch.tensor(3)}
    packed = round_files.quantize_int8(state)
    assert packed["w.int8"].dtype == torch.int8 and round_files.state_bytes(packed) < round_files.state_bytes(state) / 3
    restored = round_files.dequantize_int8(packed)
    step = state["w"].abs().amax(dim=1, keepdim=True) / 127
    assert ((restored["w"].float() - state["w"]).abs() <= step * 0.51 + 1e-3).all()
    assert torch.allclose(restored["b"].float(), state["b"], atol=1e-2) and int(restored["steps"]) == 3
    assert set(restored) == set(state)


def test_the_clock_sizes_the_schedule_without_a_jump_in_the_rate() -> None:
    config = TrainConfig(max_minutes=10, schedule_probe_s=30, warmup_share=0.1, cooldown_share=0.2, lr=1e-3)
    clock = ClockSchedule(config, start=0.0)
    assert clock.rate(30.0) == pytest.approx(1e-3 * 30 / 60)  # the warm-up is 60 s on the clock
    assert clock.observe(100, 9.0) is None and clock.observe(150, 29.0) is None  # start-up, then probing
    sized = clock.observe(310, 30.0)  # 10 steps/s since the mark (step 100 at 9 s), 570 s left
    assert sized is not None and sized["steps_per_s"] == 10.0 and sized["max_steps"] == 310 + int(10.0 * 570 * 0.97)
    assert sized["warmup_steps"] == 620 and sized["cooldown_steps"] == round(0.2 * 5839)
    after = replace(config, **{key: sized[key] for key in ClockSchedule.FIELDS})
    assert learning_rate(310, after) == pytest.approx(clock.rate(30.0))  # no jump where the clock hands over
    # Measured again every 20 steps until the cooldown: slower steps move the end earlier.
    assert clock.observe(319, 31.0) is None
    again = clock.observe(320, 32.0)  # 10 steps in 2 s since the probe's end: 5 steps/s
    assert again is not None and again["max_steps"] == 320 + int(5.0 * 568 * 0.97) and again["warmup_steps"] == 620
    cooldown_from = again["max_steps"] - again["cooldown_steps"]  # from then on its length is fixed
    assert clock.observe(cooldown_from + 20 - cooldown_from % 20, 500.0) is None


def test_batches_from_worker_processes_are_the_batches_made_here(tmp_path: Path, toy_tokenizer_path: Path) -> None:
    """Deterministic in (seed, step), whichever process makes a batch: word dropout and guided
    rows included, across an epoch's end."""
    write_toy_data(tmp_path / "data", toy_tokenizer_path, train_count=60, held_out_count=4)
    lines = (tmp_path / "data" / "train.tsv").read_text().splitlines()
    links = tmp_path / "data" / "eflomal.train.pharaoh"
    links.write_text(
        "".join(" ".join(f"{i}-{i}" for i in range(len(ln.split("\t")[0].split()))) + "\n" for ln in lines)
    )
    config = TrainConfig(data_dir=str(tmp_path / "data"), max_tokens=120, word_dropout=0.3, guided_alignment=str(links))
    tokenizer = Tokenizer(toy_tokenizer_path)
    model_config = toy_model_config(vocab_size=tokenizer.vocab_size, max_positions=64)
    data = load_training_data(config, model_config, tmp_path / "data", tokenizer)
    preparer = BatchPreparer(data.reader, model_config, config.word_dropout, data.guided, reseed=config.seed)
    plan = BatchPlan(data.examples, data.phrases, config, {"step": 5, "epoch": 0, "batch_in_epoch": 5}, 0, 1)
    here = list(islice(prepared_batches(preparer, plan, 0), 30))
    there = list(islice(prepared_batches(preparer, plan, 2), 30))
    assert [b.step for b in here] == list(range(6, 36)) and len({b.epoch for b in here}) > 1
    assert (here[0].epoch, here[0].batch_in_epoch) == (0, 6)  # resumed where the state left off
    for mine, theirs in zip(here, there):
        assert (mine.step, mine.epoch, mine.batch_in_epoch, mine.tokens) == (
            theirs.step,
            theirs.epoch,
            theirs.batch_in_epoch,
            theirs.tokens,
        )
        for name in ("src", "tgt_in", "tgt_out", "gold"):
            assert torch.equal(getattr(mine, name), getattr(theirs, name)), name
    assert any((b.src == model_config.unk_id).any() for b in here)  # word dropout drew


def test_phases_are_shortened_to_the_deadline_and_distil_only_a_better_teacher() -> None:
    assert gpu_round.phase_minutes(2.0, now=0.0, deadline=600.0, after_s=60.0) == 2.0
    assert gpu_round.phase_minutes(2.0, now=450.0, deadline=600.0, after_s=60.0) == pytest.approx(1.5)
    assert gpu_round.phase_minutes(2.0, now=550.0, deadline=600.0, after_s=60.0) == 0.0
    assert gpu_round.teacher_wins(12.1, 12.0, "auto") and not gpu_round.teacher_wins(12.0, 12.0, "auto")
    assert gpu_round.teacher_wins(1.0, 12.0, "always") and not gpu_round.teacher_wins(20.0, 12.0, "never")


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_prepare_packs_moves_models_aside_counts_the_tree_and_prints_the_call(
    tmp_path: Path, toy_tokenizer_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    (repo / "models" / "de-en").mkdir(parents=True)
    make_student(repo / "models" / "de-en", toy_tokenizer_path)
    (repo / "code.py").write_bytes(b"x" * 1000)
    (repo / ".gitignore").write_text("/work/\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    (repo / "notes.txt").write_bytes(b"y" * 300)  # untracked, not ignored: travels
    (repo / "work" / "other").mkdir(parents=True)
    (repo / "work" / "other" / "big").write_bytes(b"z" * 5000)  # ignored and not carried: stays
    data = tmp_path / "data"
    write_toy_data(data, toy_tokenizer_path, train_count=30, held_out_count=4)
    monkeypatch.setattr(round_prepare, "CACHE", tmp_path / "cache")
    call = round_prepare.prepare(repo, data)
    assert call["carry"] == ["work/gpu"] and call["timeout_s"] == 600
    assert call["command"] == (
        'PYTHONUNBUFFERED=1 TQDM_MININTERVAL=30 python3 -m seq2seq.training.gpu_round run --pack work/gpu --out "$OUT"'
    )
    assert not (repo / "models").exists() and (round_prepare.aside_dir(repo) / "de-en" / "model.pt").is_file()
    carried = (repo / "work" / "gpu" / "data.tar.gz").stat().st_size
    assert call["tree_bytes"] == 1000 + len("/work/\n") + 300 + carried  # code.py, .gitignore, notes.txt, the pack
    with monkeypatch.context() as limit:
        limit.setattr(round_prepare, "TREE_BYTES", call["tree_bytes"])
        assert round_prepare.check_tree(repo, ["work/gpu"]) == call["tree_bytes"]  # exactly the limit
        limit.setattr(round_prepare, "TREE_BYTES", call["tree_bytes"] - 1)
        with pytest.raises(ValueError, match=r"MiB; largest: work/gpu/data.tar.gz \(0.\d MiB\), code.py"):
            round_prepare.check_tree(repo, ["work/gpu"])
    assert round_prepare.prepare(repo, data)["tree_bytes"] == call["tree_bytes"]  # again: the student from aside
    (repo / "models").mkdir()
    with pytest.raises(ValueError, match="restore` first"):  # models/ back first: nothing is lost
        round_prepare.prepare(repo, data)
    (repo / "models").rmdir()
    assert round_prepare.restore(repo) == repo / "models" and (repo / "models" / "de-en" / "model.pt").is_file()
    assert round_prepare.restore(repo) is None
