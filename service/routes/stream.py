"""`POST /v1/translate/stream`: a translation as Server-Sent Events, step by step.

The body is /v1/translate's (without `format`: marked-up text is not streamed), plus
`all_heads`. The request is checked, resolved and queued before the stream starts, so bad
input, a refused key, the rate limit, the work cap and a full queue are answered as on
/v1/translate (a 4xx or 503 with `{"error"}`); once it has started, every event is
`event: <name>` and one line of JSON `data:`, in this order:

    start     the model, the search, and per text its sentences with their source pieces
              and words (offsets into the input): the columns of the step events' rows
    step      greedy search only (beam_size 1), one per decoder step of each sentence, as
              it is decoded: the piece chosen, its log-prob and probability, the decoder's
              input, the translation so far and the words this step completed, the
              likeliest candidates, and the step's cross-attention row over the source
              (the alignment's layer, heads and level; with `all_heads`, every layer and
              head over the source pieces and </s>, and the decoder self-attention row)
    sentence  one per sentence as soon as it is whole, in order within each text: the
              sentence exactly as /v1/translate returns it (`result`)
    done      the totals: each text's joined translation and score, sentences, steps,
              tokens, seconds
    error     instead of what was left: {"status", "error"} with the JSON routes' message
              (a timeout, the server shutting down, a model failure)

A beam search (beam_size > 1) sends no step events: a beam's prefix is not final until its
sentence ends, so it streams finished sentences. The steps come from the one search (the
translator's `Watch`, seq2seq/decoding/search.py's observer), run by the scheduler like
every translation (fair turns, queue bound, request timeout); a client that disconnects
cancels the request's token and its rows leave the search at the next step. Steps of
different sentences interleave; each step event names its text (`index`) and sentence.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from pydantic import Field
from starlette.concurrency import run_in_threadpool

from seq2seq.core.alignment import (
    Token,
    normalize_rows,
    pieces_with_offsets,
    projection,
    source_rows,
    visible,
    words,
)
from seq2seq.core.config import AlignmentOptions, DecodeConfig
from seq2seq.decoding.records import aligned_sentence
from seq2seq.decoding.search import max_target_length
from seq2seq.decoding.texts import TranslatedText, sentence_spans
from seq2seq.decoding.translator import TranslationResult, TranslationStep
from service.compute.engine import ServedModel
from service.http.access import CheckedRoute
from service.http.errors import APIError
from service.shared.context import ContextDep, RequestContext
from service.shared.jobs import TranslateFields, TranslationJob, translation_job

log = logging.getLogger("crossalign.service")
router = APIRouter(prefix="/v1", tags=["native"], route_class=CheckedRoute)
# A comment line this often while nothing else is sent, so a proxy does not time the stream out.
KEEP_ALIVE_S = 15.0
# A client that does not take the stream's text is cut off this long after `request_timeout`
# (the time for the `error` event that says so to go out to one that still reads).
SEND_GRACE_S = 1.0
DECIMALS = 4
BOS, EOS = "<s>", "</s>"
# The events are made (JSON of every step's maps with `all_heads`: megabytes for a long text)
# off the event loop, which /health and every other connection need; a pool of their own, so
# that handlers waiting on the model in the request thread pool never hold them up.
EVENT_MAKERS = ThreadPoolExecutor(2, thread_name_prefix="stream-events")


class StreamRequest(TranslateFields):
    all_heads: bool = Field(
        False,
        description="each step event also carries the cross-attention of every layer and head over the source "
        "pieces and </s> (`cross`), and the decoder's self-attention row (`decoder`): what the explorer plays back",
    )


EVENTS = ("start", "step", "sentence", "done", "error")
# One event of the stream (OpenAPI 3.1 describes a text/event-stream by its events).
STREAM_EVENT = {
    "type": "object",
    "required": ["event", "data"],
    "properties": {
        "event": {
            "enum": list(EVENTS),
            "description": "start, a step per decoder step (greedy search), "
            "a sentence per finished sentence, then done; or error instead of what was left",
        },
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "description": "the event's JSON on one line: see the operation's description and service/routes/stream.py",
        },
    },
}
STREAM_RESPONSES = {
    200: {
        "content": {"text/event-stream": {"schema": STREAM_EVENT}},
        "description": "Server-Sent Events: start, step (greedy search), sentence, done; or error",
    }
}


@router.post(
    "/translate/stream",
    response_class=StreamingResponse,
    responses=STREAM_RESPONSES,
    summary="Translate, streaming each step (Server-Sent Events)",
)
async def translate_stream(body: StreamRequest, ctx: ContextDep) -> StreamingResponse:
    """The translation of /v1/translate as it is made, as Server-Sent Events (`event:` name,
    one line of JSON `data:`). Bad input, keys, the rate limit, the work cap and a full queue
    are answered before the stream starts, as on /v1/translate (`format` is not streamed).

    - `start`: `model`, `source`, `target`, `beam_size`, `steps` (whether step events follow),
      `attention` (the level, layer, heads and step shift the step rows are read with: the
      request's `alignment`, else the model's), `decoder_layers`, `n_heads`,
      `alignment_layer`, `alignment_heads`, and `texts[i].sentences[j]` with `source`,
      `source_start`, `source_end`, `source_tokens` (pieces) and `source_words` (offsets
      into the input): the columns of the step rows.
    - `step` (greedy search, beam_size 1; a beam's prefix is not final, so a beam search has
      none): `index` (the text), `sentence`, `step` (0: the step reading `<s>`), `token` (the
      piece chosen, `</s>` at the end), `id`, `end`, `log_prob`, `prob`, `input` (the piece the
      decoder read), `translation` (the sentence so far), `words` (the target words this step
      completed: `index`, `text`), `candidates` (the likeliest pieces: `token`, `prob`,
      `log_prob`, the chosen one first), `attention` (the step's cross-attention over the
      source words or pieces, as the map reads it: with a step shift, the map's row t is step
      t + 1's); with `all_heads`, `cross` (layers x heads x source pieces + `</s>`) and
      `decoder` (layers x heads x the `step + 1` decoder inputs: the causal triangle's row).
    - `sentence`: `index`, `sentence`, `result`: the sentence exactly as /v1/translate's
      `translations[index].sentences[sentence]`, sent as soon as it and those before it are
      done.
    - `done`: `translations` (per text: `text`, `score`, `source`, `target`, `alternatives`),
      `sentences`, `steps`, `source_tokens`, `target_tokens`, `seconds`.
    - `error` (instead of what was left): `status` and `error`, the JSON routes' status and
      message (a timeout, the server stopping, a model failure).

    A client that disconnects drops the request's work at the search's next step."""
    stream = await run_in_threadpool(open_stream, body, ctx, asyncio.get_running_loop())
    return DeadlineStream(
        stream.events(),
        deadline=stream.started + ctx.settings.request_timeout + SEND_GRACE_S,
        on_expiry=stream.future.cancel,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


class DeadlineStream(StreamingResponse):
    """A `StreamingResponse` whose writes must be taken by `deadline` (`time.monotonic()`): a
    client that stops reading blocks the writes (the transport waits to drain), and would
    hold the stream, its request and its connection open however long; past the deadline the
    writes stop, `on_expiry` drops the request's work, and the connection is closed."""

    def __init__(self, content: AsyncIterator[str], deadline: float, on_expiry: Callable[[], Any], **kwargs: Any):
        super().__init__(content, **kwargs)
        self.deadline, self.on_expiry = deadline, on_expiry

    async def stream_response(self, send: Any) -> None:
        async def timed(message: dict) -> None:
            await asyncio.wait_for(send(message), max(self.deadline - time.monotonic(), 0.0))

        try:
            await super().stream_response(timed)
        except TimeoutError:
            self.on_expiry()
            log.info("closed a stream whose client did not take its events within request_timeout")


def open_stream(body: StreamRequest, ctx: RequestContext, loop: asyncio.AbstractEventLoop) -> TranslationStream:
    """Check and resolve the request, queue its sentences, and return the stream of its
    events (blocking: tokenizes, may detect the language; run in the thread pool)."""
    job = translation_job(body, ctx)
    model, config = job.model, job.config
    # The step rows are read as the request's map is (or the model's own, when it asks for none).
    options = config.alignment or ctx.resolve_alignment(model, AlignmentOptions())
    spans = [sentence_spans(text) for text in job.texts]
    sentences = [
        SentenceState(index, number, text[start:end], (start, end))
        for index, (text, text_spans) in enumerate(zip(job.texts, spans))
        for number, (start, end) in enumerate(text_spans)
    ]
    for state, pieces in zip(sentences, model.translator.pieces_to_read([s.source for s in sentences], config)):
        state.read(pieces)
    if body.all_heads:  # bounded as /v1/attention's maps are, before anything is translated
        limit = ctx.settings.attention_max_weights
        check_streamed_weights(sum(streamed_weights(model, len(s.pieces), config) for s in sentences), limit)
    stream = TranslationStream(ctx, job, spans, sentences, options, body.all_heads, loop)
    stream.future = ctx.submit(model, job.texts, [s.source for s in sentences], config, stream.observe)
    stream.future.add_done_callback(stream.ended)
    return stream


def streamed_weights(model: ServedModel, pieces: int, config: DecodeConfig) -> int:
    """The most attention weights the `all_heads` step events of a sentence of `pieces` source
    pieces can carry: per step, every decoder layer and head's cross row (the pieces and
    </s>) and self-attention row (the step's inputs so far), for as many steps as the search
    may take (its length limit, `max_target_length`, and the model's positions)."""
    layers, heads = model.config.decoder_layers, model.config.n_heads
    steps = min(max_target_length(pieces + 1, config), model.config.max_positions - 2) + 1
    return layers * heads * (steps * (pieces + 1) + steps * (steps + 1) // 2)


def check_streamed_weights(weights: int, limit: int) -> None:
    """413 when the `all_heads` events would carry more than `limit` weights (`attention_max_weights`)."""
    if weights > limit:
        raise APIError(
            413,
            f"the all_heads step events of this text can hold {weights} attention weights; a stream holds at "
            f"most {limit} (send a shorter text, or leave all_heads out)",
        )


@dataclass
class SentenceState:
    """One sentence of a stream: where it is, what the model reads of it, its steps so far."""

    index: int  # its text
    number: int  # its place among the text's sentences
    source: str
    span: tuple[int, int]  # in the text
    pieces: list[Token] = field(default_factory=list)  # offsets into `source`, as the maps label them
    words: list[Token] = field(default_factory=list)
    to_words: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # (pieces, words) `projection`
    target: list[str] = field(default_factory=list)  # the pieces decoded so far
    next_step: int = 0  # steps sent (a batch retried piece by piece repeats them)
    words_sent: int = 0
    result: TranslationResult | None = None

    def read(self, pieces: list[Token]) -> None:
        self.pieces = [visible(p, self.source) for p in pieces]
        self.words = words(self.source)
        self.to_words = projection(self.pieces, self.words)


class TranslationStream:
    """The events of one streamed request. The scheduler's threads hand `observe` and
    `ended` what happens; the events are made and sent on the event loop (`events`)."""

    def __init__(
        self,
        ctx: RequestContext,
        job: TranslationJob,
        spans: list[list[tuple[int, int]]],
        sentences: list[SentenceState],
        options: AlignmentOptions,
        all_heads: bool,
        loop: asyncio.AbstractEventLoop,
    ):
        self.ctx, self.model, self.config = ctx, job.model, job.config
        self.texts, self.spans, self.sentences = job.texts, spans, sentences
        self.options, self.all_heads, self.loop = options, all_heads, loop
        self.messages: asyncio.Queue[tuple[str, int, Any]] = asyncio.Queue()
        self.future: concurrent.futures.Future = concurrent.futures.Future()
        self.started = time.monotonic()
        self.steps = 0
        self.weights = 0  # attention weights sent in `all_heads` events (checked before, held here too)
        self.sent = [0] * len(self.texts)  # per text, the sentences sent (in order)

    # ---------------------------------------------------------------- the scheduler's side

    def observe(self, item: int, event: Any) -> None:
        """A step or a result of sentence `item` (in a scheduler thread)."""
        self._put(("event", item, event))

    def ended(self, future: concurrent.futures.Future) -> None:
        self._put(("end", -1, future))

    def _put(self, message: tuple[str, int, Any]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed (shutdown): nobody reads the stream any more
            self.loop.call_soon_threadsafe(self.messages.put_nowait, message)

    # ---------------------------------------------------------------- the loop's side

    async def events(self) -> AsyncIterator[str]:
        """The stream's text: `start`, then the events as they come, ending with `done` or
        `error`; whatever fails once it has started ends it with its `error` event."""
        try:
            yield event("start", self.start())
            deadline = self.started + self.ctx.settings.request_timeout
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.future.cancel()
                    yield self.error(concurrent.futures.TimeoutError())
                    return
                try:
                    message = await asyncio.wait_for(self.messages.get(), min(remaining, KEEP_ALIVE_S))
                except TimeoutError:
                    yield ": waiting\n\n"
                    continue
                # What came meanwhile goes out in one write: under load a step of every
                # sentence arrives at once, and each write costs a pass through the server.
                messages = [message]
                while not self.messages.empty():
                    messages.append(self.messages.get_nowait())
                text, ended = await self.loop.run_in_executor(EVENT_MAKERS, self.made, messages)
                if text:
                    yield text
                if ended:
                    return
        except Exception as error:  # noqa: BLE001 - after `start`, a failure is told in the stream, as documented
            log.exception("a streamed translation failed after its start")
            yield self.error(error)
        finally:
            self.future.cancel()  # a client gone, or a timeout: drop what is left (a no-op once done)

    def made(self, messages: list[tuple[str, int, Any]]) -> tuple[str, bool]:
        """The text of the events `messages` make (in an event maker's thread, one call at a
        time per stream), and whether the stream ends with them."""
        texts: list[str] = []
        for kind, item, payload in messages:
            if kind == "end":
                return "".join(texts + self.finish(payload)), True
            texts += self.progress(item, payload)
        return "".join(texts), False

    def start(self) -> dict[str, Any]:
        model, config = self.model, self.config
        return {
            "model": model.name,
            "source": model.source,
            "target": model.target,
            "beam_size": config.beam_size,
            "steps": config.beam_size == 1,
            "attention": {
                "level": self.options.level,
                "layer": self.options.layer,
                "heads": list(self.options.heads or ()) or "mean",
                "step_shift": self.options.step_shift,
            },
            "all_heads": self.all_heads,
            "decoder_layers": model.config.decoder_layers,
            "n_heads": model.config.n_heads,
            "alignment_layer": model.config.resolved_alignment_layer,
            "alignment_heads": list(model.config.alignment_heads),
            "texts": [
                {
                    "sentences": [
                        {
                            "source": state.source,
                            "source_start": state.span[0],
                            "source_end": state.span[1],
                            "source_tokens": spans_at(state.pieces, state.span[0]),
                            "source_words": spans_at(state.words, state.span[0]),
                        }
                        for state in self.sentences
                        if state.index == index
                    ]
                }
                for index in range(len(self.texts))
            ],
        }

    def progress(self, item: int, payload: TranslationStep | TranslationResult) -> list[str]:
        state = self.sentences[item]
        if isinstance(payload, TranslationStep):
            if payload.step < state.next_step:  # a retried batch repeats its steps
                return []
            return [event("step", self.step(state, payload))]
        state.result = state.result or payload
        return self.sentences_ready(state.index)

    def step(self, state: SentenceState, step: TranslationStep) -> dict[str, Any]:
        """The event of one step of `state`'s sentence."""
        ended = step.token == self.model.translator.backend.eos_id
        previous = state.target[-1] if state.target else BOS
        if not ended:
            state.target.append(step.piece)
        state.next_step = step.step + 1
        self.steps += 1
        translation, _ = pieces_with_offsets(state.target)
        done = words(translation) if ended else settled_words(translation)
        new, state.words_sent = done[state.words_sent :], max(state.words_sent, len(done))
        row = source_rows(step.cross[:, :, None, :], self.options.layer or 0, self.options.heads or ())
        if self.options.level == "word":
            row = normalize_rows(row @ state.to_words)
        answer: dict[str, Any] = {
            "index": state.index,
            "sentence": state.number,
            "step": step.step,
            "token": step.piece,
            "id": step.token,
            "end": ended,
            "log_prob": round(step.log_prob, DECIMALS),
            "prob": probability(step.log_prob),
            "input": previous,
            "translation": translation,
            "words": [{"index": state.words_sent - len(new) + i, "text": w.text} for i, w in enumerate(new)],
            "candidates": [
                {"token": piece, "prob": probability(log_prob), "log_prob": round(log_prob, DECIMALS)}
                for piece, log_prob in step.candidates
                if np.isfinite(log_prob)
            ],
            "attention": rounded(row[0]),
        }
        if self.all_heads:
            self.weights += step.cross.size + (0 if step.decoder is None else step.decoder.size)
            # Past the bound only if hints lengthened the search beyond what was counted before it.
            check_streamed_weights(self.weights, self.ctx.settings.attention_max_weights)
            answer["cross"] = rounded(step.cross)
            answer["decoder"] = None if step.decoder is None else rounded(step.decoder)
        return answer

    def sentences_ready(self, index: int) -> list[str]:
        """The `sentence` events of text `index` that can be sent now: each once those before
        it are (its offsets into the whole translation depend on them)."""
        states = [s for s in self.sentences if s.index == index]
        ready = []
        while self.sent[index] < len(states) and states[self.sent[index]].result is not None:
            number = self.sent[index]
            # The text so far: a sentence's place in the whole translation depends only on those before it.
            results = [s.result for s in states[: number + 1] if s.result is not None]
            so_far = TranslatedText.joined(self.texts[index], self.spans[index][: number + 1], results)
            sentence = aligned_sentence(results[number], so_far.spans[number], so_far.target_spans[number])
            ready.append(event("sentence", {"index": index, "sentence": number, "result": sentence.model_dump()}))
            self.sent[index] += 1
        return ready

    def finish(self, future: concurrent.futures.Future) -> list[str]:
        """The last events: the sentences not sent yet and `done`, or `error`."""
        if future.cancelled() or future.exception() is not None:
            error = concurrent.futures.CancelledError() if future.cancelled() else future.exception()
            assert error is not None
            if not isinstance(error, concurrent.futures.CancelledError):
                log.error("a streamed translation failed: %s", error)
            return [self.error(error)]
        for state, result in zip(self.sentences, future.result()):
            state.result = state.result or result
        finished = [text for index in range(len(self.texts)) for text in self.sentences_ready(index)]
        results: list[list[TranslationResult]] = [[] for _ in self.texts]
        for state in self.sentences:
            if state.result is not None:
                results[state.index].append(state.result)
        translated = [TranslatedText.joined(*text) for text in zip(self.texts, self.spans, results)]
        model, config = self.model, self.config
        self.ctx.metrics.count_tokens(
            model.name,
            len(self.sentences),
            sum(t.source_tokens for t in translated),
            sum(t.target_tokens for t in translated),
        )
        done = {
            "translations": [text_summary(t, model.source, model.target, config.n_best) for t in translated],
            "sentences": len(self.sentences),
            "steps": self.steps,
            "source_tokens": sum(t.source_tokens for t in translated),
            "target_tokens": sum(t.target_tokens for t in translated),
            "seconds": round(time.monotonic() - self.started, 3),
        }
        return [*finished, event("done", done)]

    def error(self, error: BaseException) -> str:
        answer = error if isinstance(error, APIError) else self.ctx.scheduling_error(error)
        return event("error", {"status": answer.status, "error": answer.message})


def text_summary(translated: TranslatedText, source: str, target: str, n_best: int) -> dict[str, Any]:
    """A text's translation as /v1/translate's answer has it, without its sentences (sent one by one)."""
    alternatives = [translated.alternative(k) for k in range(n_best - 1)]
    return {
        "text": translated.text,
        "score": round(translated.score, 4),
        "source": source,
        "target": target,
        "alternatives": [{"text": text, "score": round(score, 4)} for text, score in alternatives],
    }


def settled_words(translation: str) -> list[Token]:
    """The words of a translation still being written that no later piece can change: those
    a space follows (the last may yet grow: "Hau" + "s", "don" + "'t")."""
    cut = translation.rfind(" ")
    return [w for w in words(translation) if w.end <= cut]


def probability(log_prob: float) -> float:
    return round(float(np.exp(log_prob)), DECIMALS)


def spans_at(tokens: list[Token], offset: int) -> list[dict[str, Any]]:
    return [{"text": t.text, "start": t.start + offset, "end": t.end + offset} for t in tokens]


def rounded(values: np.ndarray) -> Any:
    return np.round(values.astype(np.float64), DECIMALS).tolist()


def event(name: str, data: dict[str, Any]) -> str:
    """One Server-Sent Event: its name and its JSON on one `data:` line."""
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n"
