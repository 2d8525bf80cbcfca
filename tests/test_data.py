"""Corpus readers, Ding cleaning, the leakage-free split and `prepare` end to end."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import io
import json
import random
import sys
import time
import unicodedata
from pathlib import Path

import pytest

from data.corpora import ding, read_corpus
from data.corpora.ding import clean_ding_text, find_ding, parse_ding_line, read_ding
from data.corpora.lines import read_moses, read_tsv
from data.corpora.pairs import PHRASE, SENTENCE, CorpusError, Pair, is_sentence, split_key
from data.prepare import (
    Elapsed,
    PrepareError,
    PrepareOptions,
    add_arguments,
    check_held_out_sizes,
    clock,
    data_languages,
    options_from,
    prepare,
    read_pairs,
)
from data.split import split_pairs
from data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer

SHIPPED_TOKENIZER = Path(__file__).resolve().parents[1] / "models" / "de-en" / "spm.model"

# --------------------------------------------------------------------------- Ding cleaning


def test_example_sentence_keeps_one_of_the_slashed_words():
    assert parse_ding_line("Es war purer Zufall. :: It was sheer/pure coincidence.") == [
        Pair("Es war purer Zufall.", "It was sheer coincidence.", SENTENCE)
    ]


@pytest.mark.parametrize(
    "raw, clean",
    [
        ("Abkürzung {f} /Abk./", "Abkürzung"),  # gender and abbreviation
        ("Aalmolche {pl} (Amphiuma) [zool.] <Aalmolch>", "Aalmolche"),  # gloss, domain, variant
        ("eel-smoking business <eelsmoking business>", "eel-smoking business"),
        ("to put a spoke in sb.'s wheel [Br.] [coll.]", "to put a spoke in wheel"),
        ("jdm. etw. geben", "geben"),
        ("to give sb. sth.", "to give"),
        ("auf jdn. warten", "auf warten"),
        ("(zoologische (Unter)familie) Katzen", "Katzen"),  # nested annotation
        ("none other gods but me / other gods before me", ""),  # alternatives of unknown extent
    ],
)
def test_clean_ding_text_strips_annotations_and_placeholders(raw: str, clean: str):
    assert clean_ding_text(raw) == clean


def test_placeholder_lookalikes_in_real_sentences_survive():
    assert parse_ding_line("Ich glaube schon. :: I think so.") == [Pair("Ich glaube schon.", "I think so.", SENTENCE)]
    assert clean_ding_text("That's anyone's guess.") == "That's anyone's guess."


def test_sub_entries_align_by_position_and_are_labelled():
    line = "Buch {n} | Bücher {pl} | Er gab mir das Buch. :: book | books | He gave me the book."
    assert parse_ding_line(line) == [
        Pair("Buch", "book", PHRASE),
        Pair("Bücher", "books", PHRASE),
        Pair("Er gab mir das Buch.", "He gave me the book.", SENTENCE),
    ]
    # A different number of sub-entries: which example translates which is unknown.
    assert parse_ding_line("Buch {n} | Bücher {pl} :: book") == []


def test_alternatives_pair_by_position_not_as_a_cross_product():
    pairs = parse_ding_line("blank {adj}; pur; rein :: sheer; pure [Br.]")
    assert [(p.source, p.target) for p in pairs] == [("blank", "sheer"), ("pur", "pure"), ("rein", "pure")]
    # Semicolons inside a gloss do not split alternatives.
    assert [p.source for p in parse_ding_line("Bank {f} (Sitz; Möbel) :: bench")] == ["Bank"]


def test_sentence_versus_phrase():
    assert is_sentence("Er gab mir das Buch.")
    assert is_sentence("Wo ist er?")
    assert is_sentence("„Komm her!“, rief sie.")
    assert not is_sentence("er gab mir das Buch.")  # not capitalised
    assert not is_sentence("Er gab mir das Buch")  # no final punctuation
    assert not is_sentence("Komm!")  # too short
    # A pair is a sentence only if both sides are.
    assert parse_ding_line("Er kommt gleich. :: to come soon")[0].kind == PHRASE


def test_read_ding_skips_comments_and_names_file_and_line_of_bad_input(tmp_path: Path):
    path = tmp_path / "de-en"
    path.write_text(
        "# Version :: 1.9\nHaus {n} :: house\n\nEs regnet heute. :: It is raining today.\n", encoding="utf-8"
    )
    assert list(read_ding(path)) == [
        Pair("Haus", "house", PHRASE),
        Pair("Es regnet heute.", "It is raining today.", SENTENCE),
    ]
    path.write_text("Haus {n} :: house\nnot a dictionary line\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"de-en:2: expected 'German :: English'"):
        list(read_ding(path))


def test_missing_ding_explains_how_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(ding, "DING_SYSTEM_PATH", tmp_path / "no-such-system-file")
    monkeypatch.setattr(ding.Path, "home", lambda: tmp_path / "home")
    monkeypatch.setattr(ding.shutil, "which", lambda name: None)  # as on a machine without apt

    def no_subprocess(*args, **kwargs):
        raise AssertionError("find_ding must not run apt-get here")

    monkeypatch.setattr(ding.subprocess, "run", no_subprocess)
    with pytest.raises(CorpusError) as error:
        find_ding(cache_dir=tmp_path / "cache")
    assert "apt-get install trans-de-en" in str(error.value) and "--ding-path" in str(error.value)
    with pytest.raises(CorpusError, match="apt-get install trans-de-en"):
        read_corpus("ding")
    with pytest.raises(CorpusError, match=r"nowhere\.txt: no such file.*apt-get install"):
        find_ding(tmp_path / "nowhere.txt")
    # A copy already unpacked into the cache is found without any download.
    cached = tmp_path / "cache" / "root" / "usr/share/trans/de-en"
    cached.parent.mkdir(parents=True)
    cached.write_text("Haus {n} :: house\n", encoding="utf-8")
    assert find_ding(cache_dir=tmp_path / "cache") == cached


# --------------------------------------------------------------------------- TSV and Moses


def test_read_tsv_good_input(tmp_path: Path):
    path = tmp_path / "pairs.tsv"
    path.write_text("Hallo Welt.\tHello world.\tCC-BY 2.0 #123\n\n  Ja.  \t Yes.\r\n", encoding="utf-8")
    assert list(read_tsv(path)) == [Pair("Hallo Welt.", "Hello world.", SENTENCE), Pair("Ja.", "Yes.", SENTENCE)]


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"Hallo.\tHello.\nkein Tab hier\n", "found no tab"),
        (b"Hallo.\tHello.\n \tEmpty.\n", "empty source"),
        (b"Hallo.\tHello.\nLeer.\t  \n", "empty target"),
        (b"Hallo.\tHello.\nGr\xfc\xdfe.\tGreetings.\n", "invalid UTF-8"),  # Latin-1, not UTF-8
    ],
)
def test_read_tsv_rejects_malformed_lines_naming_file_and_line(tmp_path: Path, content: bytes, problem: str):
    path = tmp_path / "broken.tsv"
    path.write_bytes(content)
    with pytest.raises(CorpusError) as error:
        list(read_tsv(path))
    assert "broken.tsv:2:" in str(error.value) and problem in str(error.value)


def write_moses(tmp_path: Path, source: bytes, target: bytes) -> tuple[Path, Path]:
    (tmp_path / "corpus.de").write_bytes(source)
    (tmp_path / "corpus.en").write_bytes(target)
    return tmp_path / "corpus.de", tmp_path / "corpus.en"


def test_read_moses_good_input(tmp_path: Path):
    src, tgt = write_moses(tmp_path, b"Guten Morgen.\n\nDanke.\n", b"Good morning.\n\nThanks.\n")
    assert list(read_moses(src, tgt)) == [
        Pair("Guten Morgen.", "Good morning.", SENTENCE),
        Pair("Danke.", "Thanks.", SENTENCE),
    ]
    pairs, inputs, _ = read_corpus(f"moses:{src},{tgt}")
    assert len(list(pairs)) == 2 and inputs == [src, tgt]


@pytest.mark.parametrize(
    "source, target, where, problem",
    [
        (b"a\nb\nc\n", b"x\ny\n", "corpus.de:3:", "different line counts"),  # one extra source line
        (b"a\nb\n", b"x\ny\nz\nw\n", "corpus.en:3:", "different line counts"),
        (b"a\n\nc\n", b"x\ny\nz\n", "corpus.de:2:", "empty line"),
        (b"a\nb\n", b"x\n\xff\xfe\n", "corpus.en:2:", "invalid UTF-8"),
    ],
)
def test_read_moses_rejects_malformed_input(tmp_path: Path, source: bytes, target: bytes, where: str, problem: str):
    src, tgt = write_moses(tmp_path, source, target)
    with pytest.raises(CorpusError) as error:
        list(read_moses(src, tgt))
    assert where in str(error.value) and problem in str(error.value)


def test_unknown_corpus_spec_and_missing_file(tmp_path: Path):
    with pytest.raises(CorpusError, match="unknown corpus spec"):
        read_corpus("csv:x")
    pairs, _, _ = read_corpus(f"tsv:{tmp_path / 'absent.tsv'}")
    with pytest.raises(CorpusError, match=r"absent\.tsv: no such file"):
        list(pairs)


# --------------------------------------------------------------------------- split


def synthetic_pairs(n: int) -> list[Pair]:
    pairs = []
    for i in range(n):
        pairs.append(Pair(f"Satz Nummer {i} ist hier.", f"Sentence number {i} is here.", SENTENCE))
        if i % 5 == 0:  # a second reference, and a phrase sharing the sentence's source
            pairs.append(Pair(f"Satz Nummer {i} ist hier.", f"Here is sentence number {i}.", SENTENCE))
            pairs.append(Pair(f"satz nummer {i}  ist hier.", f"sentence no. {i}", PHRASE))
        if i % 3 == 0:
            pairs.append(Pair(f"Wort {i}", f"word {i}", PHRASE))
    return pairs


def test_split_has_no_leakage_and_holds_out_only_sentences():
    pairs = synthetic_pairs(2000)
    splits = split_pairs(pairs, test_size=100, valid_size=80)
    train_keys = {split_key(p.source) for p in splits.train}
    valid_keys = {split_key(p.source) for p in splits.valid}
    test_keys = {split_key(p.source) for p in splits.test}
    assert not train_keys & valid_keys and not train_keys & test_keys and not valid_keys & test_keys
    assert all(p.kind == SENTENCE for p in splits.valid + splits.test)
    assert len(valid_keys) == len(splits.valid) and len(test_keys) == len(splits.test)  # one reference each
    assert 60 <= len(splits.test) <= 140 and 45 <= len(splits.valid) <= 115
    assert any(p.kind == PHRASE for p in splits.train)


def test_no_training_pair_shares_a_side_with_a_held_out_pair():
    """Read the other way (en->de), a held-out English sentence is a source: it must not be
    trained on either, not even as the target of another German sentence."""
    pairs = synthetic_pairs(2000)
    # Ding-like repeats: the same English under another German source, and a German source
    # that is some held-out pair's translation read back.
    pairs += [Pair(f"Hier ist Satz {i}.", f"Sentence number {i} is here.", SENTENCE) for i in range(2000)]
    pairs += [Pair(f"Sentence number {i} is here.", f"Kopie {i}", PHRASE) for i in range(0, 2000, 7)]
    splits = split_pairs(pairs, test_size=100, valid_size=80)
    held_out = {split_key(side) for p in splits.valid + splits.test for side in (p.source, p.target)}
    assert held_out
    leaked = [p for p in splits.train if split_key(p.source) in held_out or split_key(p.target) in held_out]
    assert not leaked, leaked[:3]
    assert len(splits.train) > 0.8 * len(pairs)  # only what touches a held-out sentence goes


def test_prepare_reverse_writes_the_same_split_the_other_way(tmp_path: Path):
    corpus = tmp_path / "corpus.tsv"
    corpus.write_text("".join(f"Satz Nummer {i} hier.\tSentence number {i} here.\n" for i in range(300)))
    forward = prepare(
        tmp_path / "de-en", PrepareOptions(corpus=f"tsv:{corpus}", vocab_size=60, test_size=20, valid_size=15)
    )
    backward = prepare(
        tmp_path / "en-de",
        PrepareOptions(
            corpus=f"tsv:{corpus}",
            test_size=20,
            valid_size=15,
            tokenizer_model=tmp_path / "de-en" / "spm.model",
            reverse=True,
        ),
    )
    assert forward["languages"] == {"source": "de", "target": "en"}
    assert backward["languages"] == {"source": "en", "target": "de"}
    assert data_languages(tmp_path / "en-de") == ("en", "de")
    for split in ("train", "valid", "test"):
        there = read_pairs(tmp_path / "de-en" / f"{split}.tsv")
        back = read_pairs(tmp_path / "en-de" / f"{split}.tsv")
        assert [(p.target, p.source) for p in back] == [(p.source, p.target) for p in there], split
    assert backward["counts"] == forward["counts"]


def test_split_is_deterministic_and_independent_of_input_order():
    pairs = [Pair(f"Satz {i} ist hier.", f"Sentence {i} is here.", SENTENCE) for i in range(1500)]
    first = split_pairs(pairs, test_size=60, valid_size=40)
    shuffled = pairs[:]
    random.Random(7).shuffle(shuffled)
    second = split_pairs(shuffled, test_size=60, valid_size=40)
    for name in ("train", "valid", "test"):
        assert set(getattr(first, name)) == set(getattr(second, name)), name
    assert first == split_pairs(pairs, test_size=60, valid_size=40)


def test_small_corpus_holds_out_at_most_a_quarter():
    pairs = [Pair(f"Satz {i} ist hier.", f"Sentence {i} is here.", SENTENCE) for i in range(200)]
    splits = split_pairs(pairs)  # default sizes far exceed the corpus
    assert len(splits.valid) + len(splits.test) <= 0.4 * len(pairs)
    assert len(splits.train) >= 0.6 * len(pairs)


# --------------------------------------------------------------------------- prepare


def test_prepare_end_to_end_on_a_tsv_corpus(tmp_path: Path):
    subjects = [
        ("Der Hund", "The dog"),
        ("Die Katze", "The cat"),
        ("Mein Vater", "My father"),
        ("Das Kind", "The child"),
        ("Unsere Lehrerin", "Our teacher"),
    ]
    verbs = [("sieht", "sees"), ("mag", "likes"), ("sucht", "is looking for"), ("findet", "finds")]
    objects = [
        ("den Ball", "the ball"),
        ("das Haus", "the house"),
        ("einen Apfel", "an apple"),
        ("die Zeitung", "the newspaper"),
        ("den Garten", "the garden"),
        ("ein Buch", "a book"),
        ("den Schlüssel", "the key"),
        ("die Straße", "the street"),
        ("das Fahrrad", "the bicycle"),
        ("den Mond", "the moon"),
    ]
    lines = [f"{s} {v} {o}.\t{se} {ve} {oe}.\n" for s, se in subjects for v, ve in verbs for o, oe in objects]
    corpus = tmp_path / "corpus.tsv"
    corpus.write_text("".join(lines), encoding="utf-8")
    out = tmp_path / "prepared"
    manifest = prepare(out, PrepareOptions(corpus=f"tsv:{corpus}", vocab_size=80, test_size=20, valid_size=15))

    for name in ("train.tsv", "valid.tsv", "test.tsv", "spm.model", "manifest.json"):
        assert (out / name).is_file(), name
    assert json.loads((out / "manifest.json").read_text()) == manifest
    splits = {name: read_pairs(out / f"{name}.tsv") for name in ("train", "valid", "test")}
    for name, pairs in splits.items():
        assert manifest["counts"][name]["total"] == len(pairs)
    assert sum(len(p) for p in splits.values()) == len(lines)
    assert min(len(splits["valid"]), len(splits["test"])) > 0
    assert not {p.source for p in splits["train"]} & {p.source for p in splits["test"] + splits["valid"]}
    assert manifest["inputs"] == [{"path": str(corpus), "sha256": hashlib.sha256(corpus.read_bytes()).hexdigest()}]
    assert manifest["tokenizer"]["vocab_size"] == 80

    tokenizer = Tokenizer(out / "spm.model")
    assert (tokenizer.sp.pad_id(), tokenizer.sp.unk_id(), tokenizer.sp.bos_id(), tokenizer.sp.eos_id()) == (
        PAD_ID,
        UNK_ID,
        BOS_ID,
        EOS_ID,
    )
    text = "Die Katze mag den Garten."
    ids = tokenizer.encode(text)
    assert min(ids) > EOS_ID and tokenizer.decode(ids + [EOS_ID]) == text
    _, pieces, offsets = tokenizer.encode_with_offsets("Die Straße")
    assert "".join(pieces).replace("▁", " ").strip() == "Die Straße"
    assert offsets[-1][1] == len("Die Straße")


@pytest.mark.parametrize(
    "text", ["Die Straße", "Er wohnt in München.", "ﬁnden Sie   das?", "Käse 😀 e\u0301", "  Rand  ", "ＮＡＴＯ", ""]
)
def test_piece_offsets_point_into_the_text_as_given(text: str):
    """Each piece's (start, end) are character offsets into the text as the user wrote it,
    normalization and all (the NFKC ligature and full-width letters): what the alignment maps
    and the explorer highlight."""
    tokenizer = Tokenizer(SHIPPED_TOKENIZER)
    ids, pieces, offsets = tokenizer.encode_with_offsets(text)
    assert ids == tokenizer.encode(text) and pieces == tokenizer.sp.encode(text, out_type=str)
    assert len(offsets) == len(pieces)
    for (start, end), piece in zip(offsets, pieces, strict=True):
        assert 0 <= start <= end <= len(text)
        spelled = unicodedata.normalize("NFKC", text[start:end]).strip()
        assert spelled == piece.lstrip("▁") or piece == "▁", (text, piece, text[start:end])
    assert [start for start, _ in offsets] == sorted(start for start, _ in offsets)


def test_prepare_can_reuse_an_existing_tokenizer(tmp_path: Path):
    """`--tokenizer`: the data of a model that is continued or fine-tuned keeps its ids."""
    corpus = tmp_path / "corpus.tsv"
    corpus.write_text("".join(f"Satz Nummer {i}.\tSentence number {i}.\n" for i in range(200)), encoding="utf-8")
    first = prepare(
        tmp_path / "first", PrepareOptions(corpus=f"tsv:{corpus}", vocab_size=40, test_size=10, valid_size=10)
    )
    other = tmp_path / "other.tsv"
    other.write_text(
        "".join(f"Ganz andere Wörter {i}.\tQuite other words {i}.\n" for i in range(200)), encoding="utf-8"
    )
    second = prepare(
        tmp_path / "second",
        PrepareOptions(
            corpus=f"tsv:{other}", test_size=10, valid_size=10, tokenizer_model=tmp_path / "first" / "spm.model"
        ),
    )
    assert (tmp_path / "second" / "spm.model").read_bytes() == (tmp_path / "first" / "spm.model").read_bytes()
    assert second["tokenizer"]["sha256"] == first["tokenizer"]["sha256"]
    assert second["tokenizer"]["reused_from"] == str(tmp_path / "first" / "spm.model")
    assert second["tokenizer"]["vocab_size"] == 40  # the reused model's size, not the default 8000
    assert first["tokenizer"]["reused_from"] is None


def test_the_prepare_command_maps_onto_prepare_options_with_their_defaults(tmp_path: Path):
    """One default per setting: the flags left out give `PrepareOptions()`, and each flag
    lands on its field."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert options_from(parser.parse_args(["--out", str(tmp_path)])) == PrepareOptions()
    args = parser.parse_args(
        ["--out", str(tmp_path), "--corpus", "tsv:a.tsv", "--extra-corpus", "gettext:po", "--tag-extra-corpora"]
        + ["--vocab-size", "60", "--max-phrases", "-1", "--test-size", "20", "--valid-size", "15", "--seed", "3"]
        + ["--languages", "en", "de", "--reverse", "--tokenizer", "spm.model", "--ding-path", "ding.txt"]
    )
    assert options_from(args) == PrepareOptions(
        corpus="tsv:a.tsv",
        vocab_size=60,
        max_phrases=None,
        test_size=20,
        valid_size=15,
        seed=3,
        ding_path=Path("ding.txt"),
        tokenizer_model=Path("spm.model"),
        languages=("en", "de"),
        reverse=True,
        extra_corpora=("gettext:po",),
        tag_extra_corpora=True,
    )


