"""The FastAPI app: models loaded in `lifespan`, the routers, the middleware, one error shape.

    crossalign serve      (uvicorn with the read timeouts and the key-redacting log: service/serve.py)

The service in role folders, each importing only those below it (tests/test_layers.py):
service/compute (the served models behind the fair scheduler, the language identifier, the
render thread) < service/http (errors, bodies, access, connections, middleware, metrics,
OpenAPI) < service/shared (the request context, request fields, translation jobs, marked
text, attention maps, the file store) < service/routes (one module per route group, none
importing another) < this module, which wires them together.

Every error, whatever raised it (our checks, FastAPI's validation, a malformed body), is
answered as LibreTranslate answers, `{"error": "..."}` with a 4xx status; an unexpected
failure is a logged 500 with the same shape, and the server keeps serving. Below the
routes (service/http/connections.py): HEAD runs as GET, a query that is not UTF-8 is a 400,
and every request carries a cancel token that a client's hang-up cancels. Torch-free: the
models run on onnxruntime.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from seq2seq.core.languages import get_detector
from service.compute.engine import TranslatorEngine, load_engine
from service.compute.rendering import Renderer
from service.http import openapi
from service.http.access import Access
from service.http.connections import ClientWatch, HeadAsGet, Utf8Query
from service.http.errors import SERVED_METHODS, install_error_handlers
from service.http.metrics import Metrics, MetricsMiddleware
from service.http.middleware import ErrorBoundary, SecurityHeaders, SizeLimitMiddleware
from service.routes import align, attention, files, heatmap, libre, native, operations, stream
from service.settings import Settings, get_settings
from service.shared.file_jobs import JobBoard
from service.shared.file_store import FileStore

__all__ = ["SERVED_METHODS", "create_app"]


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
        jobs = JobBoard.for_settings(app.state.files, settings)
        jobs.start()  # the store's sweeps, and this process's heartbeats
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
    app.state.files = FileStore(
        settings.files_path, settings.file_ttl, settings.file_store_max_bytes, settings.file_client_max_bytes
    )
    app.dependency_overrides[get_settings] = lambda: settings
    install_error_handlers(app)
    stack_middleware(app, settings, metrics_)
    for routes in (libre, native, heatmap, stream, align, files, operations):
        app.include_router(routes.router)
    attention.install(app)  # /v1/attention and the explorer page at /
    openapi.install(app, settings)  # /openapi.json as the service behaves, /docs and /redoc offline
    return app


def stack_middleware(app: FastAPI, settings: Settings, metrics: Metrics) -> None:
    """The middleware, innermost first (each added one wraps those before it)."""
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
    app.add_middleware(SecurityHeaders)  # on every answer, the limits' and the error boundary's included
    app.add_middleware(MetricsMiddleware, metrics=metrics, methods=SERVED_METHODS)
    # Outermost: the rest sees a HEAD as the GET it runs (the router labels the GET's scope with its route).
    app.add_middleware(HeadAsGet)
