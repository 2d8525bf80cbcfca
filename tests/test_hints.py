"""Target-term hints: the hint pieces in the vocabulary, the term index, which hints a
training pair carries, how a source carries them, and what the maps see of them."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from data.corpora.pairs import PHRASE, SENTENCE, Pair
from data.dictionary import TermIndex, first_term, phrase_votes, usual_term, write_term_index
from data.tokenizer import HINT_CLOSE, HINT_OPEN, Tokenizer, add_hint_pieces
from seq2seq.core.hints import (
    Glossary,
    Hint,
    collapse_columns,
    dictionary_hints,
    insert_hints,
    plain_source,
)
from seq2seq.training.checkpoints import grow_embeddings
from seq2seq.training.hint_data import HintSampler, reference_hints
from seq2seq.training.train import rdrop_divergence
from seq2seq.training.train_data import BatchReader

REPO = Path(__file__).resolve().parents[1]
SHIPPED_SPM = REPO / "models" / "de-en" / "spm.model"  # taught hints: it ends with the two hint pieces


@pytest.fixture(scope="module")
def base_spm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped vocabulary as it was before the model was taught hints: the same pieces
    without the two appended hint pieces (what `crossalign data prepare` trains)."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(SHIPPED_SPM.read_bytes())
    while proto.pieces[-1].piece in (HINT_OPEN, HINT_CLOSE):
        del proto.pieces[-1]
    path = tmp_path_factory.mktemp("spm") / "base.model"
    path.write_bytes(proto.SerializeToString())
    return path


@pytest.fixture(scope="module")
def hint_tokenizer(base_spm: Path, tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    return Tokenizer(add_hint_pieces(base_spm, tmp_path_factory.mktemp("spm") / "spm.model"))


def test_hint_pieces_extend_the_vocabulary_without_moving_an_id(hint_tokenizer: Tokenizer, base_spm: Path) -> None:
    shipped = Tokenizer(base_spm)
    assert shipped.hint_ids is None
    assert hint_tokenizer.hint_ids == (shipped.vocab_size, shipped.vocab_size + 1)
    assert hint_tokenizer.same_pieces_as(shipped) and not shipped.same_pieces_as(hint_tokenizer)
    text = "Die Gießkanne ist leer, sagte Ärztin Müller."
    assert hint_tokenizer.encode(text) == shipped.encode(text)  # plain text reads the same
    ids = hint_tokenizer.encode(f"x{HINT_OPEN}watering can{HINT_CLOSE}y")
    assert ids.count(hint_tokenizer.hint_ids[0]) == 1 and ids.count(hint_tokenizer.hint_ids[1]) == 1  # never split


def test_corpus_tags_are_pieces_only_the_translator_places(hint_tokenizer: Tokenizer, tmp_path: Path) -> None:
    from types import SimpleNamespace

    from data.tokenizer import add_pieces, corpus_tag
    from seq2seq.decoding.translator import Translator

    tagged = Tokenizer(add_pieces(hint_tokenizer.model_path, tmp_path / "spm.model", (corpus_tag("gettext"),)))
    assert hint_tokenizer.tag_ids == {} and hint_tokenizer.reserved_ids == set(hint_tokenizer.hint_ids)
    assert tagged.tag_ids == {"gettext": hint_tokenizer.vocab_size}
    assert tagged.reserved_ids == {*hint_tokenizer.hint_ids, hint_tokenizer.vocab_size}
    text = f"⟦gettext⟧ Datei {HINT_OPEN}file{HINT_CLOSE} speichern"
    assert tagged.tag_ids["gettext"] in tagged.encode(text)
    # Typed by a user, a tag or a hint marker is read as <unk>, never as what it marks.
    read = Translator.model_source(SimpleNamespace(tokenizer=tagged, max_source_tokens=64), text, []).ids
    assert not set(read) & tagged.reserved_ids and read.count(1) == 3


def test_term_index_finds_every_form_and_nothing_else(tmp_path: Path) -> None:
    rows = [("Gießkanne", 0, "watering can"), ("Flur", 3, "hall"), ("Flure", 0, "halls"), ("a", 9, "b")]
    assert write_term_index(rows, tmp_path / "d.tsv.gz") == 4
    index = TermIndex.load(tmp_path / "d.tsv.gz")
    assert len(index) == 4
    for form, count, term in rows:
        assert index.lookup(form) == (count, term)
    for absent in ("Gießkann", "Gießkannen", "flur", "", "zzz", "A"):
        assert index.lookup(absent) is None


def test_the_usual_term_is_the_one_given_most_often_then_the_first() -> None:
    pairs = [
        Pair("Flur", "open fields", PHRASE),
        Pair("Flur", "hall", PHRASE),
        Pair("Flur", "hall", PHRASE),
        Pair("Flur ist", "not a phrase", SENTENCE),
        Pair("Gang", "corridor", PHRASE),
        Pair("Gang", "gear", PHRASE),
    ]
    votes = phrase_votes(pairs)
    assert set(votes) == {"Flur", "Gang"}
    assert usual_term(votes["Flur"]) == "hall" and usual_term(votes["Gang"]) == "corridor"
    assert first_term(votes["Flur"]) == "open fields" and first_term(votes["Gang"]) == "corridor"


def test_a_pair_carries_hints_for_the_dictionary_words_its_reference_uses() -> None:
    votes = {
        "Gießkanne": Counter({"watering can": 1}),
        "leer": Counter({"empty": 2, "void": 1}),
        "Kinderwagen": Counter({"pram": 1, "baby carriage": 1}),
        "gehen": Counter({"to go": 1}),
        "ist": Counter({"is": 5}),
    }
    pair = Pair("Die Gießkanne ist leer.", "The watering cans are void.", SENTENCE)
    # "watering can" appears with a plural ending; "leer" by its second sense; "ist" is frequent.
    assert reference_hints(pair, votes, frequent={"ist", "die"}) == [(4, 13, "watering cans"), (18, 22, "void")]
    pair = Pair("Wir gehen mit dem Kinderwagen.", "We go with the baby carriage.", SENTENCE)
    assert reference_hints(pair, votes, frequent=set()) == [(4, 9, "go"), (18, 29, "baby carriage")]
    assert reference_hints(Pair("Er ist leer.", "It is hollow.", SENTENCE), votes, set()) == [(3, 6, "is")]


def test_hints_go_after_their_word_and_maps_fold_them_back() -> None:
    # "▁Die ▁Gieß kanne ▁ist": offsets into "Die Gießkanne ist"
    ids, offsets = [10, 11, 12, 13], [(0, 3), (3, 8), (8, 13), (13, 17)]
    hinted = insert_hints(ids, offsets, [Hint(4, 13, "watering can", "glossary")], lambda t: [50, 51], (90, 91))
    assert hinted.ids == [10, 11, 12, 90, 50, 51, 91, 13]
    assert hinted.owner == [0, 1, 2, 2, 2, 2, 2, 3] and hinted.user_positions == [0, 1, 2, 7]
    assert hinted.user_pieces == 4 and hinted.hinted and not plain_source(ids).hinted
    # (L, H, T, S+1): the hint columns' weight goes to "kanne", the EOS column stays last.
    attention = np.random.default_rng(0).dirichlet(np.ones(len(hinted.ids) + 1), size=(2, 3, 5))
    collapsed = collapse_columns(attention, hinted, kept=len(hinted.ids))
    assert collapsed.shape == (2, 3, 5, 5)
    np.testing.assert_allclose(collapsed.sum(-1), 1.0)
    np.testing.assert_allclose(collapsed[..., 2], attention[..., 2:7].sum(-1))
    np.testing.assert_allclose(collapsed[..., 3], attention[..., 7])
    np.testing.assert_allclose(collapsed[..., 4], attention[..., 8])


def test_glossary_matches_inflected_forms_and_the_longer_term_wins() -> None:
    glossary = Glossary((("Gießkanne", "watering can"), ("Kanne", "jug"), ("roter Kinderwagen", "red pram")))
    text = "Zwei Gießkannen, eine Kanne und drei roten Kinderwägen."
    hints = glossary.hints(text)
    assert [(text[h.start : h.end], h.term) for h in hints] == [
        ("Gießkannen", "watering can"),
        ("Kanne", "jug"),
        ("roten Kinderwägen", "red pram"),
    ]
    assert Glossary((("Haus", "building"),)).hints("Ein Hausboot.") == []  # not a suffix rule's ending


def test_glossary_terms_and_texts_match_whatever_their_unicode_normalisation() -> None:
    import unicodedata

    nfd = lambda text: unicodedata.normalize("NFD", text)  # noqa: E731 - "a" + U+0308 for "ä"
    composed = "Der Gärtner gießt die Blumen der Gärtner."
    for text in (composed, nfd(composed)):
        for term in ("Gärtner", nfd("Gärtner")):
            hints = Glossary(((term, nfd("jardinière")),)).hints(text)
            # Offsets in the text as given (longer when decomposed), the term shown composed.
            assert [text[h.start : h.end] for h in hints] == [nfd("Gärtner") if text != composed else "Gärtner"] * 2
            assert [h.term for h in hints] == ["jardinière"] * 2
    text = "Ein Zeitungsausschnitt und " + nfd("Gärtner") + ", bitte."  # a span ending before a comma
    [hint] = Glossary((("Gärtner", "gardener"),)).hints(text)
    assert text[hint.end :] == ", bitte."


def test_control_characters_in_glossary_terms_are_refused_or_never_shown(tmp_path: Path) -> None:
    from seq2seq.cli.translate_args import read_glossary
    from seq2seq.core.hints import term_problem

    assert term_problem("Gie\x1bßkanne") == "control character U+001B at column 4" and term_problem("Kanne") is None
    [hint] = Glossary((("Kan\x00ne", "jug\x1b[31m"),)).hints("Eine Kanne.")
    assert hint.term == "jug[31m"  # what the model is shown and the records echo: never an escape
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("Haus\thouse\nKanne\tj\x1bug\n", encoding="utf-8")
    with pytest.raises(argparse.ArgumentTypeError, match=r"terms.tsv:2: a term holds a control character U\+001B"):
        read_glossary(str(glossary))


def test_terms_take_the_endings_of_their_own_language() -> None:
    from seq2seq.core.hints import term_outcomes

    english = Glossary((("watering can", "Gießkanne"), ("house", "Gebäude")))
    text = "Two watering cans and a housen."  # "-en" is a German ending, not an English one
    assert [(text[h.start : h.end], h.term) for h in english.hints(text, "en")] == [("watering cans", "Gießkanne")]
    assert [text[h.start : h.end] for h in english.hints(text, "de")] == ["watering cans", "housen"]
    hint = Hint(4, 17, "Gießkanne", "glossary")
    german, english_text = "Zwei Gießkannen sind leer.", "Two watering cans are empty."
    assert term_outcomes([hint], "Two watering cans.", None, german, "de")[0].appears
    assert not term_outcomes([hint], "Two watering cans.", None, german, "en")[0].appears
    assert term_outcomes([Hint(0, 4, "watering can", "glossary")], "Zwei", None, english_text)[0].appears


def test_dictionary_hints_only_rare_known_words_and_never_inside_a_glossary_term(tmp_path: Path) -> None:
    write_term_index([("Gießkanne", 0, "watering can"), ("Haus", 40, "house"), ("Leer", 0, "x")], tmp_path / "d.gz")
    index = TermIndex.load(tmp_path / "d.gz")
    text = "Gießkanne und Haus sind leer."
    assert [(h.start, h.term) for h in dictionary_hints(text, index, max_count=2)] == [(0, "watering can")]
    assert [h.term for h in dictionary_hints(text, index, max_count=50)] == ["watering can", "house"]
    skip = [Hint(0, 9, "can", "glossary")]
    assert [h.term for h in dictionary_hints(text, index, max_count=50, skip=skip)] == ["house"]


def test_a_batch_draws_hints_from_torchs_rng_and_guided_rows_skip_them(hint_tokenizer: Tokenizer) -> None:
    pairs = [Pair("Die Gießkanne ist leer.", "The watering can is empty.", SENTENCE)]
    source = hint_tokenizer.encode(pairs[0].source) + [3]
    examples = [(source, hint_tokenizer.encode(pairs[0].target))]
    sampler = HintSampler([[Hint(4, 13, "watering can", "dictionary")]], hint_tokenizer, rate=0.5)
    reader = BatchReader(examples, [0], pairs, hint_tokenizer, 64, hints=sampler)
    torch.manual_seed(3)
    first = [reader.read([0], step)[0].source for step in range(20)]
    torch.manual_seed(3)
    again = [reader.read([0], step)[0].source for step in range(20)]
    assert first == again  # a resumed run (torch's RNG restored) reads the same batches
    hinted = [s for s in first if s != source]
    assert 0 < len(hinted) < 20
    open_id, close_id = hint_tokenizer.hint_ids
    shown = hint_tokenizer.sp.decode(hinted[0][hinted[0].index(open_id) + 1 : hinted[0].index(close_id)])
    assert shown == "watering can"


def test_subword_sampling_is_fixed_by_the_step(hint_tokenizer: Tokenizer) -> None:
    pairs = [Pair("Der Kinderwagen steht im Flur.", "The pram is in the hall.", SENTENCE)]
    examples = [(hint_tokenizer.encode(pairs[0].source) + [3], hint_tokenizer.encode(pairs[0].target))]
    reader = BatchReader(examples, [0], pairs, hint_tokenizer, 64, subword_alpha=0.1)
    reads = {step: reader.read([0], step)[0] for step in range(8)}
    assert reads[5].source == reader.read([0], 5)[0].source
    assert len({tuple(r.source) for r in reads.values()}) > 1  # segmentations vary
    for read in reads.values():
        assert hint_tokenizer.sp.decode(read.source[:-1]) == pairs[0].source and read.source[-1] == 3
        assert [names for names, _ in read.pieces] == [
            hint_tokenizer.pieces(read.source[:-1]),
            hint_tokenizer.pieces(read.target),
        ]


def test_embeddings_grow_for_appended_pieces(hint_tokenizer: Tokenizer) -> None:
    state = {"embedding.weight": torch.randn(8000, 4), "other": torch.ones(2)}
    grown = grow_embeddings(state, 8002, hint_tokenizer)
    assert grown["embedding.weight"].shape == (8002, 4)
    assert torch.equal(grown["embedding.weight"][:8000], state["embedding.weight"]) and grown["other"] is state["other"]
    assert not torch.equal(grown["embedding.weight"][8000], grown["embedding.weight"][8001])
    assert grow_embeddings(state, 8000, hint_tokenizer) is state


def test_rdrop_divergence_is_zero_for_equal_halves_and_ignores_padding() -> None:
    log_probs = torch.log_softmax(torch.randn(2, 3, 5), dim=-1)
    targets = torch.tensor([[4, 4, 0], [4, 4, 0]])
    assert rdrop_divergence(torch.cat([log_probs[:1], log_probs[:1]]), targets, 0).abs() < 1e-6
    divergence = rdrop_divergence(log_probs, targets, 0)
    assert divergence > 0
    changed = log_probs.clone()
    changed[:, 2] = torch.log_softmax(torch.randn(2, 5), dim=-1)  # only the padding position moves
    assert torch.isclose(rdrop_divergence(changed, targets, 0), divergence)


def test_data_hints_command_writes_candidates_index_and_vocabulary(
    tmp_path: Path, toy_tokenizer_path: Path, base_spm: Path
) -> None:
    from seq2seq.cli.hints import prepare_hints

    data = tmp_path / "data"
    data.mkdir()
    (data / "spm.model").write_bytes(base_spm.read_bytes())
    (data / "manifest.json").write_text(json.dumps({"tokenizer": {"vocab_size": 8000}}))
    (data / "train.tsv").write_text(
        "Gießkanne\twatering can\tphrase\n"
        "Die Gießkanne ist leer.\tThe watering can is empty.\tsentence\n"
        "Der Hund bellt.\tThe dog barks.\tsentence\n"
        # from a tagged extra corpus (`data prepare --tag-extra-corpora`): the tag is no word
        "⟦gettext⟧ Schlauch\those\tphrase\n"
        "⟦gettext⟧ Der Schlauch ist lang.\tThe hose is long.\tsentence\n"
    )
    counts = prepare_hints(data)
    assert counts == {"pairs": 5, "pairs_with_hints": 4, "indexed_forms": 2}
    lines = [json.loads(line) for line in (data / "hints.train.jsonl").read_text().splitlines()]
    assert lines == [[[0, 9, "watering can"]], [[4, 13, "watering can"]], [], [[10, 18, "hose"]], [[14, 22, "hose"]]]
    assert TermIndex.load(data / "dictionary.tsv.gz").lookup("Gießkanne") == (1, "watering can")
    assert TermIndex.load(data / "dictionary.tsv.gz").lookup("Schlauch") == (1, "hose")
    assert Tokenizer(data / "spm.model").hint_ids == (8000, 8001)
    assert json.loads((data / "manifest.json").read_text())["tokenizer"]["vocab_size"] == 8002

    # An en->de split (`data prepare --reverse`): German terms, found with German endings,
    # and never cut like Ding's English verbs ("to ...").
    reverse = tmp_path / "reverse"
    reverse.mkdir()
    (reverse / "spm.model").write_bytes(base_spm.read_bytes())
    manifest = {"tokenizer": {"vocab_size": 8000}, "languages": {"source": "en", "target": "de"}}
    (reverse / "manifest.json").write_text(json.dumps(manifest))
    (reverse / "train.tsv").write_text(
        "watering can\tGießkanne\tphrase\n"
        "pram\tto Kinderwagen\tphrase\n"
        "Every watering can is empty.\tDie Gießkannen sind leer.\tsentence\n"
    )
    assert prepare_hints(reverse)["pairs_with_hints"] == 3
    lines = [json.loads(line) for line in (reverse / "hints.train.jsonl").read_text().splitlines()]
    assert lines[1] == [[0, 4, "to Kinderwagen"]]  # kept whole: "to" is no verb marker in German
    assert lines[2] == [[6, 18, "Gießkannen"]]  # "Gießkanne" with a German ending
    assert TermIndex.load(reverse / "dictionary.tsv.gz").lookup("pram") == (0, "to Kinderwagen")


# --------------------------------------------------------------------------- a model that uses them


def test_a_tiny_model_learns_to_follow_a_glossary_and_says_when_it_did(
    tmp_path: Path, toy_tokenizer_path: Path
) -> None:
    """The copy task, except that "a" becomes one of e..h at random: only a hint can say which.
    Trained with hints half of the time, the model writes the glossary's term where "a" was
    and the quality block says so; its maps stay over the user's words."""
    import random

    from test_train import tiny_model_config, tiny_train_config

    from seq2seq.core.config import AlignmentOptions, DecodeConfig
    from seq2seq.decoding.translator import HintError, Translator
    from seq2seq.training.model import load_model
    from seq2seq.training.torch_backend import TorchBackend
    from seq2seq.training.train import train

    data = tmp_path / "data"
    data.mkdir()
    tokenizer = Tokenizer(add_hint_pieces(toy_tokenizer_path, data / "spm.model"))
    rng = random.Random(0)

    def pair() -> tuple[str, str, list]:
        words = [rng.choice("abcd") for _ in range(rng.randint(3, 6))]
        words[rng.randrange(len(words))] = "a"
        outputs, hints, position = [], [], 0
        for word in words:
            term = rng.choice("efgh") if word == "a" else word
            outputs.append(term)
            if word == "a":
                hints.append([position, position + 1, term])
            position += len(word) + 1
        return " ".join(words), " ".join(outputs), hints

    pairs = [pair() for _ in range(3000)]
    (data / "train.tsv").write_text("".join(f"{s}\t{t}\tsentence\n" for s, t, _ in pairs))
    (data / "hints.train.jsonl").write_text("".join(json.dumps(h) + "\n" for _, _, h in pairs))
    (data / "valid.tsv").write_text("".join(f"{s}\t{t}\tsentence\n" for s, t, _ in pairs[:4]))
    final = train(
        # 800 steps: 36 of the 40 followed on this machine (1,200 cost 25 s more for a margin it did not need).
        tiny_train_config(data, tmp_path / "run", max_steps=800, hint_rate=0.5),
        tiny_model_config(vocab_size=tokenizer.vocab_size),
        resume=False,
    )
    translator = Translator(TorchBackend(load_model(final)), Tokenizer(final / "spm.model"))
    tests = [pair()[0] for _ in range(40)]
    wanted = [rng.choice("efgh") for _ in tests]
    followed = 0
    for source, term in zip(tests, wanted):
        config = DecodeConfig(beam_size=1, glossary=(("a", term),), alignment=AlignmentOptions())
        result = translator.translate(source, config)
        expected = " ".join(term if w == "a" else w for w in source.split())
        followed += result.text == expected
        outcomes = result.quality.terms
        assert [(o.source, o.term, o.origin) for o in outcomes] == [("a", term, "glossary")] * source.split().count("a")
        assert result.attention.shape[-1] == len(source.split()) + 1  # the user's pieces and EOS, no hint column
        assert [t.text for t in result.alignment.word.source_tokens] == source.split()
        if result.text == expected:
            assert all(o.appears for o in outcomes)
    assert followed >= 0.8 * len(tests), followed
    # Without the hint "a" has no answer: the model guesses, mostly wrong.
    plain = [translator.translate(s, DecodeConfig(beam_size=1)).text for s in tests]
    assert (
        sum(p == " ".join(t if w == "a" else w for w in s.split()) for p, s, t in zip(plain, tests, wanted)) < followed
    )
    # A model that never saw hints refuses a glossary.
    shipped_like = Translator(TorchBackend(load_model(final)), Tokenizer(toy_tokenizer_path))
    with pytest.raises(HintError):
        shipped_like.translate(tests[0], DecodeConfig(glossary=(("a", "e"),)))


