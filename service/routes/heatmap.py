"""`GET/POST /v1/heatmap`: the alignment heatmap of a translation as a download, or the model view (`view=heads`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response
from pydantic import ConfigDict, Field

from seq2seq.analysis.heads import block_diagonal, head_statistics
from seq2seq.analysis.heatmap import FORMATS, default_size, filename, head_grid_size, render_head_grid, render_heatmap
from seq2seq.core.alignment import concat, words
from seq2seq.core.config import AlignmentOptions, DecodeConfig
from seq2seq.decoding.texts import sentences_of
from service.compute.engine import ServedModel
from service.http.access import CheckedRoute
from service.http.errors import APIError
from service.shared.context import ContextDep, RequestContext, Search
from service.shared.jobs import explored_config, sentence_source_lengths
from service.shared.maps import self_attention_alignment, sentence_maps
from service.shared.requests import BeamSize, NoRepeatNgramSize, RerankFields, Source, StepShift, Target

router = APIRouter(prefix="/v1", tags=["native"], route_class=CheckedRoute)


class HeatmapRequest(RerankFields):
    q: str = Field(description="the text to translate and draw")
    source: Source
    target: Target
    format: Literal["png", "svg"] = "png"
    view: Literal["map", "heads"] = Field(
        "map",
        description="map: one map (the `layer` and `head` chosen); heads: the model view, every layer and head of "
        "`kind` as a small map over the raw pieces (with <s> and </s>), the model's alignment heads framed, each "
        "with its entropy, diagonality and share on the sentence mark (`level`, `layer`, `head` and "
        "`step_shift` do not apply)",
    )
    kind: Literal["cross", "encoder", "decoder"] = Field(
        "cross",
        description="cross: the alignment map; encoder / decoder: that self-attention, over subword "
        "pieces with <s> / </s> (`level` and `step_shift` apply to cross only)",
    )
    level: Literal["word", "subword"] = "word"
    layer: int | None = Field(None, description="default: the alignment layer (cross), the last layer (self)")
    head: list[int] | None = Field(
        None,
        description="heads to average (default: the model's alignment heads "
        "for cross, all heads for self-attention; in a query, "
        "repeat the parameter for several heads)",
    )
    step_shift: StepShift
    beam_size: BeamSize
    no_repeat_ngram_size: NoRepeatNgramSize
    width: int | None = Field(None, description="pixels (default: fitted to the tokens)")
    height: int | None = Field(None, description="pixels (default: fitted to the tokens)")


class HeatmapQuery(HeatmapRequest):
    """`HeatmapRequest`'s fields as query parameters: text, so "640" is 640; parameters that are
    not its fields (an `api_key`) are left to others."""

    model_config = ConfigDict(extra="ignore", strict=False)


def heatmap_response(body: HeatmapRequest, ctx: RequestContext) -> Response:
    ctx.check_texts([body.q])
    check_canvas(ctx, body.width, body.height)
    if body.view == "heads":
        return heads_response(body, ctx)
    # Its pixels are admitted first, so that a heatmap that cannot be drawn now costs next to
    # nothing (under a flood, most are refused); a side left out is counted as fitted to the
    # text's words, a guess at its tokens made without tokenizing it.
    guess = default_size(len(words(body.q)), len(words(body.q)))
    with ctx.render_place((body.width or guess[0]) * (body.height or guess[1])):
        model, _ = ctx.resolve_pair(body.source, body.target, [body.q])
        options = AlignmentOptions(
            body.level, body.layer, None if body.head is None else tuple(body.head), body.step_shift
        )
        # A self-attention layer is checked against its own stack (the encoder's may be deeper).
        options = ctx.resolve_alignment(model, options if body.kind == "cross" else replace(options, layer=None))
        cross = options if body.kind == "cross" else None
        rerank = body.rerank_options(ctx.settings.max_beam_size)
        search = Search(body.beam_size, 1, body.no_repeat_ngram_size, attention=True, rerank=rerank)
        config = ctx.decode_config(model, search, alignment=cross)
        if body.kind != "decoder":  # the source axis is known before translating (a decoder map's are not)
            check_axis(ctx, source_axis(model, body.q, config, body.kind, body.level), 0)
        translated = ctx.translate(model, [body.q], config)[0]
        if body.kind == "cross":
            alignment, title, axes = translated.alignment() or concat([], options), None, ("source", "target")
        else:
            alignment = self_attention_alignment(model, translated, body.kind, body.layer, tuple(body.head or ()))
            heads = "heads " + ",".join(map(str, alignment.heads)) if alignment.heads else "mean of heads"
            title, axes = f"{body.kind} self-attention, layer {alignment.layer}, {heads}", ("keys", "queries")
        rows, columns = alignment.matrix.shape
        check_axis(ctx, columns, rows)
        fitted = default_size(columns, rows)
        width, height = body.width or fitted[0], body.height or fitted[1]
        check_canvas(ctx, width, height)
        # A word-level cross-attention map shows its quality flags (they index words).
        quality = translated.quality() if body.kind == "cross" and body.level == "word" else None
        image = ctx.render(
            lambda: render_heatmap(
                alignment,
                body.format,
                width,
                height,
                title,
                axes,
                untranslated=quality.untranslated if quality else (),
                ungrounded=quality.ungrounded if quality else (),
            ),
            width * height,
        )
    name = filename(model.source, model.target, body.q, body.format)
    if body.kind != "cross":
        name = name.replace("alignment-", f"{body.kind}-attention-", 1)
    return download(image, body.format, name)


def heads_response(body: HeatmapRequest, ctx: RequestContext) -> Response:
    """The model view of `body.kind` for the translation of `body.q`: every layer and head (the
    raw maps of its sentences, block-diagonal), within the same admission as one map."""
    model, _ = ctx.resolve_pair(body.source, body.target, [body.q])
    config = model.config
    layers = config.encoder_layers if body.kind == "encoder" else config.decoder_layers
    fitted = head_grid_size(layers, config.n_heads)
    width, height = body.width or fitted[0], body.height or fitted[1]
    check_canvas(ctx, width, height)
    with ctx.render_place(width * height):
        rerank = body.rerank_options(ctx.settings.max_beam_size)
        decode = explored_config(ctx, model, body.beam_size, body.no_repeat_ngram_size, rerank=rerank)
        check_axis(ctx, source_axis(model, body.q, decode, "encoder", "subword"), 0)
        translated = ctx.translate(model, [body.q], decode)[0]
        maps = [getattr(sentence_maps(model.translator.backend, r), body.kind) for r in translated.results]
        statistics = head_statistics(maps, body.kind)
        whole = block_diagonal(maps)
        check_axis(ctx, whole.shape[3], whole.shape[2])
        marked = []
        if body.kind == "cross":
            layer = config.resolved_alignment_layer
            marked = [(layer, head) for head in (config.alignment_heads or range(config.n_heads))]
        caption = f"{body.kind} attention, every layer and head: {translated.text!r} ({model.source} -> {model.target})"
        image = ctx.render(
            lambda: render_head_grid(whole, statistics, marked, caption, body.format, width, height), width * height
        )
    name = filename(model.source, model.target, body.q, body.format).replace("alignment-", f"heads-{body.kind}-", 1)
    return download(image, body.format, name)


def download(image: bytes, fmt: str, name: str) -> Response:
    return Response(image, media_type=FORMATS[fmt], headers={"Content-Disposition": f'attachment; filename="{name}"'})


def source_axis(model: ServedModel, text: str, config: DecodeConfig, kind: str, level: str) -> int:
    """The tokens along a heatmap's source axis, counted before translating: the words of every
    sentence (a word-level cross map), the source pieces the model reads (subword), or those
    with each sentence's </s> (the encoder's self-attention)."""
    if kind == "cross" and level == "word":
        return sum(len(words(sentence)) for sentence in sentences_of(text))
    lengths = sentence_source_lengths(model, text, config)
    return sum(lengths) + (len(lengths) if kind == "encoder" else 0)


def check_axis(ctx: RequestContext, columns: int, rows: int) -> None:
    """413 when a heatmap axis holds more tokens than `heatmap_max_tokens` (rows 0: not known yet)."""
    limit = ctx.settings.heatmap_max_tokens
    if max(columns, rows) > limit:
        shape = f"{columns} x {rows}" if rows else f"{columns} source"
        raise APIError(
            413,
            f"the alignment has {shape} tokens; a heatmap shows at most {limit} per axis "
            "(send less text, or use level=word)",
        )


def check_canvas(ctx: RequestContext, width: int | None, height: int | None) -> None:
    """400 for a side outside 100..heatmap_max_pixels or an area over heatmap_max_area (None: not
    asked; the fitted default is checked once the tokens are known)."""
    limit, area = ctx.settings.heatmap_max_pixels, ctx.settings.heatmap_max_area
    for name, value in (("width", width), ("height", height)):
        if value is not None and not 100 <= value <= limit:
            raise APIError(400, f"{name} must be between 100 and {limit} pixels, not {value}")
    if width is not None and height is not None and width * height > area:
        raise APIError(400, f"width x height is {width * height} pixels; a heatmap has at most {area}")


IMAGE_RESPONSES = {
    200: {"content": {media: {} for media in FORMATS.values()}, "description": "the heatmap, as a download"}
}


@router.get("/heatmap", response_class=Response, responses=IMAGE_RESPONSES, summary="Alignment heatmap (download)")
def heatmap(query: Annotated[HeatmapQuery, Query()], ctx: ContextDep) -> Response:
    """The alignment heatmap of the translation of `q`: token labels on both axes, a colour
    scale, hard links outlined; `kind=encoder|decoder` draws a self-attention map of the same
    translation instead. `POST /v1/heatmap` takes the same fields as JSON, for long text."""
    return heatmap_response(query, ctx)


@router.post("/heatmap", response_class=Response, responses=IMAGE_RESPONSES, summary="Alignment heatmap (long text)")
def heatmap_post(body: HeatmapRequest, ctx: ContextDep) -> Response:
    return heatmap_response(body, ctx)
