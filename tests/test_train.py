"""Training: it learns a toy task, resumes exactly, averages, schedules, and runs under torchrun."""

from __future__ import annotations

import json
import math
import os
import pickletools
import random
import re
import subprocess
import sys
import textwrap
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from data.tokenizer import Tokenizer, train_sentencepiece
from seq2seq.core.config import DecodeConfig, ModelConfig, TrainConfig, to_dict
from seq2seq.decoding.translator import Translator
from seq2seq.training.checkpoints import average_checkpoints, list_checkpoints
from seq2seq.training.model import Transformer, load_model
from seq2seq.training.torch_backend import TorchBackend
from seq2seq.training.train import learning_rate, smoothed_loss, train
from seq2seq.training.train_data import collate, load_examples, make_batches

REPO = Path(__file__).resolve().parents[1]


def toy_sequences(alphabet: list[str], rng: random.Random, count: int) -> set[str]:
    return {" ".join(rng.choice(alphabet) for _ in range(rng.randint(3, 6))) for _ in range(count)}


def write_toy_data(
    directory: Path, tokenizer_path: Path, train_count: int, held_out_count: int, seed: int = 0
) -> list[str]:
    """A data dir as `data prepare` writes it, for the copy task; returns held-out sources.

    The words are the pieces of the word-level toy tokenizer (conftest), one id each.
    """
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "spm.model").write_bytes(tokenizer_path.read_bytes())
    tokenizer = Tokenizer(directory / "spm.model")
    alphabet = [piece.lstrip("▁") for piece in tokenizer.pieces(range(4, tokenizer.vocab_size))]
    rng = random.Random(seed)
    train_set = sorted(toy_sequences(alphabet, rng, train_count))
    held_out = sorted(toy_sequences(alphabet, rng, 4 * held_out_count) - set(train_set))[:held_out_count]
    (directory / "train.tsv").write_text("".join(f"{s}\t{s}\tsentence\n" for s in train_set))
    (directory / "valid.tsv").write_text("".join(f"{s}\t{s}\tsentence\n" for s in held_out[:4]))
    return held_out


def tiny_train_config(data_dir: Path, out_dir: Path, **overrides) -> TrainConfig:
    values = dict(
        data_dir=str(data_dir),
        out_dir=str(out_dir),
        max_tokens=800,
        max_steps=10,
        lr=3e-3,
        warmup_steps=50,
        weight_decay=0.0,
        label_smoothing=0.0,
        valid_every=10**6,
        save_every=10**6,
        valid_bleu_sentences=2,
        average_last=1,
        threads=1,
    )
    values.update(overrides)
    return TrainConfig(**values)


def tiny_model_config(d_model: int = 32, **overrides) -> ModelConfig:
    values = dict(
        d_model=d_model,
        n_heads=2,
        d_ff=2 * d_model,
        encoder_layers=1,
        decoder_layers=1,
        alignment_layer=-1,
        dropout=0.0,
        max_positions=32,
    )
    values.update(overrides)
    return ModelConfig(**values)


# --------------------------------------------------------------------------- it learns


def test_tiny_model_learns_to_copy(tmp_path: Path, toy_tokenizer_path: Path):
    held_out = write_toy_data(tmp_path / "data", toy_tokenizer_path, train_count=3000, held_out_count=50)
    final = train(
        tiny_train_config(tmp_path / "data", tmp_path / "run", max_steps=400), tiny_model_config(), resume=False
    )
    assert {"config.json", "model.pt", "spm.model", "history.json"} <= {p.name for p in final.iterdir()}
    translator = Translator(TorchBackend(load_model(final)), Tokenizer(final / "spm.model"))
    results = translator.translate_batch(held_out, DecodeConfig(beam_size=1))
    accuracy = sum(r.text == source for r, source in zip(results, held_out)) / len(held_out)
    assert accuracy >= 0.9, [(r.text, s) for r, s in zip(results, held_out) if r.text != s]
    # The alignment of a copy is the diagonal: each target token attends most to its own source.
    exact = [(r, s) for r, s in zip(results, held_out) if r.text == s]
    diagonal = sum(
        bool((r.attention[0].mean(0)[:-1, :-1].argmax(-1) == np.arange(len(s.split()))).all()) for r, s in exact
    )
    assert diagonal >= 0.8 * len(exact)


