"""Quality signals read from the alignment maps: what a translation left out, what it made up,
and how far to trust it.

The signals the API shows are computed from a word alignment map (`seq2seq.core.alignment.Alignment.matrix`,
rows = target words, columns = source words, each row summing to 1), the same map the API
returns, so a user can check every figure against the heatmap:

- per source word, **coverage**: the attention mass it received, Σ over target words of
  its column (0 = no target word drew on it; about 1 = one target word's worth);
- per target word, **peak** (its largest weight), **entropy** (of its row, divided by
  log(source words), so 0 = all weight on one source word and 1 = spread evenly) and,
  when the model's log-probabilities are known, **surprise**: -log p of the word under the
  decoder (the mean over its pieces);
- per sentence, **confidence** in [0, 1] (read on a scale to act on, P(usable) and a band, by
  the model's calibration: `seq2seq.analysis.calibration`): a linear estimate of the sentence's chrF / 100
  from three features, clipped to [0, 1] (the weights are fitted on the valid split by
  `export/quality_signals.py`):
    * the mean log-probability per target token (EOS included), ≤ 0;
    * the sentence coverage: the mean over source words of min(coverage, 1), in [0, 1];
    * the length misfit: -|log(length ratio / expected ratio)|, ≤ 0, where the length ratio
      is target words per source word and the expected ratio that of the valid references.

The two flags:

- **untranslated** (source word: no target word was produced from it) and **ungrounded**
  (target word: not drawn from the source) are each a `Detector`, a logistic regression
  over a handful of per-word features (`word_features`) that the translator and teacher
  forcing produce in the same pass as the map (`Evidence`: the cross-attention of every
  layer and head, and the log-probability of every produced piece):
    * untranslated: the coverage of the model's own alignment source (the head it was
      trained to align with), the coverages of each decoder layer's mean map (read where the
      target word is the decoder's input and where it is its output), and per layer the
      surprise of the target pieces produced while looking at the word. A single coverage
      threshold is fooled because the target words beside a deleted span still draw on the
      source words it translated; the steps that looked at such a word produced surprising
      pieces (the decoder expected the translation that is missing), and other layers
      cover it less.
      Where the detector reads them (`QualityThresholds.needs_occlusion`), also how much
      less likely the target gets without the word (`seq2seq.analysis.occlusion`): one more
      teacher-forced row per source word, batched (about source words x a teacher-forced
      pass); F1 on planted omissions 65.2 / 67.1 -> 71.0 / 72.6 (valid-held / gold). The
      quality mode "fast" (`QualityThresholds.for_mode`) skips it: the attention-only
      detector fitted beside it flags instead, and each block says which did (`untranslated_by`).
    * ungrounded: the word's surprise (mean and max over its pieces) with the peak and the
      entropy of its row in the model's own map: an invented word is one the decoder did
      not expect; attention alone hardly tells it.
  Weights and thresholds are fitted on the model's valid split (`export/quality_signals.py`).
- A `quality.json` without detectors (written before them), or an assessment without
  `Evidence`, falls back to single thresholds: coverage < `untranslated_coverage`, peak <
  `ungrounded_peak` of the map itself.

Punctuation words (no letter or digit) are never flagged: a comma left out or added is
not what a reader needs warning about, and the gold guidelines leave many of them unlinked.

The thresholds and weights belong to a model (a differently trained head spreads its
attention differently), so they are chosen on that model's valid data and stored beside it
as `quality.json` (`QualityThresholds.save/load`).

The GNMT coverage penalty, which the beam search can score hypotheses with, lives with the
length penalty in `seq2seq.decoding.search` (`hypothesis_score`). Torch-free.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import numpy as np

from data.files import QUALITY_FILE
from seq2seq.analysis.calibration import Calibrated, Calibration
from seq2seq.analysis.confidence import confidence_features, sentence_coverage
from seq2seq.analysis.occlusion import OCCLUSION_FEATURES, occlusion_features
from seq2seq.core.alignment import Alignments, is_punctuation, projection, subword_map, word_map
from seq2seq.core.config import AlignmentOptions
from seq2seq.core.hints import TermOutcome

# "thorough": the untranslated detector with source occlusion (a teacher-forced row per source
# word); "fast": its attention-only twin, no occlusion (`QualityThresholds.for_mode`).
QUALITY_MODES = ("thorough", "fast")
DEFAULT_QUALITY_MODE = "thorough"
# What flagged a sentence's untranslated words (`SentenceQuality.untranslated_by`).
UNTRANSLATED_BY = ("occlusion", "attention", "coverage threshold")


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
    logs = np.log(np.where(matrix > 0, matrix, 1.0))  # 0 · log 0 = 0
    return np.clip(-(matrix * logs).sum(axis=1) / math.log(matrix.shape[1]), 0.0, 1.0)


# --------------------------------------------------------------------------- learned flags

COVERAGE_FLOOR = 0.05  # coverages enter the detector as log(c + floor): a word receiving 0 is not -inf


@dataclass(frozen=True)
class Evidence:
    """What the model produced along with one translation, besides its word map: the raw
    material of the learned flags. The translator has it from the search, forced alignment
    from the teacher-forced run; nothing is computed twice."""

    attention: np.ndarray  # (L, H, T+1, S+1) cross-attention, as `TranslationResult.attention`
    token_log_probs: np.ndarray  # (T+1,) log-prob of each produced piece, EOS last
    own_source: AlignmentOptions  # the model's own alignment source (resolved): the detectors read its map
    # (Sw, T+1) log-prob of each produced piece with source word w occluded (seq2seq.analysis.occlusion);
    # None where the detectors do not read it (it costs a teacher-forced row per source word)
    occluded_log_probs: np.ndarray | None = None

    def __post_init__(self) -> None:
        steps = np.shape(self.attention)[2]
        if np.shape(self.token_log_probs) != (steps,):
            raise ValueError(f"evidence: {np.shape(self.token_log_probs)} token log-probs for {steps} decoder steps")
        if self.occluded_log_probs is not None and np.shape(self.occluded_log_probs)[1:] != (steps,):
            raise ValueError(
                f"evidence: occluded log-probs of shape {np.shape(self.occluded_log_probs)} for {steps} decoder steps"
            )


def feature_names(decoder_layers: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The names `word_features` computes for a model with `decoder_layers` layers: (per
    source word, per target word). The source side ends with the `OCCLUSION_FEATURES`,
    computed only from `Evidence` that has the occluded log-probs."""
    layers = range(decoder_layers)
    source = (
        ("log_coverage",)
        + tuple(f"log_coverage_layer{n}" for n in layers)
        + tuple(f"log_coverage_layer{n}_output" for n in layers)
        + tuple(f"attended_surprise_layer{n}" for n in layers)
        + OCCLUSION_FEATURES
    )
    return source, ("surprise", "surprise_max", "peak", "entropy")


