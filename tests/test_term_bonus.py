"""The term bonus of the beam search (seq2seq/decoding/terms.py): worked out by hand on the
scripted decoder, then on the shipped model with a glossary."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scripted_backend import EOS, TABLES, A, B, ScriptedBackend, lp, plain, sources

from seq2seq.core.config import MAX_TERM_BONUS
from seq2seq.decoding.search import beam_search
from seq2seq.decoding.terms import TermBias

REPO = Path(__file__).resolve().parents[1]

# Sentence 11: the model prefers [A] (.7 * .9); [B, A] (.2 * .5 * .9) is the term's way.
SENTENCE_11 = {
    (): {A: 0.7, B: 0.2, EOS: 0.1},
    (A,): {EOS: 0.9, A: 0.05, B: 0.05},
    (B,): {A: 0.5, EOS: 0.4, B: 0.1},
    (B, A): {EOS: 0.9, A: 0.05, B: 0.05},
}
A_ENDS = (0.0 + lp(0.7)) + lp(0.9)
B_A_ENDS = ((0.0 + lp(0.2)) + lp(0.5)) + lp(0.9)
B_ENDS = (0.0 + lp(0.2)) + lp(0.4)


@pytest.fixture(scope="module")
def shipped_translator():
    from seq2seq.loading import load_translator

    return load_translator(REPO / "models" / "de-en")


@pytest.fixture(autouse=True)
def sentence_11(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TABLES, 11, SENTENCE_11)


def search(bonus: float, terms: list, n_best: int = 1) -> list:
    config = plain(beam_size=2, n_best=n_best, length_penalty=0.0, term_bonus=bonus)
    [hypotheses] = beam_search(ScriptedBackend(), *sources([11, EOS]), config, terms=[terms])
    return hypotheses


def test_a_completed_term_keeps_its_bonus_and_wins() -> None:
    assert [h.tokens for h in search(0.0, [([B, A],)])] == [[A]]  # without the bonus: the model's choice
    [best] = search(1.5, [([B, A],)])
    assert best.tokens == [B, A]
    assert best.log_prob == pytest.approx(B_A_ENDS)  # the log-prob is the model's own
    assert best.score == pytest.approx(B_A_ENDS + 2 * 1.5)  # the score has the bonus of both pieces
    assert best.score > A_ENDS


def test_a_half_written_term_gives_its_bonus_back() -> None:
    # The term [B, B]: [B] earns the bonus, then [B, A] breaks the match (a bonus small
    # enough that [B, B] itself does not win).
    hypotheses = search(0.5, [([B, B],)], n_best=2)
    assert [h.tokens for h in hypotheses] == [[A], [B, A]]
    assert all(h.score == pytest.approx(h.log_prob) for h in hypotheses)


def test_a_term_counts_once_and_one_alternative_is_enough() -> None:
    # Alternatives [B, A] and [A]: [A] completes the term; its other spelling earns nothing more.
    hypotheses = search(2.0, [([B, A], [A])], n_best=2)
    assert [h.tokens for h in hypotheses] == [[B, A], [A]]
    assert hypotheses[0].score == pytest.approx(B_A_ENDS + 2 * 2.0)  # [B] +2, then [A] completes [B, A]: +2
    assert hypotheses[1].score == pytest.approx(A_ENDS + 2.0)
    # A sentence without terms in the same batch is searched as without a bias.
    config = plain(beam_size=2, length_penalty=0.0, term_bonus=2.0)
    [[with_term], [without]] = beam_search(
        ScriptedBackend(), *sources([11, EOS], [11, EOS]), config, terms=[[([B, A],)], []]
    )
    assert with_term.tokens == [B, A] and without.tokens == [A] and without.score == without.log_prob


def test_the_bias_follows_its_rows_when_they_reorder() -> None:
    bias = TermBias([[([B, A],)], [([A, A, B],)]], bonus=1.0, k=2, eos_id=EOS)

    # Rows 0-1: sentence 0; rows 2-3: sentence 1. Row 2 writes A (its term's first piece).
    bias.select(np.array([0, 1, 2, 2]), np.array([B, A, A, B]), active=np.array([0, 1]))
    assert bias.progress[:, 0].tolist() == [1, 0, 1, 0]
    # Sentence 0 leaves: the remaining rows are sentence 1's, taken from rows 2 and 2.
    bias.select(np.array([2, 2]), np.array([A, B]), active=np.array([0, 1]))
    assert bias.progress[:, 0].tolist() == [2, 0] and bias.kept.tolist() == [0.0, 0.0]
    log_probs = np.zeros((2, 6), dtype=np.float32)
    ranked, changed = bias.apply(log_probs, active=np.array([1]))
    assert changed.tolist() == [0, 1]
    assert ranked[0, B] == pytest.approx(1.0)  # completes [A, A, B]: +1 on top of the 2 kept so far
    assert ranked[0, EOS] == pytest.approx(-2.0)  # ending gives the partial match's 2 back
    assert ranked[1, A] == pytest.approx(1.0) and ranked[1, EOS] == 0.0


def test_a_term_earns_its_bonus_once_even_when_it_is_written_again() -> None:
    bias = TermBias([[([B, A],)]], bonus=1.0, k=1, eos_id=EOS)
    one, sentence = np.array([0]), np.array([0])
    for token in (B, A):  # the term, written: its bonus is kept
        bias.select(one, np.array([token]), active=sentence)
    assert bias.kept.tolist() == [2.0] and bias.done.tolist() == [[True]]
    ranked, changed = bias.apply(np.zeros((1, 6), dtype=np.float32), active=sentence)
    assert changed.tolist() == [] and ranked[0, B] == 0.0  # a done term offers nothing more
    for token in (A, B, A):  # later in the sentence, written again: nothing more
        bias.select(one, np.array([token]), active=sentence)
        assert bias.kept.tolist() == [2.0] and bias.done.tolist() == [[True]]


def test_the_shipped_model_writes_more_glossary_terms_with_the_bonus(shipped_translator) -> None:
    # Gold sentences whose glossary terms the model ranks too low to copy from the hints alone.
    glossary = (
        ("Akkulaufzeit", "battery life"),
        ("Wohnzimmerfenster", "living room window"),
        ("Ferienhaus", "holiday home"),
    )
    texts = [
        "Die Akkulaufzeit beträgt bis zu zehn Stunden.",
        "Das Wohnzimmerfenster ist seit gestern kaputt.",
        "Meine Großeltern haben ein Ferienhaus am Bodensee.",
    ]
    config = dataclasses.replace(shipped_translator.decode_defaults, glossary=glossary)
    assert config.term_bonus > 0  # the bundle serves it
    used = {}
    for bonus in (0.0, config.term_bonus):
        results = shipped_translator.translate_batch(texts, dataclasses.replace(config, term_bonus=bonus))
        used[bonus] = sum(t.appears for r in results for t in r.terms if t.origin == "glossary")
    assert used[config.term_bonus] == 3 > used[0.0], used


def test_the_cli_refuses_a_bonus_out_of_range() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "seq2seq.cli", "translate", "--term-bonus", "-1", "Hallo"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert run.returncode == 2 and "--term-bonus: must be between 0 and 10.0, not -1" in run.stderr


@pytest.fixture(scope="module")
def shipped_client(shipped_translator):
    from echo_backend import make_client

    from service.compute.engine import TranslatorEngine

    engine = TranslatorEngine({("de", "en"): ("de-en", shipped_translator)}, window_s=0.002)
    with make_client(engine) as client:
        yield client
    engine.close()


# A gold sentence whose glossary term the model writes with the bundle's bonus and not from the hint alone.
PRACTICE = {"text": "Er geht jeden Tag zum Training.", "glossary": {"Training": "practice"}}


def test_a_request_sets_the_term_bonus_or_gets_the_bundles(shipped_client) -> None:
    def translated(route: str, body: dict) -> str:
        answer = shipped_client.post(route, json=body)
        assert answer.status_code == 200, answer.text
        found = answer.json()
        return found["translatedText"] if route == "/translate" else found["translations"][0]["text"]

    libre = {"q": PRACTICE["text"], "source": "de", "target": "en", "glossary": PRACTICE["glossary"]}
    for route, body in (("/v1/translate", PRACTICE), ("/translate", libre)):
        assert "practice" in translated(route, body).split()  # the bundle's bonus (2.5)
        assert "practice" not in translated(route, {**body, "term_bonus": 0}).split()  # off: the hint alone
    for bonus, expected in ((None, True), (0, False)):  # the stream's search too (its `done` event's text)
        stream = shipped_client.post("/v1/translate/stream", json={**PRACTICE, "term_bonus": bonus})
        done = stream.text.split("event: done\ndata: ")[1].splitlines()[0]
        assert ("practice" in json.loads(done)["translations"][0]["text"].split()) is expected, done
    for route, body in (("/v1/translate", PRACTICE), ("/translate", libre), ("/v1/attention", PRACTICE)):
        refused = shipped_client.post(route, json={**body, "term_bonus": 11})
        assert refused.status_code in (400, 422) and "term_bonus" in refused.text, (route, refused.text)


def test_a_strict_glossary_makes_ending_without_a_term_cost() -> None:
    # Sentence 11 and the term [B, A] without a bonus: the model's [A] wins unless ending
    # before the term costs (MAX_TERM_BONUS per term left out).
    config = plain(beam_size=2, length_penalty=0.0, glossary_strict=True)
    [[best]] = beam_search(ScriptedBackend(), *sources([11, EOS]), config, terms=[[([B, A],)]])
    assert best.tokens == [B, A] and best.score == pytest.approx(B_A_ENDS) == best.log_prob  # wrote it: no cost
    # Ending at once, without it, costs the bonus's ceiling: the EOS candidate's value at step 0.
    bias = TermBias([[([B, A],)]], bonus=0.0, k=2, eos_id=EOS, strict=True)
    ranked, _ = bias.apply(np.zeros((2, 6), dtype=np.float32), active=np.array([0]))
    assert ranked[0, EOS] == -MAX_TERM_BONUS and ranked[0, A] == 0.0
    bias.select(np.array([0, 0]), np.array([B, B]), active=np.array([0]))  # both rows begin the term
    # Row 0 writes B again (the match starts over: the term still owed), row 1 completes it.
    bias.select(np.array([0, 1]), np.array([B, A]), active=np.array([0]))
    ranked, _ = bias.apply(np.zeros((2, 6), dtype=np.float32), active=np.array([0]))
    assert ranked[0, EOS] == -MAX_TERM_BONUS and ranked[1, EOS] == 0.0


def test_strict_puts_the_glossary_terms_in_where_the_bonus_alone_does_not(shipped_client) -> None:
    # "Regenschirm" -> "umbrella": the model keeps "rain" even with the bonus (docs/terms.md).
    body = {"text": "Ich habe meinen Regenschirm im Bus vergessen.", "glossary": {"Regenschirm": "umbrella"}}
    for strict in (False, True):
        answer = shipped_client.post("/v1/translate", json={**body, "glossary_strict": strict})
        assert answer.status_code == 200, answer.text
        [term] = answer.json()["translations"][0]["sentences"][0]["quality"]["terms"]
        assert term["term"] == "umbrella" and term["appears"] is strict, answer.json()["translations"][0]["text"]