# --------------------------------------------------------------------------- resume and checkpoints


def test_resume_is_exact(tmp_path: Path, toy_tokenizer_path: Path):
    # Dropout on, so the restored RNG state matters; small batches, so the run crosses an epoch.
    write_toy_data(tmp_path / "data", toy_tokenizer_path, train_count=40, held_out_count=4)
    model_config = tiny_model_config(d_model=16, dropout=0.1)

    def run(out: str, max_steps: int) -> Path:
        return train(
            tiny_train_config(tmp_path / "data", tmp_path / out, max_steps=max_steps, max_tokens=64), model_config
        )

    straight = torch.load(run("straight", 14) / "model.pt")
    first_half = run("resumed", 7)
    assert [p.name for p in list_checkpoints(tmp_path / "resumed")] == ["step0000007.pt"]
    assert load_model(first_half).state_dict().keys() == straight.keys()
    resumed = torch.load(run("resumed", 14) / "model.pt")
    for name, tensor in straight.items():
        assert torch.allclose(tensor, resumed[name], atol=1e-6, rtol=0), name
    payload = torch.load(list_checkpoints(tmp_path / "resumed")[-1], weights_only=False)
    assert payload["state"]["step"] == 14 and payload["state"]["epoch"] >= 1  # crossed an epoch boundary

    # Resuming a run that already reached max_steps trains no further.
    again = torch.load(run("resumed", 14) / "model.pt")
    assert all(torch.equal(again[name], resumed[name]) for name in resumed)
    assert [p.name for p in list_checkpoints(tmp_path / "resumed")] == ["step0000007.pt", "step0000014.pt"]


def test_init_from_starts_a_new_run_from_a_model_and_checks_its_tokenizer(tmp_path: Path, toy_tokenizer_path: Path):
    write_toy_data(tmp_path / "data", toy_tokenizer_path, train_count=200, held_out_count=4)
    # The first model's architecture (d_model 16) wins over the second run's model arguments.
    base = train(tiny_train_config(tmp_path / "data", tmp_path / "base", max_steps=5), tiny_model_config(16))
    continued_config = tiny_train_config(
        tmp_path / "data", tmp_path / "continued", max_steps=1, lr=0.0, init_from=str(base)
    )
    continued = train(continued_config, tiny_model_config(32))
    assert load_model(continued).config == load_model(base).config
    base_state, continued_state = torch.load(base / "model.pt"), torch.load(continued / "model.pt")
    for name, tensor in base_state.items():  # one step at learning rate 0 changes no weight
        assert torch.equal(tensor, continued_state[name]), name

    # A guided continuation records the supervised head as the model's alignment head.
    links = tmp_path / "links.pharaoh"
    links.write_text(
        "".join(
            " ".join(f"{i}-{i}" for i in range(len(line.split("\t")[0].split()))) + "\n"
            for line in (tmp_path / "data" / "train.tsv").read_text().splitlines()
        )
    )
    guided = train(
        replace(continued_config, out_dir=str(tmp_path / "guided"), guided_alignment=str(links), guided_head=1),
        tiny_model_config(32),
    )
    assert load_model(guided).config.alignment_heads == (1,)

    # Ids must mean the same pieces: another tokenizer is refused before any training.
    other = tmp_path / "other"
    other.mkdir()
    for name in ("config.json", "model.pt"):
        (other / name).write_bytes((base / name).read_bytes())
    train_sentencepiece(["ganz andere Wörter hier", "quite other words here"] * 50, other / "spm", vocab_size=25)
    with pytest.raises(ValueError, match="spm.model differs"):
        train(replace(continued_config, out_dir=str(tmp_path / "refused"), init_from=str(other)), tiny_model_config(32))
    with pytest.raises(FileNotFoundError, match="no config.json"):
        train(
            replace(continued_config, out_dir=str(tmp_path / "refused"), init_from=str(tmp_path / "data")),
            tiny_model_config(32),
        )


