"""What the routes share: one request context (overridable in tests), errors, limits, access.

Every handler takes one dependency, `get_context`: the `RequestContext` holds the
settings, the served models, the metrics and the client whose turn the request takes, and
does what every route does with them (check the texts, pick the language pair, resolve
the alignment options, run the model through the fair scheduler). Every problem a client
can cause is raised as `APIError(status, message)` and answered as LibreTranslate does,
`{"error": message}`; the app's exception handlers turn validation errors and malformed
bodies into the same shape, so no bad input reaches a 500.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from fastapi import Depends, Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.requests import ClientDisconnect

from seq2seq.core.config import AlignmentError, AlignmentOptions, DecodeConfig
from seq2seq.core.inputs import text_problem
from seq2seq.decoding.forced import ForcedAlignment
from seq2seq.decoding.texts import TranslatedText, translate_texts
from service.batching import CancelToken, Item, Observe, QueueFull, work_units
from service.engine import ServedModel, TranslatorEngine
from service.languages import CONFIDENT, Detection, LanguageDetector, get_detector, language_name
from service.metrics import Metrics
from service.rendering import Renderer, RendererBusy
from service.settings import Settings, get_settings

# No request body of ours nests deeper than 4 (an object, `pairs`, a pair); 32 leaves room
# and keeps every later recursive walk (validation, the integral-number rule) far from
# Python's recursion limit.
MAX_JSON_DEPTH = 32
CLIENT_GONE = 499  # nginx's "client closed request": counted in the metrics, never seen by the client


class APIError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The one error shape, LibreTranslate's: `{"error": message}`."""
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def internal_error_message(error: BaseException) -> str:
    """What a client is told of an unexpected failure (the log has the traceback)."""
    return f"internal error ({type(error).__name__}); the request was not completed"


# --------------------------------------------------------------------------- reading bodies


async def read_body(request: Request) -> bytes:
    """The whole body (the app's SizeLimitMiddleware stops it at max_body_bytes: 413; the
    server's read timeout at body_timeout_s: 408)."""
    try:
        return await request.body()
    except ClientDisconnect:
        raise APIError(CLIENT_GONE, "the client closed the connection before its body was read") from None


