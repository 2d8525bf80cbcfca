"""Prometheus metrics: one registry per app, and a small ASGI middleware that feeds it.

Requests are labelled by route template ("/v1/heatmap", never the raw URL) and by method,
from the methods the app serves (any other is "other"), so no request can add label
values: unmatched paths share the route label "unmatched". With several uvicorn
workers each process counts its own requests (scrape each, or run one worker per
container).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "crossalign_requests", "HTTP requests", ["route", "method", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "crossalign_request_seconds",
            "HTTP request latency",
            ["route", "method"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge("crossalign_requests_in_flight", "HTTP requests being served", registry=self.registry)
        self.queued_work = Gauge(
            "crossalign_queued_work",
            "work units (beam size x characters) queued or running, per model",
            ["model"],
            registry=self.registry,
        )
        self.file_jobs = Gauge(
            "crossalign_file_jobs", "file jobs queued or running (this process)", ["state"], registry=self.registry
        )
        self.tokens = Counter(
            "crossalign_tokens", "subword tokens translated", ["model", "side"], registry=self.registry
        )
        self.sentences = Counter("crossalign_sentences", "sentences translated", ["model"], registry=self.registry)
        self.batch_size = Histogram(
            "crossalign_batch_sentences",
            "sentences per model call (micro-batch)",
            ["model"],
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )

    def watch_queue(self, model: str, queued_work: Callable[[], float]) -> None:
        """Report `queued_work()` as the model's queued work at every scrape."""
        self.queued_work.labels(model).set_function(queued_work)

    def watch_jobs(self, count: Callable[[str], int]) -> None:
        """Report `count(state)` file jobs queued and running at every scrape."""
        for state in ("queued", "running"):
            self.file_jobs.labels(state).set_function(lambda state=state: count(state))

    def observe_batch(self, model: str, size: int) -> None:
        self.batch_size.labels(model).observe(size)

    def count_tokens(self, model: str, sentences: int, source_tokens: int, target_tokens: int) -> None:
        self.sentences.labels(model).inc(sentences)
        self.tokens.labels(model, "source").inc(source_tokens)
        self.tokens.labels(model, "target").inc(target_tokens)


class MetricsMiddleware:
    """Counts, times and tracks in-flight HTTP requests (pure ASGI: no body buffering);
    `methods` are the method labels, any other method is counted as "other"."""

    def __init__(self, app: Any, metrics: Metrics, methods: frozenset[str]):
        self.app, self.metrics, self.methods = app, metrics, methods

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = {"code": 500}

        async def send_wrapper(message: dict) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        start = time.perf_counter()
        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            self.metrics.in_flight.dec()
            route = scope.get("route")
            label = getattr(route, "path", None) or "unmatched"
            method = scope["method"] if scope["method"] in self.methods else "other"
            self.metrics.requests.labels(label, method, str(status["code"])).inc()
            self.metrics.latency.labels(label, method).observe(time.perf_counter() - start)
