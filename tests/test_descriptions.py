"""Debian's translated package descriptions (DDTP) as a corpus: apt's Translation-LL files
joined to their English originals by md5, summaries, paragraphs, sentences and list items
paired only where both sides agree, and a real `apt-get update` of the indexes."""

from __future__ import annotations

import bz2
from pathlib import Path

import pytest

from data.corpora import read_corpus
from data.corpora.descriptions import description_pairs, read_descriptions, read_translation_file
from data.corpora.pairs import PHRASE, SENTENCE, CorpusError, Pair
from data.descriptions import collect_descriptions

ENGLISH = """\
Package: pager
Description-md5: 1111
Description-en: simple text pager
 The pager shows a text one screen at a time. It is small and fast.
 .
 Features:
  * colours for the search results
  * a help screen

Package: editor
Description-md5: 2222
Description-en: text editor for the terminal
 The editor opens several files at once.
 .
 Example:
   editor --help

Package: game
Description-md5: 3333
Description-en: puzzle game
 Move the blocks until they fit.

Package: untranslated
Description-md5: 4444
Description-en: a package without a German description
 Nobody translated it.
"""

GERMAN = """\
Package: pager
Description-md5: 1111
Description-de: Einfacher Textbetrachter
 Der Betrachter zeigt einen Text Seite für Seite. Er ist klein und schnell.
 .
 Funktionen:
  * Farben für die Suchergebnisse
  * ein Hilfebildschirm

Package: editor
Description-md5: 2222
Description-de: Texteditor für das Terminal
 Der Editor öffnet mehrere Dateien gleichzeitig. Er ist sehr beliebt.
 .
 Beispiel:
   editor --help

Package: game
Description-md5: 3333
Description-de: Knobelspiel
 Verschieben Sie die Blöcke, bis sie passen.
 .
 Viel Spaß beim Spielen.

Package: stale
Description-md5: 9999
Description-de: Eine Beschreibung, deren Original es nicht mehr gibt
 Sie wird übersprungen.
"""

EXPECTED = [
    Pair("Einfacher Textbetrachter", "simple text pager", PHRASE),
    Pair("Der Betrachter zeigt einen Text Seite für Seite.", "The pager shows a text one screen at a time.", SENTENCE),
    Pair("Er ist klein und schnell.", "It is small and fast.", SENTENCE),
    Pair("Funktionen:", "Features:", PHRASE),
    Pair("Farben für die Suchergebnisse", "colours for the search results", PHRASE),
    Pair("ein Hilfebildschirm", "a help screen", PHRASE),
    Pair("Texteditor für das Terminal", "text editor for the terminal", PHRASE),
    # editor: its first paragraph has two German sentences to one English: not paired; its
    # second paragraph is preformatted: skipped.
    Pair("Knobelspiel", "puzzle game", PHRASE),
    # game: two German paragraphs to one English: only the summary pairs.
]


def write_corpus(root: Path, german: str = GERMAN, compress: bool = False) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "Translation-en").write_text(ENGLISH, encoding="utf-8")
    if compress:
        (root / "Translation-de.bz2").write_bytes(bz2.compress(german.encode()))
    else:
        (root / "Translation-de").write_text(german, encoding="utf-8")
    return root


def test_descriptions_pair_where_both_sides_agree(tmp_path: Path) -> None:
    assert list(read_descriptions(write_corpus(tmp_path))) == EXPECTED


def test_a_compressed_index_reads_the_same_and_the_spec_names_its_files(tmp_path: Path) -> None:
    root = write_corpus(tmp_path / "d", compress=True)
    pairs, inputs, license_ = read_corpus(f"descriptions:{root}")
    assert list(pairs) == EXPECTED
    assert inputs == [root / "Translation-en", root / "Translation-de.bz2"]
    assert "DDTP" in license_


def test_the_summary_pairs_even_when_the_paragraphs_do_not() -> None:
    german = ["Zusammenfassung", "Erster Absatz.", ".", "Zweiter Absatz."]
    english = ["summary", "One paragraph."]
    assert list(description_pairs(german, english)) == [("Zusammenfassung", "summary")]


def test_bad_indexes_are_errors_that_name_the_file(tmp_path: Path) -> None:
    root = write_corpus(tmp_path / "bad", german="Package: x\nthis line has no field\n")
    with pytest.raises(CorpusError, match=r"Translation-de:2: expected a 'Field: value' line"):
        list(read_descriptions(root))
    (root / "Translation-de").write_bytes(b"Package: x\nDescription-de: \xff\n")
    with pytest.raises(CorpusError, match="invalid UTF-8"):
        read_translation_file(root / "Translation-de", "de")
    (root / "Translation-fr").write_text("")
    with pytest.raises(CorpusError, match="one other Translation-LL file"):
        list(read_descriptions(root))
    (tmp_path / "only").mkdir()
    (tmp_path / "only" / "Translation-de").write_text(GERMAN)
    with pytest.raises(CorpusError, match="no Translation-en"):
        list(read_descriptions(tmp_path / "only"))


def test_descriptions_are_fetched_with_apt_and_read_as_pairs(tmp_path: Path) -> None:
    # A real `apt-get update` into a directory of its own (the system's lists untouched),
    # fetching only the signed translation indexes of the system's Debian sources.
    counts = collect_descriptions(tmp_path, "de")
    assert counts["en"] > 10_000 and counts["de"] > 1_000
    text = (tmp_path / "Translation-de").read_text(encoding="utf-8")
    assert "Description-de:" in text and "Description-en:" not in text
    pairs = list(read_descriptions(tmp_path))
    assert len(pairs) > counts["de"]  # summaries and sentences
    assert sum(p.kind == SENTENCE for p in pairs) > 1_000
    assert all(p.source != p.target and "\t" not in p.source + p.target for p in pairs)
    with pytest.raises(CorpusError, match="language code"):
        collect_descriptions(tmp_path, "en")
