"""What happens on the connection, below the routes: read timeouts, hang-ups, HEAD, the query.

- `ReadTimeouts`: uvicorn's h11 protocol with the timeouts uvicorn lacks. A request's head
  must be whole within `head_timeout_s` (from the connection's opening, or from the first
  byte of a later request on a kept-alive connection: the idle time before that byte is
  `keep_alive_s`'s), its body within `body_timeout_s` of the head plus a second for every
  `body_min_rate` bytes received (a large upload may take its time, a trickle may not).
  Past either: 408 (when an answer can still be given) and the connection closed, so
  connections that hold a head or trickle a body cannot pile up.
- `ClientWatch`: every HTTP request gets a `CancelToken` (`request.state.cancel_token`),
  cancelled when the client disconnects before its answer is complete: its translation
  rows leave the scheduler and its queued render is skipped (service.compute.batching, "Cancellation").
  A body whose read timed out counts as a disconnect.
- `HeadAsGet`: HEAD wherever GET is served (uptime monitors use it): the GET runs and its
  status and headers are sent without the body (RFC 9110, 9.3.2).
- `Utf8Query`: a query string that is not UTF-8 once percent-decoded gets 400, as a form
  body does (Starlette would read U+FFFD in place of the bad bytes).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any
from urllib.parse import unquote_to_bytes

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.utils import get_path_with_query_string

from service.compute.batching import CancelToken
from service.http.errors import error_response
from service.settings import get_settings

log = logging.getLogger("crossalign.service")


class HTTPMiddleware:
    """The base of the app's pure ASGI middlewares: `http()` handles HTTP requests, anything
    else (the lifespan) passes through."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.http(scope, receive, send)

    async def http(self, scope: dict, receive: Any, send: Any) -> None:
        raise NotImplementedError


# --------------------------------------------------------------------------- read timeouts


class ReadTimeouts(H11Protocol):
    """uvicorn's h11 protocol (`uvicorn.run(http=ReadTimeouts)`) with head and body read
    timeouts from the settings (`head_timeout_s`, `body_timeout_s`)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        settings = get_settings()
        self._limits = {"head": settings.head_timeout_s, "body": settings.body_timeout_s}
        self._min_rate = settings.body_min_rate
        self._phase: str | None = None  # "head", "body" or None: what the timer waits for
        self._timer: asyncio.TimerHandle | None = None
        self._started = 0.0  # when the phase began
        self._body_bytes = 0  # received since the body phase began

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._enter("head")  # a connection that never sends a whole head is closed too

    def data_received(self, data: bytes) -> None:
        if self._phase == "body":
            self._body_bytes += len(data)
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self._enter(None)
        super().connection_lost(exc)

    def _follow(self) -> None:
        """Set the timer by what h11 waits for: a head (some of which has come), a body, or neither."""
        state = self.conn.their_state
        if self.transport.is_closing():
            phase = None
        elif state is h11.IDLE:
            phase = "head" if self._phase == "head" or self.conn.trailing_data[0] else None
        else:
            phase = "body" if state is h11.SEND_BODY else None
        self._enter(phase)

    def _enter(self, phase: str | None) -> None:
        """Start `phase`'s timer, unless it is already running (its deadline stands)."""
        if phase == self._phase:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._phase, self._started, self._body_bytes = phase, self.loop.time(), 0
        if phase is not None:
            self._timer = self.loop.call_later(self._limits[phase], self._expired)

    def _deadline(self) -> float:
        """When the phase's time is up: its timeout, and for a body a second per `body_min_rate` bytes."""
        extra = self._body_bytes / self._min_rate if self._phase == "body" else 0.0
        return self._started + self._limits[self._phase or "head"] + extra

    def _expired(self) -> None:
        if self._phase == "body" and self.loop.time() < self._deadline():  # the bytes since bought more time
            self._timer = self.loop.call_at(self._deadline(), self._expired)
            return
        phase, self._phase, self._timer = self._phase, None, None
        if self.transport.is_closing():
            return
        limit = self._limits[phase or "head"]
        if phase == "head":
            if self.conn.trailing_data[0]:  # a head had begun: say why the connection closes
                self.transport.write(_raw_408(f"the request head did not arrive within {limit:g} s"))
            log.info("closed a connection from %s: request head incomplete after %g s", _address(self.client), limit)
        else:
            cycle = self.cycle
            if not cycle.response_started:
                message = (
                    f"the request body came slower than allowed ({limit:g} s, then {self._min_rate} bytes a second)"
                )
                self.transport.write(_raw_408(message))
                if self.access_log:
                    self.access_logger.info(
                        '%s - "%s %s HTTP/%s" %d',
                        _address(self.client),
                        cycle.scope["method"],
                        get_path_with_query_string(cycle.scope),
                        cycle.scope["http_version"],
                        408,
                    )
            # The app hears a disconnect (its ClientWatch cancels the request's work) and sends nothing more.
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.close()