# --------------------------------------------------------------------------- the HTTP API


@pytest.fixture(scope="module")
def hint_client(toy_tokenizer_path: Path, tmp_path_factory: pytest.TempPathFactory):
    """The echo model over the toy vocabulary with the hint pieces: it copies what it reads,
    hints included, attending to the position it copies, which is all the wiring needs."""
    from echo_backend import EchoBackend, make_client

    from seq2seq.decoding.translator import Translator
    from service.compute.engine import TranslatorEngine

    tokenizer = Tokenizer(add_hint_pieces(toy_tokenizer_path, tmp_path_factory.mktemp("hint_spm") / "spm.model"))
    engine = TranslatorEngine(
        {("de", "en"): ("de-en", Translator(EchoBackend(tokenizer.vocab_size), tokenizer))}, window_s=0.002
    )
    with make_client(engine) as client:
        yield client
    engine.close()


@pytest.mark.parametrize(
    ("glossary", "problem"),
    [
        (["a", "e"], "valid dictionary"),
        ({"a": 1}, "valid string"),
        ({"a": " "}, "non-empty"),
        ({f"w{i}": "e" for i in range(257)}, "at most 256 entries"),
        ({"a": "e" * 20_000}, "bytes"),
    ],
)
@pytest.mark.parametrize("route", ["/v1/translate", "/translate"])
def test_a_bad_glossary_is_a_400_naming_the_field(hint_client, glossary: object, problem: str, route: str) -> None:
    body = {"source": "de", "target": "en", "glossary": glossary}
    body |= {"text": "b a c"} if route == "/v1/translate" else {"q": "b a c"}
    response = hint_client.post(route, json=body)
    assert response.status_code == 400, response.text
    assert "glossary" in response.json()["error"] and problem in response.json()["error"]


