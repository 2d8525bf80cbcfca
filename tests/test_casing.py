"""Shouted input (seq2seq/core/casing.py): the detection rule, the truecaser on the shipped
SentencePiece model, and the shipped translator, service, explorer and batch CLI answering a
shouter in capitals with offsets into the text as given.

The translator tests run the real shipped bundle (models/de-en, int8 onnxruntime) on one
sentence or two; the service's field is checked over the scripted echo backend with the
shipped SentencePiece model, so its answer is the restored source, shouted back.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
from pathlib import Path

import pytest
from echo_backend import EchoBackend, make_client

from data.tokenizer import Tokenizer
from seq2seq.analysis.heatmap import render_heatmap
from seq2seq.core.alignment import pieces_with_offsets, words
from seq2seq.core.casing import (
    MIN_UPPER_LETTERS,
    UPPER_SHARE,
    Truecaser,
    capitalise,
    cased_pieces,
    is_cased,
    is_shouting,
    is_title_cased,
    keep_case_pattern,
    keep_shouted_words,
    lower,
    shout,
)
from seq2seq.core.config import AlignmentOptions, DecodeConfig
from seq2seq.decoding.translator import Translator
from seq2seq.loading import load_translator
from service.compute.engine import TranslatorEngine

SHIPPED = Path(__file__).resolve().parents[1] / "models" / "de-en"
SHOUTED = "ICH HABE MEINEN REGENSCHIRM IM BUS VERGESSEN"
RESTORED = "Ich habe meinen Regenschirm im Bus vergessen"
ALIGNED = DecodeConfig(n_best=2, alignment=AlignmentOptions())


@pytest.fixture(scope="module")
def shipped() -> Translator:
    return load_translator(SHIPPED, threads=1)


@pytest.fixture(scope="module")
def truecaser() -> Truecaser:
    return Truecaser(Tokenizer(SHIPPED / "spm.model").segmentation_score, "de")


# --------------------------------------------------------------------------- the rule


@pytest.mark.parametrize(
    "text,shouted",
    [
        (SHOUTED, True),
        ("ACHTUNG!", True),  # one shouted word of 7 letters: a sign
        ("NATO", True),  # 4 capitals are enough; the truecaser keeps a form it knows
        ("ICH HABE IN EINER WOCHE 5 kg ABGENOMMEN", True),  # nearly all: a shouter's unit stays lower case
        ("STRAßE GESPERRT", True),  # "ß" has no one-letter capital: it counts neither way
        ("STRAẞE GESPERRT", True),
        ("USA", False),  # abbreviations: too few capitals to tell
        ("EU", False),
        ("OK", False),
        ("Die EU-Kommission tagt in den USA.", False),
        ("Das ist UNGLAUBLICH.", False),  # one shouted word in a normal sentence: 72%
        ("ACHTUNG: Der Zug fällt heute aus.", False),  # a mixed line is read as given
        ("Das Haus ist klein.", False),
        ("3 + 4 = 7", False),
        ("", False),
    ],
)
def test_shouting_is_nearly_all_capitals_with_enough_letters(text: str, shouted: bool) -> None:
    assert is_shouting(text) is shouted


def _is_shouting_per_character(text: str) -> bool:
    """The rule as first written, one character at a time: what `is_shouting` must agree with."""
    cased = [character for character in text if is_cased(character)]
    upper = sum(character == shout(character) for character in cased)
    return upper >= MIN_UPPER_LETTERS and upper >= UPPER_SHARE * len(cased)


def test_shouting_counts_as_the_per_character_rule() -> None:
    """`is_shouting` counts distinct characters (cached); on tricky strings (ß, ẞ, İ, the
    titlecase ǅ and ᾈ, ligatures, digits, final sigma) and on the boundaries of both
    thresholds it agrees with the per-character rule everywhere."""
    tricky = "AaÄäßẞİıiIǅǄǆᾈᾀﬁΣσςŉ1 .-ÉéЖжǰ"
    rng = random.Random(0)
    texts = ["".join(rng.choice(tricky) for _ in range(rng.randint(0, 40))) for _ in range(3000)] + [
        "ABC",
        "ABCD",
        "ABCDEFGHIa",
        "ABCDEFGHIab",
        "ABCDEFGHIJKLMNOPQRa",
        "ǅǅǅǅ",
        "ᾈᾈᾈᾈ",
        "İİİİ",
        "ßßßßABCD",
        SHOUTED,
        lower(SHOUTED),
        shout("Die EU-Kommission tagt in den USA."),
    ]
    fired = 0
    for text in texts:
        fired += _is_shouting_per_character(text)
        assert is_shouting(text) is _is_shouting_per_character(text), text
    assert 0 < fired < len(texts)  # the corpus tells both ways


def test_case_changes_keep_every_characters_length() -> None:
    assert shout("Straße, fiancée") == "STRAßE, FIANCÉE"  # "ß".upper() would be "SS"
    assert lower("İSTANBUL") == "İstanbul"  # "İ".lower() would be two characters
    assert capitalise("öL") == "Öl" and capitalise("") == ""
    assert not is_cased("ß") and is_cased("ẞ") and is_cased("Ä") and not is_cased("1")
    text = "ÄRGER İN DER STRAẞE: ǅ ﬁ ß Σ"
    for changed in (shout(text), lower(text), capitalise(text)):
        assert len(changed) == len(text)


# --------------------------------------------------------------------------- the truecaser


def test_the_shipped_spm_model_restores_german_case(truecaser: Truecaser) -> None:
    """Nouns capitalised (the unigram model saw them so; "Bus" after the determiner "im"),
    function words and verbs lower case, the first word capitalised, a known abbreviation kept."""
    assert truecaser.restore(SHOUTED) == RESTORED
    assert truecaser.restore("DIE EU-KOMMISSION TAGT.").startswith("Die EU-Kommission ")
    assert truecaser.restore("DAS ESSEN IST KALT.") == "Das Essen ist kalt."
    assert truecaser.restore_shouted("Das Haus ist klein.") is None


def test_restoration_changes_only_the_case_of_letters(truecaser: Truecaser) -> None:
    text = "„İSTANBUL“ – GROßE STRAẞE, 3 ÄPFEL & ﬁX-KOSTEN: ΣΟΦΊΑ"
    restored = truecaser.restore(text)
    assert len(restored) == len(text)
    for given, read in zip(text, restored, strict=True):
        assert read in (given, lower(given), shout(given))


def test_cased_pieces_show_the_originals_characters(truecaser: Truecaser) -> None:
    tokenizer = Tokenizer(SHIPPED / "spm.model")
    read = truecaser.restore(SHOUTED)
    _, pieces, offsets = tokenizer.encode_with_offsets(read)
    shown = cased_pieces([(p, s, e) for p, (s, e) in zip(pieces, offsets)], read, SHOUTED)
    assert shown[:5] == ["▁ICH", "▁HABE", "▁MEINEN", "▁REGEN", "SCHIRM"]
    assert "".join(shown).replace("▁", " ").strip() == SHOUTED


# --------------------------------------------------------------------------- the shipped translator


def test_a_shouted_sentence_is_translated_in_capital_words(shipped: Translator) -> None:
    result = shipped.translate(SHOUTED, ALIGNED)
    assert result.case_restored and result.cased_source == RESTORED
    # Real words, not the letters of a model that read "▁I C H ▁H A B E ..." ("ICCCCNNNN...").
    said = [w.text for w in words(result.text)]
    assert result.text == shout(result.text) and ("UMBRELLA" in said or "BUS" in said or "FORGOT" in said), result.text
    assert not re.search(r"(\w)\1{4}", result.text), result.text
    # The source tokens point into the text as given and show its characters.
    assert [t.text for t in result.alignment.word.source_tokens] == SHOUTED.split()
    for level in (result.alignment.word, result.alignment.subword):
        assert all(SHOUTED[t.start : t.end] == t.text for t in level.source_tokens)
        assert all(result.text[t.start : t.end] == t.text for t in level.target_tokens)
    assert "".join(result.source_tokens).replace("▁", " ").strip() == SHOUTED
    # The map's columns are the pieces the model read ("REGEN" "SCHIRM"), not the letters of the input.
    assert [t.text for t in result.alignment.subword.source_tokens] == [p.lstrip("▁") for p in result.source_tokens]
    # Every hypothesis answers in capitals, its pieces too, so its offsets hold.
    for hypothesis in [result, *result.alternatives]:
        assert hypothesis.case_restored and hypothesis.text == shout(hypothesis.text)
        assert pieces_with_offsets(hypothesis.target_tokens)[0] == hypothesis.text
    assert result.alternatives and result.quality is not None
    assert len(result.quality.source_coverage) == len(words(SHOUTED))
    # The heatmap labels are the user's words.
    assert "REGENSCHIRM" in render_heatmap(result.alignment.word, "svg").decode()


def test_switched_off_the_model_reads_shouted_text_as_given(shipped: Translator) -> None:
    result = shipped.translate(SHOUTED, DecodeConfig(restore_case=False, max_length_extra=0, max_length_ratio=0.5))
    assert not result.case_restored and result.cased_source is None
    assert result.source_tokens[:3] == ["▁I", "C", "H"]  # letters: what the SentencePiece model makes of it


def test_normal_text_translates_the_same_with_restoration_on_and_off(shipped: Translator) -> None:
    texts = ["Das Haus ist klein.", "Die EU-Kommission tagt in den USA.", "Die GmbH ist klein.", "USA"]
    on = shipped.translate_batch(texts, ALIGNED)
    off = shipped.translate_batch(texts, DecodeConfig(n_best=2, alignment=AlignmentOptions(), restore_case=False))
    for a, b in zip(on, off, strict=True):
        assert not a.case_restored
        assert (a.text, a.target_ids, a.score, a.source_tokens) == (b.text, b.target_ids, b.score, b.source_tokens)
        assert [t.text for t in a.alignment.word.source_tokens] == [t.text for t in b.alignment.word.source_tokens]


def test_a_shouted_word_in_normal_text_is_read_in_its_case(truecaser: Truecaser) -> None:
    """Only words of 4+ capitals change, in a text that is not shouted as a whole."""
    assert truecaser.restore_emphasised("Das ist UNGLAUBLICH teuer.") == "Das ist unglaublich teuer."
    assert truecaser.restore_emphasised("WICHTIG: Bitte lesen Sie die Anleitung.") == (
        "Wichtig: Bitte lesen Sie die Anleitung."
    )
    for untouched in ("Das Haus ist klein.", "Die EU-Kommission tagt in den USA.", "Die GmbH ist klein.", SHOUTED):
        assert truecaser.restore_emphasised(untouched) is None, untouched


def test_a_shouted_word_is_translated_as_the_word_not_its_letters(shipped: Translator) -> None:
    emphasised, plain = "Das ist UNGLAUBLICH teuer.", "Das ist unglaublich teuer."
    result, reference = shipped.translate_batch([emphasised, plain], ALIGNED)
    # The model reads the word ("unglaublich"), so it says what it says for the plain sentence,
    # not shouted back (the sentence was not shouted), and the maps show the user's word.
    assert result.case_restored and result.cased_source == plain
    assert (result.text, result.target_ids) == (reference.text, reference.target_ids)
    assert result.text != shout(result.text)
    assert [t.text for t in result.alignment.word.source_tokens] == ["Das", "ist", "UNGLAUBLICH", "teuer", "."]
    pieces = [t for t in result.alignment.subword.source_tokens if t.end > t.start]  # not a bare "▁"
    assert all(emphasised[t.start : t.end] == t.text for t in pieces) and "LAUB" in [t.text for t in pieces]
    off = shipped.translate(emphasised, DecodeConfig(restore_case=False))
    assert not off.case_restored and off.target_ids != reference.target_ids  # read as letters, it differs


def test_a_copied_shouted_word_comes_back_in_its_capitals() -> None:
    pieces = ["▁The", "▁na", "to", "▁has", "▁met", "."]
    text, shown = keep_shouted_words("Die NATO hat getagt.", "The nato has met.", pieces)
    assert text == "The NATO has met." and shown == ["▁The", "▁NA", "TO", "▁has", "▁met", "."]
    assert pieces_with_offsets(shown)[0] == text  # the pieces still spell the text: offsets hold
    # Nothing else changes: a word that is not a copy, a source without shouted words, pieces
    # that do not spell the text.
    assert keep_shouted_words("Die NATO hat getagt.", "The alliance met.", ["▁The", "▁alliance", "▁met", "."]) == (
        "The alliance met.",
        ["▁The", "▁alliance", "▁met", "."],
    )
    assert keep_shouted_words("Die Nato hat getagt.", "The nato has met.", pieces) == ("The nato has met.", pieces)
    assert keep_shouted_words("Die NATO hat getagt.", "The nato has met!", pieces) == ("The nato has met!", pieces)


def test_the_shipped_model_keeps_an_acronym_it_copies(shipped: Translator) -> None:
    source = "Die NATO hat ein großes Interesse an dem Abkommen."
    # The bundle's own decoding, as users get it (whether the model copies the word depends on it).
    served = dataclasses.replace(shipped.decode_defaults, n_best=2, alignment=AlignmentOptions())
    result = shipped.translate(source, served)
    assert result.case_restored and "NATO" in [w.text for w in words(result.text)], result.text
    for hypothesis in [result, *result.alternatives]:
        assert pieces_with_offsets(hypothesis.target_tokens)[0] == hypothesis.text
        assert all(hypothesis.text[t.start : t.end] == t.text for t in hypothesis.alignment.word.target_tokens)


# --------------------------------------------------------------------------- a heading's, a word's case


@pytest.mark.parametrize(
    "text,title",
    [
        ("Neue Funktionen", True),
        ("Bericht über das Projekt", True),  # small words after the first stay lower case
        ("Terms of Service", True),
        ("Willkommen", False),  # one word: capitalised, not a title
        ("Häufig gestellte Fragen", False),  # a lower-case word that is not small
        ("Das Haus ist klein.", False),  # a sentence
        ("Neue Funktionen!", False),
        ("über das Projekt", False),  # the first word lower case
        ("NEUE FUNKTIONEN", False),  # shouted: casing.py's other rule
    ],
)
def test_a_title_is_every_word_capitalised_but_the_small_ones(text: str, title: bool) -> None:
    assert is_title_cased(text) is title


def test_a_capitalised_source_gets_a_capitalised_translation() -> None:
    pieces = ["▁report", "▁over", "▁the", "▁project"]
    text, shown = keep_case_pattern("Bericht über das Projekt", "report over the project", pieces)
    assert text == "Report over the Project" and shown == ["▁Report", "▁over", "▁the", "▁Project"]
    assert keep_case_pattern("Willkommen", "welcome", ["▁wel", "come"]) == ("Welcome", ["▁Wel", "come"])
    assert keep_case_pattern("Häufig gestellte Fragen", "frequent questions", ["▁frequent", "▁questions"]) == (
        "Frequent questions",
        ["▁Frequent", "▁questions"],
    )
    # Nothing else changes: a lower-case source, a word with capitals of its own ("iPhone"), a
    # translation already capitalised, pieces that do not spell the text.
    for source, target, spelled in (
        ("über uns", "about us", ["▁about", "▁us"]),
        ("iPhone kaufen", "buy iPhone", ["▁buy", "▁iPhone"]),
        ("Willkommen", "iPhone", ["▁iPhone"]),
        ("Willkommen", "Welcome", ["▁Welcome"]),
        ("Willkommen", "welcome", ["▁hello"]),
    ):
        assert keep_case_pattern(source, target, spelled) == (target, spelled)


def test_the_shipped_model_keeps_a_headings_and_a_words_case(shipped: Translator) -> None:
    served = dataclasses.replace(shipped.decode_defaults, alignment=AlignmentOptions())
    for source in ("Willkommen", "Einleitung", "Bericht über das Projekt", "Neue Funktionen"):
        result = shipped.translate(source, served)
        first = words(result.text)[0].text
        assert first[0].isupper(), (source, result.text)
        assert pieces_with_offsets(result.target_tokens)[0] == result.text  # offsets hold
        assert all(result.text[t.start : t.end] == t.text for t in result.alignment.word.target_tokens)
    title = shipped.translate("Neue Funktionen", served).text
    assert all(w.text[0].isupper() for w in words(title)), title  # a title's words each capitalised


# --------------------------------------------------------------------------- service, explorer, batch CLI


@pytest.fixture(scope="module")
def echo_shipped_spm() -> TranslatorEngine:
    """The scripted echo backend (it copies the source pieces) with the shipped SentencePiece
    model: a shouted text's answer is its restored case, shouted back."""
    tokenizer = Tokenizer(SHIPPED / "spm.model")
    engine = TranslatorEngine({("de", "en"): ("de-en", Translator(EchoBackend(tokenizer.vocab_size), tokenizer))})
    yield engine
    engine.close()


