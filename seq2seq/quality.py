"""Quality signals read from the alignment maps: what a translation left out, what it made up,
and how far to trust it.

All signals are computed from a word alignment map (`seq2seq.alignment.Alignment.matrix`,
rows = target words, columns = source words, each row summing to 1), the same map the API
returns, so a user can check every flag against the heatmap:

- per source word, **coverage**: the attention mass it received, Σ over target words of
  its column (0 = no target word drew on it; about 1 = one target word's worth). A word
  whose coverage is below `QualityThresholds.untranslated_coverage` is flagged
  **untranslated**: no target word was produced from it.
- per target word, **peak** (its largest weight) and **entropy** (of its row, divided by
  log(source words), so 0 = all weight on one source word and 1 = spread evenly). A word
  whose peak is below `QualityThresholds.ungrounded_peak` is flagged **ungrounded**: it
  was not drawn from any one source word.
- per sentence, **confidence** in [0, 1]: a linear estimate of the sentence's chrF / 100
  from three features, clipped to [0, 1] (the weights are fitted on the valid split by
  `bench/quality_signals.py`):
    * the mean log-probability per target token (EOS included), ≤ 0;
    * the sentence coverage: the mean over source words of min(coverage, 1), in [0, 1];
    * the length misfit: -|log(length ratio / expected ratio)|, ≤ 0, where the length ratio
      is target words per source word and the expected ratio that of the valid references.

Punctuation words (no letter or digit) are never flagged: a comma left out or added is
not what a reader needs warning about, and the gold guidelines leave many of them unlinked.

The thresholds and weights belong to a model (a differently trained head spreads its
attention differently), so they are chosen on that model's valid data and stored beside it
as `quality.json` (`QualityThresholds.save/load`).

The GNMT coverage penalty, which the beam search can score hypotheses with, lives with the
length penalty in `seq2seq.search` (`hypothesis_score`). Torch-free.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from seq2seq.alignment import Alignment

QUALITY_FILE = "quality.json"


def is_punctuation(word: str) -> bool:
    """True for a word without any letter or digit ("," "?" "–")."""
    return not any(character.isalnum() for character in word)


# --------------------------------------------------------------------------- per word


def source_coverage(matrix: np.ndarray) -> np.ndarray:
    """(T, S) alignment map, rows summing to 1 -> (S,) attention mass each source column received."""
    return np.asarray(matrix, dtype=np.float64).sum(axis=0)


def target_peak(matrix: np.ndarray) -> np.ndarray:
    """(T, S) -> (T,) the largest weight of each row (1 = drawn from one source word)."""
    matrix = np.asarray(matrix, dtype=np.float64)
    return matrix.max(axis=1) if matrix.shape[1] else np.zeros(matrix.shape[0])


def target_entropy(matrix: np.ndarray) -> np.ndarray:
    """(T, S) -> (T,) entropy of each row divided by log S: 0 = one source word, 1 = uniform.

    A one-word source has nothing to spread over: its rows get 0.
    """
    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.shape[1] < 2:
        return np.zeros(matrix.shape[0])
    logs = np.log(np.where(matrix > 0, matrix, 1.0))                 # 0 · log 0 = 0
    return np.clip(-(matrix * logs).sum(axis=1) / math.log(matrix.shape[1]), 0.0, 1.0)


# --------------------------------------------------------------------------- thresholds


@dataclass(frozen=True)
class QualityThresholds:
    """A model's flag thresholds and confidence weights, chosen on its valid split."""

    untranslated_coverage: float = 0.25   # a source word receiving less mass is flagged untranslated
    ungrounded_peak: float = 0.3          # a target word whose largest weight is below this is ungrounded
    expected_length_ratio: float = 1.0    # target words per source word of the valid references
    # confidence = clip(bias + w_lp · mean log-prob + w_cov · coverage + w_len · length misfit, 0, 1)
    confidence_weights: tuple[float, float, float, float] = (0.5, 0.1, 0.2, 0.2)
    chosen_on: dict = field(default_factory=dict)   # provenance: data, counts, the figures they reached

    def __post_init__(self) -> None:
        if len(self.confidence_weights) != 4:
            raise ValueError("confidence_weights: expected (bias, log-prob, coverage, length) weights")
        if self.expected_length_ratio <= 0:
            raise ValueError(f"expected_length_ratio must be positive, not {self.expected_length_ratio}")

    def to_dict(self) -> dict:
        return asdict(self) | {"confidence_weights": list(self.confidence_weights)}

    @classmethod
    def from_dict(cls, values: dict) -> QualityThresholds:
        names = {"untranslated_coverage", "ungrounded_peak", "expected_length_ratio", "confidence_weights",
                 "chosen_on"}
        kept = {k: v for k, v in values.items() if k in names}
        if "confidence_weights" in kept:
            kept["confidence_weights"] = tuple(float(w) for w in kept["confidence_weights"])
        return cls(**kept)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> QualityThresholds:
        """Read `quality.json` (a file, or the model directory holding one); defaults if absent."""
        path = Path(path)
        if path.is_dir():
            path = path / QUALITY_FILE
        if not path.is_file():
            return cls()
        return cls.from_dict(json.loads(path.read_text(encoding="utf-8")))


