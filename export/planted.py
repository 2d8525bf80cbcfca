"""Planted damage and its scoring: the ground truth `export/quality_signals.py` measures the
quality flags against, and the fit of the flags' detectors to it.

**Planting.** A held-out reference translation is damaged on purpose: a contiguous span of
1-3 target words is deleted (the source words linked only to that span, by the gold links
or by eflomal's, have lost their translation: the truth of `untranslated`), or 1-2 words
taken from another reference are inserted (they translate nothing: the truth of
`ungrounded`).

**Scoring.** Precision, recall and F1 of the flags over the non-punctuation words of the
damaged pairs, against the baseline that flags the same number of words, spread over the
sentences in proportion to their length, picking each sentence's lowest-coverage
(lowest-peak) words. A source word that no link of the *original* pair touches is left out
of the omission scoring, for every signal and the baseline alike (`Case.unlinked`): its
translation was missing before the damage (or the aligner missed it), so neither flagging
it nor leaving it is known to be right. The gold links cover every gold word, so this
changes only the eflomal-linked splits; `quality_signals.py` prints F1 counting them too.

**Fitting.** `fit_detector`: a logistic regression (Newton's method, numpy) on one part of
the data, its threshold the logit with the best F1 on that part; applied at serving time by
`seq2seq.analysis.quality.Detector`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from seq2seq.analysis.quality import Detector, is_punctuation
from seq2seq.core.alignment import words

Links = set[tuple[int, int]]
THRESHOLDS = np.round(np.arange(0.02, 2.001, 0.02), 2)  # coverage may exceed 1


# --------------------------------------------------------------------------- planting


@dataclass
class Case:
    """One pair to align: intact, or damaged with the words the damage concerns."""

    split: str
    kind: str  # "intact", "omission" (truth: source words), "insertion" (truth: target words)
    source: str
    target: str
    truth: frozenset[int]
    unlinked: frozenset[int] = frozenset()  # source words without any link in the original pair
    pair: int = 0  # index of the original pair in its split


def content(tokens) -> list[int]:
    return [i for i, t in enumerate(tokens) if not is_punctuation(t.text)]


def plant_omission(
    source: str, target: str, links: Links, rng: random.Random, tries: int = 20
) -> tuple[str, frozenset[int]] | None:
    """Delete 1-3 contiguous target words -> (damaged target, source words that lost their translation)."""
    source_words, target_words = words(source), words(target)
    kept_content = content(target_words)
    for _ in range(tries):
        length = rng.choice((1, 2, 3))
        start = rng.randrange(len(target_words))
        span = range(start, start + length)
        if span.stop > len(target_words) or any(is_punctuation(target_words[j].text) for j in span):
            continue
        if len(kept_content) - length < 2:
            continue
        inside = {i for i, j in links if j in span}
        outside = {i for i, j in links if j not in span}
        truth = frozenset(i for i in inside - outside if not is_punctuation(source_words[i].text))
        if not truth:
            continue
        before, after = target[: target_words[start].start].rstrip(), target[target_words[span.stop - 1].end :].lstrip()
        joiner = "" if not before or not after or is_punctuation(after[0]) else " "
        damaged = before + joiner + after
        if not before and damaged[:1].islower() and target[:1].isupper():
            damaged = damaged[0].upper() + damaged[1:]
        expected = [t.text.lower() for j, t in enumerate(target_words) if j not in span]
        if [t.text.lower() for t in words(damaged)] != expected:
            continue
        return damaged, truth
    return None


def plant_insertion(
    target: str, pool: list[str], rng: random.Random, tries: int = 20
) -> tuple[str, frozenset[int]] | None:
    """Insert 1-2 words of other references before a word -> (damaged target, inserted target words)."""
    target_words = words(target)
    for _ in range(tries):
        position = rng.randrange(1, max(2, len(target_words)))
        if position >= len(target_words):
            continue
        at = target_words[position].start
        if target[at - 1] != " " or is_punctuation(target_words[position].text):
            continue
        inserted = [rng.choice(pool) for _ in range(rng.choice((1, 2)))]
        damaged = target[:at] + " ".join(inserted) + " " + target[at:]
        got = [t.text for t in words(damaged)]
        if got[position : position + len(inserted)] != inserted or len(got) != len(target_words) + len(inserted):
            continue
        return damaged, frozenset(range(position, position + len(inserted)))
    return None


def make_cases(split: str, pairs: list[tuple[str, str]], links: list[Links], seed: int) -> list[Case]:
    rng = random.Random(f"{seed}:{split}")
    # Insertion material: the references' words, except sentence-initial ones (capitalised).
    pool = [t.text for _, target in pairs for t in words(target)[1:] if not is_punctuation(t.text)]
    cases = []
    for index, ((source, target), pair_links) in enumerate(zip(pairs, links)):
        unlinked = frozenset(range(len(words(source)))) - {i for i, _ in pair_links}
        cases.append(Case(split, "intact", source, target, frozenset(), unlinked, index))
        omitted = plant_omission(source, target, pair_links, rng)
        if omitted:
            cases.append(Case(split, "omission", source, omitted[0], omitted[1], unlinked, index))
        inserted = plant_insertion(target, pool, rng)
        if inserted:
            cases.append(Case(split, "insertion", source, inserted[0], inserted[1], frozenset(), index))
    return cases


# --------------------------------------------------------------------------- scoring


@dataclass
class Scored:
    """One aligned case under one signal: a value per word and the words that count."""

    case: Case
    values: np.ndarray  # per source word (omission) or per target word (insertion)
    candidates: list[int]  # word indices that are scored (not punctuation, not unlinked)
    unlinked: list[int] = field(default_factory=list)  # not punctuation, but left out of the scoring


def prf(flags: list[set[int]], truths: list[frozenset[int]]) -> tuple[float, float, float]:
    hits = sum(len(f & t) for f, t in zip(flags, truths))
    flagged, true = sum(map(len, flags)), sum(map(len, truths))
    precision = hits / flagged if flagged else 0.0
    recall = hits / true if true else 0.0
    return precision, recall, 2 * precision * recall / (precision + recall) if hits else 0.0


def flag_below(items: list[Scored], threshold: float, above: bool = False, unlinked: bool = False) -> list[set[int]]:
    """Per item, the scored words whose value is below (or above) `threshold`; with
    `unlinked`, the unlinked words too."""
    return [
        {
            i
            for i in item.candidates + (item.unlinked if unlinked else [])
            if (item.values[i] > threshold if above else item.values[i] < threshold)
        }
        for item in items
    ]


def rank_baseline(items: list[Scored], total: int, above: bool = False, unlinked: bool = False) -> list[set[int]]:
    """Flag `total` words: in every sentence the lowest-valued ones, the same share of each sentence."""
    ranked = []
    for n, item in enumerate(items):
        order = sorted(
            item.candidates + (item.unlinked if unlinked else []),
            key=lambda i: -item.values[i] if above else item.values[i],
        )
        ranked += [((rank + 0.5) / len(order), n, i) for rank, i in enumerate(order)]
    ranked.sort()
    out: list[set[int]] = [set() for _ in items]
    for _, n, i in ranked[:total]:
        out[n].add(i)
    return out


def false_alarms(items: list[Scored], threshold: float, above: bool = False) -> float:
    """Flags per 100 scored words of (intact) items."""
    flags = flag_below(items, threshold, above)
    words_seen = sum(len(item.candidates) for item in items)
    return 100 * sum(map(len, flags)) / max(words_seen, 1)


def best_threshold(items: list[Scored], above: bool = False, grid: np.ndarray = THRESHOLDS) -> tuple[float, float]:
    """The threshold of `grid` with the best F1 on `items`, and that F1."""
    truths = [item.case.truth for item in items]
    scores = [(prf(flag_below(items, t, above), truths)[2], float(t)) for t in grid]
    f1, threshold = max(scores)
    return threshold, f1


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's ρ: Pearson correlation of the ranks, ties given their mean rank."""

    def ranks(values: np.ndarray) -> np.ndarray:
        order = np.argsort(values, kind="stable")
        ranked = np.empty(len(values))
        ranked[order] = np.arange(len(values))
        _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
        sums = np.bincount(inverse, weights=ranked)
        return (sums / counts)[inverse]

    return float(np.corrcoef(ranks(np.asarray(x, float)), ranks(np.asarray(y, float)))[0, 1])