def _raw_408(message: str) -> bytes:
    body = json.dumps({"error": message}).encode()
    head = (
        "HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


def _address(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "unknown"


# --------------------------------------------------------------------------- hang-ups


class ClientWatch(HTTPMiddleware):
    """Gives every HTTP request a `CancelToken` and cancels it when the client disconnects
    before the answer is complete.

    The request's messages are pumped from the server into a queue the app reads: a body
    chunk at a time (the next is read once the app has taken one, so nothing is buffered
    beyond a chunk), and after the body the pump waits on the connection, which is how a
    hang-up is seen at once, while the request's handler waits on the model in a thread.
    A request without a body is watched from the start; one with a body once the app asks
    for it (a request refused before its body is read, a 403, never invites the body:
    `Expect: 100-continue` is answered on the first read)."""

    async def http(self, scope: dict, receive: Any, send: Any) -> None:
        token = CancelToken()
        # In place: the server gives each request its own scope and state, and the middleware
        # outside must see what the router adds to this scope (its route).
        scope.setdefault("state", {})["cancel_token"] = token
        messages: asyncio.Queue[dict] = asyncio.Queue()
        answered = gone = False

        async def pump() -> None:
            nonlocal gone
            while True:
                try:
                    message = await receive()
                except Exception:  # noqa: BLE001 - a broken connection is a disconnect
                    message = {"type": "http.disconnect"}
                if message["type"] == "http.disconnect":
                    gone = True
                    if not answered:
                        token.cancel()
                    messages.put_nowait(message)
                    return
                messages.put_nowait(message)
                if message.get("more_body", False):
                    await messages.join()  # the next chunk once the app has taken this one

        pumping: asyncio.Future | None = None

        def watch() -> None:
            nonlocal pumping
            if pumping is None:
                pumping = asyncio.ensure_future(pump())

        async def app_receive() -> dict:
            watch()
            if gone and messages.empty():
                return {"type": "http.disconnect"}
            message = await messages.get()
            messages.task_done()
            return message

        async def watched_send(message: dict) -> None:
            nonlocal answered
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                answered = True
            await send(message)

        if not has_body(scope):
            watch()
        try:
            await self.app(scope, app_receive, watched_send)
        except asyncio.CancelledError:  # the server gave up on the request (shutdown)
            token.cancel()
            raise
        finally:
            if pumping is not None:
                pumping.cancel()


def has_body(scope: dict) -> bool:
    """Whether the request says it has a body (a non-zero Content-Length, or chunked)."""
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"", b"0")):
            return True
    return False


# --------------------------------------------------------------------------- the request line


HEAD_REQUEST = "crossalign.head"  # in the scope of a HEAD run as GET: a route whose GET changes something checks it


class HeadAsGet(HTTPMiddleware):
    """A HEAD request runs as its GET; the answer's status and headers go out, its body does not."""

    async def http(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headless(message: dict) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET", HEAD_REQUEST: True}, receive, headless)


def query_problem(query: bytes) -> str | None:
    """Why a raw query string cannot be read (a parameter not UTF-8 once percent-decoded), or None."""
    for part in query.split(b"&"):
        try:
            unquote_to_bytes(part.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError:
            name = part.split(b"=", 1)[0].decode("ascii", "replace")[:40]
            return f"query parameter {name!r} is not valid UTF-8 after percent-decoding"
    return None


class Utf8Query(HTTPMiddleware):
    """400 for a query string that is not UTF-8 once percent-decoded."""

    async def http(self, scope: dict, receive: Any, send: Any) -> None:
        problem = query_problem(scope.get("query_string", b""))
        if problem:
            await error_response(400, problem)(scope, receive, send)
            return
        await self.app(scope, receive, send)
