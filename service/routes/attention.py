"""The attention explorer: `/v1/attention` (every attention map of a translation) and the page at `/`.

The maps belong to the translation the model actually produced: the text is translated by
the same beam search as /v1/translate (sentence by sentence), then each sentence's
`<s>` + translation is teacher-forced through the encoder and decoder graphs
(`SearchBackend.teacher_force`, onnxruntime's or torch's), which returns the weights of
every layer and head.

Which tokens label the axes (S source pieces, T translation pieces, per sentence):

    encoder  rows = columns = source pieces + `</s>`            (S+1) x (S+1)
             no mask: every position attends to positions before and after it.
    decoder  rows = columns = `<s>` + translation pieces        (T+1) x (T+1)
             row i is the position whose input is token i and which predicts `outputs[i]`
             (the next piece, `</s>` at the last row); the causal mask makes every column
             after the row zero, so the map is lower-triangular.
    cross    rows = `<s>` + translation pieces (decoder inputs), (T+1) x (S+1)
             columns = source pieces + `</s>`; no mask: each step may read the whole source.

Every row sums to 1 (a softmax). `alignment` holds the library's alignment maps
(seq2seq.core.alignment) of every cross-attention layer and head selection, at word and
subword level: rows = the target tokens the steps produced, columns = source tokens,
`</s>` row and column removed, rows renormalised; these are what /v1/heatmap draws.

Torch-free: the service's backend is onnxruntime's; the torch backend gives the same maps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from fastapi import APIRouter, FastAPI, Query
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field

from seq2seq.analysis.heads import head_statistics
from seq2seq.core.alignment import Token, words
from seq2seq.core.config import AlignmentOptions, ModelConfig
from seq2seq.decoding.records import Quality, TokenSpan
from seq2seq.decoding.texts import TranslatedText
from seq2seq.decoding.translator import TranslationResult, Translator
from service.compute.engine import ServedModel
from service.http.access import CheckedRoute
from service.http.errors import APIError
from service.settings import Settings
from service.shared.context import ContextDep, RequestContext
from service.shared.jobs import explored_config, sentence_source_lengths
from service.shared.maps import Kind, sentence_maps
from service.shared.requests import (
    BeamSize,
    NoRepeatNgramSize,
    RerankFields,
    Source,
    Target,
    TermFields,
)

STATIC = Path(__file__).resolve().parents[1] / "static"
DECIMALS = 4

router = APIRouter(prefix="/v1", tags=["native"], route_class=CheckedRoute)
page = APIRouter(include_in_schema=False)


# --------------------------------------------------------------------------- the response


class AttentionMaps(BaseModel):
    rows: list[str] = Field(description="the query token of each row")
    columns: list[str] = Field(description="the key token of each column")
    weights: list[list[list[list[float]]]] = Field(
        description="(layers, heads, rows, columns) softmax weights; every row sums to 1"
    )


class AlignmentMaps(BaseModel):
    source_tokens: list[TokenSpan] = Field(description="columns; offsets into the whole input text")
    target_tokens: list[TokenSpan] = Field(
        description="rows: the target tokens the decoder steps produced; offsets into the whole translation"
    )
    head_sets: list[list[int]] = Field(
        description="the heads averaged along the second axis of `matrices` and "
        "`links`: each single head, then [] = the mean of all heads"
    )
    matrices: list[list[list[list[float]]]] = Field(
        description="(decoder layers, head sets, rows, columns): the alignment rule applied to that layer and "
        "head set; rows sum to 1"
    )
    links: list[list[str]] = Field(
        description="hard links per (layer, head set), Pharaoh 'i-j' (i = source token, j = target token)"
    )


class HeadStats(BaseModel):
    """What each head of one stack does (seq2seq/analysis/heads.py), over the raw maps."""

    mark: str = Field(description="the sentence mark `mark_share` reads: </s> (encoder, cross) or <s> (decoder)")
    entropy: list[list[float]] = Field(
        description="(layers, heads): mean row entropy over the log of the keys a row may read; 0 = one token, "
        "1 = evenly spread"
    )
    diagonal: list[list[float]] = Field(
        description="(layers, heads): mean weight within one position of the diagonal (proportional on the cross map)"
    )
    mark_share: list[list[float]] = Field(description="(layers, heads): mean weight on the mark")


class SentenceAttention(BaseModel):
    source: str = Field(description="the sentence")
    translation: str
    score: float
    source_start: int = Field(description="the sentence's span in the input text")
    source_end: int
    target_start: int = Field(description="its translation's span in the whole translation")
    target_end: int
    outputs: list[str] = Field(description="what each decoder row predicted: the translation pieces, then </s>")
    encoder: AttentionMaps = Field(description="rows = columns = source pieces + </s>; unmasked")
    decoder: AttentionMaps = Field(
        description="rows = columns = <s> + translation pieces; causal (zero above the diagonal)"
    )
    cross: AttentionMaps = Field(
        description="rows = <s> + translation pieces (decoder inputs), columns = source pieces + </s>; unmasked"
    )
    alignment: dict[Literal["word", "subword"], AlignmentMaps]
    heads: dict[Kind, HeadStats] = Field(description="per stack, what each layer's heads do (the model view)")
    quality: Quality | None = Field(
        None,
        description="quality signals of the model's own word alignment (its "
        "layer and heads); word indices of `alignment.word`",
    )


class AttentionResponse(BaseModel):
    text: str = Field(description="the input")
    translation: str
    source: str
    target: str
    model: str
    encoder_layers: int
    decoder_layers: int
    n_heads: int
    alignment_layer: int = Field(description="the decoder layer the model's alignment is read from (0-based)")
    alignment_heads: list[int] = Field(description="the heads it averages ([] = all)")
    alignment_step_shift: bool = Field(
        False,
        description="whether the model's maps (and every map in `alignment`) "
        "are read where the target token is the decoder input",
    )
    sentences: list[SentenceAttention]


def _maps(rows: list[str], columns: list[str], weights: np.ndarray) -> AttentionMaps:
    return AttentionMaps(rows=rows, columns=columns, weights=np.round(weights.astype(np.float64), DECIMALS).tolist())


def _spans(tokens: list[Token]) -> list[TokenSpan]:
    return [TokenSpan(text=t.text, start=t.start, end=t.end) for t in tokens]


def alignment_maps(
    translator: Translator, source: str, result: TranslationResult, offsets: tuple[int, int]
) -> dict[str, AlignmentMaps]:
    """The alignment of every (layer, head set) of `result` at both levels, by the rule
    /v1/translate uses, read with the model's step shift."""
    config = translator.config
    head_sets = [(h,) for h in range(config.n_heads)] + [()]
    pieces = translator.pieces_read(source, result)
    found = [
        [
            translator.alignments(
                source, result, AlignmentOptions("word", layer, heads).resolve(config), pieces
            ).shifted(*offsets)
            for heads in head_sets
        ]
        for layer in range(config.decoder_layers)
    ]
    maps = {}
    for level in ("word", "subword"):
        grid = [[a.at(level) for a in row] for row in found]
        first = grid[0][0]
        maps[level] = AlignmentMaps(
            source_tokens=_spans(first.source_tokens),
            target_tokens=_spans(first.target_tokens),
            head_sets=[list(h) for h in head_sets],
            matrices=[[np.round(a.matrix, DECIMALS).tolist() for a in row] for row in grid],
            links=[[a.pharaoh for a in row] for row in grid],
        )
    return maps