# --------------------------------------------------------------------------- sizes the corpus cannot give


def small_corpus(path: Path, sentences: int = 150) -> Path:
    path.write_text("".join(f"Satz Nummer {i} ist hier.\tSentence number {i} is here.\n" for i in range(sentences)))
    return path


def test_held_out_sizes_over_a_quarter_of_the_corpus_are_refused_before_anything_is_written(tmp_path: Path):
    """150 distinct sentences hold out at most 37: 15 + 22 go ahead, 15 + 23 are refused in
    a message naming both flags and sizes that fit, and nothing is written."""
    corpus = small_corpus(tmp_path / "corpus.tsv")
    pairs = [Pair(f"Satz Nummer {i} ist hier.", f"Sentence number {i} is here.", SENTENCE) for i in range(150)]
    check_held_out_sizes(pairs, PrepareOptions(valid_size=15, test_size=22))  # exactly a quarter: fine
    with pytest.raises(PrepareError, match=r"--valid-size 15 and --test-size 23 .* at most 37") as refused:
        check_held_out_sizes(pairs, PrepareOptions(valid_size=15, test_size=23))
    assert "give smaller sizes, e.g. --valid-size 14 --test-size 23" in str(refused.value)
    with pytest.raises(PrepareError, match="--valid-size 1100 and --test-size 1600"):
        prepare(tmp_path / "out", PrepareOptions(corpus=f"tsv:{corpus}"))  # the defaults, on 150 sentences
    assert not (tmp_path / "out").exists()


