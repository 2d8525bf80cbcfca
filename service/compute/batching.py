"""Micro-batching with admission control: requests share padded batches, fairly, in a bounded queue.

A decoder step costs nearly the same for 1 row as for 32 on CPU (the time goes to
per-call overhead and to the Python beam search loop, not to the matmuls), so batching
concurrent requests multiplies throughput. One worker thread per model waits up to
`window_s` after work arrives, then fills one model call and runs it. A request alone
pays at most the window.

Fairness. A model call cannot be interrupted, so a newcomer waits for the call that is
running, and then for its turn. To keep that bounded behind heavy requests, a batch is
not "the next requests in arrival order" but is dealt out one sentence at a time,
round-robin over clients (an API key or an address) and, within a client, over its
requests, until the batch holds `max_sentences` sentences or `max_rows` beam rows
(sentences x beam size, what a decoder step really computes). A one-sentence request
therefore rides in the very next call, however many 64-text requests are queued before
it; their sentences are spread over several calls.

Admission. The queue holds at most `max_queue_work` work units (`work_units`: beam size
x characters, summed over a request's texts); a request that does not fit is refused
with `QueueFull`, which carries an estimate of when to retry (queued work over the
throughput of recent calls). 0 = unbounded.

Jobs. A request is a list of items and one job: sentences and a `DecodeConfig`, or (for
/v1/align) given (source, translation) pairs and a forced-alignment job; both take the
same turns and the same queue bound, and a batch holds one job (one beam size) only. A
sentence carries its request's glossary with it (`Sentence`), not in the job: requests
with different glossaries share a batch, the translator reading each sentence's own.

Turns between models. The models of one server share one `gate` (a `FairLock`): each
model's onnxruntime threads already take every core, so two model calls at once would only
contend. A batch is dealt once its model holds the gate, not before it waits for it: what
arrived while the other model ran rides in the call (a batch dealt first would leave it for
the call after), and the gate is taken in the order asked, so the models alternate under
load instead of one taking it again before the other wakes.

Turns inside a call. A model call runs whole, but not in one breath: at each of its steps (a
search step, a teacher-forced batch of the occlusion pass or of a forced alignment: wherever
the run asks `wanted`) it offers a turn. Once it has run `TURN_S` since it began or last
stepped aside, a request that has never been served waits, and no other thread of the call is
aside already, it steps aside: a batch of the waiting requests (dealt as any batch, newcomers
first) runs there and then, whole (a nested call steps aside for nobody), and the call goes on;
and if the other model waits for the gate, the call lets it take the gate and takes it back
after. So a newcomer waits for at most one turn and its own call, however long the running
call (one long sentence, its thorough quality pass: issue 41, 2).

Failures. If a model call raises, each request in it is retried on its own, so only the
request whose text is at fault fails; its neighbours get their results.

Watching. A request may come with an observer (`submit(..., observe=)`), called in the
worker thread with (its item's index in the request, event) for whatever the run reports as
it goes: a translation's steps and its sentences as each is whole (service/routes/stream.py streams
them). A batch in which nobody watches is run unwatched; one with a watcher reports every
row, and each request hears only of its own.

Cancellation. A caller that no longer wants a request's results cancels its future
(`future.cancel()`, or through a `CancelToken` the future is bound to: the service binds
every future of an HTTP request to one token, cancelled when the client disconnects, a
stream's included). Its rows not yet dealt leave the queue at once, its
work leaves the queue bound, and its rows in the running model call stop at the search's
next step (`run`'s `wanted`); a cancelled future's waiter gets `CancelledError`. A request
that times out is cancelled the same way, and `close()` cancels everything.

With `window_s == 0` there is no worker: `submit` runs the request in the caller's
thread, so concurrent requests run side by side, each with its own small batch (the
benchmark's "batching off"); the queue bound still counts their work.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from seq2seq.core.config import GlossaryTerms
from seq2seq.decoding.search import Wanted

log = logging.getLogger("crossalign.service")


@dataclass(frozen=True)
class Sentence:
    """A sentence to translate with its request's glossary (the job holds none)."""

    text: str
    glossary: GlossaryTerms = ()


# A sentence to translate (with its glossary, or bare), or a (source, translation) pair to align.
Item = Sentence | str | tuple[str, ...]


class Job(Protocol):
    """What a batch's items are run with: a `DecodeConfig`, or a forced-alignment job. Only
    requests with equal jobs share a batch."""

    @property
    def beam_size(self) -> int: ...


