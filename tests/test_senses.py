"""Which sense a dictionary hint shows (seq2seq/training/senses.py): the evidence for each
reading of a form, the ambiguity rule and its thresholds, the index it writes, and a release
bundle's dictionary rebuilt in place."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from data.corpora.pairs import PHRASE, SENTENCE, Pair
from data.dictionary import TermIndex, phrase_votes
from seq2seq.runtime.bundle import load_bundle_manifest
from seq2seq.training.senses import Reading, SenseRule, choose_terms, sense_table, wordfreq_frequency

# A hand-made vote table: Ding's entries (one-word phrases) and the examples that hold the form.
PAIRS = [
    # "Störung": three senses, the examples split between two of them
    Pair("Störung", "hiccup", PHRASE),
    Pair("Störung", "disturbance", PHRASE),
    Pair("Störung", "disorder", PHRASE),
    Pair("Störung des Betriebs", "disturbance of operation", PHRASE),
    Pair("Die Störung ist vorbei.", "The disturbances are over.", SENTENCE),
    Pair("eine genetische Störung", "a genetic disorder", PHRASE),
    # "Gleis": the first entry's gloss is not the word the examples use
    Pair("Gleis", "railroad line", PHRASE),
    Pair("Gleis", "track", PHRASE),
    Pair("Gleis drei", "track three", PHRASE),
    Pair("Der Zug steht am Gleis.", "The train is on the track.", SENTENCE),
    # one reading in two spellings; a verb Ding writes "to ..."
    Pair("Beileid", "condolence", PHRASE),
    Pair("Beileid", "condolences", PHRASE),
    Pair("gehen", "to go", PHRASE),
    Pair("Fahrkarte", "fare ticket", PHRASE),
    # six senses, no example: none has a fifth of the evidence
    *(Pair("Anlage", term, PHRASE) for term in ("plant", "facility", "system", "installation", "enclosure", "annex")),
]
FREQUENCY = {
    "hiccup": 2.9,
    "disturbance": 3.6,
    "disorder": 4.3,
    "railroad line": 4.3,
    "track": 5.0,
    "condolence": 2.8,
    "condolences": 3.6,
    "go": 6.0,
    "fare ticket": 3.9,
    "plant": 4.6,
    "facility": 4.5,
    "system": 5.3,
    "installation": 4.1,
    "enclosure": 3.3,
    "annex": 3.0,
}


@pytest.fixture(scope="module")
def table() -> dict[str, list[Reading]]:
    return sense_table(PAIRS, phrase_votes(PAIRS), "en", FREQUENCY.__getitem__)


def test_each_reading_gets_its_entries_and_the_examples_that_write_it(table: dict[str, list[Reading]]) -> None:
    evidence = {form: {r.terms: (r.entries, r.support) for r in readings} for form, readings in table.items()}
    assert evidence["Störung"] == {("hiccup",): (1, 0), ("disturbance",): (1, 2), ("disorder",): (1, 1)}
    assert evidence["Gleis"] == {("railroad line",): (1, 0), ("track",): (1, 2)}
    assert evidence["Beileid"] == {("condolence", "condolences"): (2, 0)}  # one reading, the first spelling shown
    assert evidence["gehen"] == {("go",): (1, 0)}  # the hint shows the verb as a reference writes it
    assert set(table) == {"Störung", "Gleis", "Beileid", "gehen", "Fahrkarte", "Anlage"}  # single-word forms only


def test_senses_that_disagree_get_no_hint_and_a_clear_one_does(table: dict[str, list[Reading]]) -> None:
    chosen = choose_terms(table, SenseRule(min_share=0.6, min_frequency=0, max_words=2))
    # Störung: disturbance has 3 of 6 (hiccup 1, disorder 2): split, so no hint at all.
    assert "Störung" not in chosen
    # Gleis: track has 3 of 4: the examples' word, not the first entry's gloss.
    assert chosen["Gleis"] == "track"
    assert chosen["Beileid"] == "condolence" and chosen["gehen"] == "go" and chosen["Fahrkarte"] == "fare ticket"
    # Without the ambiguity rule the evidence still picks the sense the examples use.
    assert SenseRule(min_share=0, min_frequency=0).choose(table["Störung"]) == "disturbance"
    # The served rule: Anlage's six readings have a sixth each, below its fifth.
    assert SenseRule().min_share == 0.2 and SenseRule().choose(table["Anlage"]) is None
    assert SenseRule(min_share=1 / 6).choose(table["Anlage"]) == "system"  # the most frequent of equals


def test_the_share_threshold_is_pinned_at_the_readings_share(table: dict[str, list[Reading]]) -> None:
    assert SenseRule(min_share=3 / 6, min_frequency=0).choose(table["Störung"]) == "disturbance"
    assert SenseRule(min_share=3 / 6 + 0.01, min_frequency=0).choose(table["Störung"]) is None
    assert SenseRule(min_share=3 / 4, min_frequency=0).choose(table["Gleis"]) == "track"
    assert SenseRule(min_share=3 / 4 + 0.01, min_frequency=0).choose(table["Gleis"]) is None


def test_the_frequency_and_length_thresholds_are_pinned(table: dict[str, list[Reading]]) -> None:
    assert SenseRule(min_share=0, min_frequency=5.0).choose(table["Gleis"]) == "track"
    assert SenseRule(min_share=0, min_frequency=5.01).choose(table["Gleis"]) is None  # railroad line is rarer too
    # A rare term is never shown, even where it has the most evidence: the next plausible one is.
    assert SenseRule(min_share=0, min_frequency=3.6).choose(table["Störung"]) == "disturbance"
    assert SenseRule(min_share=0, min_frequency=3.61).choose(table["Störung"]) == "disorder"
    assert SenseRule(min_share=0, min_frequency=0, max_words=2).choose(table["Fahrkarte"]) == "fare ticket"
    assert SenseRule(min_share=0, min_frequency=0, max_words=1).choose(table["Fahrkarte"]) is None


def test_equal_evidence_goes_to_fewer_words_then_the_more_frequent_term() -> None:
    readings = [
        Reading(("railroad line",), 1, 0, 5.5, 0),
        Reading(("rail",), 1, 0, 4.0, 1),
        Reading(("track",), 1, 0, 5.0, 2),
    ]
    assert SenseRule(min_share=0, min_frequency=0).choose(readings) == "track"
    assert SenseRule(min_share=0, min_frequency=0).choose(readings[:2]) == "rail"
    assert SenseRule(min_share=0, min_frequency=0).choose([Reading(("a b",), 0, 0, 9.0, 0)]) is None  # no evidence


@pytest.mark.parametrize("bad", [{"min_share": 1.01}, {"min_share": -0.1}, {"max_words": 0}])
def test_a_rule_out_of_range_is_refused(bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        SenseRule(**bad)


def test_wordfreq_ships_its_word_lists() -> None:
    """The build reads target-side frequencies from the wheel's own data (no download)."""
    english, german = wordfreq_frequency("en"), wordfreq_frequency("de")
    assert english("track") > english("railroad line") > english("hiccup") > 0
    assert german("Temperatur") > german("erhöhte Temperatur") > 0


