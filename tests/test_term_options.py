"""Terms as one options value (`TermOptions`, seq2seq/core/config.py), end to end: validated once,
put over a config by one merge, read from one request field group, and carried with each
sentence in the scheduler, so that requests with different glossaries share a micro-batch."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from seq2seq.core.config import MAX_TERM_BONUS, DecodeConfig, TermOptions
from seq2seq.decoding.translator import Translator
from service.compute.engine import TranslatorEngine
from service.shared.requests import TermFields

SHIPPED = Path(__file__).resolve().parents[1] / "models" / "de-en"


def test_term_options_are_validated_once_naming_every_problem() -> None:
    assert TermOptions(term_bonus=MAX_TERM_BONUS).term_bonus == MAX_TERM_BONUS  # the limit itself
    assert TermOptions(term_bonus=0.0).term_bonus == 0.0
    with pytest.raises(ValueError, match="term_bonus must be between 0 and 10.0, not 10.01"):
        TermOptions(term_bonus=MAX_TERM_BONUS + 0.01)
    with pytest.raises(ValueError, match="non-blank string; term_bonus must be between 0 and 10.0, not -0.5"):
        TermOptions(glossary=(("Garten", " "),), term_bonus=-0.5)
    with pytest.raises(ValueError, match="term_bonus must be between"):  # a config validates its terms the same way
        DecodeConfig(term_bonus=-1.0)
    assert TermOptions(glossary=[["Garten", "yard"]]).glossary == (("Garten", "yard"),)  # JSON lists normalised


def test_term_options_apply_over_the_models_own() -> None:
    served = DecodeConfig(dictionary_hints=True, term_bonus=2.5)  # as a bundle's `decoding` has them
    asked = TermOptions(glossary=(("Garten", "yard"),), glossary_strict=True)
    config = asked.apply(served)
    assert config.terms == TermOptions((("Garten", "yard"),), True, 2.5, True)  # unset: the model's own
    assert TermOptions(dictionary_hints=False, term_bonus=0.0).apply(served).terms == TermOptions((), False, 0.0)
    assert config.without_glossary().terms == TermOptions((), True, 2.5, True)


def test_the_request_field_group_reads_as_term_options() -> None:
    fields = TermFields.model_validate({"glossary": {"Garten": "yard"}, "term_bonus": 1.5})
    assert fields.term_options() == TermOptions((("Garten", "yard"),), None, 1.5, False)
    assert TermFields.model_validate({}).term_options() == TermOptions()


@pytest.fixture(scope="module")
def shipped() -> Translator:
    from seq2seq.loading import load_translator

    return load_translator(SHIPPED)


def test_requests_with_different_glossaries_share_a_micro_batch(shipped: Translator) -> None:
    """Two requests, each with its own glossary, arrive within one batching window: one model
    call of both sentences, each translated with its own glossary, as it is alone."""
    batches: list[int] = []
    engine = TranslatorEngine(
        {("de", "en"): ("de-en", shipped)}, window_s=0.5, on_batch=lambda name, size: batches.append(size)
    )
    model = engine.models["de", "en"]
    asks = [
        ("Der Hund schläft im Garten.", (("Garten", "yard"),)),
        ("Die Katze sitzt auf dem Dach.", (("Dach", "rooftop"),)),
    ]
    configs = [TermOptions(glossary=glossary).apply(shipped.decode_defaults) for _, glossary in asks]
    try:
        start = threading.Barrier(2)
        futures: list = [None, None]

        def submit(i: int) -> None:
            start.wait()
            futures[i] = model.submit([asks[i][0]], configs[i])

        threads = [threading.Thread(target=submit, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        together = [future.result(timeout=60)[0] for future in futures]
    finally:
        engine.close()
    assert batches == [2]  # one call: the glossaries rode with their sentences, not in the batch's job
    for (text, glossary), config, result in zip(asks, configs, together):
        assert [(t.source, t.term, t.origin) for t in result.terms if t.origin == "glossary"] == [
            (glossary[0][0], glossary[0][1], "glossary")
        ]
        alone = shipped.translate(text, config)
        assert (result.text, result.score) == (alone.text, pytest.approx(alone.score, abs=1e-4))
