"""The FastAPI app: models loaded in `lifespan`, small routers, one error shape.

    crossalign serve      (uvicorn with the read timeouts and the key-redacting log: service/serve.py)

Every error, whatever raised it (our checks, FastAPI's validation, a malformed body), is
answered as LibreTranslate answers, `{"error": "..."}` with a 4xx status; an unexpected
failure is a logged 500 with the same shape, and the server keeps serving. Below the
routes (service/connections.py): HEAD runs as GET, a query that is not UTF-8 is a 400, and
every request carries a cancel token that a client's hang-up cancels. Torch-free: the
models run on onnxruntime.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException
from starlette.routing import Match, Mount

from service import align, attention, files, libre, native, openapi, stream
from service.connections import ClientWatch, HeadAsGet, HTTPMiddleware, Utf8Query
from service.deps import Access, APIError, error_response, get_engine, internal_error_message
from service.engine import TranslatorEngine, load_engine
from service.file_jobs import FileStore, JobBoard
from service.languages import get_detector
from service.metrics import Metrics, MetricsMiddleware
from service.rendering import Renderer
from service.settings import Settings, get_settings

log = logging.getLogger("crossalign.service")
ops = APIRouter(tags=["operations"])
# Every method a route answers (HEAD through HeadAsGet, counted as the GET it runs; OPTIONS:
# CORS preflight): the metrics label any other method "other", so no request line can add
# series (tested against the routes).
SERVED_METHODS = frozenset({"GET", "HEAD", "POST", "OPTIONS"})


class Decoding(BaseModel):
    """The search settings a request that sets none gets: the model's bundle's `decoding`, which its
    figures were measured with (seq2seq.core.config.SEARCH_FIELDS)."""

    beam_size: int
    length_penalty: float = Field(description="GNMT alpha")
    coverage_penalty: float = Field(description="GNMT beta; 0 = off")
    no_repeat_ngram_size: int = Field(description="no repeated n-gram of target pieces; 0 = off")
    dictionary_hints: bool = Field(
        description="rare source words the bundle's dictionary knows are shown with their translation (a model "
        "trained with hints)"
    )
    hint_max_count: int = Field(description="a word is rare when the training sentences held it at most this often")
    term_bonus: float = Field(
        0.0, description="added to a translation's score per piece of a glossary term it writes; 0 = off"
    )


class ModelStatus(BaseModel):
    name: str
    source: str
    target: str
    decoding: Decoding = Field(description="what a request that leaves its search settings out decodes with")


class FailedModel(BaseModel):
    name: str = Field(description="the bundle directory's name")
    error: str = Field(description="why it is not served")


class Health(BaseModel):
    status: Literal["ok", "degraded"] = Field(description="degraded: some bundle failed to load (see `failed`)")
    models: list[ModelStatus]
    failed: list[FailedModel] = Field(default_factory=list, description="bundles found but not served")


# /health and /metrics run on the event loop and take no sync dependency (FastAPI runs those
# in the thread pool): however busy the pool every translating route shares, they answer.
@ops.get("/health", response_model=Health)
async def health(request: Request) -> Health:
    engine = get_engine(request)
    failed = [FailedModel(name=name, error=error) for name, error in sorted(engine.failed.items())]
    return Health(
        status="degraded" if failed else "ok",
        failed=failed,
        models=[
            ModelStatus(
                name=m.name,
                source=m.source,
                target=m.target,
                decoding=Decoding(**m.decode_defaults.search_settings),
            )
            for m in engine.models.values()
        ],
    )


@ops.get("/metrics", response_class=Response, summary="Prometheus metrics")
async def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def _validation_message(error: RequestValidationError) -> str:
    problems = []
    for item in error.errors()[:5]:
        if item.get("type") == "json_invalid":
            problems.append(f"malformed JSON body: {item.get('ctx', {}).get('error', item['msg'])}")
            continue
        where = ".".join(str(p) for p in item.get("loc", ()) if p not in ("body", "query"))
        problems.append(f"{where}: {item['msg']}" if where else item["msg"])
    return "Invalid request: " + "; ".join(problems)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def api_error(request: Request, error: APIError) -> JSONResponse:
        return error_response(error.status, error.message, error.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
        return error_response(400, _validation_message(error))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        message = error.detail if isinstance(error.detail, str) else str(error.detail)
        if error.status_code == 400 and "parsing the body" in message:
            message = "malformed request body (invalid JSON or not UTF-8)"
        headers = dict(error.headers or {})
        if error.status_code == 405:  # Starlette names only the first route's methods
            headers["Allow"] = ", ".join(allowed_methods(request.app, request.scope))
        return error_response(error.status_code, message, headers)


def allowed_methods(app: FastAPI, scope: dict) -> list[str]:
    """Every method served at this request's path (GET and POST may be two routes), HEAD
    wherever GET is (`HeadAsGet`): each method of SERVED_METHODS is tried against the
    routes, by the router's own matching (FastAPI nests included routers, so their routes
    are not a flat list to read methods from)."""
    # Inside a mount (/static) the scope's root_path has grown by the mount's path: probe as the app saw it.
    top = {**scope, "root_path": scope.get("app_root_path", scope.get("root_path", ""))}
    methods = set()
    for route in app.router.routes:
        if isinstance(route, Mount):  # matches any method; the app's mounts serve files, by GET
            methods |= {"GET"} if route.matches(top)[0] == Match.FULL else set()
            continue
        methods |= {m for m in SERVED_METHODS - {"HEAD"} if route.matches({**top, "method": m})[0] == Match.FULL}
    return sorted(methods | ({"HEAD"} if "GET" in methods else set()))


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


def create_app(settings: Settings | None = None, engine: TranslatorEngine | None = None) -> FastAPI:
    """The app for `settings` (default `get_settings()`), serving `engine` (default: load every
    bundle under `settings.models` in lifespan). Also the uvicorn factory."""
    settings = settings or get_settings()
    metrics_ = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loaded = engine or load_engine(
            settings.models,
            settings.threads,
            settings.batch_window_ms / 1000,
            settings.max_batch_sentences,
            on_batch=metrics_.observe_batch,
            max_rows=settings.max_batch_rows,
            max_queue_work=settings.max_queue_work,
            precision=settings.precision or None,
            quality_mode=settings.quality,
            streams=settings.streams,
        )
        app.state.engine = loaded
        for model in loaded.models.values():
            metrics_.watch_queue(model.name, lambda batcher=model.batcher: batcher.queued_work)
        # A job's record outlives its last update by more than any wait between two updates
        # (a running job's model call, or the whole of the job ahead of a queued one).
        unfinished_ttl = settings.file_ttl + settings.file_timeout + settings.request_timeout
        jobs = JobBoard(app.state.files, settings.file_job_workers, settings.file_max_jobs, unfinished_ttl)
        app.state.jobs = jobs
        metrics_.watch_jobs(jobs.count)
        # Load the language identifier in the background: the first "auto" request need not wait.
        languages = frozenset(lang for pair in loaded.models for lang in pair)
        threading.Thread(target=get_detector, args=(languages,), name="langid-warmup", daemon=True).start()
        try:
            yield
        finally:
            app.state.engine = app.state.jobs = None
            jobs.close()  # before the models: every job's record says it was stopped
            if engine is None:  # the app's own (a given engine is its owner's to close)
                loaded.close()  # cancels what is queued or running: its handlers answer at once
            app.state.renderer.close()

    app = FastAPI(
        title="crossalign",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        description="German-English translation with cross-attention alignment maps. "
        "LibreTranslate-compatible routes plus a native API with alignments and heatmaps.",
    )
    app.state.metrics = metrics_
    app.state.access = Access(settings.api_key_set, settings.rate_limit)
    app.state.renderer = Renderer(settings.max_render_pixels)
    app.state.engine = app.state.jobs = None
    app.state.files = FileStore(settings.files_path, settings.file_ttl)
    app.dependency_overrides[get_settings] = lambda: settings
    install_error_handlers(app)
    app.add_middleware(ErrorBoundary)  # first added = innermost: it sees route errors before Starlette's
    if settings.cors_origin_list:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origin_list,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "X-API-Key"],
        )
    app.add_middleware(
        SizeLimitMiddleware,
        max_bytes=settings.max_body_bytes,
        max_header_bytes=settings.max_header_bytes,
        upload_bytes={files.UPLOAD_PATH: settings.file_max_bytes},
    )
    app.add_middleware(Utf8Query)
    app.add_middleware(ClientWatch)  # outside the size limit: the body it pumps is counted as the app reads it
    app.add_middleware(MetricsMiddleware, metrics=metrics_, methods=SERVED_METHODS)
    # Outermost: the rest sees a HEAD as the GET it runs (the router labels the GET's scope with its route).
    app.add_middleware(HeadAsGet)
    app.include_router(libre.router)
    app.include_router(native.router)
    app.include_router(stream.router)
    app.include_router(align.router)
    app.include_router(files.router)
    app.include_router(ops)
    attention.install(app)  # /v1/attention and the explorer page at /
    openapi.install(app, settings)  # /openapi.json as the service behaves, /docs and /redoc offline
    return app