def word_features(alignments: Alignments, evidence: Evidence) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per-word features of one translation -> ({name: (Sw,)} per source word, {name: (Tw,)} per target word).

    alignments: the translation's maps (any options: only their tokens are used, so the
    features do not depend on the map a caller asked to see). Source side, per word:
    log(coverage + COVERAGE_FLOOR) in the model's own map (`log_coverage`) and in each
    layer's mean-of-heads map, read at the step where the target piece is the decoder's
    input (`..._layer{n}`) and where it is its output (`..._layer{n}_output`); and
    `attended_surprise_layer{n}`: the mean surprise (-log p) of the target pieces produced
    at the steps that attended to the word, weighted by that attention (layer n's mean
    map, output steps); and with the evidence's occluded log-probs, the `OCCLUSION_FEATURES`
    (`seq2seq.analysis.occlusion.occlusion_features`). Target side, per word: `surprise` (mean -log p
    over its pieces), `surprise_max`, and the `peak` and `entropy` of its row in the model's
    own map.
    """
    source_pieces, target_pieces = alignments.subword.source_tokens, alignments.subword.target_tokens
    to_source_words = projection(source_pieces, alignments.word.source_tokens)  # (S, Sw)
    to_target_words = projection(target_pieces, alignments.word.target_tokens)  # (T, Tw)
    attention = np.asarray(evidence.attention, dtype=np.float64)
    surprise = -np.asarray(evidence.token_log_probs, dtype=np.float64)[: len(target_pieces)]  # (T,) EOS dropped
    own = evidence.own_source

    def words_map(layer: int, heads: tuple[int, ...], input_steps: bool) -> np.ndarray:
        return word_map(subword_map(attention, layer, heads, input_steps), to_source_words, to_target_words)

    own_map = words_map(own.layer or 0, own.heads or (), bool(own.step_shift))  # (Tw, Sw)
    source = {"log_coverage": np.log(source_coverage(own_map) + COVERAGE_FLOOR)}
    for n in range(attention.shape[0]):
        source[f"log_coverage_layer{n}"] = np.log(source_coverage(words_map(n, (), True)) + COVERAGE_FLOOR)
        source[f"log_coverage_layer{n}_output"] = np.log(source_coverage(words_map(n, (), False)) + COVERAGE_FLOOR)
    for n in range(attention.shape[0]):
        attended = subword_map(attention, n, (), False) @ to_source_words  # (T, Sw)
        source[f"attended_surprise_layer{n}"] = surprise @ attended / np.maximum(attended.sum(axis=0), 1e-6)
    if evidence.occluded_log_probs is not None:
        if len(evidence.occluded_log_probs) != to_source_words.shape[1]:
            raise ValueError(
                f"evidence: occluded log-probs for {len(evidence.occluded_log_probs)} source words, "
                f"not {to_source_words.shape[1]}"
            )
        source |= occlusion_features(evidence.token_log_probs, evidence.occluded_log_probs)
    pieces_of = to_target_words > 0  # (T, Tw)
    share = to_target_words / np.maximum(to_target_words.sum(axis=0, keepdims=True), 1e-12)
    target = {
        "surprise": share.T @ surprise,
        "surprise_max": np.where(pieces_of, surprise[:, None], 0.0).max(axis=0, initial=0.0),
        "peak": target_peak(own_map),
        "entropy": target_entropy(own_map),
    }
    return source, target


@dataclass(frozen=True)
class Detector:
    """A learned flag: logistic regression over named per-word features. A word is flagged
    where bias + Σ weight · feature > threshold (a logit: 0 = even odds). The weights apply
    to the raw features (any standardisation used in fitting is folded in)."""

    features: tuple[str, ...]
    weights: tuple[float, ...]
    bias: float
    threshold: float

    def __post_init__(self) -> None:
        if len(self.features) != len(self.weights):
            raise ValueError(f"detector: {len(self.features)} features but {len(self.weights)} weights")

    def logits(self, table: dict[str, np.ndarray]) -> np.ndarray:
        """{name: (W,)} features of W words -> (W,) logits; raises ValueError naming missing features."""
        missing = [name for name in self.features if name not in table]
        if missing:
            raise ValueError(f"detector needs features the model does not produce: {', '.join(missing)}")
        columns = np.stack([np.asarray(table[name], dtype=np.float64) for name in self.features], axis=1)
        return self.bias + columns @ np.asarray(self.weights, dtype=np.float64)

    def to_dict(self) -> dict:
        return {
            "features": list(self.features),
            "weights": list(self.weights),
            "bias": self.bias,
            "threshold": self.threshold,
        }

    @classmethod
    def from_dict(cls, values: dict) -> Detector:
        return cls(
            tuple(values["features"]),
            tuple(float(w) for w in values["weights"]),
            float(values["bias"]),
            float(values["threshold"]),
        )


# --------------------------------------------------------------------------- thresholds

DETECTORS = ("untranslated", "ungrounded", "untranslated_fast")  # the `Detector` fields of quality.json


@dataclass(frozen=True)
class QualityThresholds:
    """A model's flag detectors, fallback thresholds and confidence weights, chosen on its valid split."""

    untranslated_coverage: float = 0.25  # without a detector: a source word receiving less mass is untranslated
    ungrounded_peak: float = 0.3  # without a detector: a target word peaking lower is ungrounded
    expected_length_ratio: float = 1.0  # target words per source word of the valid references
    # confidence = clip(bias + w_lp · mean log-prob + w_cov · coverage + w_len · length misfit, 0, 1)
    confidence_weights: tuple[float, float, float, float] = (0.5, 0.1, 0.2, 0.2)
    chosen_on: dict = field(default_factory=dict)  # provenance: data, counts, the figures they reached
    untranslated: Detector | None = None  # the learned flags (None: the thresholds above)
    ungrounded: Detector | None = None
    # untranslated without the occlusion features: quality mode "fast" (None: files before it)
    untranslated_fast: Detector | None = None
    # The confidence read as P(usable) and bands: the bundle's calibration.json, not quality.json
    # (seq2seq/analysis/calibration.py); None: no calibrated block, the raw confidence alone.
    calibration: Calibration | None = None

    def __post_init__(self) -> None:
        if len(self.confidence_weights) != 4:
            raise ValueError("confidence_weights: expected (bias, log-prob, coverage, length) weights")
        if self.expected_length_ratio <= 0:
            raise ValueError(f"expected_length_ratio must be positive, not {self.expected_length_ratio}")

    @property
    def needs_occlusion(self) -> bool:
        """True when the untranslated detector reads occlusion features: its `Evidence` must
        then carry the occluded log-probs (`seq2seq.analysis.occlusion`)."""
        return self.untranslated is not None and any(f in OCCLUSION_FEATURES for f in self.untranslated.features)

    @property
    def untranslated_by(self) -> str:
        """What flags untranslated words, given the features (`UNTRANSLATED_BY`)."""
        if self.untranslated is None:
            return "coverage threshold"
        return "occlusion" if self.needs_occlusion else "attention"

    def for_mode(self, mode: str) -> QualityThresholds:
        """The thresholds a quality `mode` flags with: "thorough" these; "fast" the same
        without occlusion: the attention-only untranslated detector (an older file's only
        detector if it reads no occlusion, else `untranslated_fast`; without one, the
        coverage threshold). Raises ValueError for an unknown mode."""
        if mode not in QUALITY_MODES:
            raise ValueError(f"quality mode {mode!r}: choose one of {', '.join(QUALITY_MODES)}")
        if mode == "thorough" or not self.needs_occlusion:
            return self
        return replace(self, untranslated=self.untranslated_fast)

    def check(self, decoder_layers: int) -> None:
        """Raise ValueError if a detector reads a feature a model of `decoder_layers` layers lacks
        (a quality.json of another architecture): at load, not at the first request."""
        source, target = feature_names(decoder_layers)
        for name, detector, known in (
            ("untranslated", self.untranslated, source),
            ("untranslated_fast", self.untranslated_fast, source),
            ("ungrounded", self.ungrounded, target),
        ):
            unknown = [] if detector is None else [f for f in detector.features if f not in known]
            if unknown:
                raise ValueError(
                    f"quality.json: the {name} detector reads {', '.join(unknown)}, which a "
                    f"{decoder_layers}-layer decoder does not produce"
                )

    def to_dict(self) -> dict:
        """quality.json's values (the calibration has its own file)."""
        values = asdict(replace(self, calibration=None)) | {"confidence_weights": list(self.confidence_weights)}
        values.pop("calibration")
        for name in DETECTORS:
            detector = getattr(self, name)
            values[name] = None if detector is None else detector.to_dict()
        return values

    @classmethod
    def from_dict(cls, values: dict) -> QualityThresholds:
        """From `to_dict`, or an older file: detectors it lacks stay None (the thresholds apply;
        for "fast", see `for_mode`); keys this version does not know are ignored."""
        names = {f.name for f in fields(cls)} - {"calibration"}
        kept = {k: v for k, v in values.items() if k in names}
        if "confidence_weights" in kept:
            kept["confidence_weights"] = tuple(float(w) for w in kept["confidence_weights"])
        for name in DETECTORS:
            if kept.get(name) is not None:
                kept[name] = Detector.from_dict(kept[name])
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


