"""Training sources with target-term hints: which hints a pair may carry, and the batches that carry them.

Which (`reference_hints`, run once by `crossalign data hints`): a source word, or a run of
two or three, whose dictionary translations (any sense: every target term the training
phrase pairs give it) occur in the pair's reference gets that occurrence, as the
reference writes it, as a candidate hint. German inflection is matched on both sides by
the endings of `seq2seq.core.hints` (the form as written, else its dictionary form with
an ending; English terms with a plural ending). The most frequent source words (articles,
pronouns) never carry one: a hint is for the word a model cannot know.

The batches (`HintSampler`): each epoch every candidate is shown with probability
`TrainConfig.hint_rate` (Dinu et al. 2019 show a half of the terms; the model must still
translate well without them), drawn from torch's RNG, which checkpoints save, so a resumed
run draws the same hints.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import torch

from data.corpora.pairs import Pair
from data.tokenizer import Tokenizer
from seq2seq.core.alignment import words
from seq2seq.core.hints import Hint, HintedSource, endings, find_term, fold, insert_hints

HINTS_FILE = "hints.train.jsonl"  # one JSON list of [start, end, term] per line of train.tsv


def verb_stem(term: str, language: str = "en") -> str:
    """Ding writes English verbs as "to go": the reference says "go". Other languages' terms
    are kept as written."""
    return term[3:] if language == "en" and term.startswith("to ") and len(term) > 3 else term


def reference_hints(
    pair: Pair, votes: dict[str, Counter[str]], frequent: set[str], max_words: int = 3, target_language: str = "en"
) -> list[tuple[int, int, str]]:
    """Candidate hints (start, end, term) of one pair, non-overlapping, longest runs first;
    the term is found in the reference with `target_language`'s endings."""
    source_words = words(pair.source)
    target_words = words(pair.target)
    taken = [False] * len(source_words)
    found = []
    for size in range(max_words, 0, -1):
        for first in range(len(source_words) - size + 1):
            if any(taken[first : first + size]):
                continue
            run = source_words[first : first + size]
            if all(fold(w.text) in frequent or not w.text.isalpha() for w in run):
                continue
            form = pair.source[run[0].start : run[-1].end]
            terms = votes.get(form) or (votes.get(form[0].lower() + form[1:]) if first == 0 else None)
            if not terms:
                continue
            for term in terms:
                span = find_term(target_words, verb_stem(term, target_language), endings(target_language))
                if span is not None:
                    written = pair.target[target_words[span[0]].start : target_words[span[1] - 1].end]
                    found.append((run[0].start, run[-1].end, written))
                    taken[first : first + size] = [True] * size
                    break
    return sorted(found)


def frequent_source_words(pairs: list[Pair], per_sentences: int = 200) -> set[str]:
    """The source words (folded) of the sentence pairs seen more than once in every
    `per_sentences` sentences (and more than twice): articles, pronouns, auxiliaries."""
    sentences = [p for p in pairs if p.kind == "sentence"]
    counts = Counter(fold(w.text) for p in sentences for w in words(p.source))
    floor = max(2, len(sentences) // per_sentences)
    return {word for word, count in counts.items() if count > floor}


def read_hint_candidates(path: Path) -> list[list[Hint]]:
    """The candidates of every train.tsv line, as written by `crossalign data hints`."""
    with open(path, encoding="utf-8") as handle:
        return [[Hint(s, e, t, "dictionary") for s, e, t in json.loads(line)] for line in handle]


class HintSampler:
    """The candidate hints of each training line, and each batch's draw of them."""

    def __init__(self, candidates: list[list[Hint]], tokenizer: Tokenizer, rate: float):
        if tokenizer.hint_ids is None:
            raise ValueError(
                "hint_rate needs a vocabulary with the hint pieces: run `crossalign data hints` on the data directory"
            )
        self.rate, self.hint_ids, self.tokenizer = rate, tokenizer.hint_ids, tokenizer
        self.by_line = {line: hints for line, hints in enumerate(candidates) if hints}
        self._terms: dict[str, list[int]] = {}

    def draw(self, line: int) -> list[Hint]:
        """Each candidate of train.tsv line `line` with probability `rate` (torch's RNG)."""
        candidates = self.by_line.get(line)
        if not candidates:
            return []
        return [hint for hint, keep in zip(candidates, torch.rand(len(candidates)) < self.rate) if keep]

    def insert(self, ids: list[int], offsets: list[tuple[int, int]], hints: list[Hint]) -> HintedSource:
        """The source pieces `ids` (with character `offsets`, EOS excluded) with `hints` inserted."""
        return insert_hints(ids, offsets, hints, self._term_ids, self.hint_ids)

    def _term_ids(self, term: str) -> list[int]:
        if term not in self._terms:
            self._terms[term] = self.tokenizer.encode(term)
        return self._terms[term]
