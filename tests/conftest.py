"""Shared test setup: one thread per process, tiny models, a word-level toy tokenizer.

Everything here is small enough that the whole suite runs in about a minute on two cores.
"""

from __future__ import annotations

import os

# Before torch is imported anywhere: tests use tiny tensors, and threads only add noise.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

# The toy task's alphabet: each letter is one whole word, so one SentencePiece "word" piece.
TOY_ALPHABET = "a b c d e f g h".split()


def write_toy_tokenizer(directory: Path) -> Path:
    """A word-level SentencePiece model over TOY_ALPHABET: ids 4..11 are the letters."""
    from data.tokenizer import train_sentencepiece

    return train_sentencepiece(TOY_ALPHABET * 5, directory / "spm", vocab_size=4 + len(TOY_ALPHABET),
                               model_type="word")


@pytest.fixture(scope="session")
def toy_tokenizer_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`spm.model` of the toy tokenizer; copy it, do not modify it (shared by the session)."""
    return write_toy_tokenizer(tmp_path_factory.mktemp("toy_spm"))


@pytest.fixture
def tiny_model_config():
    """A 2+2-layer model with d_model 32: big enough for every mechanism, fast on CPU."""
    from seq2seq.config import ModelConfig

    return ModelConfig(vocab_size=24, d_model=32, n_heads=4, d_ff=64, encoder_layers=2, decoder_layers=2,
                       dropout=0.0, max_positions=64)


@pytest.fixture
def tiny_model(tiny_model_config):
    """A randomly initialised tiny Transformer in eval mode (deterministic: seeded)."""
    import torch

    from seq2seq.model import Transformer

    torch.manual_seed(0)
    return Transformer(tiny_model_config).eval()