# --------------------------------------------------------------------------- fitting


def logistic_regression(x: np.ndarray, y: np.ndarray, l2: float = 1e-2, steps: int = 50) -> np.ndarray:
    """x (N, F) standardised features, y (N,) 0/1 -> (F + 1,) [bias, weights] maximising the
    log-likelihood minus l2/2 · |weights|² (the bias is not penalised), by Newton's method."""
    design = np.concatenate([np.ones((len(x), 1)), x], axis=1)
    penalty = l2 * np.diag([0.0] + [1.0] * x.shape[1])
    w = np.zeros(design.shape[1])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(design @ w, -30, 30)))
        gradient = design.T @ (p - y) + penalty @ w
        hessian = (design * (p * (1 - p))[:, None]).T @ design + penalty + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def fit_detector(items: list[tuple[dict[str, np.ndarray], Scored]], features: tuple[str, ...]) -> Detector | None:
    """A `Detector` over `features` fitted to the truth of `items` ((per-word features, the
    case scored): candidate words only), its threshold the logit with the best F1 on them.
    None when the items have no flagged truth and no candidate to learn from."""
    rows = [np.stack([table[name][item.candidates] for name in features], axis=1) for table, item in items]
    labels = [[i in item.case.truth for i in item.candidates] for _, item in items]
    x = np.concatenate(rows) if rows else np.zeros((0, len(features)))
    y = np.concatenate(labels).astype(np.float64) if labels else np.zeros(0)
    if len(y) == 0 or y.min() == y.max():
        return None
    mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-9
    w = logistic_regression((x - mean) / scale, y)
    weights = w[1:] / scale  # in raw feature units
    bias = float(w[0] - weights @ mean)
    logits = [
        Scored(item.case, bias + np.stack([table[n] for n in features], axis=1) @ weights, item.candidates)
        for table, item in items
    ]
    grid = np.unique(np.quantile(np.concatenate([s.values[s.candidates] for s in logits]), np.linspace(0, 1, 201)))
    threshold, _ = best_threshold(logits, above=True, grid=grid)
    return Detector(features, tuple(round(float(v), 5) for v in weights), round(bias, 5), round(threshold, 5))