def test_checkpoints_name_no_project_module(tmp_path: Path, toy_tokenizer_path: Path):
    """A checkpoint pickles builtins, tensors and RNG states only: moving a module (the
    role folders of seq2seq/) can never break resuming an old run."""
    write_toy_data(tmp_path / "data", toy_tokenizer_path, train_count=40, held_out_count=4)
    train(tiny_train_config(tmp_path / "data", tmp_path / "run", max_steps=1, save_every=1), tiny_model_config(16))
    (checkpoint,) = list_checkpoints(tmp_path / "run")
    with zipfile.ZipFile(checkpoint) as archive:
        pickled = archive.read(next(name for name in archive.namelist() if name.endswith("data.pkl")))
    named = [str(argument) for _, argument, _ in pickletools.genops(pickled) if isinstance(argument, str)]
    assert any(name.startswith("torch") for name in named)  # the scan sees the globals it should
    project = re.compile(r"(seq2seq|data|export|service)([. ]|$)")
    assert not [name for name in named if project.match(name)]


def test_average_checkpoints(tmp_path: Path):
    config = tiny_model_config(d_model=16)
    states = []
    for seed in range(3):
        torch.manual_seed(seed)
        states.append(Transformer(config).state_dict())
        torch.save({"model": states[-1], "state": {"step": seed}}, tmp_path / f"step{seed}.pt")
    averaged = average_checkpoints([tmp_path / f"step{seed}.pt" for seed in range(3)])
    assert averaged.keys() == states[0].keys()
    for name in averaged:
        expected = (states[0][name].double() + states[1][name].double() + states[2][name].double()) / 3
        assert averaged[name].dtype == states[0][name].dtype
        assert torch.allclose(averaged[name].double(), expected, atol=1e-7)
    Transformer(config).load_state_dict(averaged)  # loads as a model


# --------------------------------------------------------------------------- optimisation pieces


def test_learning_rate_warms_up_linearly_then_decays_as_inverse_sqrt():
    config = TrainConfig(lr=1e-3, warmup_steps=100)
    assert learning_rate(1, config) == pytest.approx(1e-5)
    assert learning_rate(50, config) == pytest.approx(5e-4)
    assert learning_rate(100, config) == pytest.approx(1e-3)
    assert learning_rate(400, config) == pytest.approx(5e-4)  # 4x the warmup: half the peak
    assert learning_rate(10_000, config) == pytest.approx(1e-4)
    rates = [learning_rate(step, config) for step in range(1, 1000)]
    assert max(rates) == rates[99]
    assert all(a < b for a, b in zip(rates[:99], rates[1:100]))
    assert all(a > b for a, b in zip(rates[99:], rates[100:]))


def test_cooldown_takes_the_rate_linearly_to_zero_over_the_last_steps():
    plain = TrainConfig(lr=1e-3, warmup_steps=100, max_steps=1000)
    cooled = TrainConfig(lr=1e-3, warmup_steps=100, max_steps=1000, cooldown_steps=200)
    assert all(learning_rate(s, cooled) == learning_rate(s, plain) for s in range(1, 802))
    assert learning_rate(901, cooled) == pytest.approx(learning_rate(901, plain) * 0.5)
    assert learning_rate(1000, cooled) == pytest.approx(learning_rate(1000, plain) / 200)
    rates = [learning_rate(s, cooled) for s in range(801, 1001)]
    assert all(a > b > 0 for a, b in zip(rates, rates[1:]))
    with pytest.raises(ValueError, match="cooldown_steps"):
        TrainConfig(max_steps=100, cooldown_steps=101)


def test_smoothed_loss_ignores_padding():
    torch.manual_seed(0)
    log_probs = torch.randn(2, 4, 7).log_softmax(-1)
    target = torch.tensor([[4, 5, 3, 0], [6, 3, 0, 0]])
    real = target != 0
    loss, count = smoothed_loss(log_probs, target, smoothing=0.1, pad_id=0)
    assert count == 5
    nll = -log_probs.gather(-1, target[..., None])[..., 0]
    expected = (0.9 * nll - 0.1 * log_probs.mean(-1))[real].sum()
    assert torch.allclose(loss, expected)
    scrambled = log_probs.clone()
    scrambled[~real] = torch.randn(3, 7).log_softmax(-1)  # anything at padded positions
    assert torch.equal(smoothed_loss(scrambled, target, 0.1, 0)[0], loss)
    unsmoothed, _ = smoothed_loss(log_probs, target, 0.0, 0)
    assert torch.allclose(unsmoothed, nll[real].sum())


