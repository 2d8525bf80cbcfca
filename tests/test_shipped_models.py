"""The release bundles under models/: both directions load with their files' hashes checked,
translate everyday sentences sensibly, align the words a person would, and one server
serves them both (the README's first command serves exactly this directory)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

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
