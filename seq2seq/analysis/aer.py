"""Alignment quality against a hand-aligned gold set: precision, recall, AER, and symmetrisation.

Gold file (documented in data/gold/README.md): one sentence pair per line,
`source<TAB>target<TAB>links`, links separated by spaces, `i-j` a sure link and `i?j` a
possible one; i indexes the source words and j the target words of
`seq2seq.core.alignment.words()`, from 0. Hypotheses are Pharaoh files: one line of `i-j` links
per gold pair, in the same order (an empty line is a pair with no links).

Scores (Och & Ney 2003, "A Systematic Comparison of Various Statistical Alignment Models",
section 5), with A the hypothesis links, S the sure and P the possible gold links, P ⊇ S,
each count summed over the whole corpus before dividing:

    precision = |A ∩ P| / |A|      recall = |A ∩ S| / |S|
    AER       = 1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|)

Torch-free.

    python -m seq2seq.analysis.aer score data/gold/de-en.gold.tsv hypothesis.pharaoh
    python -m seq2seq.analysis.aer show data/gold/de-en.gold.tsv     # the gold links as words, to review
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from seq2seq.core.alignment import words

Link = tuple[int, int]  # (source word index, target word index)

_GOLD_LINK = re.compile(r"(\d+)([-?])(\d+)")
_PHARAOH_LINK = re.compile(r"(\d+)-(\d+)")


class AlignmentFormatError(ValueError):
    """A malformed gold or Pharaoh line; the message starts with `file:line:`."""


@dataclass(frozen=True)
class GoldPair:
    source: str
    target: str
    sure: frozenset[Link]
    possible: frozenset[Link]  # includes every sure link (P ⊇ S)
    line: int  # 1-based line number in the gold file

    @property
    def source_words(self) -> list[str]:
        return [token.text for token in words(self.source)]

    @property
    def target_words(self) -> list[str]:
        return [token.text for token in words(self.target)]


@dataclass(frozen=True)
class Score:
    precision: float
    recall: float
    aer: float
    hypothesis_links: int  # |A|
    sure_links: int  # |S|
    possible_links: int  # |P|, sure included
    hits_sure: int  # |A ∩ S|
    hits_possible: int  # |A ∩ P|

    def __str__(self) -> str:
        return (
            f"AER {100 * self.aer:.1f}  precision {100 * self.precision:.1f}  recall {100 * self.recall:.1f}"
            f"  (|A| {self.hypothesis_links}, |S| {self.sure_links}, |P| {self.possible_links})"
        )


def read_gold(path: str | Path) -> list[GoldPair]:
    """Read and validate a gold file; raises AlignmentFormatError naming file:line.

    Checks: three tab-separated fields, every link `i-j` or `i?j`, indices within the
    `words()` counts of their sentence, no link both sure and possible, at least one link.
    Blank lines and lines starting with `#` are skipped.
    """
    pairs = []
    with open(path, encoding="utf-8") as handle:
        for number, raw in enumerate(handle, start=1):
            line = raw.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            where = f"{path}:{number}"
            fields = line.split("\t")
            if len(fields) != 3:
                raise AlignmentFormatError(f"{where}: expected source<TAB>target<TAB>links, got {len(fields)} field(s)")
            source, target, link_text = fields
            n_source, n_target = len(words(source)), len(words(target))
            sure, possible_only = set(), set()
            for item in link_text.split():
                match = _GOLD_LINK.fullmatch(item)
                if not match:
                    raise AlignmentFormatError(f"{where}: not a gold link (i-j sure, i?j possible): {item!r}")
                link = (int(match.group(1)), int(match.group(3)))
                if link[0] >= n_source or link[1] >= n_target:
                    raise AlignmentFormatError(
                        f"{where}: link {item} out of range: the source has {n_source} words, the target {n_target}"
                    )
                (sure if match.group(2) == "-" else possible_only).add(link)
            if not sure and not possible_only:
                raise AlignmentFormatError(f"{where}: no links")
            if sure & possible_only:
                both = " ".join(f"{i}-{j}" for i, j in sorted(sure & possible_only))
                raise AlignmentFormatError(f"{where}: links both sure and possible: {both}")
            pairs.append(GoldPair(source, target, frozenset(sure), frozenset(sure | possible_only), number))
    return pairs


def parse_pharaoh(text: str, where: str = "<string>") -> set[Link]:
    """One Pharaoh line (`0-0 1-2 ...`) -> set of (source, target) links."""
    links = set()
    for item in text.split():
        match = _PHARAOH_LINK.fullmatch(item)
        if not match:
            raise AlignmentFormatError(f"{where}: not a Pharaoh link i-j: {item!r}")
        links.add((int(match.group(1)), int(match.group(2))))
    return links


def read_pharaoh(path: str | Path) -> list[set[Link]]:
    """One set of links per line; an empty line is a pair without links."""
    with open(path, encoding="utf-8") as handle:
        return [parse_pharaoh(line, f"{path}:{number}") for number, line in enumerate(handle, start=1)]


def write_pharaoh(path: str | Path, alignments: Iterable[Iterable[Link]]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for links in alignments:
            handle.write(" ".join(f"{i}-{j}" for i, j in sorted(links)) + "\n")


def score(hypotheses: Sequence[Iterable[Link]], gold: Sequence[GoldPair]) -> Score:
    """Corpus-level precision, recall and AER; counts are summed before dividing (Och & Ney 2003)."""
    if len(hypotheses) != len(gold):
        raise ValueError(f"{len(hypotheses)} hypothesis alignments for {len(gold)} gold pairs")
    n_a = n_s = n_p = hits_s = hits_p = 0
    for links, pair in zip(hypotheses, gold):
        links = set(links)
        n_a += len(links)
        n_s += len(pair.sure)
        n_p += len(pair.possible)
        hits_s += len(links & pair.sure)
        hits_p += len(links & pair.possible)
    precision = hits_p / n_a if n_a else 0.0
    recall = hits_s / n_s if n_s else 0.0
    aer = 1.0 - (hits_s + hits_p) / (n_a + n_s) if n_a + n_s else 0.0
    return Score(precision, recall, aer, n_a, n_s, n_p, hits_s, hits_p)


# Neighbours in the order of Koehn's pseudo-code: the 4 adjacent points, then the diagonals.
_NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


def grow_diag_final(forward: Iterable[Link], backward: Iterable[Link]) -> set[Link]:
    """Symmetrise two directional alignments with grow-diag-final (Koehn et al. 2003; Koehn's
    "Statistical Machine Translation", 2010, section 4.5.3; the Moses default).

    Both arguments are (source, target) links, the backward one already flipped back to that
    orientation. Start from the intersection; repeatedly add a neighbouring (diagonals
    included) union point that covers a so far unaligned source or target word; finally add
    any union point, forward links first, that covers a still unaligned word. Points are
    visited in (target, source) order, as in the pseudo-code ("for english word e, for
    foreign word f"), so the result is deterministic.
    """
    forward, backward = set(forward), set(backward)
    union = forward | backward
    alignment = forward & backward
    aligned_source = {i for i, _ in alignment}
    aligned_target = {j for _, j in alignment}

    def add(link: Link) -> None:
        alignment.add(link)
        aligned_source.add(link[0])
        aligned_target.add(link[1])

    def order(links: Iterable[Link]) -> list[Link]:
        return sorted(links, key=lambda link: (link[1], link[0]))

    added = True
    while added:  # grow-diag
        added = False
        for i, j in order(alignment):
            for di, dj in _NEIGHBOURS:
                new = (i + di, j + dj)
                if (
                    new in union
                    and new not in alignment
                    and (new[0] not in aligned_source or new[1] not in aligned_target)
                ):
                    add(new)
                    added = True
    for directional in (forward, backward):  # final
        for link in order(directional):
            if link not in alignment and (link[0] not in aligned_source or link[1] not in aligned_target):
                add(link)
    return alignment


def show(pair: GoldPair) -> str:
    """The gold links of one pair as words, sure `=` and possible `~`, for review."""
    source, target = pair.source_words, pair.target_words
    items = [f"{source[i]}{'=' if (i, j) in pair.sure else '~'}{target[j]}" for i, j in sorted(pair.possible)]
    unaligned = (
        [w for i, w in enumerate(source) if all(link[0] != i for link in pair.possible)],
        [w for j, w in enumerate(target) if all(link[1] != j for link in pair.possible)],
    )
    lines = [f"{pair.line}: {pair.source}", f"   {pair.target}", "   " + "  ".join(items)]
    if unaligned[0] or unaligned[1]:
        lines.append(f"   unaligned: source {unaligned[0]} target {unaligned[1]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m seq2seq.analysis.aer", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    score_parser = commands.add_parser("score", help="precision, recall and AER of a Pharaoh file")
    score_parser.add_argument("gold", type=Path, help="gold file (data/gold/de-en.gold.tsv)")
    score_parser.add_argument("hypothesis", type=Path, help="Pharaoh file, one line per gold pair")
    show_parser = commands.add_parser("show", help="print the gold links as words")
    show_parser.add_argument("gold", type=Path)
    args = parser.parse_args(argv)
    gold = read_gold(args.gold)
    if args.command == "score":
        print(score(read_pharaoh(args.hypothesis), gold))
    else:
        print("\n\n".join(show(pair) for pair in gold))


if __name__ == "__main__":
    main()
