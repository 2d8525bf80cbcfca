"""The service's settings: one table feeding env vars (`CROSSALIGN_*`) and CLI flags.

Each setting is declared once, here, with its only default. pydantic-settings reads the
environment; `crossalign serve` generates one `--flag` per field (see service/serve.py)
and hands the flags that were given to the server as env vars, so every uvicorn worker
process builds the same `Settings`. `get_settings()` is cached and is what the app and
the dependencies read; tests override it or pass a `Settings` to `create_app`.
"""

from __future__ import annotations

import os
import tempfile
from functools import lru_cache
from pathlib import Path

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from seq2seq.analysis.quality import DEFAULT_QUALITY_MODE, QUALITY_MODES
from seq2seq.core.config import DecodeConfig
from seq2seq.runtime.bundle import PRECISIONS
from seq2seq.runtime.models import default_models_dir

ENV_PREFIX = "CROSSALIGN_"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="ignore")

    # Where the models are, and how to run them.
    models: Path = Field(
        default_factory=default_models_dir,
        description="directory of model bundles; every bundle in it (or the directory itself, if it is one) is served "
        "(unset: ./models when it holds a bundle, else the models shipped beside the package)",
    )
    threads: int = Field(0, ge=0, description="onnxruntime intra-op threads per model (0 = runtime default)")
    streams: int = Field(
        0,
        ge=0,
        description="sub-batches of one micro-batch searched at once, sharing the model's threads "
        "(0 = two once there are two threads; 1 = search each batch whole)",
    )
    precision: str = Field(
        "", description="graph precision to run, fp32 or int8 (empty: each bundle's default, named in its bundle.json)"
    )
    quality: str = Field(
        DEFAULT_QUALITY_MODE,
        description="untranslated flags of the quality blocks: thorough (source occlusion: one more "
        "teacher-forced row per source word, translation with alignment ~2.7x and /v1/align ~5.5x "
        "the time) or fast (attention only: no extra cost, more false flags)",
    )
    restore_case: bool = Field(
        DecodeConfig.restore_case,
        description="read shouted (all-caps) text with its case restored and answer it in capitals "
        "(false: the model reads every text as given)",
    )
    # The server.
    host: str = Field("127.0.0.1", description="address to listen on (0.0.0.0 in a container)")
    port: int = Field(5000, ge=0, le=65535, description="port (LibreTranslate's default)")
    workers: int = Field(1, ge=1, description="uvicorn worker processes, each with its own copy of the models")
    keep_alive_s: float = Field(5.0, gt=0, description="seconds an idle keep-alive connection stays open")
    head_timeout_s: float = Field(
        10.0,
        gt=0,
        description="seconds a request head (request line and headers) may take to arrive whole, from the "
        "connection's opening or its first byte; beyond it: 408 and the connection closed",
    )
    body_timeout_s: float = Field(
        20.0,
        gt=0,
        description="seconds a request body may take to arrive whole after its head, plus a second for every "
        "body_min_rate bytes received; beyond it: 408, the connection closed and the request's work dropped",
    )
    body_min_rate: int = Field(
        500,
        ge=1,
        description="bytes per second a body slower than body_timeout_s allows must keep up (a 20 MB upload "
        "may take as long as it needs at 500 B/s; a body trickled a byte at a time is closed after "
        "body_timeout_s; Apache's mod_reqtimeout MinRate)",
    )
    # Limits: a request beyond them gets a 4xx that names the limit (413 for the characters of
    # all its texts and its work, 400 for the number of texts; docs/api.md, errors).
    char_limit: int = Field(5000, ge=1, description="characters per request, summed over all texts")
    batch_limit: int = Field(64, ge=1, description="texts per request (a list `q` or `texts`)")
    max_beam_size: int = Field(8, ge=1, description="largest beam_size (and n_best / alternatives) a request may ask")
    heatmap_max_tokens: int = Field(
        120,
        ge=2,
        description="tokens per heatmap axis, and per sentence in /v1/attention (the source side is "
        "counted before translating); beyond it: 413",
    )
    heatmap_max_pixels: int = Field(4000, ge=100, description="largest heatmap width or height in pixels")
    heatmap_max_area: int = Field(
        16_000_000,
        ge=10_000,
        description="largest heatmap area, width x height in pixels (a 4000 x 4000 PNG: ~3 s and ~65 MB "
        "while it is drawn); beyond it: 400",
    )
    max_render_pixels: int = Field(
        64_000_000,
        ge=10_000,
        description="pixels (width x height) of the heatmaps being drawn, one at a time on the render "
        "thread, or waiting to be (four at the largest area, ~200 of 600 x 500); one that does not fit "
        "gets 503 with Retry-After before it translates anything",
    )
    attention_max_weights: int = Field(
        1_000_000,
        ge=1000,
        description="attention weights in one /v1/attention answer, all maps of all sentences (at most "
        "~8 bytes of JSON each: ~8 MB); beyond it: 413",
    )
    request_timeout: float = Field(120.0, gt=0, description="seconds a request may wait for its translation")
    max_body_bytes: int = Field(
        1 << 20,
        ge=1024,
        description="largest request body in bytes, counted while it is read (chunked bodies too); beyond it: 413",
    )
    max_header_bytes: int = Field(
        16384,
        ge=1024,
        description="largest header fields in bytes; beyond it: 431 "
        "(or 400 and a closed connection, when the parser "
        "sees it first)",
    )
    # Files (POST /translate_file, GET /download_file/<id>): a document is an attack surface.
    file_max_bytes: int = Field(
        20 << 20,
        ge=1024,
        description="largest upload to /translate_file in bytes (the whole multipart body, counted while it "
        "is read); beyond it: 413",
    )
    file_char_limit: int = Field(
        100000,
        ge=1,
        description="characters of text to translate in one file, counted before translating; beyond it: 413",
    )
    file_max_unzipped_bytes: int = Field(
        200 << 20,
        ge=1024,
        description="a DOCX, PPTX or ODT's entries uncompressed, summed; beyond it (or an entry expanding over "
        "200 times): 413, before any parser reads it",
    )
    file_timeout: float = Field(
        600.0,
        gt=0,
        description="seconds a file's translation may take, all its segments (each model call also within "
        "request_timeout); beyond it: 503",
    )
    file_ttl: float = Field(
        1800.0,
        gt=0,
        description="seconds a translated file can be downloaded, and a finished file job's status read; then "
        "they are deleted",
    )
    # 20,000 characters (about eight pages) take some 2.5 s with the shipped model on two cores
    # (a 10-page DOCX of 25,894 characters: 3.2 s, bench/file_jobs.py), well within the 60 s a
    # proxy or client commonly waits for an answer, even under load; a much longer file could
    # hold its connection open for minutes on a busy server.
    file_sync_chars: int = Field(
        20000,
        ge=0,
        description="characters to translate above which /translate_file answers 202 at once with a job to "
        "poll (GET /translate_file/<id>) instead of the translated file (a form field async=true asks for a "
        "job whatever the size; 0: every file with text is a job)",
    )
    file_max_jobs: int = Field(
        16,
        ge=1,
        description="file jobs queued or running per worker process; an upload that would be one more gets 503 "
        "with Retry-After",
    )
    file_job_workers: int = Field(
        2,
        ge=1,
        description="file jobs translated at once per worker process, their model calls on their clients' fair "
        "turns beside every other request; the others wait, a client's second job after others' first",
    )
    file_client_max_jobs: int = Field(
        4,
        ge=1,
        description="file jobs queued or running per client (API key, or address without keys) per worker "
        "process, its share of file_max_jobs; one more gets 429 with Retry-After",
    )
    # Bytes, not files: 20 MiB uploads make files of about that size, and their alignment
    # sidecars add a few times a plain text's size (a JSONL line per segment).
    file_store_max_bytes: int = Field(
        1 << 30,
        ge=0,
        description="bytes of translated files (with their alignment sidecars) waiting for their download in "
        "files_dir, all clients of all the servers sharing it (counted from the directory); a file that would "
        "pass it gets 503 with Retry-After (0 = unbounded)",
    )
    file_client_max_bytes: int = Field(
        100 << 20,
        ge=0,
        description="the same per client (API key, or address without keys), over all the servers sharing "
        "files_dir; a file that would pass it gets 507 (0 = unbounded)",
    )
    file_delete_after_download: bool = Field(
        False,
        description="delete a translated file once it is downloaded, as LibreTranslate does (an upload's form "
        "field delete_after_download=true|false decides for that file)",
    )
    file_sweep_s: float = Field(
        60.0,
        gt=0,
        description="seconds between two sweeps of files_dir by each worker process, in the background: what "
        "expired is deleted and the jobs of servers that died are marked failed",
    )
    file_job_stale_s: float = Field(
        60.0,
        gt=0,
        description="seconds without a heartbeat after which a file job's server counts as dead, where its "
        "process cannot be seen (another machine or container); each server beats every quarter of it",
    )
    files_dir: str = Field(
        "",
        description="where translated files wait for their download (empty: crossalign-files-<uid> in the "
        "system's temporary directory); nothing else is written anywhere. Replicas share one (a network volume)",
    )
    # Admission control: bounded work per request and in the queue, turns shared between clients.
    max_request_work: int = Field(
        20000,
        ge=1,
        description="work units per request: beam_size x characters (5,000 characters at beam 4); beyond it: 413",
    )
    max_queue_work: int = Field(
        160000,
        ge=0,
        description="work units queued or running per model; a request "
        "that does not fit gets 503 with Retry-After (0 = "
        "unbounded)",
    )
    # Micro-batching: requests arriving within the window share one padded batch.
    batch_window_ms: float = Field(
        5.0, ge=0, description="micro-batching window (0 = off: every request runs on its own)"
    )
    max_batch_sentences: int = Field(128, ge=1, description="sentences per micro-batch")
    # 64: at concurrency 32 the batching gain rose from 1.93x to 2.42x (medians of two
    # rounds, bench/service_load.py --rounds 2); concurrency 8 has at most 32 rows queued
    # (one sentence a request, beam 4), so its latency does not change (docs/performance.md,
    # "64 beam rows per micro-batch by default").
    max_batch_rows: int = Field(
        64,
        ge=0,
        description="beam rows (sentences x beam_size) per model call; "
        "bounds how long a newcomer waits behind a running batch "
        "(0 = only max_batch_sentences)",
    )
    # Access.
    api_keys: str = Field("", description="comma-separated API keys; when set, requests must carry one")
    rate_limit: int = Field(
        0,
        ge=0,
        description="requests per minute per API key (or per client address "
        "without keys, and for attempts with a wrong key); 429 with "
        "Retry-After beyond it; 0 = unlimited",
    )
    cors_origins: str = Field("", description="comma-separated origins allowed by CORS ('*' for any)")

    @model_validator(mode="after")
    def _queue_fits_a_request(self) -> Settings:
        if self.max_queue_work and self.max_queue_work < self.max_request_work:
            raise ValueError(
                f"max_queue_work ({self.max_queue_work}) must be 0 or at least max_request_work "
                f"({self.max_request_work}), or a maximal request could never be served"
            )
        return self

    @field_validator("precision")
    @classmethod
    def _known_precision(cls, value: str) -> str:
        if value and value not in PRECISIONS:
            raise ValueError(f"precision {value!r}: choose one of {', '.join(PRECISIONS)}, or leave it empty")
        return value

    @field_validator("quality")
    @classmethod
    def _known_quality(cls, value: str) -> str:
        if value not in QUALITY_MODES:
            raise ValueError(f"quality {value!r}: choose one of {', '.join(QUALITY_MODES)}")
        return value

    @field_validator("api_keys", "cors_origins")
    @classmethod
    def _strip(cls, value: str) -> str:
        return ",".join(item.strip() for item in value.split(",") if item.strip())

    @property
    def api_key_set(self) -> frozenset[str]:
        return frozenset(self.api_keys.split(",")) if self.api_keys else frozenset()

    @property
    def cors_origin_list(self) -> list[str]:
        return self.cors_origins.split(",") if self.cors_origins else []

    @property
    def files_path(self) -> Path:
        return (
            Path(self.files_dir) if self.files_dir else Path(tempfile.gettempdir()) / f"crossalign-files-{os.getuid()}"
        )


@lru_cache
def get_settings() -> Settings:
    return Settings()