# --------------------------------------------------------------------------- the table


def select(items: list[Scored], split: str, kind: str) -> list[Scored]:
    return [i for i in items if i.case.split == split and i.case.kind == kind]


def evaluate_split(
    items: list[Scored], split: str, kind: str, threshold: float, above: bool, baseline: list[Scored]
) -> dict:
    """Flags at `threshold` on the `kind` cases of `split` against the planted truth, the
    rank baseline (lowest `baseline` values) with as many flags, the same two counting
    unlinked source words, and the false alarms on the split's intact pairs."""
    damaged, ranked = select(items, split, kind), select(baseline, split, kind)
    truths = [i.case.truth for i in damaged]
    flags = flag_below(damaged, threshold, above)
    p, r, f1 = prf(flags, truths)
    bp, br, bf1 = prf(rank_baseline(ranked, sum(map(len, flags))), truths)
    flags_all = flag_below(damaged, threshold, above, unlinked=True)
    f1_all = prf(flags_all, truths)[2]
    bf1_all = prf(rank_baseline(ranked, sum(map(len, flags_all)), unlinked=True), truths)[2]
    alarms = false_alarms(select(items, split, "intact"), threshold, above)
    return {
        "threshold": threshold,
        "split": split,
        "pairs": len(damaged),
        "precision": p,
        "recall": r,
        "f1": f1,
        "baseline_precision": bp,
        "baseline_recall": br,
        "baseline_f1": bf1,
        "f1_counting_unlinked": f1_all,
        "baseline_f1_counting_unlinked": bf1_all,
        "intact_flags_per_100_words": alarms,
    }


HEADER = (
    f"{'signal':<26} {'rule':<17} {'split':<10} {'pairs':>5} {'P':>6} {'R':>6} {'F1':>6} "
    f"{'base P':>7} {'base R':>7} {'base F1':>7} {'F1/base, unlinked counted':>26} {'intact flags/100w':>18}"
)


def print_row(name: str, rule: str, row: dict) -> None:
    unlinked = f"{100 * row['f1_counting_unlinked']:.1f} / {100 * row['baseline_f1_counting_unlinked']:.1f}"
    print(
        f"{name:<26} {rule:<17} {row['split']:<10} {row['pairs']:>5} "
        f"{100 * row['precision']:6.1f} {100 * row['recall']:6.1f} {100 * row['f1']:6.1f} "
        f"{100 * row['baseline_precision']:7.1f} {100 * row['baseline_recall']:7.1f} "
        f"{100 * row['baseline_f1']:7.1f} {unlinked:>26} {row['intact_flags_per_100_words']:18.1f}"
    )
