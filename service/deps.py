"""What the routes share: dependencies (overridable in tests), errors, limits, access.

Every problem a client can cause is raised as `APIError(status, message)` and answered as
LibreTranslate does, `{"error": message}`; the app's exception handlers turn validation
errors and malformed bodies into the same shape, so no bad input reaches a 500.
"""

from __future__ import annotations

import concurrent.futures
import math
import threading
import time
from collections import deque
from collections.abc import Callable

from fastapi import Depends, Request

from seq2seq.alignment import AlignmentError, AlignmentOptions
from seq2seq.config import DecodeConfig
from seq2seq.inputs import text_problem
from service.batching import QueueFull, work_units
from service.engine import Engine, Pair
from service.languages import CONFIDENT, Detection, LanguageDetector, get_detector, language_name
from service.metrics import Metrics
from service.settings import Settings, get_settings
from service.translation import TranslatedText, translate_texts


class APIError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


# --------------------------------------------------------------------------- dependencies


def get_engine(request: Request) -> Engine:
    engine = getattr(request.app.state, "engine", None)
    if engine is None:
        raise APIError(503, "the models are not loaded yet")
    return engine


def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


def get_language_detector(engine: Engine = Depends(get_engine)) -> Callable[[], LanguageDetector]:
    """A loader of the detector (its model loads on the first request that needs it)."""
    languages = frozenset(lang for pair in engine.models for lang in pair)
    return lambda: get_detector(languages)


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


def get_limiter(request: Request) -> RateLimiter:
    return request.app.state.limiter


def request_api_key(request: Request) -> str | None:
    """The key from `Authorization: Bearer`, `X-API-Key`, or the `api_key` query parameter."""
    authorization = request.headers.get("authorization", "")
    if authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    return request.headers.get("x-api-key") or request.query_params.get("api_key")


def client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def check_access(request: Request, settings: Settings, limiter: RateLimiter, api_key: str | None) -> None:
    """403 without a valid key (when keys are configured), 429 (with Retry-After) over the rate limit.

    The rate is counted per key, or per address without keys; attempts with a missing or
    wrong key count against their address, so keys cannot be guessed at full speed. The
    client this request's translations are scheduled for (fair turns) is left in
    `request.state.client`.
    """
    keys = settings.api_key_set
    valid = not keys or api_key in keys
    who = f"key:{api_key}" if keys and valid else f"address:{client_address(request)}"
    wait = limiter.acquire(who)
    if wait is not None:
        raise APIError(429, f"Too many requests: the limit is {settings.rate_limit} per minute"
                            + ("" if valid else " (failed API key attempts count too)"),
                       headers={"Retry-After": str(wait)})
    if not valid:
        raise APIError(403, "Invalid API key" if api_key else
                       "Please provide an API key (Authorization: Bearer <key>, X-API-Key, or api_key)")
    request.state.client = who


def require_access(request: Request, settings: Settings = Depends(get_settings),
                   limiter: RateLimiter = Depends(get_limiter)) -> None:
    """Dependency for the native routes (the LibreTranslate routes may carry the key in the body)."""
    check_access(request, settings, limiter, request_api_key(request))


def get_client(request: Request) -> str:
    """Whose turn a request's translations take in the scheduler (set by `check_access`)."""
    return getattr(request.state, "client", None) or f"address:{client_address(request)}"


# --------------------------------------------------------------------------- request checks


def check_texts(texts: list[str], settings: Settings, field: str = "q", labels: list[str] | None = None,
                items: int | None = None) -> None:
    """400 unless every text passes the input rules (seq2seq.inputs) and the request's limits.

    Messages name the text as `field` (one text), `field[i]`, or `labels[i]` when given.
    `items` is what the batch limit counts (default: the texts; /v1/align counts pairs)."""
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
        raise APIError(400, f"Invalid request: request ({items} {unit}) exceeds the batch limit "
                            f"({settings.batch_limit})")
    characters = sum(len(t) for t in texts)
    if characters > settings.char_limit:
        # 413, not 400: each text may be valid (the schema bounds each one), the request as a
        # whole is larger than this server takes, a limit JSON Schema cannot state.
        raise APIError(413, f"request ({characters} characters) exceeds the text limit ({settings.char_limit})")


def served_pairs_text(engine: Engine) -> str:
    return ", ".join(f"{s}->{t}" for s, t in sorted(engine.models))


