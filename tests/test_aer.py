"""AER, precision and recall by hand; the gold set's consistency; grow-diag-final; format errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from data.corpora.pairs import split_key
from seq2seq.analysis.aer import (
    AlignmentFormatError,
    GoldPair,
    grow_diag_final,
    parse_pharaoh,
    read_gold,
    read_pharaoh,
    score,
)
from seq2seq.core.alignment import words

ROOT = Path(__file__).resolve().parents[1]
GOLD = ROOT / "data" / "gold" / "de-en.gold.tsv"
BASELINE = ROOT / "data" / "gold" / "eflomal.gold.pharaoh"
PREPARED = ROOT / "work" / "ding8k"
DING = Path("/usr/share/trans/de-en")


def gold_pair(sure: set, possible_only: set = frozenset()) -> GoldPair:
    return GoldPair("s", "t", frozenset(sure), frozenset(set(sure) | set(possible_only)), 1)


def test_score_by_hand():
    # Pair 1: S = {0-0, 1-1}, P = S + {1-2}; A = {0-0, 1-2, 2-2}: A∩S = 1, A∩P = 2.
    # Pair 2: S = {0-0}, P = S;             A = {} : A∩S = 0, A∩P = 0.
    gold = [gold_pair({(0, 0), (1, 1)}, {(1, 2)}), gold_pair({(0, 0)})]
    result = score([{(0, 0), (1, 2), (2, 2)}, set()], gold)
    # Summed over the corpus: |A| = 3, |S| = 3, |A∩S| = 1, |A∩P| = 2.
    assert (result.hypothesis_links, result.sure_links, result.hits_sure, result.hits_possible) == (3, 3, 1, 2)
    assert result.precision == pytest.approx(2 / 3)
    assert result.recall == pytest.approx(1 / 3)
    assert result.aer == pytest.approx(1 - (1 + 2) / (3 + 3))


def test_score_extremes():
    gold = [gold_pair({(0, 0), (1, 1)}, {(2, 1)})]
    perfect = score([{(0, 0), (1, 1)}], gold)
    assert (perfect.precision, perfect.recall, perfect.aer) == (1.0, 1.0, 0.0)
    # Possible links cost nothing: recall counts sure links only, precision counts P.
    with_possible = score([{(0, 0), (1, 1), (2, 1)}], gold)
    assert (with_possible.precision, with_possible.recall, with_possible.aer) == (1.0, 1.0, 0.0)
    # AER = 1 - (1 + 1) / (2 + 2): one sure hit out of two, one wrong link.
    half = score([{(0, 0), (3, 3)}], gold)
    assert half.aer == pytest.approx(0.5)
    assert score([set()], gold).aer == 1.0
    with pytest.raises(ValueError, match="2 hypothesis alignments for 1 gold pairs"):
        score([set(), set()], gold)


def test_grow_diag_final_known_example():
    # Forward: 0-0 1-1 3-2; backward: 0-0 1-2 2-3 3-3. Intersection {0-0}; grow-diag adds the
    # diagonal neighbour 1-1 (union point, both words new), then 1-2 (neighbour of 1-1,
    # target 2 unaligned); 2-3 is a diagonal neighbour of 1-2 with source 2 unaligned;
    # 3-3 neighbours 2-3 with source 3 unaligned. 3-2 (forward only) is then
    # not added by final: source 3 and target 2 are both aligned by now.
    forward = {(0, 0), (1, 1), (3, 2)}
    backward = {(0, 0), (1, 2), (2, 3), (3, 3)}
    assert grow_diag_final(forward, backward) == {(0, 0), (1, 1), (1, 2), (2, 3), (3, 3)}


def test_grow_diag_final_final_step_and_symmetry_of_agreement():
    # No neighbours at all: grow adds nothing, final adds every point of a word left unaligned.
    forward, backward = {(0, 0), (2, 5)}, {(0, 0), (4, 1)}
    assert grow_diag_final(forward, backward) == {(0, 0), (2, 5), (4, 1)}
    # Agreement is kept as is; an empty side leaves the other one's links.
    assert grow_diag_final({(0, 1), (1, 0)}, {(0, 1), (1, 0)}) == {(0, 1), (1, 0)}
    assert grow_diag_final({(0, 0), (1, 1)}, set()) == {(0, 0), (1, 1)}


@pytest.fixture(scope="module")
def gold() -> list[GoldPair]:
    return read_gold(GOLD)


def test_gold_set_loads_and_is_consistent(gold):
    assert len(gold) >= 150
    for pair in gold:
        n_source, n_target = len(words(pair.source)), len(words(pair.target))
        assert pair.sure, f"line {pair.line} has no sure link"
        assert pair.sure <= pair.possible
        assert all(i < n_source and j < n_target for i, j in pair.possible), f"line {pair.line}"
    sources = [split_key(pair.source) for pair in gold]
    assert len(set(sources)) == len(sources), "a gold sentence occurs twice"


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().casefold()


def test_gold_sentences_are_not_in_the_training_data(gold):
    """The gold set must be unseen: checked against the prepared splits, else the raw Ding file."""
    if PREPARED.is_dir() and list(PREPARED.glob("*.tsv")):
        # Prepared text is already normalised (data.corpora.pairs.normalize_text): casefolding and
        # collapsing spaces gives its split_key, and is ten times faster than calling it.
        seen = set()
        for path in PREPARED.glob("*.tsv"):
            for line in path.read_text(encoding="utf-8").casefold().splitlines():
                seen.update(" ".join(field.split()) for field in line.split("\t")[:2])
        assert len(seen) > 1000, "the prepared splits look empty"
        leaked = [pair.line for pair in gold if split_key(pair.source) in seen or split_key(pair.target) in seen]
    elif DING.is_file():
        # The raw dictionary has several entries per line: look for the sentence anywhere.
        ding = _normalise(DING.read_text(encoding="utf-8"))
        leaked = [pair.line for pair in gold if _normalise(pair.source) in ding]
    else:
        pytest.skip("neither work/ding8k nor /usr/share/trans/de-en is here")
    assert not leaked, f"gold lines found in the training data: {leaked}"


@pytest.mark.parametrize(
    "line, message",
    [
        ("Das Haus .\tThe house .", "expected source<TAB>target<TAB>links, got 2 field"),
        ("Das Haus .\tThe house .\t0-0 1:1", "not a gold link"),
        ("Das Haus .\tThe house .\t0-0 3-1", "link 3-1 out of range: the source has 3 words, the target 3"),
        ("Das Haus .\tThe house .\t0-0 1?1 1-1", "links both sure and possible: 1-1"),
        ("Das Haus .\tThe house .\t", "no links"),
    ],
)
def test_malformed_gold_line_names_the_line(tmp_path, line, message):
    path = tmp_path / "gold.tsv"
    path.write_text("# comment\nDas ist gut .\tThat is good .\t0-0 1-1 2-2 3-3\n" + line + "\n", encoding="utf-8")
    with pytest.raises(AlignmentFormatError, match=re.escape(f"{path}:3: {message}")):
        read_gold(path)


def test_gold_reader_keeps_sure_and_possible(tmp_path):
    path = tmp_path / "gold.tsv"
    path.write_text("Ich rufe an .\tI call .\t0-0 1-1 2-1 1?0 3-2\n", encoding="utf-8")
    [pair] = read_gold(path)
    assert pair.sure == {(0, 0), (1, 1), (2, 1), (3, 2)}
    assert pair.possible == pair.sure | {(1, 0)}
    assert pair.line == 1


def test_pharaoh_reader(tmp_path):
    path = tmp_path / "hyp.pharaoh"
    path.write_text("0-0 1-2\n\n2-1\n", encoding="utf-8")
    assert read_pharaoh(path) == [{(0, 0), (1, 2)}, set(), {(2, 1)}]
    path.write_text("0-0\n1?2\n", encoding="utf-8")
    with pytest.raises(AlignmentFormatError, match=re.escape(f"{path}:2: not a Pharaoh link")):
        read_pharaoh(path)
    assert parse_pharaoh("  3-4   0-0 ") == {(3, 4), (0, 0)}


def test_baseline_alignments_fit_the_gold_set(gold):
    """The committed eflomal baseline has one line per gold pair, within each pair's words."""
    if not BASELINE.is_file():
        pytest.skip("no committed baseline")
    hypotheses = read_pharaoh(BASELINE)
    assert len(hypotheses) == len(gold), "regenerate the baseline: export/eflomal_baseline.py --gold-out"
    for links, pair in zip(hypotheses, gold):
        n_source, n_target = len(words(pair.source)), len(words(pair.target))
        assert all(i < n_source and j < n_target for i, j in links), f"gold line {pair.line}"
    assert score(hypotheses, gold).aer < 0.5


def test_the_english_german_files_are_the_same_pairs_transposed(gold):
    """en-de.gold.tsv and eflomal.en-de.gold.pharaoh are the German-English files read the
    other way (data/gold/README.md makes them with one script): same pairs, links transposed."""
    transpose = lambda links: {(j, i) for i, j in links}  # noqa: E731
    reverse = read_gold(GOLD.with_name("en-de.gold.tsv"))
    assert [(p.target, p.source) for p in reverse] == [(p.source, p.target) for p in gold]
    for there, back in zip(gold, reverse):
        assert (transpose(back.sure), transpose(back.possible)) == (there.sure, there.possible), there.line
    flipped = read_pharaoh(BASELINE.with_name("eflomal.en-de.gold.pharaoh"))
    assert [transpose(links) for links in flipped] == read_pharaoh(BASELINE)