def weights_in_answer(config: ModelConfig, pieces: tuple[int, int], words: tuple[int, int] = (0, 0)) -> int:
    """The attention weights /v1/attention returns for one sentence of (S, T) source and
    translation pieces and (Sw, Tw) words: the encoder, decoder and cross maps of every layer
    and head (with </s> and <s>), and the alignment maps of every decoder layer and head set
    at both levels. (0 for T, Sw, Tw: what is known before translating.)"""
    (source, target), (source_words, target_words) = pieces, words
    heads, decoder = config.n_heads, config.decoder_layers
    maps = heads * (config.encoder_layers * (source + 1) ** 2 + decoder * (target + 1) * (target + source + 2))
    return maps + decoder * (heads + 1) * (target * source + target_words * source_words)


def check_answer_size(weights: int, limit: int) -> None:
    """413 when the answer would hold more than `limit` weights (`attention_max_weights`)."""
    if weights > limit:
        raise APIError(
            413,
            f"the attention maps of this text hold {weights} weights; an answer holds at most {limit} "
            "(send a shorter text, or draw one map with /v1/heatmap)",
        )


def check_sentence_tokens(source: int, target: int | None, max_tokens: int) -> None:
    """413 when a sentence's maps would have more than `max_tokens` rows or columns (pieces
    and <s> or </s>): the source side before translating (`target` None), both after."""
    if max(source, target or 0) + 1 > max_tokens:
        found = f"{source} source" + ("" if target is None else f" and {target} target")
        raise APIError(413, f"a sentence has {found} tokens; the explorer shows at most {max_tokens - 1} per sentence")


