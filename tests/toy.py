"""A toy word-for-word German -> English language and a tiny model trained on it.

Shared by the test files that need a real trained model (export, service, explorer,
alignment): d_model 32, 2+2 layers, an 80-piece SentencePiece model, trained for a few
seconds so its searches end with EOS and make real choices.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import torch
import torch.nn.functional as F

from data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer, train_sentencepiece
from seq2seq.core.config import ModelConfig
from seq2seq.decoding.search import pad_batch
from seq2seq.training.model import Transformer, save_model

LEXICON = {
    "der": "the",
    "die": "the",
    "das": "the",
    "ist": "is",
    "war": "was",
    "sehr": "very",
    "nicht": "not",
    "auch": "also",
    "und": "and",
    "heute": "today",
    "hier": "here",
    "Hund": "dog",
    "Katze": "cat",
    "Haus": "house",
    "Auto": "car",
    "Mann": "man",
    "Frau": "woman",
    "Kind": "child",
    "Baum": "tree",
    "Buch": "book",
    "Stadt": "city",
    "Garten": "garden",
    "Tisch": "table",
    "klein": "small",
    "groß": "big",
    "rot": "red",
    "blau": "blue",
    "alt": "old",
    "neu": "new",
    "schön": "nice",
    "kalt": "cold",
    "warm": "warm",
    "grün": "green",
    "schnell": "fast",
    "langsam": "slow",
}
NOUNS = ["Hund", "Katze", "Haus", "Auto", "Mann", "Frau", "Kind", "Baum", "Buch", "Stadt", "Garten", "Tisch"]
ADJECTIVES = ["klein", "groß", "rot", "blau", "alt", "neu", "schön", "kalt", "warm", "grün", "schnell", "langsam"]
SENTENCES = [
    "der Hund ist klein .",
    "die Katze war sehr alt und schön heute .",
    "das Haus ist nicht rot .",
    "der Baum war groß hier .",
    "das Kind ist auch schnell und warm .",
]


def toy_pairs(count: int, seed: int = 0) -> list[tuple[str, str]]:
    """`count` toy sentence pairs: German words translated one by one."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        words = [rng.choice(["der", "die", "das"]), rng.choice(NOUNS), rng.choice(["ist", "war"])]
        words += rng.sample(["sehr", "nicht", "auch"], rng.randint(0, 1)) + [rng.choice(ADJECTIVES)]
        if rng.random() < 0.3:
            words += ["und", rng.choice(ADJECTIVES)]
        if rng.random() < 0.3:
            words.append(rng.choice(["heute", "hier"]))
        pairs.append((" ".join(words) + " .", " ".join(LEXICON[w] for w in words) + " ."))
    return pairs


def toy_model_config(**overrides: object) -> ModelConfig:
    """The tests' tiny architecture (2+2 layers, d_model 32): big enough for every mechanism,
    fast on CPU. `overrides` set the vocabulary, positions and the rest per test."""
    values: dict = dict(d_model=32, n_heads=4, d_ff=64, encoder_layers=2, decoder_layers=2, dropout=0.0)
    return ModelConfig(**(values | overrides))


def train_tiny(directory: Path, steps: int = 30) -> Path:
    """A tiny model trained for `steps` (deterministic, ~3 s on one core) into `directory/ckpt`
    (config.json, model.pt, spm.model)."""
    pairs = toy_pairs(400)
    spm_path = train_sentencepiece([text for pair in pairs for text in pair], directory / "spm", vocab_size=80)
    tokenizer = Tokenizer(spm_path)
    torch.manual_seed(0)
    config = toy_model_config(vocab_size=tokenizer.vocab_size, max_positions=256)
    model = Transformer(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    sources = [tokenizer.encode(s) + [EOS_ID] for s, _ in pairs]
    targets = [tokenizer.encode(t) for _, t in pairs]
    rng = random.Random(0)
    for _ in range(steps):
        batch = rng.sample(range(len(pairs)), 32)
        src, _ = pad_batch([sources[i] for i in batch], PAD_ID)
        tgt_in, _ = pad_batch([[BOS_ID] + targets[i] for i in batch], PAD_ID)
        tgt_out, _ = pad_batch([targets[i] + [EOS_ID] for i in batch], PAD_ID)
        log_probs = model(torch.from_numpy(src), torch.from_numpy(tgt_in))
        loss = F.nll_loss(log_probs.flatten(0, 1), torch.from_numpy(tgt_out).flatten(), ignore_index=PAD_ID)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    checkpoint = directory / "ckpt"
    save_model(model.eval(), checkpoint)
    shutil.copyfile(spm_path, checkpoint / "spm.model")
    return checkpoint