@dataclass
class SentenceQuality:
    """The quality block of one translation (API, batch records, explorer)."""

    source_coverage: list[float]  # per source word: attention mass received (the API's source_attention_mass), >= 0
    untranslated: list[int]  # indices of source words flagged untranslated
    target_peak: list[float]  # per target word
    target_entropy: list[float]  # per target word, 0..1
    ungrounded: list[int]  # indices of target words flagged ungrounded
    coverage: float  # sentence coverage, 0..1
    length_ratio: float  # target words / source words (punctuation not counted)
    mean_log_prob: float | None  # per target token, EOS included; None when not known
    confidence: float | None  # 0..1, about the sentence chrF / 100; None without log-prob
    target_surprise: list[float] | None = None  # per target word, -log p (mean over pieces); None when not known
    untranslated_by: str = "coverage threshold"  # what flagged `untranslated` (UNTRANSLATED_BY)
    # The target-term hints the model was shown and whether the translation used each
    # (seq2seq/core/hints.py); filled by the translator with the map.
    terms: list[TermOutcome] = field(default_factory=list)
    # What reads `confidence` on a scale a person can act on (the model's calibration.json);
    # None: no calibrated reading.
    calibration: Calibration | None = field(default=None, repr=False, compare=False)

    @property
    def calibrated(self) -> Calibrated | None:
        """The confidence read by the model's calibration: P(usable), expected chrF, band."""
        if self.calibration is None or self.confidence is None:
            return None
        return self.calibration(self.confidence)

    def to_dict(self, decimals: int = 4) -> dict:
        rounded = lambda values: [round(float(v), decimals) for v in values]  # noqa: E731
        maybe = lambda value: None if value is None else round(float(value), decimals)  # noqa: E731
        return {
            # The API's name: a sum over target words, not a fraction; `source_coverage`, the old
            # name, stays as a deprecated alias for one release (docs/api.md).
            "source_attention_mass": rounded(self.source_coverage),
            "source_coverage": rounded(self.source_coverage),
            "untranslated": list(self.untranslated),
            "target_peak": rounded(self.target_peak),
            "target_entropy": rounded(self.target_entropy),
            "ungrounded": list(self.ungrounded),
            "coverage": round(self.coverage, decimals),
            "length_ratio": round(self.length_ratio, decimals),
            "mean_log_prob": maybe(self.mean_log_prob),
            "confidence": maybe(self.confidence),
            "calibrated": None if self.calibrated is None else self.calibrated.to_dict(decimals),
            "target_surprise": None if self.target_surprise is None else rounded(self.target_surprise),
            "untranslated_by": self.untranslated_by,
            "terms": [term.to_dict() for term in self.terms],
        }


