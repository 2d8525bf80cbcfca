"""Who may make a request now: API keys and the rate limit, checked before a body is read.

`Access` (one per app, `request.app.state.access`) holds the keys (none = anyone) and the
`RateLimiter`; `CheckedRoute` checks a native route's caller before FastAPI reads its body,
and reads a JSON body with the one reader (service/http/bodies.py). The LibreTranslate routes
check a header key as early, and a key in the body as soon as the body is read.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from service.http.bodies import is_json, parse_json, read_body
from service.http.errors import APIError


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
    body as soon as the body is read: service/routes/libre.py.) A JSON body is then read by
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
