"""The release bundles under models/: both directions load with their files' hashes checked,
translate everyday sentences sensibly, align the words a person would, and one server
serves them both (the README's first command serves exactly this directory)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from data.dictionary import TermIndex
from seq2seq.core.config import AlignmentOptions
from seq2seq.loading import load_translator
from seq2seq.runtime.bundle import load_bundle_manifest
from service.app import create_app
from service.settings import Settings

MODELS = Path(__file__).resolve().parents[1] / "models"

# Everyday sentences, each with words its translation must hold and a (source word, target
# word) pair the word map must link: what even a small model gets right.
EVERYDAY = {
    "de-en": [("Das Haus ist klein.", {"house", "small"}, ("Haus", "house")), ("Ich habe keine Zeit.", {"time"}, None)],
    "en-de": [("The house is small.", {"Haus", "klein"}, ("house", "Haus")), ("I have no time.", {"Zeit"}, None)],
}


@pytest.mark.parametrize("direction", sorted(EVERYDAY))
def test_each_shipped_bundle_loads_checked_and_translates_everyday_sentences(direction: str) -> None:
    manifest = load_bundle_manifest(MODELS / direction).manifest  # every file's sha256 checked
    source, target = direction.split("-")
    assert (manifest["languages"]["source"], manifest["languages"]["target"]) == (source, target)
    assert manifest["metrics"]["test_bleu_beam4"] > 8 and manifest["metrics"]["gold_aer_default_map"] < 16
    translator = load_translator(MODELS / direction, threads=1)
    config = translator.decode_defaults.override(alignment=AlignmentOptions())
    for text, expected_words, link in EVERYDAY[direction]:
        result = translator.translate(text, config)
        said = {w.strip(".,!?") for w in result.text.split()}
        assert expected_words <= said, (text, result.text)
        if link is not None:
            word_map = result.alignment.word
            sources = [t.text for t in word_map.source_tokens]
            targets = [t.text for t in word_map.target_tokens]
            assert (sources.index(link[0]), targets.index(link[1])) in word_map.links, (result.text, word_map.links)


@pytest.fixture(scope="module")
def both_client():
    """One server over the whole models/ directory, as the README's first command starts it."""
    with TestClient(create_app(Settings(models=str(MODELS), threads=1))) as client:
        yield client


def test_one_server_serves_both_shipped_directions(both_client) -> None:
    languages = {item["code"]: item["targets"] for item in both_client.get("/languages").json()}
    assert languages == {"de": ["en"], "en": ["de"]}
    for text, source, target, word in (
        ("Der Hund ist klein.", "de", "en", "dog"),
        ("The dog is small.", "en", "de", "Hund"),
    ):
        answer = both_client.post("/translate", json={"q": text, "source": "auto", "target": target})
        assert answer.status_code == 200, answer.text
        assert answer.json()["detectedLanguage"]["language"] == source
        assert word in answer.json()["translatedText"], answer.json()


# A rare word each direction's model gets wrong on its own, with the term a user would give.
GLOSSARY = {
    "de-en": ("Mein Staubsauger ist kaputt.", "de", "en", {"Staubsauger": "vacuum cleaner"}),
    "en-de": ("My vacuum cleaner is broken.", "en", "de", {"vacuum cleaner": "Staubsauger"}),
}


@pytest.mark.parametrize("direction", sorted(GLOSSARY))
def test_each_shipped_direction_follows_a_glossary_and_says_it_did(both_client, direction: str) -> None:
    text, source, target, glossary = GLOSSARY[direction]
    ((source_term, target_term),) = glossary.items()
    request = {"q": text, "source": source, "target": target, "glossary": glossary}
    answer = both_client.post("/translate", json=request)
    assert answer.status_code == 200, answer.text
    assert target_term in answer.json()["translatedText"], answer.json()
    (term,) = answer.json()["terms"]
    assert (text[term["start"] : term["end"]], term["term"], term["used"]) == (source_term, target_term, True)