def attention_response(model: ServedModel, translated: TranslatedText, settings: Settings) -> AttentionResponse:
    translator, config = model.translator, model.config
    weights = 0
    for source, result in zip(translated.spans, translated.results):
        check_sentence_tokens(len(result.source_ids), len(result.target_ids), settings.heatmap_max_tokens)
        counts = (len(words(translated.source[slice(*source)])), len(words(result.text)))
        weights += weights_in_answer(config, (len(result.source_ids), len(result.target_ids)), counts)
    check_answer_size(weights, settings.attention_max_weights)
    sentences, encoder_layers = [], 0
    for (start, end), (target_start, target_end), result in zip(
        translated.spans, translated.target_spans, translated.results
    ):
        maps = sentence_maps(translator.backend, result)
        encoder_layers = maps.encoder.shape[0]
        source = translated.source[start:end]
        alignment = alignment_maps(translator, source, result, (start, target_start))
        sentences.append(
            SentenceAttention(
                source=source,
                translation=result.text,
                score=round(result.score, 4),
                source_start=start,
                source_end=end,
                target_start=target_start,
                target_end=target_end,
                outputs=maps.decoder_outputs,
                encoder=_maps(maps.encoder_tokens, maps.encoder_tokens, maps.encoder),
                decoder=_maps(maps.decoder_inputs, maps.decoder_inputs, maps.decoder),
                cross=_maps(maps.decoder_inputs, maps.encoder_tokens, maps.cross),
                alignment=alignment,
                heads={
                    kind: HeadStats.model_validate(head_statistics([weights], kind).rounded(DECIMALS))
                    for kind, weights in (("encoder", maps.encoder), ("decoder", maps.decoder), ("cross", maps.cross))
                },
                quality=None if result.quality is None else Quality.from_quality(result.quality),
            )
        )
    return AttentionResponse(
        text=translated.source,
        translation=translated.text,
        source=model.source,
        target=model.target,
        model=model.name,
        encoder_layers=encoder_layers,
        decoder_layers=config.decoder_layers,
        n_heads=config.n_heads,
        alignment_layer=config.resolved_alignment_layer,
        alignment_heads=list(config.alignment_heads),
        alignment_step_shift=config.alignment_step_shift,
        sentences=sentences,
    )


# --------------------------------------------------------------------------- routes


class AttentionRequest(TermFields, RerankFields):
    text: str = Field(description="the text to translate and explore")
    source: Source
    target: Target
    beam_size: BeamSize
    no_repeat_ngram_size: NoRepeatNgramSize


class AttentionQuery(RerankFields):
    """`AttentionRequest` as query parameters (`q` for the text), read as text: "4" is 4, and
    parameters that are not its fields (an `api_key`) are left to others."""

    model_config = ConfigDict(extra="ignore", strict=False)

    q: str = Field(description="the text to translate and explore")
    source: Source
    target: Target
    beam_size: BeamSize
    no_repeat_ngram_size: NoRepeatNgramSize


def attention_for(body: AttentionRequest, ctx: RequestContext) -> AttentionResponse:
    ctx.check_texts([body.text], "text")
    model, _ = ctx.resolve_pair(body.source, body.target, [body.text])
    terms, rerank = body.term_options(), body.rerank_options(ctx.settings.max_beam_size)
    config = explored_config(ctx, model, body.beam_size, body.no_repeat_ngram_size, terms, rerank)
    # What is known before translating is checked before translating: the source tokens, and
    # the weights of the encoder's maps alone.
    lengths = sentence_source_lengths(model, body.text, config)
    for length in lengths:
        check_sentence_tokens(length, None, ctx.settings.heatmap_max_tokens)
    check_answer_size(sum(weights_in_answer(model.config, (n, 0)) for n in lengths), ctx.settings.attention_max_weights)
    translated = ctx.translate(model, [body.text], config)[0]
    return attention_response(model, translated, ctx.settings)


@router.post("/attention", response_model=AttentionResponse, summary="Every attention map of a translation")
def attention(body: AttentionRequest, ctx: ContextDep) -> AttentionResponse:
    """Translate `text` (beam search), then return, per sentence, the encoder self-attention,
    the decoder (masked) self-attention and the cross-attention of every layer and head of
    that translation, with the tokens labelling rows and columns, and its alignment maps."""
    return attention_for(body, ctx)


@router.get("/attention", response_model=AttentionResponse, summary="Every attention map of a translation (GET)")
def attention_get(query: Annotated[AttentionQuery, Query()], ctx: ContextDep) -> AttentionResponse:
    asked = query.model_dump(exclude={"q"})
    return attention_for(AttentionRequest(text=query.q, **asked), ctx)


@page.get("/")
def explorer_page() -> FileResponse:
    """The attention explorer (service/static): plain HTML, CSS and JS, no build step, no CDN."""
    return FileResponse(STATIC / "index.html", media_type="text/html")


@page.get("/favicon.ico")
def favicon() -> FileResponse:
    """The page's icon (a small alignment map), where browsers look for it first."""
    return FileResponse(STATIC / "favicon.ico", media_type="image/x-icon")


def install(app: FastAPI) -> None:
    """Add the attention routes, the page at `/` (and its icon) and its files under `/static`."""
    app.include_router(router)
    app.include_router(page)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
