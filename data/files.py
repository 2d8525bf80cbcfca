"""File helpers shared by corpus preparation and the release bundle (no corpus code here)."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks (bundles hold 50 MB graphs)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# The files of a model directory (a release bundle, or a training run's final/ and best/),
# named once. A data directory from `crossalign data prepare` holds the same TOKENIZER_FILE.
CONFIG_FILE = "config.json"  # ModelConfig, beside every checkpoint and export
WEIGHTS_FILE = "model.pt"  # the torch state dict
TOKENIZER_FILE = "spm.model"  # the SentencePiece model the embeddings are indexed by
QUALITY_FILE = "quality.json"  # the quality detectors' thresholds, chosen at release
CALIBRATION_FILE = "calibration.json"  # the confidence read as P(usable) and bands (seq2seq/analysis/calibration.py)
DICTIONARY_FILE = "dictionary.tsv.gz"  # the term index automatic hints read (data/dictionary.py)
BUNDLE_FILE = "bundle.json"  # a release bundle's manifest: graphs, sha256 of every file, decoding defaults
SOUP_FILE = "soup.json"  # a weight soup: the models and weights it averages (export/soup.py)
# A soup's first member's model card, kept beside the soup: its training section and curve
# (training_curve.png) say how the soup's weights were trained.
MEMBER_CARD_FILE = "member_card.md"
# How a checkpoint's term index was built (a bundle's manifest `dictionary`, kept beside a soup
# of it by export/soup.py), so that its export records it again.
DICTIONARY_RECORD_FILE = "dictionary.json"
ENSEMBLE_FILE = "ensemble.json"  # an ensemble: the model directories it averages (seq2seq/runtime/ensemble.py)