# Dictionary hints that showed a wrong sense while the index kept each form's first entry
# (issue 39): (direction, sentence, the rare word, the term it was shown with then).
WRONG_SENSES = [
    ("de-en", "Wegen einer Störung fällt der Zug heute aus.", "Störung", "hiccup"),
    ("de-en", "Der Zug fährt heute von Gleis drei ab.", "Gleis", "railroad line"),
    ("en-de", "The temperature is rising.", "temperature", "erhöhte Temperatur"),
    ("en-de", "The cleaner comes on Mondays.", "cleaner", "Filter"),
]


# What the evidence rule shows instead: the sense the dictionary's examples use most ("disorder":
# 17 of Störung's 42 pieces of evidence, above the fifth it needs), nothing where no sense has a
# fifth (cleaner: Putze, sauberer, Filter, Reiniger, ...).
SHOWN_NOW = {"Störung": "disorder", "Gleis": "track", "temperature": "Temperatur", "cleaner": None}


@pytest.fixture(scope="module")
def shipped_translators() -> dict:
    return {direction: load_translator(MODELS / direction, threads=1) for direction in sorted(EVERYDAY)}


@pytest.mark.parametrize(("direction", "text", "word", "wrong"), WRONG_SENSES)
def test_shipped_dictionaries_no_longer_hint_the_wrong_sense(
    shipped_translators: dict, direction: str, text: str, word: str, wrong: str
) -> None:
    translator = shipped_translators[direction]
    assert translator.decode_defaults.dictionary_hints  # what a request gets unless it says otherwise
    shown = {text[h.start : h.end]: h.term for h in translator.hints_for(text, translator.decode_defaults)}
    assert shown.get(word) != wrong, shown
    assert shown.get(word) == SHOWN_NOW[word], shown


def test_the_shipped_model_no_longer_writes_hiccup_for_a_disruption(shipped_translators: dict) -> None:
    translator = shipped_translators["de-en"]
    text = WRONG_SENSES[0][1]
    result = translator.translate(text, translator.decode_defaults)
    assert "hiccup" not in result.text.lower(), result.text


@pytest.mark.parametrize("direction", sorted(EVERYDAY))
def test_each_shipped_dictionary_was_built_with_the_served_sense_rule(direction: str) -> None:
    """Rebuilt by `crossalign data hints --dictionary-only --bundle`, hashed in bundle.json."""
    from seq2seq.cli.hints import sense_description
    from seq2seq.training.senses import SenseRule

    manifest = load_bundle_manifest(MODELS / direction).manifest
    assert manifest["dictionary"]["sense"] == sense_description("evidence", SenseRule())
    assert manifest["dictionary"]["indexed_forms"] == len(TermIndex.load(MODELS / direction / "dictionary.tsv.gz"))


def test_a_file_report_shows_what_the_shipped_model_dropped_and_a_misplaced_link() -> None:
    """Issue 42's Markdown example, as the shipped stage 12 gets it wrong: "mit dem Flugzeug" is
    not translated and the link lands on "morning"; the report used to say nothing was wrong
    (tags_approximated: 0). Now it counts the flagged segment and the unsupported tag, and the
    sidecar names them. (Issue 42's own sentence, "... mit dem [Zug](...) nach Berlin.", now
    loses "Zug" and "Berlin" unflagged: a miss of stage 12's `untranslated` detector.)"""
    from seq2seq.documents.files import format_of, read_document, translate_document
    from seq2seq.documents.translate import sentence_translator

    source = "Wir fliegen **morgen früh** mit dem [Flugzeug](https://lufthansa.de) nach Berlin.\n"
    translator = load_translator(MODELS / "de-en", threads=1)
    document = read_document(source.encode(), format_of("reise.md"))
    result = translate_document(document, sentence_translator(translator), "en")
    report = result.report.to_dict()
    assert report["tags_approximated"] == 0 and not result.partial  # as before: nothing failed
    assert report["segments_untranslated"] == 1 and report["tags_unsupported"] == 1, (result.data, report)
    (record,) = result.alignments
    assert "Flugzeug" in record["untranslated"] and "plane" not in record["translation"]
    assert record["tags_unsupported"] == [{"source": "Flugzeug", "placed_on": "morning"}]
