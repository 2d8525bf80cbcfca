"""The GPU round's CPU path: pack the data, run the round with a tiny model, unpack the parts
into a model directory that loads. It runs the same code a lent GPU runs, so it cannot rot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_train import write_toy_data

from seq2seq.training import gpu_round
from seq2seq.training.model import load_model


def test_the_round_packs_trains_and_comes_back_in_parts(
    tmp_path: Path, toy_tokenizer_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    write_toy_data(data, toy_tokenizer_path, train_count=300, held_out_count=4)
    (data / "manifest.json").write_text(json.dumps({"languages": {"source": "en", "target": "de"}}))
    packed = gpu_round.pack(data, tmp_path / "pack")
    assert (packed / gpu_round.DATA_ARCHIVE).is_file()
    monkeypatch.setattr(gpu_round, "PART_BYTES", 20_000)  # several parts, as 15 MiB makes of a large model
    out = tmp_path / "OUT"
    summary = gpu_round.main(["run", "--pack", str(packed), "--out", str(out), "--device", "cpu", "--tiny"])
    assert summary == 0
    back = json.loads((out / "round.json").read_text())
    assert back["steps"] == 20 and len(back["parts"]) > 1 and back["model"] == gpu_round.TINY
    # What comes back: only files, each under the part size, none of the work folder.
    assert all(p.is_file() and p.stat().st_size <= 20_000 for p in out.iterdir() if p.name.startswith("model.pt"))
    assert not (out / "work").exists()
    model_dir = gpu_round.unpack(out, tmp_path / "final")
    model = load_model(model_dir)
    assert model.config.d_model == gpu_round.TINY["d_model"] and model.config.decoder_layers == 2
    assert (model.config.source_lang, model.config.target_lang) == ("en", "de")  # the data's direction
