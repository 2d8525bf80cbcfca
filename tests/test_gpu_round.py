"""The GPU round's CPU path: pack the data and a student, run the round with a tiny model and
a distillation into the student, unpack the parts into model directories that load. It runs
the same code a lent GPU runs, so it cannot rot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_train import write_toy_data
from toy import toy_model_config

from data.tokenizer import Tokenizer
from seq2seq.training import gpu_round
from seq2seq.training.model import Transformer, load_model, load_weights, save_model


def make_student(directory: Path, tokenizer_path: Path) -> Path:
    torch.manual_seed(3)
    vocab = Tokenizer(tokenizer_path).vocab_size
    save_model(Transformer(toy_model_config(vocab_size=vocab, max_positions=64, d_model=24)), directory)
    (directory / "spm.model").write_bytes(tokenizer_path.read_bytes())
    return directory


def test_the_round_trains_distils_and_comes_back_in_parts(
    tmp_path: Path, toy_tokenizer_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    write_toy_data(data, toy_tokenizer_path, train_count=300, held_out_count=4)
    (data / "manifest.json").write_text(json.dumps({"languages": {"source": "en", "target": "de"}}))
    student = make_student(tmp_path / "student", toy_tokenizer_path)
    packed = gpu_round.pack(data, tmp_path / "pack", student)
    assert (packed / gpu_round.DATA_ARCHIVE).is_file()
    monkeypatch.setattr(gpu_round, "PART_BYTES", 20_000)  # several parts, as 15 MiB makes of a large model
    out = tmp_path / "OUT"
    command = ["run", "--pack", str(packed), "--out", str(out), "--device", "cpu", "--tiny", "--distill-minutes", "1"]
    assert gpu_round.main(command) == 0
    back = json.loads((out / "round.json").read_text())
    assert back["large"]["steps"] == 20 and back["large"]["model"] == gpu_round.TINY
    assert back["distilled"]["steps"] == 20 and back["distilled"]["model"]["d_model"] == 24
    assert back["distillation"]["sentences"] == len((data / "train.tsv").read_text().splitlines())
    # What comes back: only files, each under the part size, none of the work folder.
    for folder, part in ((gpu_round.LARGE_DIR, "model.int8.pt.part"), (gpu_round.DISTILLED_DIR, "model.pt.part")):
        parts = [p for p in (out / folder).iterdir() if p.name.startswith(part)]
        assert len(parts) > 1 and all(p.is_file() and p.stat().st_size <= 20_000 for p in parts)
    assert not (out / "work").exists()
    large, distilled = gpu_round.unpack(out, tmp_path / "final")
    model = load_model(large)
    assert model.config.d_model == gpu_round.TINY["d_model"] and model.config.decoder_layers == 2
    assert (model.config.source_lang, model.config.target_lang) == ("en", "de")  # the data's direction
    student_model = load_model(distilled)
    assert student_model.config.d_model == 24
    before, after = load_weights(student / "model.pt"), load_weights(distilled / "model.pt")
    assert not torch.equal(before["embedding.weight"].float(), after["embedding.weight"].float())  # it trained


def test_int8_weights_come_back_within_half_a_step() -> None:
    torch.manual_seed(0)
    state = {"w": torch.randn(8, 16), "b": torch.randn(16), "steps": torch.tensor(3)}
    packed = gpu_round.quantize_int8(state)
    assert packed["w.int8"].dtype == torch.int8 and gpu_round.state_bytes(packed) < gpu_round.state_bytes(state) / 3
    restored = gpu_round.dequantize_int8(packed)
    step = state["w"].abs().amax(dim=1, keepdim=True) / 127
    assert ((restored["w"].float() - state["w"]).abs() <= step * 0.51 + 1e-3).all()
    assert torch.allclose(restored["b"].float(), state["b"], atol=1e-2) and int(restored["steps"]) == 3
    assert set(restored) == set(state)


def test_a_large_model_over_the_return_budget_stays_on_the_device(
    tmp_path: Path, toy_tokenizer_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    write_toy_data(data, toy_tokenizer_path, train_count=100, held_out_count=4)
    monkeypatch.setattr(gpu_round, "RETURN_BYTES", 1_000)
    out = tmp_path / "OUT"
    summary = gpu_round.run(gpu_round.pack(data, tmp_path / "pack"), out, 0, "cpu", tiny=True)
    assert "kept_on_device" in summary["large"] and not (out / gpu_round.LARGE_DIR).exists()
    assert "distilled" not in summary and gpu_round.unpack(out, tmp_path / "final") == []


def test_pack_refuses_a_student_with_another_tokenizer(tmp_path: Path, toy_tokenizer_path: Path) -> None:
    data = tmp_path / "data"
    write_toy_data(data, toy_tokenizer_path, train_count=10, held_out_count=4)
    student = make_student(tmp_path / "student", toy_tokenizer_path)
    (student / "spm.model").write_bytes(b"another")
    with pytest.raises(ValueError, match="not the tokenizer"):
        gpu_round.pack(data, tmp_path / "pack", student)
