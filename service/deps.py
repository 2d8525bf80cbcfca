"""What the routes share: dependencies (overridable in tests), errors, limits, access.

Every problem a client can cause is raised as `APIError(status, message)` and answered as
LibreTranslate does, `{"error": message}`; the app's exception handlers turn validation
errors and malformed bodies into the same shape, so no bad input reaches a 500.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections import deque
from collections.abc import Callable
from fastapi import Depends, Request

from seq2seq.alignment import AlignmentError, AlignmentOptions
from seq2seq.config import DecodeConfig
from service.engine import Engine, Pair
from service.languages import CONFIDENT, Detection, LanguageDetector, get_detector, language_name
from service.metrics import Metrics
from service.settings import Settings, get_settings
from service.translation import TranslatedText, translate_texts


class APIError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


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

    def allow(self, key: str) -> bool:
        if self.per_minute <= 0:
            return True
        now = time.monotonic()
        with self._lock:
            seen = self._seen.setdefault(key, deque())
            while seen and now - seen[0] >= 60.0:
                seen.popleft()
            if len(seen) >= self.per_minute:
                return False
            seen.append(now)
            return True


def get_limiter(request: Request) -> RateLimiter:
    return request.app.state.limiter


def request_api_key(request: Request) -> str | None:
    """The key from `X-API-Key`, `Authorization: Bearer`, or the `api_key` query parameter."""
    authorization = request.headers.get("authorization", "")
    if authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    return request.headers.get("x-api-key") or request.query_params.get("api_key")


def check_access(request: Request, settings: Settings, limiter: RateLimiter, api_key: str | None) -> None:
    """403 without a valid key (when keys are configured), 429 over the rate limit."""
    keys = settings.api_key_set
    if keys and api_key not in keys:
        raise APIError(403, "Invalid API key" if api_key else "Please provide an API key (api_key)")
    who = api_key if keys else (request.client.host if request.client else "unknown")
    if not limiter.allow(str(who)):
        raise APIError(429, f"Too many requests: the limit is {settings.rate_limit} per minute")


def require_access(request: Request, settings: Settings = Depends(get_settings),
                   limiter: RateLimiter = Depends(get_limiter)) -> None:
    """Dependency for the native routes (the LibreTranslate routes read the key from the body)."""
    check_access(request, settings, limiter, request_api_key(request))


# --------------------------------------------------------------------------- request checks


def check_texts(texts: list[str], settings: Settings) -> None:
    if len(texts) > settings.batch_limit:
        raise APIError(400, f"Invalid request: request ({len(texts)} texts) exceeds the batch limit "
                            f"({settings.batch_limit})")
    characters = sum(len(t) for t in texts)
    if characters > settings.char_limit:
        raise APIError(400, f"Invalid request: request ({characters} characters) exceeds the text limit "
                            f"({settings.char_limit})")


def served_pairs_text(engine: Engine) -> str:
    return ", ".join(f"{s}->{t}" for s, t in sorted(engine.models))


def resolve_pair(engine: Engine, detector: Callable[[], LanguageDetector], source: str | None, target: str | None,
                 texts: list[str]) -> tuple[Pair, Detection | None]:
    """The served pair a request asks for; `source="auto"` detects the language of the texts.

    `detector` returns the LanguageDetector, so its model is loaded only when a request
    actually says "auto".
    """
    source = (source or "auto").strip().lower()
    target = (target or "").strip().lower() or None
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
            else:
                raise APIError(400, f"the text looks like {language_name(detection.language)} "
                                    f"({detection.language}, {detection.confidence:.0%} confidence), which this "
                                    f"server does not translate (served: {served_pairs_text(engine)})")
        source = detection.language
    if target is None:
        targets = sorted(t for s, t in engine.models if s == source)
        if len(targets) != 1:
            raise APIError(400, "Invalid request: missing target parameter")
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
    if not 1 <= n_best <= beam_size:
        raise APIError(400, f"n_best (or alternatives + 1) must be between 1 and beam_size ({beam_size}), "
                            f"not {n_best}")
    return DecodeConfig(beam_size=beam_size, n_best=n_best, return_attention=attention or alignment is not None,
                        alignment=alignment)


def resolve_alignment(engine: Engine, pair: Pair, options: AlignmentOptions) -> AlignmentOptions:
    """The request's alignment options with the model's defaults applied; 400 if it cannot satisfy them."""
    try:
        return options.resolve(engine.models[pair].config)
    except AlignmentError as error:
        raise APIError(400, str(error)) from None


def run_translation(engine: Engine, metrics: Metrics, settings: Settings, pair: Pair, texts: list[str],
                    config: DecodeConfig) -> list[TranslatedText]:
    """Translate whole texts (one batch), count tokens, map timeouts to 503."""
    try:
        translated = translate_texts(engine, pair, texts, config, timeout=settings.request_timeout)
    except concurrent.futures.TimeoutError:
        raise APIError(503, f"the translation took longer than {settings.request_timeout:g} s; try again "
                            "with less text") from None
    name = engine.models[pair].name
    metrics.count_tokens(name, sum(len(t.results) for t in translated), sum(t.source_tokens for t in translated),
                         sum(t.target_tokens for t in translated))
    return translated
