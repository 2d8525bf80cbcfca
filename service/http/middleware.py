"""The app's own middleware: an unexpected exception answered for its request alone, the
size limits on a request's headers and body, and the headers that keep a browser safe.

(What happens on the connection itself, HEAD, the query and hang-ups, is
service/http/connections.py's; the order the app stacks them in is service/app.py's.)
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.exceptions import HTTPException

from service.http.connections import HTTPMiddleware
from service.http.errors import error_response, internal_error_message

log = logging.getLogger("crossalign.service")


class ErrorBoundary(HTTPMiddleware):
    """An unexpected exception becomes a logged 500 `{"error"}` for that request alone.

    Starlette's own last-resort handler re-raises after answering, and the server then
    closes the connection; answered here, the exception goes no further, so the client's
    keep-alive connection (and nobody else's request) is affected.
    """

    async def http(self, scope: dict, receive: Any, send: Any) -> None:
        started = False

        async def send_wrapper(message: dict) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except Exception as error:  # noqa: BLE001 - the boundary: logged, answered, contained
            log.exception("unexpected error on %s %s", scope.get("method"), scope.get("path"))
            if not started:
                await error_response(500, internal_error_message(error))(scope, receive, send)


# The explorer page (`/`) runs its own files only: its script and style from /static (no
# inline code, no other origin), its calls to this server, images it draws (data:, blob:);
# no plugins, no <base>, forms only here, and no other site may frame it (clickjacking).
PAGE_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
PAGE_PATHS = frozenset({"/"})


class SecurityHeaders(HTTPMiddleware):
    """Every answer is read as the media type it says (`X-Content-Type-Options: nosniff`) and
    may not be framed by another site (CSP `frame-ancestors 'none'`, and `X-Frame-Options:
    DENY` for browsers before it); the explorer page gets its whole policy (`PAGE_POLICY`).
    (The API reference pages, /docs and /redoc, start their viewers with inline scripts: they
    get the frame rule only.)"""

    async def http(self, scope: dict, receive: Any, send: Any) -> None:
        policy = PAGE_POLICY if scope.get("path") in PAGE_PATHS else "frame-ancestors 'none'"
        added = [
            (b"x-content-type-options", b"nosniff"),
            (b"x-frame-options", b"DENY"),
            (b"content-security-policy", policy.encode()),
        ]

        async def with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", ())}
                extra = [(name, value) for name, value in added if name not in present]
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        await self.app(scope, receive, with_headers)


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int):
        super().__init__(413, f"request body exceeds the limit of {limit} bytes")


class SizeLimitMiddleware:
    """431 for header fields over `max_header_bytes`; 413 for a body over `max_bytes`:
    at once if Content-Length says so, else as soon as the bytes read exceed it (chunked
    bodies have no Content-Length). The body is never buffered past the limit.

    The request line is not counted: a GET may carry a whole text (`/v1/heatmap?q=`), which
    the text limits bound. The HTTP parser bounds the whole head as it arrives (h11's
    incomplete-event limit, see service/serve.py), which stops an endless header before it
    is whole; this check makes the limit exact when a header arrives at once."""

    def __init__(self, app: Any, max_bytes: int, max_header_bytes: int, upload_bytes: dict[str, int] | None = None):
        self.app, self.max_bytes, self.max_header_bytes = app, max_bytes, max_header_bytes
        self.upload_bytes = upload_bytes or {}  # paths that take files, and their own limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header_bytes = sum(len(name) + len(value) + 4 for name, value in scope.get("headers", ()))
        if header_bytes > self.max_header_bytes:
            await error_response(431, f"request headers exceed the limit of {self.max_header_bytes} bytes")(
                scope, receive, send
            )
            return
        limit = self.upload_bytes.get(scope.get("path", ""), self.max_bytes)
        length = dict(scope.get("headers", ())).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            response = (
                error_response(413, f"request body exceeds the limit of {limit} bytes")
                if length.isdigit()
                else error_response(400, "invalid Content-Length header")
            )
            await response(scope, receive, send)
            return
        received = 0

        async def counting_receive() -> dict:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)  # FastAPI and our readers pass HTTPExceptions on
            return message

        await self.app(scope, counting_receive, send)
