"""Translated software messages as a corpus: .po/.mo catalogs read as plain sentence pairs,
and `prepare --extra-corpus` adding them to training only, never a held-out or gold sentence."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import pytest

from data.catalogs import DEFAULT_PACKAGES, collect_catalogs, default_packages
from data.corpora import read_corpus
from data.corpora.catalogs import message_pair, plain_message, read_gettext, read_mo, read_po
from data.corpora.pairs import PHRASE, SENTENCE, CorpusError, Pair, split_key
from data.prepare import GOLD_DIR, PrepareOptions, prepare, read_pairs, untagged
from data.tokenizer import Tokenizer

PO = r"""# German translation of a program.
msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\n"

#: src/main.c:10
msgid "The file could not be saved."
msgstr "Die Datei konnte nicht gespeichert werden."

#, fuzzy
msgid "Do you want to quit?"
msgstr "Wollen Sie gehen?"

#, c-format
msgid "Cannot open %s."
msgstr "%s kann nicht geöffnet werden."

msgctxt "menu"
msgid "_Save As"
msgstr "Speichern _unter"

msgid ""
"Please enter your password "
"twice."
msgstr ""
"Bitte geben Sie Ihr Passwort "
"zweimal ein."

msgid "One window is open."
msgid_plural "Several windows are open."
msgstr[0] "Ein Fenster ist offen."
msgstr[1] "Mehrere Fenster sind offen."

msgid "Untranslated message."
msgstr ""

msgid "See <b>the manual</b>."
msgstr "Siehe <b>das Handbuch</b>."

#~ msgid "An obsolete message."
#~ msgstr "Eine veraltete Meldung."