# (index of an item, event): what a run reports as it goes (service.compute.engine.model_call: a
# translation step, or an item's result as soon as it is whole).
Observe = Callable[[int, Any], None]
# (items, job, wanted, observe) -> one result per item, in order; `wanted()` -> (items,) bool says
# which items someone still waits for (seq2seq.decoding.search.Wanted); one no longer wanted may
# get None. `observe`, when someone watches an item of the batch, is told of its progress.
RunBatch = Callable[[list[Any], Any, Wanted, Observe | None], list[Any]]


# How long a model call runs before it steps aside for a newcomer (module doc, "Turns inside
# a call"): a newcomer waits this, a step, and its own call (the aim of issue 41: <= 1 s).
TURN_S = 0.25
# A teacher-forced row of the occlusion pass (one per source word, about the sentence long)
# costs about half a search's beam row over the same characters: it reads every position at
# once. Measured on the shipped model (bench/service_reliability.py --parts occlusion_cost):
# 1.4 rows a beam row on short sentences, 2.5 on sentences of 120-300 characters (7.4 on a
# 990-character one, whose search costs more a character than work_units counts).
OCCLUSION_SHARE = 2


def work_units(items: Sequence[Item], beam_size: int) -> int:
    """What a request costs the model: beam rows x characters (decoding time grows with both);
    a pair counts the characters of both its texts."""
    texts = (
        text
        for item in items
        for text in ((item.text,) if isinstance(item, Sentence) else (item,) if isinstance(item, str) else item)
    )
    return beam_size * sum(max(len(text), 1) for text in texts)


def occlusion_units(sentences: Sequence[str], hypotheses: int = 1) -> int:
    """What the thorough quality pass's source occlusion costs on `sentences`, in work units:
    per sentence and hypothesis, a row per word (`seq2seq.analysis.occlusion`), each about the
    sentence's characters, at `OCCLUSION_SHARE` rows a beam row."""
    return hypotheses * sum(len(sentence.split()) * len(sentence) for sentence in sentences) // OCCLUSION_SHARE


class QueueFull(Exception):
    """The queue cannot take this request now; `retry_after` is seconds until it likely can."""

    def __init__(self, retry_after: int):
        super().__init__(f"the translation queue is full; retry in {retry_after} s")
        self.retry_after = retry_after


class CancelToken:
    """Says that nobody wants a request's results any more (its client hung up): `cancel()`
    cancels every future bound to it, and any bound later at once. Thread-safe.

    One per HTTP request (service/http/connections.py cancels it when the client disconnects),
    and one per file job (service/shared/file_jobs.py: cancelled when the server stops); the
    futures of the scheduler and of the heatmap renderer are bound to it, so what a request
    queued or started is dropped with it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._futures: set[Future] = set()
        self._cancelled = False
        self._event = threading.Event()  # set once cancelled: what `wait` waits on

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`, waking at once if the token is cancelled; whether it is."""
        return self._event.wait(seconds)

    def bind(self, future: Future) -> Future:
        """Cancel `future` with this token (now, if the token is already cancelled); returns it."""
        with self._lock:
            if not self._cancelled:
                self._futures.add(future)
        if self._cancelled:
            future.cancel()
        else:
            future.add_done_callback(self._forget)
        return future

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            futures, self._futures = list(self._futures), set()
        self._event.set()
        for future in futures:
            future.cancel()

    def _forget(self, future: Future) -> None:
        with self._lock:
            self._futures.discard(future)


@dataclass(eq=False)
class _Request:
    items: list[Item]
    config: Job
    client: str
    cost: int
    future: Future = field(default_factory=Future)
    results: list[Any] = field(default_factory=list)
    arrived: float = field(default_factory=time.monotonic)
    served: float = 0.0  # when it last had a sentence dealt; 0 = never
    next: int = 0  # the first sentence not yet dealt into a batch
    done: int = 0  # sentences with a result
    dropped: bool = False  # released: done, failed or cancelled (its rows still queued or running are skipped)
    observe: Observe | None = None  # told (item index in the request, event) as its items progress


@dataclass
class _Piece:
    request: _Request
    start: int
    end: int


