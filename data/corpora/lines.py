"""Parallel text by lines: tab-separated pairs and Moses file pairs."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import zip_longest
from pathlib import Path

from data.corpora.pairs import SENTENCE, CorpusError, Pair, normalize_text, open_text


def read_tsv(path: Path) -> Iterator[Pair]:
    """`source<TAB>target[<TAB>anything]` per line (Tatoeba / manythings style)."""
    with open_text(path) as lines:
        for number, line in lines:
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) < 2:
                raise CorpusError(f"{path}:{number}: expected 'source<TAB>target', found no tab")
            source, target = normalize_text(fields[0]), normalize_text(fields[1])
            if not source or not target:
                raise CorpusError(f"{path}:{number}: empty {'source' if not source else 'target'}")
            yield Pair(source, target, SENTENCE)


def read_moses(source_path: Path, target_path: Path) -> Iterator[Pair]:
    """Two plain-text files, line i of one translating line i of the other."""
    with open_text(source_path) as sources, open_text(target_path) as targets:
        # zip_longest, not zip: zip would silently swallow one extra line of the source file.
        for source_item, target_item in zip_longest(sources, targets):
            if source_item is None or target_item is None:
                longer, (number, _) = (target_path, target_item) if source_item is None else (source_path, source_item)
                raise CorpusError(f"{longer}:{number}: the two Moses files have different line counts")
            (number, source), (_, target) = source_item, target_item
            source, target = normalize_text(source), normalize_text(target)
            if not source and not target:
                continue
            if not source or not target:
                side = source_path if not source else target_path
                raise CorpusError(f"{side}:{number}: empty line where the other file has text")
            yield Pair(source, target, SENTENCE)
