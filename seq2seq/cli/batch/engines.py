"""Step 4 of a batch job: batches of sentences -> `UnitResult`s, in this process or in workers.

Every engine wraps the one `Translator` interface; a worker process loads its own session
from an `EngineSpec`. A sentence's result is its `TranslationResult` (without the raw
attention, which the maps already read: it is the bulk of what a worker would send back)
or, for a sentence the model failed on, a `FailedSentence`. Results come back as futures,
in any order; the job restores it.
Torch-free: the torch backend is imported only by `load_translator` when asked for.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from seq2seq.analysis.quality import DEFAULT_QUALITY_MODE
from seq2seq.core.config import DecodeConfig
from seq2seq.decoding.translator import TranslationResult, Translator
from seq2seq.loading import DEFAULT_BACKEND, load_translator

log = logging.getLogger("crossalign.translate")


@dataclass(frozen=True)
class EngineSpec:
    """Everything a worker process needs to build its own Translator (picklable)."""

    model: Path
    backend: str = DEFAULT_BACKEND
    threads: int = 0  # 0 = the library default
    precision: str | None = None  # onnx graphs; None = the bundle's default
    # `decode.alignment` None = no alignment (and no attention kept)
    decode: DecodeConfig = DecodeConfig(return_attention=False)
    quality_mode: str = DEFAULT_QUALITY_MODE  # the untranslated flags: with source occlusion, or "fast"
    streams: int = 0  # sub-batches searched at once (0 = the library default: two from two threads)
    # The reverse direction's model, the channel a reranked search reads (`Translator.channel`); None: none.
    channel: Path | None = None


@dataclass
class FailedSentence:
    """A sentence the model failed on: its line is written as an error record."""

    error: str


# The translation of one sentence, or why there is none.
UnitResult = TranslationResult | FailedSentence


class SentenceTranslator:
    """A `Translator` plus the decode and alignment settings of a job; runs in any process."""

    def __init__(self, translator: Translator, decode: DecodeConfig):
        self.translator, self.decode = translator, decode

    @classmethod
    def load(cls, spec: EngineSpec) -> SentenceTranslator:
        translator = load_translator(
            spec.model, spec.backend, spec.threads, spec.precision, quality_mode=spec.quality_mode, streams=spec.streams
        )
        if spec.channel is not None:  # its bundle's own graphs: only teacher forcing runs on it
            translator.channel = load_translator(spec.channel, spec.backend, spec.threads)
        return cls(translator, spec.decode)

    def run(self, texts: list[str]) -> list[UnitResult]:
        """Translate `texts` (results in order); a failure is confined to its own sentence."""
        try:
            results = self.translator.translate_batch(texts, self.decode)
        except Exception:  # noqa: BLE001 - retry one by one to find the sentence at fault
            log.debug("batch of %d failed; retrying one by one", len(texts), exc_info=True)
            return [self._run_one(text) for text in texts]
        return [self._unit(result) for result in results]

    def _run_one(self, text: str) -> UnitResult:
        try:
            return self._unit(self.translator.translate_batch([text], self.decode)[0])
        except Exception as error:  # noqa: BLE001 - reported in the record, the job goes on
            return FailedSentence(f"translation failed: {type(error).__name__}: {error}")

    @staticmethod
    def _unit(result: TranslationResult) -> TranslationResult:
        """`result` without its raw attention (L, H, T+1, S+1), alternatives' included."""
        alternatives = [SentenceTranslator._unit(alternative) for alternative in result.alternatives]
        return dataclasses.replace(result, attention=None, alternatives=alternatives)


class Engine(Protocol):
    capacity: int  # batches worth having in flight at once

    def submit(self, texts: list[str]) -> Future: ...

    def close(self, cancel: bool = False) -> None: ...


class InlineEngine:
    """Translate in this process, synchronously."""

    capacity = 1

    def __init__(self, worker: SentenceTranslator):
        self.worker = worker

    def submit(self, texts: list[str]) -> Future:
        future: Future = Future()
        future.set_result(self.worker.run(texts))
        return future

    def close(self, cancel: bool = False) -> None:
        pass


# Worker processes pay for themselves from about this many lines on (`--workers-min-lines`):
# below it, their start-up (a spawned interpreter each, importing and loading the model) costs
# more than they save, and the job runs in this process. Measured with the shipped de-en at its
# beam 4 on this 2-core machine beside a training job (`bench/batch.py --break-even`, medians of
# 3 whole runs, 1 process against 2 workers): 6 lines 4.03 / 7.27 s, 50 lines 5.34 / 6.20,
# 100 7.03 / 11.12, 200 12.39 / 14.51, 250 15.83 / 14.26, 300 17.33 / 19.57, 400 16.50 /
# 12.82 and 18.25 / 19.04, 600 29.19 / 25.09: workers always lost below 200 lines, won or
# lost within the noise from 250 to 400, and won from 600 (docs/cli.md).
WORKER_MIN_LINES = 400

_WORKER: SentenceTranslator | None = None  # the session of a worker process


def _init_worker(spec: EngineSpec) -> None:
    global _WORKER
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the parent stops us
    _watch_parent(os.getppid())
    _WORKER = SentenceTranslator.load(spec)


def _watch_parent(parent: int, interval: float = 1.0) -> None:
    """Exit when the parent is gone: a SIGKILLed job must not leave its workers behind
    (the pool's queues never wake a worker whose parent died; it would wait forever)."""
    import threading
    import time

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _run_in_worker(texts: list[str]) -> list[UnitResult]:
    assert _WORKER is not None, "worker process was not initialised"
    return _WORKER.run(texts)


class ProcessEngine:
    """`workers` processes, each loading its own session once (spawned, not forked: a fork
    would copy onnxruntime/torch thread pools mid-flight)."""

    def __init__(self, spec: EngineSpec, workers: int):
        self.capacity = 2 * workers  # one running and one queued per worker
        self.pool = ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker, initargs=(spec,)
        )
        # Start every worker now and wait until each has loaded its model: a broken model
        # fails here, before any line is read, and timings do not include the loading.
        # (The pool spawns a process per submit while none is idle, so `workers` no-op
        # tasks start all of them.)
        try:
            for future in [self.pool.submit(os.getpid) for _ in range(workers)]:
                future.result()
        except BaseException:
            self.pool.shutdown(wait=False, cancel_futures=True)
            raise

    def submit(self, texts: list[str]) -> Future:
        return self.pool.submit(_run_in_worker, texts)

    def close(self, cancel: bool = False) -> None:
        if cancel:
            # Do not wait for queued batches; running ones end with their processes.
            for process in list(getattr(self.pool, "_processes", {}).values()):
                process.terminate()
        self.pool.shutdown(wait=not cancel, cancel_futures=cancel)


def worker_threads(threads: int, workers: int) -> int:
    """Inference threads per worker: given, or the cores shared out (never oversubscribed)."""
    if threads or workers <= 1:
        return threads
    return max(1, (os.cpu_count() or 1) // workers)
