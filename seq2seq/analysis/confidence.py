"""The sentence confidence's inputs (`seq2seq.analysis.quality`): how much of the source the word map
covers and how far the translation's length is from the expected one. Torch-free.

The confidence is a linear estimate of the sentence's chrF / 100 (weights fitted by
`export/quality_signals.py`); `seq2seq.analysis.quality.assess` applies it, and
`export/quality_confidence.py` fits it from these same features.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from seq2seq.core.alignment import is_punctuation


def sentence_coverage(coverage: np.ndarray, source_words: Sequence[str]) -> float:
    """Mean of min(coverage, 1) over the source words that are not punctuation, in [0, 1]."""
    kept = [min(float(c), 1.0) for c, w in zip(coverage, source_words) if not is_punctuation(w)]
    return float(np.mean(kept)) if kept else 1.0


def length_misfit(source_words: Sequence[str], target_words: Sequence[str], expected_ratio: float) -> float:
    """-|log((target words + 1) / (source words + 1) / expected_ratio)|, punctuation not counted; ≤ 0."""
    source = sum(not is_punctuation(w) for w in source_words)
    target = sum(not is_punctuation(w) for w in target_words)
    return -abs(math.log((target + 1) / (source + 1) / expected_ratio))


def confidence_features(
    mean_log_prob: float,
    coverage: np.ndarray,
    source_words: Sequence[str],
    target_words: Sequence[str],
    expected_ratio: float,
) -> np.ndarray:
    """(4,) [1, mean log-prob per token, sentence coverage, length misfit]: the confidence inputs."""
    return np.array(
        [
            1.0,
            mean_log_prob,
            sentence_coverage(coverage, source_words),
            length_misfit(source_words, target_words, expected_ratio),
        ]
    )