def resolve_pair(engine: Engine, detector: Callable[[], LanguageDetector], source: str | None, target: str | None,
                 texts: list[str]) -> tuple[Pair, Detection | None]:
    """The served pair a request asks for; `source="auto"` detects the language of the texts.

    `detector` returns the LanguageDetector, so its model is loaded only when a request
    actually says "auto".
    """
    # Codes are taken as sent (the schema lists the served ones); only absence has a default.
    source = "auto" if source is None else source
    if target == "":
        raise APIError(400, "Invalid request: target is empty (leave it out for the default)")
    detection = None
    if source == "auto":
        sources = {s for s, t in engine.models if target is None or t == target}
        if not sources:
            raise APIError(400, f"{language_name(target or '')} ({target}) is not a served target language "
                                f"(served: {served_pairs_text(engine)})")
        ranked = detector().rank(" ".join(texts)[:2000])
        detection = ranked[0] if ranked else Detection("", 0.0)
        if detection.language not in sources:
            if detection.confidence < CONFIDENT and len(sources) == 1:
                detection = Detection(next(iter(sources)), detection.confidence)  # a guess: take the only one
            else:  # 422: the request is well-formed; its text is not in a language we translate
                raise APIError(422, f"the text looks like {language_name(detection.language)} "
                                    f"({detection.language}, {detection.confidence:.0%} confidence), which this "
                                    f"server does not translate (served: {served_pairs_text(engine)})")
        source = detection.language
    if source not in {s for s, _ in engine.models}:
        raise APIError(400, f"{language_name(source)} ({source}) is not served as a source language "
                            f"(served: {served_pairs_text(engine)})")
    if target is None:
        targets = sorted(t for s, t in engine.models if s == source)
        if len(targets) != 1:
            raise APIError(400, f"Invalid request: missing target parameter ({source} is translated into "
                                f"{', '.join(targets)})")
        target = targets[0]
    if (source, target) not in engine.models:
        raise APIError(400, f"{language_name(source)} ({source}) -> {language_name(target)} ({target}) is not "
                            f"served (served: {served_pairs_text(engine)})")
    return (source, target), detection


def decode_config(settings: Settings, beam_size: int, n_best: int, attention: bool,
                  alignment: AlignmentOptions | None = None) -> DecodeConfig:
    """The search settings of a request; `alignment` (resolved) is built with the translation."""
    if not 1 <= beam_size <= settings.max_beam_size:
        raise APIError(400, f"beam_size must be between 1 and {settings.max_beam_size}, not {beam_size}")
    if not 1 <= n_best <= settings.max_beam_size:
        raise APIError(400, f"n_best (or alternatives + 1) must be between 1 and {settings.max_beam_size}, "
                            f"not {n_best}")
    # n best hypotheses need a beam at least n wide: a smaller beam_size is raised to n_best.
    return DecodeConfig(beam_size=max(beam_size, n_best), n_best=n_best,
                        return_attention=attention or alignment is not None, alignment=alignment)


def resolve_alignment(engine: Engine, pair: Pair, options: AlignmentOptions) -> AlignmentOptions:
    """The request's alignment options with the model's defaults applied; 400 if it cannot satisfy them."""
    try:
        return options.resolve(engine.models[pair].config)
    except AlignmentError as error:
        raise APIError(400, str(error)) from None


def check_work(settings: Settings, texts: list[str], beam_size: int) -> None:
    """413 if the request asks more of the model than one request may (texts x beam x length)."""
    work = work_units(texts, beam_size)
    if work > settings.max_request_work:
        raise APIError(413, f"the request's work ({work} units: beam_size {beam_size} x "
                            f"{sum(len(t) for t in texts)} characters) exceeds the limit "
                            f"({settings.max_request_work}); send less text or use a smaller beam")


def busy(full: QueueFull) -> APIError:
    """The 503 of a full queue, with the queue's estimate of when to retry."""
    return APIError(503, f"the server is busy: {full}", headers={"Retry-After": str(full.retry_after)})


def run_translation(engine: Engine, metrics: Metrics, settings: Settings, pair: Pair, texts: list[str],
                    config: DecodeConfig, client: str = "") -> list[TranslatedText]:
    """Translate whole texts (one batch, on `client`'s turns), count tokens; a full queue or a
    timeout is a 503 (with Retry-After when the queue is full)."""
    check_work(settings, texts, config.beam_size)
    try:
        translated = translate_texts(engine, pair, texts, config, timeout=settings.request_timeout, client=client)
    except QueueFull as full:
        raise busy(full) from None
    except concurrent.futures.TimeoutError:
        raise APIError(503, f"the translation took longer than {settings.request_timeout:g} s; try again "
                            "with less text", headers={"Retry-After": "5"}) from None
    name = engine.models[pair].name
    metrics.count_tokens(name, sum(len(t.results) for t in translated), sum(t.source_tokens for t in translated),
                         sum(t.target_tokens for t in translated))
    return translated
