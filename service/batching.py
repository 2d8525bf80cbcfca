"""Micro-batching: requests that arrive together share one padded batch.

A decoder step costs nearly the same for 1 row as for 32 on CPU (the time goes to
per-call overhead and to the Python beam search loop, not to the matmuls), so batching
concurrent requests multiplies throughput. One worker thread per model takes every
request waiting in its queue, waits up to `window_s` for more (up to `max_sentences`),
groups them by `DecodeConfig` (a batch shares one beam size), and makes one
`Translator.translate_batch` call per group. A request alone pays at most the window.

With `window_s == 0` there is no worker: `submit` runs the request in the caller's thread,
so concurrent requests run side by side, each with its own small batch (the benchmark's
"batching off").
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from seq2seq.config import DecodeConfig
from seq2seq.translator import TranslationResult

log = logging.getLogger("crossalign.service")
RunBatch = Callable[[list[str], DecodeConfig], list[TranslationResult]]


@dataclass
class _Request:
    texts: list[str]
    config: DecodeConfig
    future: Future = field(default_factory=Future)


class MicroBatcher:
    def __init__(self, run: RunBatch, window_s: float, max_sentences: int,
                 on_batch: Callable[[int], None] | None = None, name: str = "model"):
        self.run, self.window_s, self.max_sentences = run, window_s, max_sentences
        self.on_batch = on_batch or (lambda size: None)
        self._queue: queue.Queue[_Request | None] = queue.Queue()
        self._worker: threading.Thread | None = None
        if window_s > 0:
            self._worker = threading.Thread(target=self._loop, name=f"batcher-{name}", daemon=True)
            self._worker.start()

    def submit(self, texts: list[str], config: DecodeConfig) -> Future:
        """A future of `translate_batch(texts, config)`'s results, in order."""
        request = _Request(list(texts), config)
        if not texts:
            request.future.set_result([])
        elif self._worker is None:
            self._execute([request])
        else:
            self._queue.put(request)
        return request.future

    def close(self) -> None:
        if self._worker is not None:
            self._queue.put(None)
            self._worker.join(timeout=10)
            self._worker = None

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            pending, count, stop = [first], len(first.texts), False
            deadline = time.monotonic() + self.window_s
            while count < self.max_sentences:
                try:
                    request = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if request is None:
                    stop = True
                    break
                pending.append(request)
                count += len(request.texts)
            groups: dict[DecodeConfig, list[_Request]] = {}
            for request in pending:
                groups.setdefault(request.config, []).append(request)
            for group in groups.values():
                self._execute(group)
            if stop:
                return

    def _execute(self, requests: list[_Request]) -> None:
        texts = [text for request in requests for text in request.texts]
        self.on_batch(len(texts))
        try:
            results = self.run(texts, requests[0].config)
        except Exception as error:  # noqa: BLE001 - handed to every waiting request
            log.exception("translation batch of %d sentences failed", len(texts))
            for request in requests:
                request.future.set_exception(error)
            return
        start = 0
        for request in requests:
            request.future.set_result(results[start:start + len(request.texts)])
            start += len(request.texts)