def test_the_service_says_when_the_case_was_restored(echo_shipped_spm: TranslatorEngine) -> None:
    text = f"{SHOUTED}\nDas Haus ist klein."
    with make_client(echo_shipped_spm) as client:
        body = client.post("/v1/translate", json={"text": text, "source": "de", "target": "en"}).json()
        schema = client.get("/openapi.json").json()["components"]["schemas"]
    shouted, normal = body["translations"][0]["sentences"]
    assert shouted["case_restored"] is True and normal["case_restored"] is False
    assert shouted["text"] == SHOUTED  # the echo of "Ich habe meinen ...", in capitals
    assert [w["text"] for w in shouted["source_words"]] == SHOUTED.split()
    assert [t["text"] for t in shouted["source_tokens"]][3:5] == ["REGEN", "SCHIRM"]  # as the model read it
    for token in shouted["source_tokens"] + shouted["source_words"]:
        assert text[token["start"] : token["end"]] == token["text"]
    assert schema["AlignedSentence"]["properties"]["case_restored"]["type"] == "boolean"

    with make_client(echo_shipped_spm, restore_case=False) as client:
        raw = client.post("/v1/translate", json={"text": SHOUTED, "source": "de", "target": "en"}).json()
    sentence = raw["translations"][0]["sentences"][0]
    assert sentence["case_restored"] is False
    assert [t["text"] for t in sentence["source_tokens"]][:3] == ["I", "C", "H"]


