"""The sentence confidence on a scale a person can act on. Torch-free.

The raw `confidence` (`seq2seq.analysis.quality`) is a linear estimate of the sentence chrF / 100:
it ranks translations well but its values crowd together (ordinary sentences fall between
about 0.25 and 0.5) and say nothing about what to do. A `Calibration`, fitted on a model's
held-out valid split by `export/confidence_calibration.py` and shipped in its bundle as
`calibration.json` (`data.files.CALIBRATION_FILE`), reads it as:

- **usable**: the probability that the translation's sentence chrF reaches `usable_chrf`
  (the share of held-out sentences of about that confidence that did);
- **expected_chrf**: the mean sentence chrF (0-100) of held-out sentences of about that confidence;
- **band**: "low" (usable < `low_below`: check or rewrite it), "medium", or "high"
  (usable >= `high_from`: usually fine), the band a client can warn on.

Both curves are the held-out sentences cut into equal-count bins of confidence, each bin's
mean confidence against its share usable (mean chrF), made non-decreasing by pooling
adjacent violators (isotonic regression, as in Zadrozny and Elkan 2002 for classifier
scores), and read between the bins' centres by linear interpolation; flat beyond the ends.

A bundle without the file gets no calibrated block (`None`): the raw confidence alone,
never a made-up scale.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

BANDS = ("low", "medium", "high")


@dataclass(frozen=True)
class Calibrated:
    """One confidence read on the calibrated scale (the API's `quality.calibrated`)."""

    usable: float  # probability that the sentence chrF reaches the calibration's usable_chrf
    expected_chrf: float  # mean sentence chrF (0-100) of held-out sentences with this confidence
    band: str  # BANDS

    def to_dict(self, decimals: int = 4) -> dict:
        return {
            "usable": round(self.usable, decimals),
            "expected_chrf": round(self.expected_chrf, 2),
            "band": self.band,
        }


@dataclass(frozen=True)
class Calibration:
    """Monotone curves from the raw confidence to P(usable) and the expected chrF, and the bands."""

    knots: tuple[float, ...]  # confidence at each bin's centre, increasing
    usable: tuple[float, ...]  # P(chrF >= usable_chrf) at each knot, non-decreasing
    expected_chrf: tuple[float, ...]  # mean sentence chrF at each knot, non-decreasing
    # A sentence is usable from this sentence chrF (sacreBLEU, 0-100). The bands' limits on
    # P(usable): chosen on both shipped models' valid splits so that "low" holds the sentences
    # that are mostly wrong (mean chrF about 24, fewer than one in ten usable) and "high" those
    # that are more often right than not; docs/quality.md has the figures.
    usable_chrf: float = 40.0
    low_below: float = 0.15  # band low: usable below this
    high_from: float = 0.45  # band high: usable from this
    fitted_on: dict = field(default_factory=dict)  # provenance: model, data, settings, command, figures

    def __post_init__(self) -> None:
        n = len(self.knots)
        if n < 2 or len(self.usable) != n or len(self.expected_chrf) != n:
            raise ValueError("calibration: need at least 2 knots, with one usable and one expected_chrf value each")
        if any(b <= a for a, b in zip(self.knots, self.knots[1:])):
            raise ValueError("calibration: knots must increase")
        if not 0.0 <= self.low_below <= self.high_from <= 1.0:
            raise ValueError(
                f"calibration: need 0 <= low_below ({self.low_below}) <= high_from ({self.high_from}) <= 1"
            )

    def band(self, usable: float) -> str:
        """The band of a probability of being usable."""
        return "low" if usable < self.low_below else "high" if usable >= self.high_from else "medium"

    def __call__(self, confidence: float) -> Calibrated:
        """The calibrated reading of one raw confidence."""
        usable = float(np.interp(confidence, self.knots, self.usable))
        chrf = float(np.interp(confidence, self.knots, self.expected_chrf))
        return Calibrated(usable, chrf, self.band(usable))

    def to_dict(self) -> dict:
        return asdict(self) | {name: list(getattr(self, name)) for name in ("knots", "usable", "expected_chrf")}

    @classmethod
    def from_dict(cls, values: dict) -> Calibration:
        kept = {k: v for k, v in values.items() if k in cls.__dataclass_fields__}
        for name in ("knots", "usable", "expected_chrf"):
            kept[name] = tuple(float(v) for v in kept.get(name, ()))
        return cls(**kept)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path | None) -> Calibration | None:
        """Read a calibration file; None when `path` is None or names no file (no calibration)."""
        if path is None or not Path(path).is_file():
            return None
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


def pool_adjacent_violators(values: Sequence[float], weights: Sequence[float]) -> np.ndarray:
    """The non-decreasing sequence closest to `values` in weighted least squares (isotonic regression)."""
    blocks: list[list[float]] = []  # [mean, weight, count]
    for value, weight in zip(values, weights):
        blocks.append([float(value), float(weight), 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            mean, w, n = blocks.pop()
            last = blocks[-1]
            last[0] = (last[0] * last[1] + mean * w) / (last[1] + w)
            last[1] += w
            last[2] += n
    return np.concatenate([np.full(n, mean) for mean, _, n in blocks])


def fit_calibration(
    confidence: np.ndarray,
    chrf: np.ndarray,
    bins: int = 10,
    usable_chrf: float = Calibration.usable_chrf,
    low_below: float = Calibration.low_below,
    high_from: float = Calibration.high_from,
    fitted_on: dict | None = None,
) -> Calibration:
    """A `Calibration` from held-out sentences: confidence (N,) raw, chrF (N,) 0-100; `bins`
    equal-count bins of confidence (ties kept in one bin), each made monotone by PAV."""
    if len(confidence) != len(chrf) or len(confidence) < 2 * bins or bins < 2:
        raise ValueError(f"calibration: need at least {2 * max(bins, 2)} sentences for {bins} bins")
    order = np.argsort(confidence, kind="stable")
    c, y = np.asarray(confidence, dtype=np.float64)[order], np.asarray(chrf, dtype=np.float64)[order]
    edges = np.unique(np.searchsorted(c, np.quantile(c, np.linspace(0, 1, bins + 1)[1:-1]), side="right"))
    groups = [g for g in np.split(np.arange(len(c)), edges) if len(g)]
    counts = np.array([len(g) for g in groups], dtype=np.float64)
    knots = np.array([c[g].mean() for g in groups])
    usable = pool_adjacent_violators([float((y[g] >= usable_chrf).mean()) for g in groups], counts)
    expected = pool_adjacent_violators([float(y[g].mean()) for g in groups], counts)
    return Calibration(
        tuple(knots.round(5)),
        tuple(usable.round(4)),
        tuple(expected.round(2)),
        usable_chrf,
        low_below,
        high_from,
        fitted_on or {},
    )


def reliability(predicted: np.ndarray, observed: np.ndarray, bins: int = 10) -> list[tuple[float, float, int]]:
    """(mean predicted, observed rate, count) per equal-width bin of `predicted` in [0, 1] with
    sentences in it: the points of a reliability diagram (observed: 1 usable, 0 not)."""
    which = np.minimum((np.asarray(predicted) * bins).astype(int), bins - 1)
    return [
        (float(predicted[which == b].mean()), float(observed[which == b].mean()), int((which == b).sum()))
        for b in range(bins)
        if (which == b).any()
    ]
