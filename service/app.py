"""The FastAPI app: models loaded in `lifespan`, small routers, one error shape.

    uvicorn --factory service.app:create_app     (or `crossalign serve`)

Every error, whatever raised it (our checks, FastAPI's validation, a malformed body), is
answered as LibreTranslate answers, `{"error": "..."}` with a 4xx status; an unexpected
failure is a logged 500 with the same shape, and the server keeps serving. Torch-free:
the models run on onnxruntime.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from service import align, attention, libre, native
from service.deps import APIError, RateLimiter, get_engine, get_metrics
from service.engine import Engine, load_engine
from service.languages import get_detector
from service.metrics import Metrics, MetricsMiddleware
from service.settings import Settings, get_settings

log = logging.getLogger("crossalign.service")
ops = APIRouter(tags=["operations"])


class ModelStatus(BaseModel):
    name: str
    source: str
    target: str


class Health(BaseModel):
    status: str
    models: list[ModelStatus]


@ops.get("/health", response_model=Health)
def health(engine: Engine = Depends(get_engine)) -> Health:
    return Health(status="ok", models=[ModelStatus(name=m.name, source=m.source, target=m.target)
                                       for m in engine.models.values()])


@ops.get("/metrics", response_class=Response, summary="Prometheus metrics")
def metrics(metrics: Metrics = Depends(get_metrics)) -> Response:
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


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
        return _error(error.status, error.message)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
        return _error(400, _validation_message(error))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        message = error.detail if isinstance(error.detail, str) else str(error.detail)
        if error.status_code == 400 and "parsing the body" in message:
            message = "malformed request body (invalid JSON or not UTF-8)"
        return _error(error.status_code, message)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return _error(500, f"internal error ({type(error).__name__}); the request was not completed")


class BodyLimitMiddleware:
    """413 before reading a body whose declared Content-Length exceeds the limit."""

    def __init__(self, app: Any, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            length = dict(scope.get("headers", ())).get(b"content-length", b"0")
            if not length.isdigit() or int(length) > self.max_bytes:
                response = _error(413 if length.isdigit() else 400,
                                  f"request body exceeds the limit of {self.max_bytes} bytes"
                                  if length.isdigit() else "invalid Content-Length header")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(settings: Settings | None = None, engine: Engine | None = None) -> FastAPI:
    """The app for `settings` (default `get_settings()`), serving `engine` (default: load every
    bundle under `settings.models` in lifespan). Also the uvicorn factory."""
    settings = settings or get_settings()
    metrics_ = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loaded = engine or load_engine(settings.models, settings.threads, settings.batch_window_ms / 1000,
                                       settings.max_batch_sentences, on_batch=metrics_.observe_batch)
        app.state.engine = loaded
        # Load the language identifier in the background: the first "auto" request need not wait.
        languages = frozenset(lang for pair in loaded.models for lang in pair)
        threading.Thread(target=get_detector, args=(languages,), name="langid-warmup", daemon=True).start()
        try:
            yield
        finally:
            app.state.engine = None
            loaded.close()

    app = FastAPI(title="crossalign", version="0.1.0", lifespan=lifespan,
                  description="German-English translation with cross-attention alignment maps. "
                              "LibreTranslate-compatible routes plus a native API with alignments and heatmaps.")
    app.state.metrics = metrics_
    app.state.limiter = RateLimiter(settings.rate_limit)
    app.state.engine = None
    app.dependency_overrides[get_settings] = lambda: settings
    install_error_handlers(app)
    if settings.cors_origin_list:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origin_list, allow_methods=["GET", "POST"],
                           allow_headers=["*"])
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=metrics_)
    app.include_router(libre.router)
    app.include_router(native.router)
    app.include_router(align.router)
    app.include_router(ops)
    attention.install(app)  # /v1/attention and the explorer page at /
    return app