def join(parts: Sequence[tuple[SentenceQuality, int]], source_offsets: Sequence[int] = ()) -> SentenceQuality:
    """The quality of a text translated sentence by sentence, from each sentence's quality and
    its produced tokens (target pieces + EOS): word lists are concatenated and flag indices
    shifted, as `seq2seq.core.alignment.concat` places the maps on the diagonal; the sentence
    figures are averaged weighted by produced tokens, as the text's score is. The terms'
    spans move by each sentence's offset in the text (`source_offsets`, default 0)."""
    offsets = list(source_offsets) or [0] * len(parts)
    if len(parts) == 1:
        quality = parts[0][0]
        return replace(quality, terms=[t.shifted(offsets[0]) for t in quality.terms]) if offsets[0] else quality
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
    surprises = [q.target_surprise for q, _ in parts]
    joined.target_surprise = None if any(v is None for v in surprises) else [v for s in surprises for v in s]
    joined.untranslated_by = parts[0][0].untranslated_by  # one translator, one mode: the same for every sentence
    joined.calibration = parts[0][0].calibration  # the text's confidence read on the same scale
    joined.terms = [term.shifted(offset) for (quality, _), offset in zip(parts, offsets) for term in quality.terms]
    return joined


def flag_low(values: np.ndarray, words: Sequence[str], threshold: float) -> list[int]:
    """Indices of the words, punctuation excepted, whose value is below `threshold`."""
    return [i for i, (v, w) in enumerate(zip(values, words)) if v < threshold and not is_punctuation(w)]


