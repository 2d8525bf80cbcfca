"""Shared test setup: one thread per process, tiny models, a word-level toy tokenizer.

Everything here is small; the trained toy model and its bundle are built once per session
and shared by every module that needs them (read-only: copy before changing).
"""

from __future__ import annotations

import os

# Before torch is imported anywhere: tests use tiny tensors, and threads only add noise.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

# The toy task's alphabet: each letter is one whole word, so one SentencePiece "word" piece.
TOY_ALPHABET = ["a", "b", "c", "d", "e", "f", "g", "h"]


def write_toy_tokenizer(directory: Path) -> Path:
    """A word-level SentencePiece model over TOY_ALPHABET: ids 4..11 are the letters."""
    from data.tokenizer import train_sentencepiece

    return train_sentencepiece(TOY_ALPHABET * 5, directory / "spm", vocab_size=4 + len(TOY_ALPHABET), model_type="word")


@pytest.fixture(scope="session")
def toy_tokenizer_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`spm.model` of the toy tokenizer; copy it, do not modify it (shared by the session)."""
    return write_toy_tokenizer(tmp_path_factory.mktemp("toy_spm"))


@pytest.fixture
def tiny_model_config():
    """A 2+2-layer model with d_model 32: big enough for every mechanism, fast on CPU."""
    from toy import toy_model_config

    return toy_model_config(vocab_size=24, max_positions=64)


@pytest.fixture
def tiny_model(tiny_model_config):
    """A randomly initialised tiny Transformer in eval mode (deterministic: seeded)."""
    import torch

    from seq2seq.training.model import Transformer

    torch.manual_seed(0)
    return Transformer(tiny_model_config).eval()


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toy model of `toy.train_tiny`, trained once per session: a directory with
    config.json, model.pt and spm.model. Shared: copy it before changing anything in it."""
    from toy import train_tiny

    return train_tiny(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def tiny_bundle(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`tiny_checkpoint` exported once per session as the release bundle `.../models/de-en`
    (alone in its models directory, as the service expects), with a toy data manifest and
    parity checked on every toy sentence. Shared: copy it before changing anything in it."""
    import json

    from toy import SENTENCES

    from export.exporter import export_model

    work = tmp_path_factory.mktemp("tiny_bundle")
    manifest = work / "manifest.json"
    manifest.write_text(json.dumps({"corpus": "toy", "license": "CC0-1.0 (generated in the test)"}))
    export_model(tiny_checkpoint, work / "models" / "de-en", data_manifest=manifest, parity_sentences=SENTENCES)
    return work / "models" / "de-en"


@pytest.fixture(scope="session")
def two_models(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A models directory with both directions: `tiny_checkpoint` exported once recording
    German -> English and once English -> German (as `crossalign data prepare --reverse` makes
    a run record it), `de-en/` and `en-de/`. Shared: copy it before changing anything in it."""
    import json
    import shutil

    from toy import SENTENCES

    from export.exporter import export_model

    work = tmp_path_factory.mktemp("two_directions")
    for source, target in (("de", "en"), ("en", "de")):
        checkpoint = shutil.copytree(tiny_checkpoint, work / f"ckpt-{source}-{target}")
        config = json.loads((checkpoint / "config.json").read_text())
        (checkpoint / "config.json").write_text(json.dumps(config | {"source_lang": source, "target_lang": target}))
        export_model(checkpoint, work / "models" / f"{source}-{target}", parity_sentences=SENTENCES[:1])
    return work / "models"


@pytest.fixture(scope="session")
def batch_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random model of the batch CLI tests (tests/batch_toy.py). Shared: read-only."""
    from batch_toy import random_model

    return random_model(tmp_path_factory.mktemp("batch_model"))


@pytest.fixture(scope="module")
def echo_engine(toy_tokenizer_path: Path):
    """A `TranslatorEngine` over the scripted EchoBackend (tests/echo_backend.py), per module."""
    from echo_backend import EchoBackend

    from data.tokenizer import Tokenizer
    from seq2seq.decoding.translator import Translator
    from service.compute.engine import TranslatorEngine

    tokenizer = Tokenizer(toy_tokenizer_path)
    translator = Translator(EchoBackend(tokenizer.vocab_size), tokenizer)
    engine = TranslatorEngine({("de", "en"): ("de-en", translator)}, window_s=0.002)
    yield engine
    engine.close()
