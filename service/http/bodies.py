"""The one JSON reader of every route (`parse_json`) and the body it reads (`read_body`).

Every failure is a 400 that says what was wrong: not UTF-8, not JSON, a number JSON does not
have, nested deeper than MAX_JSON_DEPTH.
"""

from __future__ import annotations

import json
import math
from typing import Any

from fastapi import Request
from starlette.requests import ClientDisconnect

from service.http.errors import CLIENT_GONE, APIError

# No request body of ours nests deeper than 4 (an object, `pairs`, a pair); 32 leaves room
# and keeps every later recursive walk (validation, the integral-number rule) far from
# Python's recursion limit.
MAX_JSON_DEPTH = 32


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