# --------------------------------------------------------------------------- per sentence


def sentence_coverage(coverage: np.ndarray, source_words: Sequence[str]) -> float:
    """Mean of min(coverage, 1) over the source words that are not punctuation, in [0, 1]."""
    kept = [min(float(c), 1.0) for c, w in zip(coverage, source_words) if not is_punctuation(w)]
    return float(np.mean(kept)) if kept else 1.0


def length_misfit(source_words: Sequence[str], target_words: Sequence[str], expected_ratio: float) -> float:
    """-|log((target words + 1) / (source words + 1) / expected_ratio)|, punctuation not counted; ≤ 0."""
    source = sum(not is_punctuation(w) for w in source_words)
    target = sum(not is_punctuation(w) for w in target_words)
    return -abs(math.log((target + 1) / (source + 1) / expected_ratio))


def confidence_features(mean_log_prob: float, coverage: np.ndarray, source_words: Sequence[str],
                        target_words: Sequence[str], expected_ratio: float) -> np.ndarray:
    """(4,) [1, mean log-prob per token, sentence coverage, length misfit]: the confidence inputs."""
    return np.array([1.0, mean_log_prob, sentence_coverage(coverage, source_words),
                     length_misfit(source_words, target_words, expected_ratio)])


@dataclass
class SentenceQuality:
    """The quality block of one translation (API, batch records, explorer)."""

    source_coverage: list[float]          # per source word
    untranslated: list[int]               # indices of source words flagged untranslated
    target_peak: list[float]              # per target word
    target_entropy: list[float]           # per target word, 0..1
    ungrounded: list[int]                 # indices of target words flagged ungrounded
    coverage: float                       # sentence coverage, 0..1
    length_ratio: float                   # target words / source words (punctuation not counted)
    mean_log_prob: float | None           # per target token, EOS included; None when not known
    confidence: float | None              # 0..1, about the sentence chrF / 100; None without log-prob

    def to_dict(self, decimals: int = 4) -> dict:
        rounded = lambda values: [round(float(v), decimals) for v in values]  # noqa: E731
        maybe = lambda value: None if value is None else round(float(value), decimals)  # noqa: E731
        return {
            "source_coverage": rounded(self.source_coverage), "untranslated": list(self.untranslated),
            "target_peak": rounded(self.target_peak), "target_entropy": rounded(self.target_entropy),
            "ungrounded": list(self.ungrounded), "coverage": round(self.coverage, decimals),
            "length_ratio": round(self.length_ratio, decimals), "mean_log_prob": maybe(self.mean_log_prob),
            "confidence": maybe(self.confidence),
        }


