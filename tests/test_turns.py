"""The models of one server take turns on the cores (service/compute/batching.py, "Turns
between models"): the gate is taken in the order asked, and a batch is dealt once its model's
turn has come, so what arrived while the other model ran rides in the very next call."""

from __future__ import annotations

import threading
import time

from seq2seq.core.config import DecodeConfig
from service.compute.batching import FairLock
from service.compute.engine import TranslatorEngine


def wait_until(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_the_gate_is_taken_in_the_order_asked() -> None:
    """A thread that releases the gate and asks again waits behind those already waiting."""
    gate, order = FairLock(), []

    def take(name: str) -> None:
        with gate:
            order.append(name)

    gate.__enter__()
    waiting = []
    for name in ("first", "second", "third"):
        thread = threading.Thread(target=take, args=(name,))
        thread.start()
        waiting.append(thread)
        wait_until(lambda n=len(waiting): len(gate._waiting) == n)  # each in line before the next comes
    gate.__exit__(None, None, None)
    take("again")  # the releasing thread asks at once: it comes last
    for thread in waiting:
        thread.join(timeout=5)
    assert order == ["first", "second", "third", "again"]


class Slow:
    """A translator whose calls of the model `name` take `seconds` and are logged when they start."""

    def __init__(self, inner, name: str, seconds: float, started: list[str]):
        self.inner, self.name, self.seconds, self.started = inner, name, seconds, started

    def __getattr__(self, attribute):
        return getattr(self.inner, attribute)

    def translate_wanted(self, texts, config=None, wanted=None, watch=None):
        self.started.append(self.name)
        time.sleep(self.seconds)
        return self.inner.translate_wanted(texts, config, wanted, watch)


def test_what_arrives_while_the_other_model_runs_rides_in_the_next_call(echo_engine) -> None:
    """de-en's call runs 0.4 s; three en-de requests arrive one by one meanwhile: en-de's
    next call holds all three (a batch dealt before its turn came would hold the first alone)."""
    (model,) = echo_engine.models.values()
    started: list[str] = []
    sizes: dict[str, list[int]] = {"de-en": [], "en-de": []}
    pairs = {
        ("de", "en"): ("de-en", Slow(model.translator, "de-en", 0.4, started)),
        ("en", "de"): ("en-de", Slow(model.translator, "en-de", 0.0, started)),
    }
    engine = TranslatorEngine(pairs, window_s=0.002, on_batch=lambda name, size: sizes[name].append(size))
    config = DecodeConfig(beam_size=1)
    try:
        first = engine.models["de", "en"].submit(["b a c"], config)
        wait_until(lambda: started == ["de-en"])
        later = []
        for _ in range(3):
            later.append(engine.models["en", "de"].submit(["b a c"], config))
            time.sleep(0.03)
        assert all(future.result(timeout=30)[0].text for future in [first, *later])
    finally:
        engine.close()
    assert sizes == {"de-en": [1], "en-de": [3]}
    assert started == ["de-en", "en-de"]
