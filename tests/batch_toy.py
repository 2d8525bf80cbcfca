"""The toy German of the batch CLI tests (test_batch_cli.py, test_batch_resume.py): the
sentences, the tiny random model that translates them, and `crossalign translate` in-process.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

from seq2seq.cli import main as cli_main

WORDS = [
    "der",
    "die",
    "das",
    "Hund",
    "Katze",
    "Haus",
    "Mann",
    "Frau",
    "Kind",
    "ist",
    "war",
    "sehr",
    "nicht",
    "auch",
    "klein",
    "groß",
    "rot",
    "alt",
    "schön",
    "grün",
    "heute",
    "hier",
    "und",
]


def toy_sentences(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3))).capitalize() + rng.choice([" .", " !", " ?"])
        for _ in range(count)
    ]


def random_model(root: Path) -> Path:
    """config.json + model.pt + spm.model of a tiny random Transformer."""
    import torch
    from toy import toy_model_config

    from data.tokenizer import Tokenizer, train_sentencepiece
    from seq2seq.training.model import Transformer, save_model

    spm_path = train_sentencepiece(toy_sentences(300), root / "spm", vocab_size=56)
    torch.manual_seed(0)
    config = toy_model_config(vocab_size=Tokenizer(spm_path).vocab_size, max_positions=128)
    directory = root / "model"
    save_model(Transformer(config).eval(), directory)
    shutil.copyfile(spm_path, directory / "spm.model")
    return directory


def translate(model_dir: Path, *arguments: str | Path) -> int:
    """Run `crossalign translate` in this process; returns the exit status."""
    return cli_main(["translate", "-m", str(model_dir), "--backend", "torch", *map(str, arguments)])


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