def test_a_bundles_dictionary_is_rebuilt_in_place_and_still_verifies(tiny_bundle: Path, tmp_path: Path) -> None:
    from seq2seq.cli.hints import prepare_dictionary

    bundle = tmp_path / "bundle"
    shutil.copytree(tiny_bundle, bundle)
    data = tmp_path / "data"
    data.mkdir()
    (data / "manifest.json").write_text(json.dumps({"languages": {"source": "de", "target": "en"}}))
    (data / "train.tsv").write_text("".join(f"{p.source}\t{p.target}\t{p.kind}\n" for p in PAIRS))
    before = (data / "train.tsv").read_bytes()
    described = prepare_dictionary(data, bundle / "dictionary.tsv.gz", bundle=bundle)
    assert (data / "train.tsv").read_bytes() == before and sorted(p.name for p in data.iterdir()) == [
        "manifest.json",
        "train.tsv",
    ]  # the data directory is only read
    verified = load_bundle_manifest(bundle)  # every file's sha256, the new index's included
    assert verified.dictionary_path == bundle / "dictionary.tsv.gz"
    assert verified.manifest["dictionary"] == described
    assert described["sense"] == {"rule": "evidence", "min_share": 0.2, "min_frequency": 2.5, "max_words": 2}
    index = TermIndex.load(bundle / "dictionary.tsv.gz")
    # With wordfreq's frequencies: disturbance has half the evidence, Anlage's readings a sixth each.
    assert index.lookup("Gleis") == (1, "track")
    assert index.lookup("Störung") == (1, "disturbance")
    assert index.lookup("gehen") == (0, "go") and index.lookup("Beileid") == (0, "condolence")
    assert index.lookup("Anlage") is None
    assert len(index) == described["indexed_forms"] == 5

    (bundle / "dictionary.tsv.gz").write_bytes(b"not the index")
    with pytest.raises(ValueError, match="dictionary.tsv.gz: corrupted"):
        load_bundle_manifest(bundle)


def test_the_index_alone_is_rebuilt_in_a_data_directory_and_its_manifest_says_how(tmp_path: Path) -> None:
    from seq2seq.cli.hints import prepare_dictionary

    hints = {"indexed_forms": 99, "sense": {"rule": "usual"}}
    manifest = {"languages": {"source": "de", "target": "en"}, "hints": hints}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    (tmp_path / "train.tsv").write_text("".join(f"{p.source}\t{p.target}\t{p.kind}\n" for p in PAIRS))
    rule = SenseRule(min_share=0.8, min_frequency=0, max_words=2)
    described = prepare_dictionary(tmp_path, tmp_path / "dictionary.tsv.gz", rule=rule)
    written = json.loads((tmp_path / "manifest.json").read_text())["hints"]
    assert (
        written
        == {"indexed_forms": 3, "sense": {"rule": "evidence", **rule.describe()}}
        == {k: described[k] for k in ("indexed_forms", "sense")}
    )
    index = TermIndex.load(tmp_path / "dictionary.tsv.gz")
    # A share of 0.8: Gleis (3 of 4) and Störung (3 of 6) are left out, the one-reading forms kept.
    assert [index.lookup(f) for f in ("Gleis", "Störung", "Beileid")] == [None, None, (0, "condolence")]


def test_the_command_refuses_a_bundle_without_dictionary_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from seq2seq.cli import main

    assert main(["data", "hints", "--data-dir", str(tmp_path), "--bundle", str(tmp_path)]) == 2
    assert "--dictionary-only" in capsys.readouterr().err
    assert main(["data", "hints", "--data-dir", str(tmp_path), "--min-share", "2"]) == 2
    assert "min_share" in capsys.readouterr().err