def test_the_libretranslate_answer_says_when_the_case_was_restored(echo_shipped_spm: TranslatorEngine) -> None:
    with make_client(echo_shipped_spm) as client:
        single = client.post("/translate", json={"q": SHOUTED, "source": "de", "target": "en"}).json()
        listed = client.post("/translate", json={"q": ["Das Haus ist klein.", SHOUTED], "source": "de", "target": "en"})
        plain = client.post("/translate", json={"q": "Das Haus ist klein.", "source": "de", "target": "en"}).json()
    assert single["translatedText"] == SHOUTED and single["caseRestored"] is True
    assert listed.json()["caseRestored"] == [False, True]
    assert "caseRestored" not in plain  # nothing restored: LibreTranslate's own shape
    with make_client(echo_shipped_spm, restore_case=False) as client:
        raw = client.post("/translate", json={"q": SHOUTED, "source": "de", "target": "en"}).json()
    assert "caseRestored" not in raw


def test_the_explorer_labels_show_the_shouted_input(shipped: Translator) -> None:
    engine = TranslatorEngine({("de", "en"): ("de-en", shipped)})
    try:
        with make_client(engine) as client:
            answer = client.get("/v1/attention", params={"q": SHOUTED, "source": "de", "target": "en"}).json()
    finally:
        engine.close()
    (sentence,) = answer["sentences"]
    assert sentence["translation"] == shout(sentence["translation"])
    assert sentence["encoder"]["rows"][:4] == ["▁ICH", "▁HABE", "▁MEINEN", "▁REGEN"]
    assert [t["text"] for t in sentence["alignment"]["word"]["source_tokens"]] == SHOUTED.split()


