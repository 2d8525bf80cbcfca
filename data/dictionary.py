"""The dictionary behind target-term hints: source forms -> target terms, and a compact index of it.

Where the entries come from: the training split's dictionary phrase pairs (`kind` phrase in
train.tsv, the Ding entries `data prepare` cleaned), so nothing of a held-out pair is ever
looked up (the split drops every phrase that shares a side with a valid or test pair). A
form's translations are counted over every pair it heads (`phrase_votes`); the corpus keeps
each pair once, so the counts rarely differ and the vote rules here (`usual_term`,
`first_term`) mostly take the first entry, often a synonym's ("Störung" → "hiccup"). The
index is built with the evidence rule (`seq2seq.training.senses`: the dictionary's examples,
target-side frequency, the term's shape, no term where the senses disagree).

The index (`TermIndex`, the bundle's `dictionary.tsv.gz`) keeps, for every single-word
source form that has a term, the training-sentence count of the form (how rare it is) and
the term:
sorted lines in one bytes buffer with a line-offset array, searched by bisection, so a
300k-form dictionary costs about 10 MB of memory and nothing to start (no dict of Python
strings is built).
"""

from __future__ import annotations

import gzip
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from data.corpora.pairs import PHRASE, Pair


def phrase_votes(pairs: Iterable[Pair], max_words: int = 3) -> dict[str, Counter[str]]:
    """source form -> Counter of its target terms over the dictionary phrase pairs whose
    source has at most `max_words` words; a Counter keeps first-seen order among ties."""
    votes: dict[str, Counter[str]] = {}
    for pair in pairs:
        if pair.kind == PHRASE and len(pair.source.split()) <= max_words:
            votes.setdefault(pair.source, Counter())[pair.target] += 1
    return votes


def usual_term(terms: Counter[str]) -> str:
    """The term given most often; among ties, the first seen (Ding's entry order)."""
    best = max(terms.values())
    return next(term for term, count in terms.items() if count == best)


def first_term(terms: Counter[str]) -> str:
    """The term of the first entry that gives one (Ding's entry order, alphabetical by headword)."""
    return next(iter(terms))


# The rules a form's term is chosen by (`crossalign data hints --sense`), chosen on valid.
SENSE_RULES = {"usual": usual_term, "first": first_term}


class TermIndex:
    """Sorted `form<TAB>count<TAB>term` lines, looked up by bisection over their forms."""

    def __init__(self, blob: bytes):
        self.blob = blob
        ends = np.frombuffer(blob, dtype=np.uint8) == ord("\n")
        self.starts = np.concatenate([[0], np.flatnonzero(ends)[:-1] + 1]).astype(np.int64)
        self.forms = _Forms(blob, self.starts)

    @classmethod
    def load(cls, path: Path) -> TermIndex:
        return cls(gzip.decompress(Path(path).read_bytes()))

    def __len__(self) -> int:
        return len(self.starts)

    def lookup(self, form: str) -> tuple[int, str] | None:
        """(training-sentence count, term) of `form` exactly as written, or None."""
        key = form.encode("utf-8")
        index = bisect_left(self.forms, key)
        if index == len(self.starts) or self.forms[index] != key:
            return None
        start = int(self.starts[index])
        line = self.blob[start : self.blob.index(b"\n", start)].decode("utf-8")
        _, count, term = line.split("\t")
        return int(count), term


class _Forms:
    """The forms of the index's lines as a sequence of bytes, for `bisect` (no copy)."""

    def __init__(self, blob: bytes, starts: np.ndarray):
        self.blob, self.starts = blob, starts

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, index: int) -> bytes:
        start = int(self.starts[index])
        return self.blob[start : self.blob.index(b"\t", start)]


def write_term_index(rows: Iterable[tuple[str, int, str]], path: Path) -> int:
    """Write (form, count, term) rows as a gzipped, byte-sorted TermIndex file; returns the
    number of rows. Forms and terms must hold no tab or newline."""
    lines = sorted(
        f"{form}\t{count}\t{term}\n".encode() for form, count, term in rows if not any(c in form + term for c in "\t\n")
    )
    Path(path).write_bytes(gzip.compress(b"".join(lines), compresslevel=9, mtime=0))
    return len(lines)