def test_batches_respect_the_token_budget_and_cover_every_example_once():
    rng = random.Random(0)
    examples = [([5] * rng.randint(2, 20), [6] * rng.randint(2, 20)) for _ in range(300)]
    batches = make_batches(examples, max_tokens=200, seed=1, epoch=0)
    assert sorted(i for batch in batches for i in batch) == list(range(300))
    for batch in batches:
        longest = max(max(len(examples[i][0]), len(examples[i][1]) + 1) for i in batch)
        assert longest * len(batch) * 2 <= 200
    assert batches == make_batches(examples, max_tokens=200, seed=1, epoch=0)
    assert batches != make_batches(examples, max_tokens=200, seed=1, epoch=1)


# --------------------------------------------------------------------------- torchrun


def test_a_run_takes_its_direction_from_the_data_manifest(tmp_path: Path, toy_tokenizer_path: Path):
    """Data prepared with `--reverse` trains an en->de model, from scratch or from a de->en one."""
    write_toy_data(tmp_path / "data", toy_tokenizer_path, train_count=100, held_out_count=4)
    base = train(tiny_train_config(tmp_path / "data", tmp_path / "base", max_steps=2), tiny_model_config(16))
    assert (load_model(base).config.source_lang, load_model(base).config.target_lang) == ("de", "en")
    (tmp_path / "data" / "manifest.json").write_text(json.dumps({"languages": {"source": "en", "target": "de"}}))
    scratch = train(tiny_train_config(tmp_path / "data", tmp_path / "scratch", max_steps=2), tiny_model_config(16))
    started = train(
        tiny_train_config(tmp_path / "data", tmp_path / "started", max_steps=2, init_from=str(base)),
        tiny_model_config(16),
    )
    for final in (scratch, started):
        config = load_model(final).config
        assert (config.source_lang, config.target_lang) == ("en", "de")