def flag_high(scores: np.ndarray, words: Sequence[str], threshold: float) -> list[int]:
    """Indices of the words, punctuation excepted, whose score is above `threshold`."""
    return [i for i, (v, w) in enumerate(zip(scores, words)) if v > threshold and not is_punctuation(w)]


def assess_alignment(
    alignments: Alignments,
    mean_log_prob: float | None,
    thresholds: QualityThresholds = QualityThresholds(),
    evidence: Evidence | None = None,
) -> SentenceQuality:
    """The quality block of one translation from its maps (`Alignments`, read with the options
    a caller asked for) and, when known, the model's `Evidence` behind them: what the
    translator and forced alignment fill in the same pass as the map.

    The figures shown (coverage, peak, entropy) are those of the word map returned beside
    them; the flags come from the model's detectors when the thresholds have them and the
    evidence is given, else from the fallback thresholds on that map."""
    word = alignments.word
    source_words, target_words = [t.text for t in word.source_tokens], [t.text for t in word.target_tokens]
    features = None if evidence is None else word_features(alignments, evidence)
    return assess(word.matrix, source_words, target_words, mean_log_prob, thresholds, features)


def assess(
    matrix: np.ndarray,
    source_words: Sequence[str],
    target_words: Sequence[str],
    mean_log_prob: float | None = None,
    thresholds: QualityThresholds = QualityThresholds(),
    features: tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | None = None,
) -> SentenceQuality:
    """Every signal of one translation from its (T, S) word alignment map.

    source_words (S,) and target_words (T,) are the words labelling the columns and rows;
    mean_log_prob is the translation's log-probability per target token (EOS included), or
    None when it is not known (then there is no confidence); features are `word_features`
    of the translation (per source word, per target word), or None (then the flags are the
    fallback thresholds on `matrix`).
    """
    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.shape != (len(target_words), len(source_words)):
        raise ValueError(
            f"map of shape {matrix.shape} for {len(target_words)} target and {len(source_words)} source words"
        )
    coverage, peak = source_coverage(matrix), target_peak(matrix)
    confidence = None
    if mean_log_prob is not None:
        inputs = confidence_features(
            mean_log_prob, coverage, source_words, target_words, thresholds.expected_length_ratio
        )
        confidence = float(np.clip(inputs @ np.array(thresholds.confidence_weights), 0.0, 1.0))
    source_features, target_features = features if features is not None else (None, None)
    untranslated_by = "coverage threshold"
    if source_features is not None and thresholds.untranslated is not None:
        untranslated = flag_high(
            thresholds.untranslated.logits(source_features), source_words, thresholds.untranslated.threshold
        )
        untranslated_by = thresholds.untranslated_by
    else:
        untranslated = flag_low(coverage, source_words, thresholds.untranslated_coverage)
    if target_features is not None and thresholds.ungrounded is not None:
        ungrounded = flag_high(
            thresholds.ungrounded.logits(target_features), target_words, thresholds.ungrounded.threshold
        )
    else:
        ungrounded = flag_low(peak, target_words, thresholds.ungrounded_peak)
    source = sum(not is_punctuation(w) for w in source_words)
    target = sum(not is_punctuation(w) for w in target_words)
    return SentenceQuality(
        source_coverage=coverage.tolist(),
        untranslated=untranslated,
        target_peak=peak.tolist(),
        target_entropy=target_entropy(matrix).tolist(),
        ungrounded=ungrounded,
        coverage=sentence_coverage(coverage, source_words),
        length_ratio=target / max(source, 1),
        mean_log_prob=mean_log_prob,
        confidence=confidence,
        target_surprise=None if target_features is None else target_features["surprise"].tolist(),
        untranslated_by=untranslated_by,
        calibration=thresholds.calibration,
    )