def parse_json(body: bytes) -> Any:
    """The one JSON reader of every route: UTF-8 (a leading byte order mark is skipped, as
    RFC 8259 allows), standard JSON only (no NaN or Infinity, finite numbers, integers of at
    most 4,300 digits, Python's limit), nested at most MAX_JSON_DEPTH deep. Every failure is
    a 400 that says what was wrong."""
    try:
        text = body.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as error:
        raise APIError(400, f"request body is not valid UTF-8 (byte {error.start})") from None
    if not text.strip():
        raise APIError(400, "Invalid request: empty body")
    try:
        value = json.loads(text, parse_constant=_not_json, parse_float=_finite)
    except json.JSONDecodeError as error:
        raise APIError(400, f"malformed JSON body: {error.msg} at line {error.lineno} column {error.colno}") from None
    except RecursionError:
        raise APIError(400, f"malformed JSON body: nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as error:  # an integer over Python's digit limit, a constant, an infinite number
        message = str(error)
        if "digits" in message:
            message = "an integer has more digits than the 4300 this server reads"
        raise APIError(400, f"malformed JSON body: {message}") from None
    if _depth(value) > MAX_JSON_DEPTH:
        raise APIError(400, f"malformed JSON body: nested deeper than {MAX_JSON_DEPTH} levels")
    return value


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _finite(number: str) -> float:
    value = float(number)
    if not math.isfinite(value):
        raise ValueError(f"the number {number[:20]} is out of range")
    return value


def _depth(value: Any) -> int:
    """How deep arrays and objects nest in `value` (a scalar: 0); iterative, so any depth is safe."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        if depth <= MAX_JSON_DEPTH:  # deeper than that is all we need to know
            stack.extend((child, depth + 1) for child in children)
    return deepest


def is_json(request: Request) -> bool:
    """Whether FastAPI reads this request's body as JSON: no Content-Type, or application/json
    or application/*+json."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return not media or media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


# --------------------------------------------------------------------------- access


class RateLimiter:
    """At most `per_minute` requests per key in any sliding 60-second window; thread-safe."""

    def __init__(self, per_minute: int):
        self.per_minute = per_minute
        self._seen: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def acquire(self, key: str) -> int | None:
        """None if `key` may make a request now (and count it), else the seconds until it may."""
        if self.per_minute <= 0:
            return None
        now = time.monotonic()
        with self._lock:
            seen = self._seen.setdefault(key, deque())
            while seen and now - seen[0] >= 60.0:
                seen.popleft()
            if len(seen) >= self.per_minute:
                return max(1, math.ceil(60.0 - (now - seen[0])))
            seen.append(now)
            return None


class Access:
    """Who may make a request now: the API keys (none = anyone) and the rate limit; one per app."""

    def __init__(self, keys: frozenset[str], rate_limit: int):
        self.keys, self.limiter = keys, RateLimiter(rate_limit)

    def check(self, request: Request, api_key: str | None) -> None:
        """403 without a valid key (when keys are configured), 429 (with Retry-After) over the rate limit.

        The rate is counted per key, or per address without keys; attempts with a missing or
        wrong key count against their address, so keys cannot be guessed at full speed. The
        client this request's model calls are scheduled for (fair turns) is left in
        `request.state.client`.
        """
        valid = not self.keys or api_key in self.keys
        who = f"key:{api_key}" if self.keys and valid else f"address:{client_address(request)}"
        wait = self.limiter.acquire(who)
        if wait is not None:
            raise APIError(
                429,
                f"Too many requests: the limit is {self.limiter.per_minute} per minute"
                + ("" if valid else " (failed API key attempts count too)"),
                headers={"Retry-After": str(wait)},
            )
        if not valid:
            raise APIError(
                403,
                "Invalid API key"
                if api_key
                else "Please provide an API key (Authorization: Bearer <key>, X-API-Key, or api_key)",
            )
        request.state.client = who


def get_access(request: Request) -> Access:
    return request.app.state.access


def request_api_key(request: Request) -> str | None:
    """The key from `Authorization: Bearer`, `X-API-Key`, or the `api_key` query parameter."""
    authorization = request.headers.get("authorization", "")
    if authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    return request.headers.get("x-api-key") or request.query_params.get("api_key")


def client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


class CheckedRoute(APIRoute):
    """A native route: the caller's key and rate are checked before FastAPI reads the body, so
    a request without a valid key gets its 403 (or 429) whatever its body holds, malformed
    JSON included. (The LibreTranslate routes check a header key as early, and a key in the
    body as soon as the body is read: service/libre.py.) A JSON body is then read by
    `parse_json`, the reader the LibreTranslate routes use, and handed to FastAPI as the
    request's parsed JSON (Starlette's `Request.json()` returns `_json` when it is set)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def checked(request: Request) -> Response:
            get_access(request).check(request, request_api_key(request))
            if request.method == "POST" and is_json(request):
                request._json = parse_json(await read_body(request))
            return await handler(request)

        return checked


# --------------------------------------------------------------------------- the request context


def get_engine(request: Request) -> TranslatorEngine:
    engine = getattr(request.app.state, "engine", None)
    if engine is None:
        raise APIError(503, "the models are not loaded yet")
    return engine


@dataclass
class RequestContext:
    """What a handler works with: the settings, the served models, the metrics, the heatmap
    renderer, and the request (whose client takes the fair turns, and whose cancel token
    drops its work when the client hangs up)."""

    settings: Settings
    engine: TranslatorEngine
    metrics: Metrics
    request: Request
    renderer: Renderer

    @property
    def client(self) -> str:
        """Whose turn the request's model calls take in the scheduler (set by `Access.check`)."""
        return getattr(self.request.state, "client", None) or f"address:{client_address(self.request)}"

    @property
    def token(self) -> CancelToken:
        """Cancelled when the client disconnects (service.connections.ClientWatch)."""
        return self.request.state.cancel_token

    def detached(self) -> RequestContext:
        """This context for work that outlives the request (a file job): the same client's
        fair turns, and a cancel token of its own instead of the request's (which its
        connection's closing cancels)."""
        return DetachedContext(
            self.settings, self.engine, self.metrics, self.request, self.renderer, self.client, CancelToken()
        )

    def detector(self) -> LanguageDetector:
        """The language identifier for the served languages (its model loads on first use)."""
        return get_detector(frozenset(lang for pair in self.engine.models for lang in pair))

    # ---------------------------------------------------------------- checks

    def check_texts(
        self, texts: list[str], field: str = "q", labels: list[str] | None = None, items: int | None = None
    ) -> None:
        """400 unless every text passes the input rules (seq2seq.core.inputs) and the request's limits.

        Messages name the text as `field` (one text), `field[i]`, or `labels[i]` when given.
        `items` is what the batch limit counts (default: the texts; /v1/align counts pairs)."""
        settings = self.settings
        if not texts:
            raise APIError(400, f"Invalid request: {field} is empty")
        for index, text in enumerate(texts):
            problem = text_problem(text, settings.char_limit)  # one text over the limit: 400, as the schema says
            if problem:
                where = labels[index] if labels else f"{field}[{index}]" if len(texts) > 1 else field
                raise APIError(400, f"Invalid request: {where}: {problem}")
        items = len(texts) if items is None else items
        if items > settings.batch_limit:
            unit = "texts" if labels is None else "items"
            raise APIError(
                400, f"Invalid request: request ({items} {unit}) exceeds the batch limit ({settings.batch_limit})"
            )
        characters = sum(len(t) for t in texts)
        if characters > settings.char_limit:
            # 413, not 400: each text may be valid (the schema bounds each one), the request as a
            # whole is larger than this server takes, a limit JSON Schema cannot state.
            raise APIError(413, f"request ({characters} characters) exceeds the text limit ({settings.char_limit})")

    def served_pairs_text(self) -> str:
        return ", ".join(f"{s}->{t}" for s, t in sorted(self.engine.models))

    def resolve_pair(
        self, source: str | None, target: str | None, texts: list[str]
    ) -> tuple[ServedModel, Detection | None]:
        """The served model a request asks for; `source="auto"` detects the language of the texts
        (the detector's model is loaded only when a request actually says "auto")."""
        models = self.engine.models
        # Codes are taken as sent (the schema lists the served ones); only absence has a default.
        source = "auto" if source is None else source
        if target == "":
            raise APIError(400, "Invalid request: target is empty (leave it out for the default)")
        detection = None
        if source == "auto":
            sources = {s for s, t in models if target is None or t == target}
            if not sources:
                raise APIError(
                    400,
                    f"{language_name(target or '')} ({target}) is not a served target language "
                    f"(served: {self.served_pairs_text()})",
                )
            ranked = self.detector().rank(" ".join(texts)[:2000])
            detection = ranked[0] if ranked else Detection("", 0.0)
            if detection.language not in sources:
                if detection.confidence < CONFIDENT and len(sources) == 1:
                    detection = Detection(next(iter(sources)), detection.confidence)  # a guess: take the only one
                else:  # 422: the request is well-formed; its text is not in a language we translate
                    raise APIError(
                        422,
                        f"the text looks like {language_name(detection.language)} "
                        f"({detection.language}, {detection.confidence:.0%} confidence), which this "
                        f"server does not translate (served: {self.served_pairs_text()})",
                    )
            source = detection.language
        if source not in {s for s, _ in models}:
            raise APIError(
                400,
                f"{language_name(source)} ({source}) is not served as a source language "
                f"(served: {self.served_pairs_text()})",
            )
        if target is None:
            targets = sorted(t for s, t in models if s == source)
            if len(targets) != 1:
                raise APIError(
                    400, f"Invalid request: missing target parameter ({source} is translated into {', '.join(targets)})"
                )
            target = targets[0]
        if (source, target) not in models:
            raise APIError(
                400,
                f"{language_name(source)} ({source}) -> {language_name(target)} ({target}) is not "
                f"served (served: {self.served_pairs_text()})",
            )
        return models[source, target], detection

    @staticmethod
    def resolve_alignment(model: ServedModel, options: AlignmentOptions) -> AlignmentOptions:
        """The request's alignment options with the model's defaults applied; 400 if it cannot satisfy them."""
        try:
            return options.resolve(model.config)
        except AlignmentError as error:
            raise APIError(400, str(error)) from None

    def decode_config(
        self,
        model: ServedModel,
        beam_size: int | None,
        n_best: int,
        attention: bool,
        alignment: AlignmentOptions | None = None,
        no_repeat_ngram_size: int | None = None,
        early_exit: bool = False,
        glossary: dict[str, str] | None = None,
        dictionary_hints: bool | None = None,
        term_bonus: float | None = None,
        glossary_strict: bool = False,
    ) -> DecodeConfig:
        """The search settings of a request: those it sets, the model's own (`decode_defaults`,
        its bundle's) for those it leaves unset (None); `alignment` (resolved) is built with the
        translation. `no_repeat_ngram_size` and `glossary` come validated by their fields
        (service.requests), `term_bonus` too; `early_exit`, `dictionary_hints`: DecodeConfig's. 400 for a glossary
        the model cannot take."""
        largest = self.settings.max_beam_size
        defaults = model.decode_defaults
        if beam_size is not None and not 1 <= beam_size <= largest:
            raise APIError(400, f"beam_size must be between 1 and {largest}, not {beam_size}")
        if beam_size is None and defaults.beam_size > largest:
            raise APIError(
                400,
                f"the model's default beam_size ({defaults.beam_size}) is over this server's limit "
                f"({largest}): ask for a beam_size between 1 and {largest}",
            )
        if not 1 <= n_best <= largest:
            raise APIError(400, f"n_best (or alternatives + 1) must be between 1 and {largest}, not {n_best}")
        if glossary and model.translator.tokenizer.hint_ids is None:
            raise APIError(
                400, f"glossary: the {model.name} model was not trained with target-term hints, so it cannot take one"
            )
        asked = defaults.override(
            beam_size=beam_size,
            no_repeat_ngram_size=no_repeat_ngram_size,
            dictionary_hints=dictionary_hints,
            glossary=tuple(glossary.items()) if glossary else None,
            term_bonus=term_bonus,
        )
        # n best hypotheses need a beam at least n wide: a smaller beam_size is raised to n_best.
        return replace(
            asked,
            beam_size=max(asked.beam_size, n_best),
            n_best=n_best,
            return_attention=attention or alignment is not None,
            alignment=alignment,
            restore_case=self.settings.restore_case,
            early_exit=early_exit,
            glossary_strict=glossary_strict,
        )

    def check_work(self, items: list[Item], beam_size: int) -> None:
        """413 if the request asks more of the model than one request may (texts x beam x length)."""
        work, limit = work_units(items, beam_size), self.settings.max_request_work
        if work > limit:
            characters = work_units(items, 1)
            raise APIError(
                413,
                f"the request's work ({work} units: beam_size {beam_size} x {characters} "
                f"characters) exceeds the limit ({limit}); send less text or use a smaller beam",
            )

    # ---------------------------------------------------------------- model calls

    def translate(
        self, model: ServedModel, texts: list[str], config: DecodeConfig, wait_until: float | None = None
    ) -> list[TranslatedText]:
        """Translate whole texts (one batch, on the client's turns), count tokens. With
        `wait_until` (a `time.monotonic()` deadline), a full queue is waited out until then
        instead of answered with 503 (a file's calls: the file is uploaded already)."""
        self.check_work(texts, config.beam_size)
        timeout = self.settings.request_timeout
        translated = self._scheduled(
            lambda: translate_texts(
                texts, lambda sentences: model.translate(sentences, config, timeout, self.client, self.token)
            ),
            wait_until,
        )
        self.metrics.count_tokens(
            model.name,
            sum(len(t.results) for t in translated),
            sum(t.source_tokens for t in translated),
            sum(t.target_tokens for t in translated),
        )
        return translated

    def submit(
        self, model: ServedModel, texts: list[str], sentences: list[str], config: DecodeConfig, observe: Observe
    ) -> concurrent.futures.Future:
        """Queue the translation of `sentences` (those of `texts`) on the client's turns,
        without waiting: `observe` hears of its steps and results as they come (a stream),
        the future is cancelled with the request's token. The work cap (413) and the queue
        bound (503) as for `translate`."""
        self.check_work(texts, config.beam_size)
        try:
            return model.submit(sentences, config, self.client, self.token, observe)
        except QueueFull as full:
            raise self.scheduling_error(full) from None

    def align(
        self, model: ServedModel, pairs: list[tuple[str, str]], options: AlignmentOptions
    ) -> list[ForcedAlignment | AlignmentError]:
        """Align given pairs (one teacher-forced pass: a beam of one over both texts, plus the
        occlusion rows in the thorough quality mode), through the same work cap, queue bound,
        fair turns and timeout as a translation."""
        self.check_work(pairs, 1)
        return self._scheduled(
            lambda: model.align(
                pairs,
                options,
                self.settings.request_timeout,
                self.client,
                restore_case=self.settings.restore_case,
                token=self.token,
            )
        )

    @contextlib.contextmanager
    def render_place(self, pixels: int) -> Iterator[None]:
        """`pixels` of the renderer's capacity for the body of the `with` (taken before
        translating, so a heatmap that cannot be drawn now costs nothing); 503 with Retry-After
        if they do not fit."""
        try:
            with self.renderer.admit(pixels):
                yield
        except RendererBusy as busy:
            raise APIError(503, f"the server is busy: {busy}", headers={"Retry-After": str(busy.retry_after)}) from None

    def render(self, job: Callable[[], bytes], pixels: int) -> bytes:
        """`job()` (a heatmap of `pixels`) on the render thread, within the request's timeout
        and cancellation."""
        return self._scheduled(lambda: self.renderer.render(job, pixels, self.token, self.settings.request_timeout))

    def _scheduled(self, call: Callable[[], Any], wait_until: float | None = None) -> Any:
        """Run a model call or a render; its scheduling failures answered as `scheduling_error`
        says. A full queue is tried again after its `retry_after` while `wait_until` allows
        (and the request is wanted)."""
        while True:
            try:
                return call()
            except QueueFull as full:
                left = (wait_until or 0.0) - time.monotonic()
                if left <= 0:
                    raise self.scheduling_error(full) from None
                if self.token.wait(min(full.retry_after, left)):
                    raise self.scheduling_error(concurrent.futures.CancelledError()) from None
            except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError) as error:
                raise self.scheduling_error(error) from None

    def scheduling_error(self, error: BaseException) -> APIError:
        """The answer to a model call or render that did not complete: a full queue or a
        timeout is a 503 (with Retry-After), work cancelled because the client hung up a 499
        (nobody reads it), because the server is stopping a 503; anything else a 500."""
        if isinstance(error, QueueFull):
            return APIError(503, f"the server is busy: {error}", headers={"Retry-After": str(error.retry_after)})
        if isinstance(error, concurrent.futures.TimeoutError):
            return APIError(
                503,
                f"the request took longer than {self.settings.request_timeout:g} s; try again with less text",
                headers={"Retry-After": "5"},
            )
        if isinstance(error, concurrent.futures.CancelledError):
            if self.token.cancelled:
                return APIError(CLIENT_GONE, "the client closed the connection; its work was dropped")
            return APIError(503, "the server is shutting down", headers={"Retry-After": "5"})
        return APIError(500, internal_error_message(error))


@dataclass
class DetachedContext(RequestContext):
    """`RequestContext.detached()`: the client frozen when the request was made, its own token."""

    own_client: str = ""
    own_token: CancelToken = field(default_factory=CancelToken)

    @property
    def client(self) -> str:
        return self.own_client

    @property
    def token(self) -> CancelToken:
        return self.own_token


def get_context(
    request: Request, settings: Settings = Depends(get_settings), engine: TranslatorEngine = Depends(get_engine)
) -> RequestContext:
    """The one dependency of every handler."""
    return RequestContext(settings, engine, request.app.state.metrics, request, request.app.state.renderer)
