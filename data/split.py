"""Deterministic train/valid/test split by hash of the normalised source.

A source sentence lands in exactly one split, so no test source is ever trained on; and no
training pair has a side equal to a side of any valid or test pair (source or target), so
the same split serves both directions (`crossalign data prepare --reverse` trains en->de
on it) without a held-out sentence ever being trained on, in either language. The
split is deterministic and independent of input order; the hash thresholds scale with the
number of sentences, so a corpus that grows may move sentences between splits (re-run
`prepare` and retrain rather than mixing old and new splits). Only sentence
pairs may go to valid/test: dictionary phrases would make BLEU meaningless.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from data.corpora.pairs import SENTENCE, Pair, split_key


def hash_unit(key: str) -> float:
    """A uniform number in [0, 1) from the key, stable across runs and machines."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") / 2**64


@dataclass
class Splits:
    train: list[Pair] = field(default_factory=list)
    valid: list[Pair] = field(default_factory=list)
    test: list[Pair] = field(default_factory=list)

    def astuple(self) -> tuple[list[Pair], list[Pair], list[Pair]]:
        return self.train, self.valid, self.test


# On a small corpus the held-out splits take at most this share of the sentence sources.
MAX_HELD_OUT_FRACTION = 0.25


def split_pairs(
    pairs: Iterable[Pair],
    test_size: int = 1600,
    valid_size: int = 1100,
    max_held_out_fraction: float = MAX_HELD_OUT_FRACTION,
) -> Splits:
    """Split deduplicated pairs; `*_size` are targets in sentence *sources*.

    Thresholds on the hash are set so the expected counts hit the targets; on small
    corpora held-out data is capped at `max_held_out_fraction` of the sentence sources.
    Valid and test keep one reference per source (the first seen); train keeps all.
    """
    pairs = list(dict.fromkeys(pairs))  # dedupe, keep order
    sentence_keys = {split_key(p.source) for p in pairs if p.kind == SENTENCE}
    n = max(len(sentence_keys), 1)
    scale = min(1.0, max_held_out_fraction * n / max(test_size + valid_size, 1))
    test_cut = test_size * scale / n
    valid_cut = test_cut + valid_size * scale / n
    held_out: dict[str, str] = {}
    for key in sentence_keys:
        u = hash_unit(key)
        if u < test_cut:
            held_out[key] = "test"
        elif u < valid_cut:
            held_out[key] = "valid"
    splits, seen_held_out = Splits(), set()
    for pair in pairs:
        key = split_key(pair.source)
        where = held_out.get(key)
        if where is None:
            splits.train.append(pair)
        elif pair.kind == SENTENCE and key not in seen_held_out:
            seen_held_out.add(key)
            getattr(splits, where).append(pair)
        # else: a second reference or a phrase with a held-out source: dropped, never trained on
    # Read the other way, a held-out target is a source: no training pair may have a side
    # equal to either side of a held-out pair (Ding repeats sentences under other entries).
    held_out_sides = {split_key(side) for pair in splits.valid + splits.test for side in (pair.source, pair.target)}
    splits.train = [
        pair
        for pair in splits.train
        if split_key(pair.source) not in held_out_sides and split_key(pair.target) not in held_out_sides
    ]
    return splits