def test_a_model_without_hints_refuses_a_glossary_with_400(echo_engine) -> None:
    from echo_backend import make_client

    with make_client(echo_engine) as client:
        response = client.post("/v1/translate", json={"text": "b a c", "source": "de", "glossary": {"a": "e"}})
    assert response.status_code == 400 and "not trained with target-term hints" in response.json()["error"]


def test_the_api_shows_each_glossary_term_and_whether_it_was_used(hint_client) -> None:
    text = "b c d a c"
    response = hint_client.post("/v1/translate", json={"text": text, "source": "de", "glossary": {"a": "e"}})
    assert response.status_code == 200, response.text
    (sentence,) = response.json()["translations"][0]["sentences"]
    (term,) = sentence["quality"]["terms"]
    assert term["source"] == "a" and text[term["start"] : term["end"]] == "a" and term["origin"] == "glossary"
    assert term["term"] == "e" and term["appears"] and term["used"]  # the echo copied the hint, aligned to "a"
    # The maps stay over the user's words: no hint piece among the source tokens.
    assert [t["text"] for t in sentence["source_words"]] == ["b", "c", "d", "a", "c"]
    assert [t["text"] for t in sentence["source_tokens"]] == ["b", "c", "d", "a", "c"]
    libre = hint_client.post("/translate", json={"q": [text], "source": "de", "target": "en", "glossary": {"a": "e"}})
    assert libre.status_code == 200
    assert [(t["start"], t["term"], t["used"]) for t in libre.json()["terms"][0]] == [(6, "e", True)]
    plain = hint_client.post("/translate", json={"q": text, "source": "de", "target": "en"})
    assert "terms" not in plain.json()  # LibreTranslate's own shape when no hint was shown


def test_a_texts_quality_places_each_sentences_terms_at_its_offset() -> None:
    from seq2seq.analysis.quality import SentenceQuality, join
    from seq2seq.core.hints import TermOutcome

    def quality(term: str) -> SentenceQuality:
        outcome = TermOutcome("a", 2, 3, term, "glossary", True, True)
        return SentenceQuality([1.0], [], [1.0], [0.0], [], 1.0, 1.0, -0.1, 0.9, terms=[outcome])

    joined = join([(quality("e"), 3), (quality("f"), 3)], source_offsets=[0, 10])
    assert [(t.start, t.end, t.term) for t in joined.terms] == [(2, 3, "e"), (12, 13, "f")]
    assert [(t.start, t.term) for t in join([(quality("g"), 3)], source_offsets=[5]).terms] == [(7, "g")]