def test_a_vocabulary_the_corpus_cannot_fill_is_refused_naming_vocab_size(tmp_path: Path):
    corpus = small_corpus(tmp_path / "corpus.tsv")
    options = PrepareOptions(corpus=f"tsv:{corpus}", valid_size=15, test_size=20)
    with pytest.raises(PrepareError, match=r"--vocab-size 8000 is too large .* give --vocab-size (\d+) or less") as big:
        prepare(tmp_path / "big", options)
    most = int(str(big.value).split("give --vocab-size ")[1].split()[0])
    assert not (tmp_path / "big").exists()  # refused before anything is written
    prepare(tmp_path / "fits", dataclasses.replace(options, vocab_size=most))  # the size it names works
    with pytest.raises(PrepareError, match=r"--vocab-size 10 is too small: .* give --vocab-size \d+ or more"):
        prepare(tmp_path / "small", dataclasses.replace(options, vocab_size=10))


def test_elapsed_time_shows_while_a_long_step_runs(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    """In a log (stderr not a terminal): a line every `every` seconds and one at the end; on a
    terminal: a spinner line redrawn in place, cleared at the end."""
    caplog.set_level("INFO", logger="crossalign.data")
    with Elapsed("training", every=0.05):
        time.sleep(0.3)
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == "training" and messages[-1] == "training: done in 0s"
    assert messages.count("training: 0s so far") >= 2

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with Elapsed("training", tick=0.05):
        time.sleep(0.3)
    shown = terminal.getvalue()
    assert shown.count("\r") >= 3 and "| training: 0s" in shown and shown.endswith("\r\033[K")
    assert clock(243) == "4m 03s" and clock(59.9) == "59s"


def test_data_prepare_on_a_small_corpus_ends_in_one_line_with_status_2(tmp_path: Path, capsys):
    from seq2seq.cli import main

    corpus = small_corpus(tmp_path / "corpus.tsv")
    assert main(["data", "prepare", "--out", str(tmp_path / "out"), "--corpus", f"tsv:{corpus}"]) == 2
    error = capsys.readouterr().err
    assert len(error.splitlines()) == 1 and "--valid-size" in error and "--test-size" in error