def test_distributed_data_parallel_with_two_processes(tmp_path: Path, toy_tokenizer_path: Path):
    """Two ranks, each on its own batch: their gradients are averaged, so the weights after a
    step are those of one process stepping on the mean of the two batches' losses (each
    normalised by its own tokens, as each rank does). A rank that kept its own gradient
    would land elsewhere: Adam's first step moves each weight by the sign of its gradient."""
    write_toy_data(tmp_path / "data", toy_tokenizer_path, train_count=60, held_out_count=4)
    train_config = TrainConfig(
        data_dir=str(tmp_path / "data"),
        out_dir=str(tmp_path / "run"),
        max_tokens=64,
        max_steps=2,
        warmup_steps=2,
        valid_every=1,
        save_every=1,
        valid_bleu_sentences=2,
        average_last=1,
        threads=1,
        weight_decay=0.0,
    )
    model_config = ModelConfig(
        d_model=16,
        n_heads=2,
        d_ff=32,
        encoder_layers=1,
        decoder_layers=1,
        alignment_layer=-1,
        dropout=0.0,
        max_positions=32,
    )
    driver = tmp_path / "driver.py"
    driver.write_text(
        textwrap.dedent(f"""
        import os
        import torch.distributed as dist
        from seq2seq.core.config import ModelConfig, TrainConfig
        from seq2seq.training.train import train

        final = train(TrainConfig(**{to_dict(train_config)!r}), ModelConfig(**{to_dict(model_config)!r}))
        assert not dist.is_initialized()
        with open({str(tmp_path)!r} + f"/rank{{os.environ['RANK']}}.done", "w") as handle:
            handle.write(str(final))
    """)
    )
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(driver)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (tmp_path / "rank0.done").is_file() and (tmp_path / "rank1.done").is_file()
    assert [p.name for p in list_checkpoints(tmp_path / "run")] == ["step0000001.pt", "step0000002.pt"]
    history = (tmp_path / "run" / "history.jsonl").read_text().splitlines()
    assert len(history) == 2  # validation at steps 1 and 2, written once (by rank 0)
    assert math.isfinite(json.loads(history[-1])["valid_loss"])
    after_one_step = torch.load(list_checkpoints(tmp_path / "run")[0], weights_only=False)["model"]

    # The same first step in one process, on the mean of the two ranks' losses.
    tokenizer = Tokenizer(tmp_path / "data" / "spm.model")
    model_config = replace(model_config, vocab_size=tokenizer.vocab_size)
    examples = load_examples(tmp_path / "data" / "train.tsv", tokenizer, model_config.max_positions)
    batches = make_batches(examples, train_config.max_tokens, train_config.seed, 0)
    batches = batches[len(batches) % 2 :]  # as the loop makes the count even across ranks
    rank_batches = batches[:2]  # step 1: rank r reads batches[0 * 2 + r]

    def first_step(batches_read: list[list[int]]) -> dict[str, torch.Tensor]:
        torch.manual_seed(train_config.seed)  # as train() seeds before building the model
        model = Transformer(model_config)
        optimizer = torch.optim.AdamW(
            model.parameters(), lr=learning_rate(1, train_config), betas=train_config.betas, weight_decay=0.0
        )
        losses = []
        for indices in batches_read:
            src, tgt_in, tgt_out = collate(examples, indices, model_config)
            loss_sum, tokens = smoothed_loss(model(src, tgt_in), tgt_out, train_config.label_smoothing, 0)
            losses.append(loss_sum / tokens)
        optimizer.zero_grad()
        (sum(losses) / len(losses)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train_config.clip_norm)
        optimizer.step()
        return model.state_dict()

    union = first_step(rank_batches)
    for name, tensor in union.items():
        assert torch.allclose(after_one_step[name], tensor, atol=1e-5), name
    for alone in (first_step([rank_batches[0]]), first_step([rank_batches[1]])):  # no averaging: elsewhere
        assert any(not torch.allclose(after_one_step[n], tensor, atol=1e-5) for n, tensor in alone.items())


def test_every_training_setting_is_explained_in_help() -> None:
    """The comment beside (or above) each config field is its --help text: one explanation."""
    import argparse

    from seq2seq.core.config import field_comments
    from seq2seq.training.train import add_arguments

    comments = field_comments(TrainConfig)
    assert comments["lr"] == "peak learning rate"
    assert comments["init_from"].startswith("Start a new run from the weights")
    assert set(comments) == set(TrainConfig.__dataclass_fields__), "every TrainConfig field has a comment"
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    text = parser.format_help()
    assert "peak learning rate (default 0.001)" in " ".join(text.split())
    assert "residual width (default 256)" in " ".join(text.split())


def test_train_only_trains_the_matching_parameters_and_freezes_the_rest(tmp_path: Path, toy_tokenizer_path: Path):
    write_toy_data(tmp_path / "data", toy_tokenizer_path, train_count=200, held_out_count=4)
    base = train(tiny_train_config(tmp_path / "data", tmp_path / "base", max_steps=2), tiny_model_config(16))
    only = r"decoder_layers\.0\.cross_attention\.w_[qk]\..*"
    refit = train(
        tiny_train_config(tmp_path / "data", tmp_path / "refit", max_steps=3, init_from=str(base), train_only=only),
        tiny_model_config(16),
    )
    before, after = torch.load(base / "model.pt"), torch.load(refit / "model.pt")
    changed = {name for name, tensor in before.items() if not torch.equal(tensor, after[name])}
    assert changed == {f"decoder_layers.0.cross_attention.w_{p}.{k}" for p in "qk" for k in ("weight", "bias")}
    # A pattern that names nothing is refused before a step is taken, naming what names look like.
    with pytest.raises(SystemExit, match="matches no parameter; names look like embedding.weight"):
        train(
            tiny_train_config(tmp_path / "data", tmp_path / "none", max_steps=1, init_from=str(base), train_only="w_q"),
            tiny_model_config(16),
        )
    with pytest.raises(ValueError, match="train_only '\\[' is no regular expression"):
        tiny_train_config(tmp_path / "data", tmp_path / "bad", train_only="[")
