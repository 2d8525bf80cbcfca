"""Heatmaps drawn off the request threads, their pixels admitted within a bound, their memory given back.

matplotlib draws one figure at a time (its text layout is not thread-safe, so
`seq2seq.analysis.heatmap` holds a lock), and a 4000 x 4000 PNG takes ~3 s and ~65 MB
while it is drawn. Drawn in the request threads, 48 concurrent heatmaps held as many
threads of the pool every sync route shares, queued on that lock, stalled /health for
20 s and left 2.4 GB behind (a malloc arena per thread, each holding figures that only the
cycle collector frees). Here:

- `admit(pixels)` counts a heatmap's pixels (width x height) against `capacity` pixels
  being drawn or waiting to be, before the request translates anything; one that does not
  fit raises `RendererBusy`, which the service answers with 503 and a Retry-After of the
  pixels ahead over the recent drawing rate (a heatmap alone is always admitted);
- `render(job, token)` runs the job on the one render thread while the request's thread
  waits (a render whose request is cancelled before it starts is skipped);
- after each render, `gc.collect()` frees the figure at once (a Figure is a web of
  reference cycles) and glibc's `malloc_trim(0)` hands the freed heap back to the OS: the
  process holds at most one render's memory beyond its baseline, and after a burst it is
  back near the baseline (tests/test_reliability.py, bench/service_reliability.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import math
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from service.compute.batching import CancelToken

FIRST_GUESS = 5e6  # pixels drawn per second (a 4000 x 4000 PNG in ~3 s), until a render has been timed


def _malloc_trim() -> Callable[[], None]:
    """glibc's malloc_trim(0), or nothing where the C library has none (musl, macOS)."""
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return lambda: None
    return lambda: trim(0)


class RendererBusy(Exception):
    """The heatmaps admitted fill the renderer; `retry_after` is seconds until this one likely fits."""

    def __init__(self, retry_after: int, pixels: int):
        super().__init__(f"heatmaps of {pixels / 1e6:.0f} megapixels are being drawn; retry in {retry_after} s")
        self.retry_after = retry_after


class Renderer:
    """One render thread, at most `capacity` pixels admitted (drawing or waiting); thread-safe."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._pixels = 0  # admitted, not yet released
        self._rate = FIRST_GUESS  # moving average of recent renders, pixels per second
        self._lock = threading.Lock()
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="render")
        self._trim = _malloc_trim()

    @property
    def pixels(self) -> int:
        """Pixels admitted now (drawing or waiting)."""
        return self._pixels

    @contextlib.contextmanager
    def admit(self, pixels: int) -> Iterator[None]:
        """Hold `pixels` of the capacity for the body of the `with`; RendererBusy if they do not fit."""
        with self._lock:
            if self._pixels and self._pixels + pixels > self.capacity:
                wait = math.ceil((self._pixels + pixels) / self._rate)
                raise RendererBusy(int(min(60, max(1, wait))), self._pixels)
            self._pixels += pixels
        try:
            yield
        finally:
            with self._lock:
                self._pixels -= pixels

    def render(
        self, job: Callable[[], bytes], pixels: int, token: CancelToken | None = None, timeout: float | None = None
    ) -> bytes:
        """Blocking: `job()`, a heatmap of `pixels`, run on the render thread (call it inside
        `admit()`). Raises what the job raises, CancelledError once `token` is cancelled before
        the job started, and TimeoutError after `timeout` seconds (the job is then dropped if it
        has not started)."""
        future: Future = self._thread.submit(self._timed, job, pixels)
        if token is not None:
            token.bind(future)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)

    def _timed(self, job: Callable[[], bytes], pixels: int) -> bytes:
        start = time.perf_counter()
        try:
            return job()
        finally:
            rate = pixels / max(time.perf_counter() - start, 1e-3)
            with self._lock:
                self._rate = 0.7 * self._rate + 0.3 * rate
            gc.collect()  # the figure's cycles: its canvas is freed now, not at some later collection
            self._trim()
