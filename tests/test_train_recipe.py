"""The low-resource training recipe: phrase pool at a token share, word dropout, the run
directory, full-split validation with best/ and history.csv, and exact resume with all of it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from test_train import tiny_model_config, tiny_train_config, write_toy_data

from seq2seq.core.config import ModelConfig, TrainConfig
from seq2seq.training.checkpoints import list_checkpoints
from seq2seq.training.model import load_model
from seq2seq.training.train import train
from seq2seq.training.train_data import drop_words, epoch_examples


def toy_examples() -> tuple[list[tuple[list[int], list[int]]], list[bool]]:
    """10 sentences of 9 target tokens (+EOS = 10) and 200 phrases of 1 target token (+EOS = 2)."""
    examples = [([4, 5, 3], [6] * 9) for _ in range(10)] + [([7, 3], [8]) for _ in range(200)]
    return examples, [False] * 10 + [True] * 200


def test_epoch_examples_draw_phrases_up_to_their_token_share() -> None:
    examples, phrases = toy_examples()
    assert epoch_examples(examples, phrases, 0.0, seed=1, epoch=0) == list(range(210))  # share 0: everything

    chosen = epoch_examples(examples, phrases, 0.3, seed=1, epoch=0)
    assert set(range(10)) <= set(chosen)  # every sentence, every epoch
    tokens = [len(examples[i][1]) + 1 for i in chosen]
    phrase_tokens = sum(t for i, t in zip(chosen, tokens) if phrases[i])
    assert abs(phrase_tokens / sum(tokens) - 0.3) < 0.02  # 100 sentence tokens -> ~43 phrase tokens
    assert len(set(chosen)) == len(chosen)

    assert epoch_examples(examples, phrases, 0.3, seed=1, epoch=0) == chosen  # deterministic (resume)
    other_epoch = epoch_examples(examples, phrases, 0.3, seed=1, epoch=1)
    assert set(other_epoch) != set(chosen)  # a fresh sample of the pool each epoch


def test_word_dropout_replaces_real_tokens_by_unk_only() -> None:
    config = ModelConfig(vocab_size=50, d_model=16, n_heads=2, d_ff=32)
    ids = torch.tensor([[config.bos_id] + list(range(4, 44)) + [config.eos_id, config.pad_id, config.pad_id]] * 20)
    assert torch.equal(drop_words(ids, 0.0, config), ids)
    torch.manual_seed(0)
    dropped = drop_words(ids, 0.25, config)
    changed = dropped != ids
    assert (dropped[changed] == config.unk_id).all()
    special = (ids == config.bos_id) | (ids == config.eos_id) | (ids == config.pad_id)
    assert not changed[special].any()
    assert 0.2 < changed.sum().item() / (~special).sum().item() < 0.3


def test_run_directory_defaults_outside_the_checkout_and_expands_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert TrainConfig().run_dir == tmp_path / ".cache" / "crossalign" / "runs" / "default"
    with pytest.raises(ValueError, match="phrase_share"):
        TrainConfig(phrase_share=1.0)


def write_mixed_data(directory: Path, tokenizer_path: Path) -> None:
    """The toy copy task plus single-word "phrase" pairs, as `data prepare` labels them."""
    write_toy_data(directory, tokenizer_path, train_count=16, held_out_count=4)
    lines = (directory / "train.tsv").read_text().splitlines()
    words = sorted({w for line in lines for w in line.split("\t")[0].split()})
    with open(directory / "train.tsv", "a") as handle:
        handle.writelines(f"{w}\t{w}\tphrase\n" for w in words * 10)


def test_recipe_trains_validates_on_the_whole_split_and_resumes_exactly(
    tmp_path: Path, toy_tokenizer_path: Path
) -> None:
    write_mixed_data(tmp_path / "data", toy_tokenizer_path)
    model_config = tiny_model_config(d_model=16, dropout=0.1)

    def run(out: str, max_steps: int) -> Path:
        config = tiny_train_config(
            tmp_path / "data",
            tmp_path / out,
            max_steps=max_steps,
            max_tokens=64,
            phrase_share=0.3,
            word_dropout=0.2,
            valid_every=4,
            save_every=4,
            valid_bleu_sentences=-1,
        )
        return train(config, model_config)

    straight = torch.load(run("straight", 12) / "model.pt")
    run("resumed", 8)
    resumed = torch.load(run("resumed", 12) / "model.pt")
    for name, tensor in straight.items():  # data order, phrase sample and word-dropout RNG all restored
        assert torch.allclose(tensor, resumed[name], atol=1e-6, rtol=0), name
    payload = torch.load(list_checkpoints(tmp_path / "resumed")[-1], weights_only=False)
    assert payload["state"]["epoch"] >= 1

    history = [json.loads(line) for line in (tmp_path / "straight" / "history.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [4, 8, 12]
    csv_lines = (tmp_path / "straight" / "history.csv").read_text().splitlines()
    assert csv_lines[0].startswith("step,epoch,minutes,train_loss,valid_loss,valid_bleu") and len(csv_lines) == 4
    best = tmp_path / "straight" / "best"
    chosen = json.loads((best / "validation.json").read_text())
    assert chosen["valid_bleu"] == max(h["valid_bleu"] for h in history)
    assert (best / "spm.model").is_file() and load_model(best).config.d_model == 16


def test_init_from_keeps_the_architecture_but_takes_dropout_from_the_run(
    tmp_path: Path, toy_tokenizer_path: Path
) -> None:
    write_toy_data(tmp_path / "data", toy_tokenizer_path, train_count=100, held_out_count=4)
    base = train(tiny_train_config(tmp_path / "data", tmp_path / "base", max_steps=2), tiny_model_config(16))
    continued = train(
        tiny_train_config(tmp_path / "data", tmp_path / "more", max_steps=1, init_from=str(base)),
        replace(tiny_model_config(32), dropout=0.3),
    )
    config = load_model(continued).config
    assert config.d_model == 16 and config.dropout == 0.3


def test_the_device_agnostic_bf16_path_trains_on_the_cpu(tmp_path: Path, toy_tokenizer_path: Path) -> None:
    """What `--device cuda` runs (bf16 autocast, tensors moved to the run's device), on the CPU."""
    write_toy_data(tmp_path / "data", toy_tokenizer_path, train_count=200, held_out_count=4)
    config = tiny_train_config(
        tmp_path / "data", tmp_path / "bf16", max_steps=30, device="cpu", precision="bf16", valid_every=30
    )
    assert config.autocast_bf16 and not TrainConfig(device="cpu").autocast_bf16
    assert TrainConfig(device="cuda").autocast_bf16
    final = train(config, tiny_model_config(32))
    model = load_model(final)
    assert all(p.dtype == torch.float32 for p in model.parameters())  # weights stay fp32
    history = [json.loads(line) for line in (tmp_path / "bf16" / "history.jsonl").read_text().splitlines()]
    first = train(replace(config, out_dir=str(tmp_path / "one"), max_steps=1), tiny_model_config(32))
    assert history[-1]["valid_loss"] < json.loads((first / "history.json").read_text())[-1]["valid_loss"]
    with pytest.raises(ValueError, match="precision"):
        TrainConfig(precision="fp8")