def test_batch_cli_records_say_when_the_case_was_restored(tmp_path: Path) -> None:
    from seq2seq.cli import main as cli_main

    source = tmp_path / "in.txt"
    source.write_text(f"{SHOUTED}\nDas Haus ist klein.\n", encoding="utf-8")
    for flag, restored in (("--restore-case", True), ("--no-restore-case", False)):
        output = tmp_path / f"{flag}.jsonl"
        arguments = ["translate", "-m", str(SHIPPED), "-i", str(source), "-o", str(output), "-f", "jsonl", flag]
        assert cli_main([*arguments, "--alignment", "--threads", "1", "--max-chars", "200"]) == 0
        shouted, normal = (json.loads(line) for line in output.read_text().splitlines())
        assert shouted["case_restored"] is restored and normal["case_restored"] is False
        assert [t["text"] for t in shouted["alignment"]["source_tokens"]] == SHOUTED.split()
        if restored:
            assert shouted["text"] == shout(shouted["text"]) and not re.search(r"(\w)\1{4}", shouted["text"])


# --------------------------------------------------------------------------- forced alignment

PLAIN_PAIR = ("Ich habe meinen Regenschirm im Bus vergessen.", "I forgot my umbrella on the bus.")
SHOUTED_PAIR = (PLAIN_PAIR[0].upper(), PLAIN_PAIR[1].upper())


