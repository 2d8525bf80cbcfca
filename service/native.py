"""The native API: /v1/translate (translations with their alignment maps) and /v1/heatmap."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Literal

from fastapi import APIRouter, Depends, Query, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator

from seq2seq.alignment import AlignmentOptions
from seq2seq.config import DecodeConfig
from seq2seq.heatmap import FORMATS, filename, render_heatmap
from seq2seq.records import TextTranslation
from service.attention import explorer_translator, self_attention_alignment
from service.deps import (
    APIError,
    check_texts,
    decode_config,
    get_client,
    get_engine,
    get_language_detector,
    get_metrics,
    require_access,
    resolve_alignment,
    resolve_pair,
    run_translation,
)
from service.engine import Engine
from service.languages import LanguageDetector
from service.libre import AlignmentRequest
from service.metrics import Metrics
from service.openapi import JSONRequest, exactly_one
from service.settings import Settings, get_settings
from service.translation import text_alignment, text_quality, text_translation

router = APIRouter(prefix="/v1", tags=["native"], dependencies=[Depends(require_access)])


class TranslateRequest(JSONRequest):
    model_config = ConfigDict(json_schema_extra=exactly_one(("text",), ("texts",)))

    text: str | None = Field(None, description="one text (give `text` or `texts`)")
    texts: list[str] | None = Field(None, description="several texts, translated as one batch")
    source: str = Field("auto", description="source language code, or 'auto'")
    target: str | None = Field(None, description="target language (default: the only one served for the source)")
    beam_size: int = Field(DecodeConfig.beam_size, description="beam width (raised to n_best if smaller)")
    n_best: int = Field(1, description="hypotheses per sentence, each with its own alignment")
    alignment: AlignmentRequest | bool = Field(True, description="alignment options, or false for none")

    @model_validator(mode="after")
    def _one_input(self) -> TranslateRequest:
        if (self.text is None) == (self.texts is None):
            raise ValueError("give exactly one of `text` or `texts`")
        return self


class TranslateResponse(BaseModel):
    translations: list[TextTranslation]


@router.post("/translate", response_model=TranslateResponse, summary="Translate with alignment maps")
def translate(body: TranslateRequest, engine: Engine = Depends(get_engine),
              settings: Settings = Depends(get_settings), metrics: Metrics = Depends(get_metrics),
              client: str = Depends(get_client),
              detector: Callable[[], LanguageDetector] = Depends(get_language_detector)) -> TranslateResponse:
    """Per input: text, score, sentences with subword and word tokens (character offsets into
    the input and the translation), the soft alignment matrix (rows = target tokens, each row
    sums to 1), hard word links in Pharaoh `i-j` form, and the layer/heads that produced it;
    one map per n-best alternative. With the alignment, each sentence's `quality` block:
    untranslated source words, ungrounded target words, confidence (see `Quality`)."""
    texts = [body.text] if body.text is not None else list(body.texts or [])
    check_texts(texts, settings, "text" if body.text is not None else "texts")
    pair, _ = resolve_pair(engine, detector, body.source, body.target, texts)
    alignment = AlignmentRequest() if body.alignment is True else body.alignment or None
    options = resolve_alignment(engine, pair, alignment.options()) if alignment else None
    config = decode_config(settings, body.beam_size, body.n_best, attention=options is not None, alignment=options)
    translated = run_translation(engine, metrics, settings, pair, texts, config, client)
    return TranslateResponse(translations=[text_translation(pair, t, body.n_best) for t in translated])


class HeatmapRequest(JSONRequest):

    q: str = Field(description="the text to translate and draw")
    source: str = "auto"
    target: str | None = None
    format: Literal["png", "svg"] = "png"
    kind: Literal["cross", "encoder", "decoder"] = Field(
        "cross", description="cross: the alignment map; encoder / decoder: that self-attention, over subword "
                             "pieces with <s> / </s> (`level` and `step_shift` apply to cross only)")
    level: Literal["word", "subword"] = "word"
    layer: int | None = Field(None, description="default: the alignment layer (cross), the last layer (self)")
    head: list[int] | None = Field(None, description="heads to average (default: the model's alignment heads "
                                                     "for cross, all heads for self-attention)")
    step_shift: bool | None = Field(None, description="read the map where the target token is the decoder "
                                                   "input (default: the model's)")
    beam_size: int = DecodeConfig.beam_size
    width: int | None = Field(None, description="pixels (default: fitted to the tokens)")
    height: int | None = Field(None, description="pixels (default: fitted to the tokens)")


def heatmap_response(body: HeatmapRequest, engine: Engine, settings: Settings, metrics: Metrics,
                     detector: Callable[[], LanguageDetector], client: str) -> Response:
    check_texts([body.q], settings)
    for name, value in (("width", body.width), ("height", body.height)):
        if value is not None and not 100 <= value <= settings.heatmap_max_pixels:
            raise APIError(400, f"{name} must be between 100 and {settings.heatmap_max_pixels} pixels, not {value}")
    pair, _ = resolve_pair(engine, detector, body.source, body.target, [body.q])
    options = AlignmentOptions(body.level, body.layer, None if body.head is None else tuple(body.head),
                               body.step_shift)
    # A self-attention layer is checked against its own stack (the encoder's may be deeper).
    options = resolve_alignment(engine, pair, options if body.kind == "cross" else replace(options, layer=None))
    if body.kind != "cross":
        explorer_translator(engine, pair)  # 501 before translating, if it cannot
    config = decode_config(settings, body.beam_size, 1, attention=True,
                           alignment=options if body.kind == "cross" else None)
    translated = run_translation(engine, metrics, settings, pair, [body.q], config, client)[0]
    if body.kind == "cross":
        alignment, title, axes = text_alignment(translated, options), None, ("source", "target")
    else:
        alignment = self_attention_alignment(engine, pair, translated, body.kind, body.layer, tuple(body.head or ()))
        heads = "heads " + ",".join(map(str, alignment.heads)) if alignment.heads else "mean of heads"
        title, axes = f"{body.kind} self-attention, layer {alignment.layer}, {heads}", ("keys", "queries")
    rows, columns = alignment.matrix.shape
    if max(rows, columns) > settings.heatmap_max_tokens:
        raise APIError(413, f"the alignment has {columns} x {rows} tokens; a heatmap shows at most "
                            f"{settings.heatmap_max_tokens} per axis (send less text, or use level=word)")
    # A word-level cross-attention map shows its quality flags (they index words).
    quality = text_quality(translated) if body.kind == "cross" and body.level == "word" else None
    image = render_heatmap(alignment, body.format, body.width, body.height, title, axes,
                           untranslated=quality.untranslated if quality else (),
                           ungrounded=quality.ungrounded if quality else ())
    name = filename(pair[0], pair[1], body.q, body.format)
    if body.kind != "cross":
        name = name.replace("alignment-", f"{body.kind}-attention-", 1)
    return Response(image, media_type=FORMATS[body.format],
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})


IMAGE_RESPONSES = {200: {"content": {media: {} for media in FORMATS.values()},
                         "description": "the heatmap, as a download"}}


@router.get("/heatmap", response_class=Response, responses=IMAGE_RESPONSES, summary="Alignment heatmap (download)")
def heatmap(q: str = Query(description="text to translate"), source: str = "auto", target: str | None = None,
            format: Literal["png", "svg"] = "png", kind: Literal["cross", "encoder", "decoder"] = "cross",
            level: Literal["word", "subword"] = "word",
            layer: int | None = None, head: list[int] | None = Query(None, description="repeat for several heads"),
            step_shift: bool | None = None, beam_size: int = DecodeConfig.beam_size,
            width: int | None = None, height: int | None = None,
            engine: Engine = Depends(get_engine), settings: Settings = Depends(get_settings),
            metrics: Metrics = Depends(get_metrics), client: str = Depends(get_client),
            detector: Callable[[], LanguageDetector] = Depends(get_language_detector)) -> Response:
    """The alignment heatmap of the translation of `q`: token labels on both axes, a colour
    scale, hard links outlined; `kind=encoder|decoder` draws a self-attention map of the same
    translation instead. `POST /v1/heatmap` takes the same fields as JSON, for long text."""
    body = HeatmapRequest(q=q, source=source, target=target, format=format, kind=kind, level=level, layer=layer,
                          head=head,
                          step_shift=step_shift, beam_size=beam_size, width=width, height=height)
    return heatmap_response(body, engine, settings, metrics, detector, client)


@router.post("/heatmap", response_class=Response, responses=IMAGE_RESPONSES, summary="Alignment heatmap (long text)")
def heatmap_post(body: HeatmapRequest, engine: Engine = Depends(get_engine),
                 settings: Settings = Depends(get_settings), metrics: Metrics = Depends(get_metrics),
                 client: str = Depends(get_client),
                 detector: Callable[[], LanguageDetector] = Depends(get_language_detector)) -> Response:
    return heatmap_response(body, engine, settings, metrics, detector, client)