def join(parts: Sequence[tuple[SentenceQuality, int]]) -> SentenceQuality:
    """The quality of a text translated sentence by sentence, from each sentence's quality and
    its produced tokens (target pieces + EOS): word lists are concatenated and flag indices
    shifted, as `seq2seq.alignment.concat` places the maps on the diagonal; the sentence
    figures are averaged weighted by produced tokens, as the text's score is."""
    if len(parts) == 1:
        return parts[0][0]
    weights = np.array([tokens for _, tokens in parts], dtype=np.float64)

    def mean(values: list[float | None]) -> float | None:
        return None if any(v is None for v in values) else float(np.average(values, weights=weights))

    joined = SentenceQuality([], [], [], [], [], 0.0, 0.0, None, None)
    for quality, _ in parts:
        joined.untranslated += [i + len(joined.source_coverage) for i in quality.untranslated]
        joined.ungrounded += [i + len(joined.target_peak) for i in quality.ungrounded]
        joined.source_coverage += quality.source_coverage
        joined.target_peak += quality.target_peak
        joined.target_entropy += quality.target_entropy
    joined.coverage = float(np.average([q.coverage for q, _ in parts], weights=weights))
    joined.length_ratio = float(np.average([q.length_ratio for q, _ in parts], weights=weights))
    joined.mean_log_prob = mean([q.mean_log_prob for q, _ in parts])
    joined.confidence = mean([q.confidence for q, _ in parts])
    return joined


def flag_low(values: np.ndarray, words: Sequence[str], threshold: float) -> list[int]:
    """Indices of the words, punctuation excepted, whose value is below `threshold`."""
    return [i for i, (v, w) in enumerate(zip(values, words)) if v < threshold and not is_punctuation(w)]


def assess_alignment(word: Alignment, mean_log_prob: float | None,
                     thresholds: QualityThresholds = QualityThresholds()) -> SentenceQuality:
    """`assess` of a word-level alignment (`Alignments.word`), labelled by its own words: the
    quality block the translator and forced alignment fill in the same pass as the map."""
    return assess(word.matrix, [t.text for t in word.source_tokens], [t.text for t in word.target_tokens],
                  mean_log_prob, thresholds)


def assess(matrix: np.ndarray, source_words: Sequence[str], target_words: Sequence[str],
           mean_log_prob: float | None = None, thresholds: QualityThresholds = QualityThresholds()
           ) -> SentenceQuality:
    """Every signal of one translation from its (T, S) word alignment map.

    source_words (S,) and target_words (T,) are the words labelling the columns and rows;
    mean_log_prob is the translation's log-probability per target token (EOS included), or
    None when it is not known (then there is no confidence).
    """
    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.shape != (len(target_words), len(source_words)):
        raise ValueError(f"map of shape {matrix.shape} for {len(target_words)} target and "
                         f"{len(source_words)} source words")
    coverage, peak = source_coverage(matrix), target_peak(matrix)
    confidence = None
    if mean_log_prob is not None:
        features = confidence_features(mean_log_prob, coverage, source_words, target_words,
                                       thresholds.expected_length_ratio)
        confidence = float(np.clip(features @ np.array(thresholds.confidence_weights), 0.0, 1.0))
    source = sum(not is_punctuation(w) for w in source_words)
    target = sum(not is_punctuation(w) for w in target_words)
    return SentenceQuality(
        source_coverage=coverage.tolist(),
        untranslated=flag_low(coverage, source_words, thresholds.untranslated_coverage),
        target_peak=peak.tolist(),
        target_entropy=target_entropy(matrix).tolist(),
        ungrounded=flag_low(peak, target_words, thresholds.ungrounded_peak),
        coverage=sentence_coverage(coverage, source_words),
        length_ratio=target / max(source, 1),
        mean_log_prob=mean_log_prob,
        confidence=confidence,
    )