def test_a_shouted_pair_is_aligned_as_its_restored_case_reads(shipped: Translator) -> None:
    from seq2seq.decoding.forced import align_given

    plain, shouted = align_given(shipped, [PLAIN_PAIR, SHOUTED_PAIR])
    (as_typed,) = align_given(shipped, [SHOUTED_PAIR], restore_case=False)
    assert not plain.case_restored and shouted.case_restored and not as_typed.case_restored
    # Both sides restore to the plain pair here, so the model reads the same pieces: the same links.
    assert shouted.word.pharaoh == plain.word.pharaoh and as_typed.word.pharaoh != plain.word.pharaoh
    for text, tokens in ((SHOUTED_PAIR[0], shouted.word.source_tokens), (SHOUTED_PAIR[1], shouted.word.target_tokens)):
        assert [t.text for t in tokens] == [text[t.start : t.end] for t in tokens]  # the user's capitals
    assert [t.text for t in shouted.word.source_tokens][:4] == ["ICH", "HABE", "MEINEN", "REGENSCHIRM"]
    assert shouted.to_record()["case_restored"] is True


def test_the_align_cli_and_the_service_say_when_the_case_was_restored(
    tmp_path: Path, echo_shipped_spm: TranslatorEngine
) -> None:
    from seq2seq.cli import main as cli_main

    source = tmp_path / "pairs.tsv"
    source.write_text("\n".join("\t".join(pair) for pair in (PLAIN_PAIR, SHOUTED_PAIR)) + "\n", encoding="utf-8")
    for flag, restored in (("--restore-case", True), ("--no-restore-case", False)):
        output = tmp_path / f"{flag}.jsonl"
        arguments = ["align", "--model", str(SHIPPED), "-i", str(source), "-o", str(output), "--threads", "1"]
        assert cli_main([*arguments, "--format", "jsonl", "--quality", "fast", flag]) == 0
        plain, shouted = (json.loads(line) for line in output.read_text().splitlines())
        assert plain["case_restored"] is False and shouted["case_restored"] is restored
    body = {"text": SHOUTED_PAIR[0], "translation": SHOUTED_PAIR[1], "source": "de", "target": "en"}
    with make_client(echo_shipped_spm) as client:
        answer = client.post("/v1/align", json=body).json()
    assert answer["alignments"][0]["case_restored"] is True
    with make_client(echo_shipped_spm, restore_case=False) as client:
        answer = client.post("/v1/align", json=body).json()
    assert answer["alignments"][0]["case_restored"] is False
