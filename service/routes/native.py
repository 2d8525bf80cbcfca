"""`POST /v1/translate`: translations with their alignment maps."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from seq2seq.decoding.records import TextTranslation, text_translation
from service.http.access import CheckedRoute
from service.shared.context import ContextDep
from service.shared.jobs import TranslateFields, translation_job
from service.shared.markup import marked_translations
from service.shared.requests import MarkupFormat

router = APIRouter(prefix="/v1", tags=["native"], route_class=CheckedRoute)


class TranslateRequest(TranslateFields):
    format: MarkupFormat = None


class TranslateResponse(BaseModel):
    translations: list[TextTranslation]


@router.post("/translate", response_model=TranslateResponse, summary="Translate with alignment maps")
def translate(body: TranslateRequest, ctx: ContextDep) -> TranslateResponse:
    """Per input: text, score, sentences with subword and word tokens (character offsets into
    the input and the translation), the soft alignment matrix (rows = target tokens, each row
    sums to 1), hard word links in Pharaoh `i-j` form, and the layer/heads that produced it;
    one map per n-best alternative. With the alignment, each sentence's `quality` block:
    untranslated source words, ungrounded target words, confidence (see `Quality`). With
    `format` html or xml, each text is one segment whose inline markup is placed on its
    translation (`marked_text`); the rest describes the plain text (`plain_source`).
    `POST /v1/translate/stream` sends the same as Server-Sent Events, step by step."""
    job = translation_job(body, ctx)
    if body.format is not None:
        translations = marked_translations(ctx, job.model, job.texts, body.format, job.config, body.n_best)
        return TranslateResponse(translations=translations)
    translated = ctx.translate(job.model, job.texts, job.config)
    model = job.model
    return TranslateResponse(
        translations=[text_translation(t, model.source, model.target, body.n_best) for t in translated]
    )
