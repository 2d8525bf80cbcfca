"""`/health` and `/metrics`: what operations read of a running server.

Both run on the event loop and take no sync dependency (FastAPI runs those in the thread
pool): however busy the pool every translating route shares, they answer.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, Field

from service.shared.context import get_engine

router = APIRouter(tags=["operations"])


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
@router.get("/health", response_model=Health)
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


@router.get("/metrics", response_class=Response, summary="Prometheus metrics")
async def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