class FairLock:
    """A lock taken in the order it was asked for. (A `threading.Lock` is not: the thread that
    releases it may take it again before a waiting one wakes, and under load one model would
    run call after call while the other's requests wait.) Thread-safe; a context manager."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._waiting: deque[object] = deque()
        self._held = False

    def __enter__(self) -> FairLock:
        me = object()
        with self._changed:
            self._waiting.append(me)
            while self._held or self._waiting[0] is not me:
                self._changed.wait()
            self._waiting.popleft()
            self._held = True
        return self

    def __exit__(self, *exc: object) -> None:
        with self._changed:
            self._held = False
            self._changed.notify_all()

    def step_aside(self) -> bool:
        """Held by the caller: if someone waits for the lock, let them have it now, and take it
        back after, in turn; if nobody waits, keep it. Whether it stepped aside."""
        with self._changed:
            if not self._waiting:
                return False
            self._held = False
            self._changed.notify_all()
        self.__enter__()
        return True


class MicroBatcher:
    def __init__(
        self,
        run: RunBatch,
        window_s: float,
        max_sentences: int,
        on_batch: Callable[[int], None] | None = None,
        name: str = "model",
        max_rows: int = 0,
        max_queue_work: int = 0,
        gate: FairLock | None = None,
    ):
        """`max_rows`: beam rows (sentences x beam size) per model call, 0 = no limit beyond
        `max_sentences`; `max_queue_work`: work units queued or running, 0 = unbounded;
        `gate`: held around every model call (the models of one server share one)."""
        self.gate: contextlib.AbstractContextManager = gate or contextlib.nullcontext()
        self._shared_gate = gate  # stepped aside from at a call's turns (None: one model)
        self._aside = threading.Lock()  # held by the thread of a call that is stepping aside
        self.run, self.window_s, self.max_sentences = run, window_s, max_sentences
        self.max_rows, self.max_queue_work = max_rows, max_queue_work
        self.on_batch = on_batch or (lambda size: None)
        # client -> its unfinished requests, in turn order (both rotate as turns are taken).
        self._clients: OrderedDict[str, deque[_Request]] = OrderedDict()
        self._queued_work = 0
        self._work_per_second = 0.0  # moving average over recent calls, for Retry-After
        self._lock = threading.Condition()
        self._closed = False
        self._running: list[_Piece] = []  # the pieces of the model call in progress
        self._worker: threading.Thread | None = None
        if window_s > 0:
            self._worker = threading.Thread(target=self._loop, name=f"batcher-{name}", daemon=True)
            self._worker.start()

    # ------------------------------------------------------------------ callers' side

    def submit(
        self,
        items: Sequence[Item],
        config: Job,
        client: str = "",
        token: CancelToken | None = None,
        observe: Observe | None = None,
        cost: int | None = None,
    ) -> Future:
        """A future of `run(items, config)`'s results, in order, cancelled with `token` if given
        (cancelling it drops the request: see the module's docstring); `observe(index, event)`
        hears of its items' progress while they run; `cost`: its work units, what the queue
        bound counts (default `work_units`); raises QueueFull."""
        work = work_units(items, config.beam_size) if cost is None else cost
        request = _Request(list(items), config, client, work, results=[None] * len(items), observe=observe)
        if not items:
            request.future.set_result([])
            return request.future
        with self._lock:
            if self._closed:  # shutting down: nobody will run it
                request.future.cancel()
                return request.future
            self._admit(request.cost)
            if self._worker is not None:
                self._clients.setdefault(client, deque()).append(request)
                self._lock.notify()
        request.future.add_done_callback(lambda future: self._cancelled(request) if future.cancelled() else None)
        if token is not None:
            token.bind(request.future)
        if self._worker is None:
            request.next = len(items)
            with self.gate:
                self._execute(config, [_Piece(request, 0, len(items))])
        return request.future

    def _admit(self, cost: int) -> None:
        """Take `cost` into the queue, or raise QueueFull (lock held). A request alone is
        always admitted (the per-request cap is the caller's check)."""
        if self.max_queue_work and self._queued_work and self._queued_work + cost > self.max_queue_work:
            raise QueueFull(self._retry_after())
        self._queued_work += cost

    def _cancelled(self, request: _Request) -> None:
        """Its future was cancelled: drop whatever of it is queued or running."""
        with self._lock:
            self._drop(request)

    def close(self) -> None:
        """Stop: every request queued or running is cancelled (its rows stop at the next
        step), then the worker ends."""
        with self._lock:
            self._closed = True
            futures = [request.future for requests in self._clients.values() for request in requests]
            futures += [piece.request.future for piece in self._running]
            self._lock.notify()
        for future in futures:
            future.cancel()
        if self._worker is not None:
            self._worker.join(timeout=10)
            self._worker = None

    @property
    def queued_work(self) -> int:
        return self._queued_work

    # ------------------------------------------------------------------ the worker

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._clients and not self._closed:
                    self._lock.wait()
                if self._closed:
                    return
                # The window: let concurrent requests arrive, unless a batch is already full.
                deadline = time.monotonic() + self.window_s
                while not self._closed and self._waiting_sentences() < self.max_sentences:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._lock.wait(remaining)
                if not self._clients:  # every waiting request was cancelled during the window
                    continue
            # Dealt once the model may run: what arrives while another model runs rides along.
            with self.gate:
                with self._lock:
                    if self._closed:
                        return
                    if not self._clients:  # cancelled while the other model ran
                        continue
                    config, pieces = self._deal()
                if pieces:
                    self._execute(config, pieces)

    def _waiting_sentences(self) -> int:
        return sum(len(r.items) - r.next for requests in self._clients.values() for r in requests)

    def _deal(self) -> tuple[Job, list[_Piece]]:
        """One batch, dealt a sentence at a time round-robin over clients, then over each
        client's requests. The clients take their turns least recently served first (a
        newcomer before all others), so however many clients wait, a newcomer rides in the
        very next call as long as no more newcomers than the call holds sentences arrived
        with it. A batch shares one job (one DecodeConfig, one beam size): that of the
        request served least recently (a newcomer before all others, the earliest first), so
        a request whose beam size differs from the heavy ones' gets the very next call instead
        of waiting for the rotation to reach it. Called with the lock held."""
        # The deques hold only requests not fully dealt.
        waiting = (r for requests in self._clients.values() for r in requests)
        config = min(waiting, key=lambda r: (r.served, r.arrived)).config
        now = time.monotonic()
        sentences_cap = self.max_sentences
        if self.max_rows:
            sentences_cap = min(sentences_cap, max(1, self.max_rows // config.beam_size))
        taken: dict[int, _Piece] = {}
        count, progress = 0, True
        # Stable: clients served equally recently keep their rotation order.
        turns = sorted(self._clients.values(), key=lambda requests: max(r.served for r in requests))
        while count < sentences_cap and progress:
            progress = False
            for requests in turns:
                request = next((r for r in requests if r.config == config and r.next < len(r.items)), None)
                if request is None:
                    continue
                taken.setdefault(id(request), _Piece(request, request.next, request.next)).end += 1
                request.next += 1
                request.served = now
                requests.rotate(-1)  # this client's next turn goes to its next request
                count, progress = count + 1, True
                if count == sentences_cap:
                    break
        self._clients.move_to_end(next(iter(self._clients)))  # the next batch starts with the next client
        for client, requests in list(self._clients.items()):
            # Fully dealt requests leave the queue (their pieces carry them to the end).
            for request in [r for r in requests if r.next == len(r.items)]:
                requests.remove(request)
            if not requests:
                del self._clients[client]
        return config, list(taken.values())

    def _execute(self, config: Job, pieces: list[_Piece], nested: bool = False) -> None:
        """Run one batch of `pieces` and deliver its results; a `nested` one (run while
        another call stepped aside) offers no turns of its own."""
        pieces = [piece for piece in pieces if not piece.request.dropped]  # cancelled while it waited
        if not pieces:
            return
        items = [item for piece in pieces for item in piece.request.items[piece.start : piece.end]]
        owners = [piece.request for piece in pieces for _ in range(piece.start, piece.end)]
        self.on_batch(len(items))
        with self._lock:
            self._running += pieces
        turns = _Turns(self) if self._worker is not None and not nested else None

        def wanted() -> np.ndarray:
            if turns is not None:
                turns.offer()
            return np.array([not owner.dropped for owner in owners])

        start = time.perf_counter()
        try:
            results = self.run(items, config, wanted, _routed(pieces))
        except Exception:  # noqa: BLE001 - retried piece by piece below
            if len(pieces) == 1:
                self._fail(pieces[0])
                return
            log.warning("a batch of %d sentences failed; retrying its %d requests one by one", len(items), len(pieces))
            for piece in pieces:
                self._execute(config, [piece], nested)
            return
        finally:
            with self._lock:
                ended = {id(piece) for piece in pieces}
                self._running = [piece for piece in self._running if id(piece) not in ended]
        if not any(owner.dropped for owner in owners):  # a call cut short says nothing of the throughput
            # Each piece costs its share of its request's work; the time others ran in its turns is not its.
            work = sum(p.request.cost * (p.end - p.start) / len(p.request.items) for p in pieces)
            self._observe(int(work), time.perf_counter() - start - (turns.aside_s if turns else 0.0))
        position = 0
        for piece in pieces:
            count = piece.end - piece.start
            self._deliver(piece, results[position : position + count])
            position += count

    def _step_aside(self) -> bool:
        """A turn inside a running call (module doc, "Turns inside a call"): a batch of the
        waiting requests, if one has never been served, runs now, nested; then the other
        model takes the gate if it waits for it. Whether the call stepped aside."""
        with self._lock:
            newcomer = not self._closed and any(r.served == 0 for rs in self._clients.values() for r in rs)
            config, pieces = self._deal() if newcomer else (None, [])
        if pieces:
            self._execute(config, pieces, nested=True)
        gave_gate = self._shared_gate is not None and self._shared_gate.step_aside()
        return bool(pieces) or gave_gate

    def _deliver(self, piece: _Piece, results: list[Any]) -> None:
        request = piece.request
        request.results[piece.start : piece.end] = results
        request.done += len(results)
        with self._lock:
            if request.done < len(request.items) or request.dropped:
                return
            request.dropped = True  # finished: a late cancel has nothing left to release
            self._queued_work -= request.cost
        with contextlib.suppress(InvalidStateError):  # cancelled in the meantime: nobody waits for it
            request.future.set_result(list(request.results))

    def _fail(self, piece: _Piece) -> None:
        log.exception("translation of a request (%d sentences) failed", len(piece.request.items))
        with self._lock:
            if piece.request.dropped:
                return
            self._drop(piece.request)
        with contextlib.suppress(InvalidStateError):
            piece.request.future.set_exception(RuntimeError("the model failed on this request's text"))

    def _drop(self, request: _Request) -> None:
        """Stop scheduling `request` and release its work (lock held)."""
        if request.dropped:
            return
        request.dropped = True
        request.next = len(request.items)
        self._queued_work -= request.cost
        requests = self._clients.get(request.client)
        if requests is not None and request in requests:
            requests.remove(request)
            if not requests:
                del self._clients[request.client]

    def _observe(self, work: int, seconds: float) -> None:
        rate = work / max(seconds, 1e-3)
        with self._lock:
            self._work_per_second = rate if not self._work_per_second else 0.8 * self._work_per_second + 0.2 * rate

    def _retry_after(self) -> int:
        """Seconds until the queued work is likely done (lock held); 1..60."""
        if not self._work_per_second:
            return 1
        return int(min(60, max(1, math.ceil(self._queued_work / self._work_per_second))))


class _Turns:
    """The turns one running call offers (`MicroBatcher._execute`'s `wanted`): after `TURN_S`
    of running since it began or last stepped aside, on whichever of its threads asks first;
    its other threads (a search's sub-batches, `Translator.streams`) wait at their next step
    until the turn is over, so that the turn has the cores to itself."""

    def __init__(self, batcher: MicroBatcher):
        self.batcher, self.since, self.aside_s = batcher, time.monotonic(), 0.0

    def offer(self) -> None:
        if time.monotonic() - self.since < TURN_S:
            return
        if not self.batcher._aside.acquire(blocking=False):
            with self.batcher._aside:  # another thread of the call is taking the turn: wait it out
                return
        try:
            began = time.monotonic()
            if self.batcher._step_aside():
                self.since = time.monotonic()
                self.aside_s += self.since - began
        finally:
            self.batcher._aside.release()


def _routed(pieces: list[_Piece]) -> Observe | None:
    """The observer of a batch of `pieces`: each event of an item handed to the observer of
    the request it belongs to, with the item's index in that request (None: nobody watches)."""
    if not any(piece.request.observe is not None for piece in pieces):
        return None
    owners = [(piece.request, index) for piece in pieces for index in range(piece.start, piece.end)]

    def observe(item: int, event: Any) -> None:
        request, index = owners[item]
        if request.observe is not None and not request.dropped:
            request.observe(index, event)

    return observe
