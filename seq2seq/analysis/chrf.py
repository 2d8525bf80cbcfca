"""Sentence chrF (Popović 2015), as sacreBLEU computes it by default, without sacreBLEU.

The reranking of an n-best list by minimum Bayes risk (seq2seq/decoding/rerank.py) compares
every candidate with every other, inside a served translation, where sacreBLEU is not a
dependency (it is an evaluation one). This is the same statistic: character n-grams of
orders 1 to 6 with whitespace removed, each order's precision and recall averaged over the
orders both sides have, and their F-score with recall weighted β = 2 (sacreBLEU 2's default
chrF, "effective order"; tests/test_rerank.py checks it against sacreBLEU's
`sentence_score`). Torch-free, plain Python.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

CHAR_ORDER = 6
BETA = 2.0


@dataclass(frozen=True)
class CharNgrams:
    """A sentence's character n-gram counts, orders 1..CHAR_ORDER, whitespace removed:
    computed once per sentence, compared with many."""

    counts: tuple[Counter, ...]
    totals: tuple[int, ...]

    @classmethod
    def of(cls, text: str) -> CharNgrams:
        chars = "".join(text.split())
        counts = tuple(Counter(chars[i : i + n] for i in range(len(chars) - n + 1)) for n in range(1, CHAR_ORDER + 1))
        return cls(counts, tuple(sum(c.values()) for c in counts))


def chrf(hypothesis: CharNgrams | str, reference: CharNgrams | str) -> float:
    """Sentence chrF of `hypothesis` against `reference`, 0 to 100."""
    hyp = hypothesis if isinstance(hypothesis, CharNgrams) else CharNgrams.of(hypothesis)
    ref = reference if isinstance(reference, CharNgrams) else CharNgrams.of(reference)
    precision = recall = 0.0
    orders = 0
    for hyp_counts, ref_counts, hyp_total, ref_total in zip(hyp.counts, ref.counts, hyp.totals, ref.totals):
        if not hyp_total or not ref_total:
            continue  # an order one side is too short for does not count (effective order)
        small, large = (hyp_counts, ref_counts) if len(hyp_counts) <= len(ref_counts) else (ref_counts, hyp_counts)
        matches = sum(min(count, large[gram]) for gram, count in small.items() if gram in large)
        precision += matches / hyp_total
        recall += matches / ref_total
        orders += 1
    if not orders or not precision + recall:
        return 0.0
    precision, recall = precision / orders, recall / orders
    weight = BETA**2
    return 100.0 * (1 + weight) * precision * recall / (weight * precision + recall)