msgid "GIMP"
msgstr "GIMP"
"""

EXPECTED = [
    Pair("Die Datei konnte nicht gespeichert werden.", "The file could not be saved.", SENTENCE),
    Pair("Speichern unter", "Save As", PHRASE),
    Pair("Bitte geben Sie Ihr Passwort zweimal ein.", "Please enter your password twice.", SENTENCE),
    Pair("Ein Fenster ist offen.", "One window is open.", SENTENCE),
]


def write_mo(path: Path, messages: dict[str, str]) -> None:
    """A GNU .mo file (the format msgfmt writes): header, two string tables, the strings."""
    keys = sorted(messages)
    ids = b"".join(key.encode() + b"\0" for key in keys)
    strs = b"".join(messages[key].encode() + b"\0" for key in keys)
    count = len(keys)
    ids_start = 28 + 16 * count
    strs_start = ids_start + len(ids)
    id_table, str_table, id_offset, str_offset = [], [], ids_start, strs_start
    for key in keys:
        raw_id, raw_str = key.encode(), messages[key].encode()
        id_table += [len(raw_id), id_offset]
        str_table += [len(raw_str), str_offset]
        id_offset += len(raw_id) + 1
        str_offset += len(raw_str) + 1
    header = struct.pack("<7I", 0x950412DE, 0, count, 28, 28 + 8 * count, 0, 0)
    path.write_bytes(header + struct.pack(f"<{4 * count}I", *id_table, *str_table) + ids + strs)


MO_MESSAGES = {
    "": "Content-Type: text/plain; charset=UTF-8\n",
    "The printer is not connected.": "Der Drucker ist nicht verbunden.",
    "toolbar\x04&Open": "Ö&ffnen",
    "Saved %d files.": "%d Dateien gespeichert.",
    "One file is open.\x00%n files are open.": "Eine Datei ist offen.\x00%n Dateien sind offen.",
}


def test_po_catalog_gives_plain_translated_messages(tmp_path: Path):
    path = tmp_path / "de.po"
    path.write_text(PO, encoding="utf-8")
    assert list(read_gettext(path)) == EXPECTED
    # read_po itself keeps placeholders and markup (the filter is message_pair's) but never
    # fuzzy, obsolete, untranslated or header entries
    originals = [original for original, _ in read_po(path)]
    assert "Cannot open %s." in originals and "See <b>the manual</b>." in originals
    assert not {"Do you want to quit?", "An obsolete message.", "Untranslated message.", ""} & set(originals)


def test_mo_catalog_gives_the_same_kind_of_pairs(tmp_path: Path):
    path = tmp_path / "app.mo"
    write_mo(path, MO_MESSAGES)
    assert dict(read_mo(path))["The printer is not connected."] == "Der Drucker ist nicht verbunden."
    # msgfmt's order (sorted msgids); a plural gives its singular, a msgctxt is dropped
    assert list(read_gettext(path)) == [
        Pair("Eine Datei ist offen.", "One file is open.", SENTENCE),
        Pair("Der Drucker ist nicht verbunden.", "The printer is not connected.", SENTENCE),
        Pair("Öffnen", "Open", PHRASE),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "Cannot open %s.",
        "Hello {name}.",
        "Set $HOME first.",
        "See https://example.org now.",
        "Open /etc/fstab.",
        "Read config.ini first.",
        "Line one\nline two",
        "C:\\Windows",
        "mail me@example.org",
        "1234",
    ],
)
def test_messages_that_are_not_plain_text_are_skipped(text: str):
    assert plain_message(text) == ""
    assert message_pair(text, "Ein deutscher Satz.") is None


def test_accelerators_go_and_untranslated_messages_are_no_pairs():
    assert plain_message("_Open File") == "Open File"
    assert plain_message("Drag & Drop") == "Drag & Drop"  # an ampersand before a space is text
    assert plain_message("Öffnen (_O)") == "Öffnen"
    assert message_pair("Firefox", "Firefox") is None


def test_a_directory_skips_a_broken_catalog_but_a_named_file_is_an_error(tmp_path: Path, caplog):
    (tmp_path / "good.po").write_text(PO, encoding="utf-8")
    broken = tmp_path / "sub" / "broken.po"
    broken.parent.mkdir()
    broken.write_text('msgid "a"\nmsgstr "b"\nthis is not po\n', encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="crossalign.data"):
        assert list(read_gettext(tmp_path)) == EXPECTED
    assert "broken.po:3" in caplog.text
    with pytest.raises(CorpusError, match=r"broken\.po:3: expected msgctxt"):
        list(read_gettext(broken))
    (tmp_path / "latin1.po").write_bytes('msgid "x"\nmsgstr "Gr\xfc\xdfe"\n'.encode("latin-1"))
    with pytest.raises(CorpusError, match="invalid UTF-8"):
        list(read_gettext(tmp_path / "latin1.po"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusError, match="no .po or .mo"):
        list(read_gettext(tmp_path / "empty"))
    with pytest.raises(CorpusError, match="no such file"):
        list(read_gettext(tmp_path / "absent"))


def test_gettext_corpus_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "de.po").write_text(PO, encoding="utf-8")
    pairs, inputs, license_ = read_corpus(f"gettext:{tmp_path}")
    assert list(pairs) == EXPECTED
    assert inputs == [tmp_path / "de.po"]
    assert "license" in license_
    monkeypatch.setenv("HOME", str(tmp_path))  # "gettext:~/..." reaches no shell that would expand it
    pairs, inputs, _ = read_corpus("gettext:~/de.po")
    assert list(pairs) == EXPECTED and inputs == [tmp_path / "de.po"]


def test_extra_corpus_adds_training_pairs_only_and_never_a_held_out_or_gold_sentence(tmp_path: Path):
    corpus = tmp_path / "corpus.tsv"
    corpus.write_text("".join(f"Satz Nummer {i} hier.\tSentence number {i} here.\n" for i in range(300)))
    plain = prepare(
        tmp_path / "plain", PrepareOptions(corpus=f"tsv:{corpus}", vocab_size=60, test_size=20, valid_size=15)
    )
    held_out = read_pairs(tmp_path / "plain" / "test.tsv")[0]
    gold_source, gold_target = (GOLD_DIR / "de-en.gold.tsv").read_text(encoding="utf-8").splitlines()[0].split("\t")[:2]
    catalog = tmp_path / "catalogs" / "de.po"
    catalog.parent.mkdir()
    catalog.write_text(
        PO
        + f'\nmsgid "{held_out.target}"\nmsgstr "Etwas anderes hier."\n'
        + f'\nmsgid "Something else here."\nmsgstr "{gold_source}"\n'
        + f'\nmsgid "{gold_target.upper()}"\nmsgstr "Noch etwas."\n',
        encoding="utf-8",
    )
    mixed = prepare(
        tmp_path / "mixed",
        PrepareOptions(
            corpus=f"tsv:{corpus}",
            test_size=20,
            valid_size=15,
            tokenizer_model=tmp_path / "plain" / "spm.model",
            extra_corpora=(f"gettext:{catalog.parent}",),
        ),
    )
    for split in ("valid", "test"):  # the held-out splits are the main corpus's alone
        assert read_pairs(tmp_path / "mixed" / f"{split}.tsv") == read_pairs(tmp_path / "plain" / f"{split}.tsv")
    train = read_pairs(tmp_path / "mixed" / "train.tsv")
    assert train[: len(read_pairs(tmp_path / "plain" / "train.tsv"))] == read_pairs(tmp_path / "plain" / "train.tsv")
    assert train[-len(EXPECTED) :] == EXPECTED  # the catalog's plain pairs, and nothing else
    forbidden = {split_key(held_out.target), split_key(gold_source), split_key(gold_target)}
    assert not [p for p in train if split_key(p.source) in forbidden or split_key(p.target) in forbidden]
    assert mixed["extra_corpora"] == [f"gettext:{catalog.parent}"] and mixed["extra_pairs"] == len(EXPECTED)
    assert mixed["extra_dropped"] == 3  # the held-out and the two gold messages
    assert mixed["extra_added"] == {f"gettext:{catalog.parent}": len(EXPECTED)}
    assert "licenses of the programs" in mixed["extra_licenses"][f"gettext:{catalog.parent}"]
    assert mixed["counts"]["train"]["total"] == plain["counts"]["train"]["total"] + len(EXPECTED)
    assert str(catalog) in [entry["path"] for entry in mixed["inputs"]]


def test_catalogs_are_collected_from_a_debian_package_and_read_as_pairs(tmp_path: Path):
    # A real `apt-get download` (CI installs its Debian packages the same way) of a small
    # package, plus one that does not exist: logged and skipped, the rest still collected.
    counts = collect_catalogs(tmp_path, ["xdg-user-dirs", "no-such-package-crossalign"], "de")
    assert counts == {"xdg-user-dirs": 1}
    assert (tmp_path / "xdg-user-dirs" / "xdg-user-dirs.mo").is_file()
    assert (tmp_path / "packages.tsv").read_text().startswith("xdg-user-dirs\txdg-user-dirs_")
    collect_catalogs(tmp_path, ["xdg-user-dirs"], "de")  # a second run replaces the package's line
    assert (tmp_path / "packages.tsv").read_text().count("xdg-user-dirs\t") == 1
    pairs = list(read_gettext(tmp_path))
    assert Pair("Schreibtisch", "Desktop", PHRASE) in pairs
    assert not list(tmp_path.glob("*.deb")) and not list(Path.cwd().glob("xdg-user-dirs_*.deb"))


def test_the_default_packages_follow_the_language():
    assert default_packages("de") == DEFAULT_PACKAGES and "libreoffice-l10n-de" in DEFAULT_PACKAGES
    french = default_packages("fr")
    assert "libreoffice-l10n-fr" in french and "libreoffice-l10n-de" not in french
    assert len(french) == len(DEFAULT_PACKAGES) and "vlc-l10n" in french  # carries every language


def test_tagged_extra_corpora_mark_each_training_source_with_its_corpus(tmp_path: Path):
    corpus = tmp_path / "corpus.tsv"
    corpus.write_text("".join(f"Satz Nummer {i} hier.\tSentence number {i} here.\n" for i in range(300)))
    catalog = tmp_path / "catalogs" / "de.po"
    catalog.parent.mkdir()
    catalog.write_text(PO, encoding="utf-8")
    plain = prepare(
        tmp_path / "plain", PrepareOptions(corpus=f"tsv:{corpus}", vocab_size=60, test_size=20, valid_size=15)
    )
    spec = f"gettext:{catalog.parent}"
    for reverse in (False, True):
        out = tmp_path / f"tagged-{reverse}"
        manifest = prepare(
            out,
            PrepareOptions(
                corpus=f"tsv:{corpus}",
                test_size=20,
                valid_size=15,
                tokenizer_model=tmp_path / "plain" / "spm.model",
                extra_corpora=(spec,),
                tag_extra_corpora=True,
                reverse=reverse,
            ),
        )
        assert manifest["extra_tags"] == {spec: "⟦gettext⟧"}
        train = read_pairs(out / "train.tsv")
        main, extra = train[: -len(EXPECTED)], train[-len(EXPECTED) :]
        expected = [Pair(p.target, p.source, p.kind) for p in EXPECTED] if reverse else EXPECTED
        assert extra == [Pair(f"⟦gettext⟧ {p.source}", p.target, p.kind) for p in expected]
        assert not any("⟦" in p.source + p.target for p in main + read_pairs(out / "valid.tsv"))
        tokenizer = Tokenizer(out / "spm.model")  # the tag is one piece; the rest encodes as before
        assert tokenizer.vocab_size == plain["tokenizer"]["vocab_size"] + 1 == manifest["tokenizer"]["vocab_size"]
        tag_id = tokenizer.sp.piece_to_id("⟦gettext⟧")
        assert tag_id == tokenizer.vocab_size - 1 and tag_id in tokenizer.encode(extra[0].source)
        assert tokenizer.encode(extra[0].source)[-3:] == tokenizer.encode(untagged(extra[0].source))[-3:]
