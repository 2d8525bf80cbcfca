"""`POST /v1/align`: the word alignment of a translation the client already has.

The translation is teacher-forced through the decoder (seq2seq.forced, the library code
behind `crossalign align`), and the map is read by the one rule of seq2seq.alignment, so
a pair aligned here, by the CLI or by `crossalign eval --gold` gets the same links. Each
pair is aligned as one unit (it is not split into sentences: the sentences of a source
and of its translation need not correspond one to one). Word indices are those of
`seq2seq.alignment.words()` over the texts as sent, as in the gold set.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field, model_validator

from seq2seq.alignment import AlignmentError, AlignmentOptions
from seq2seq.forced import AlignmentFailed, align_given
from seq2seq.records import AlignmentMap, TokenSpan
from seq2seq.translator import Translator
from service.batching import QueueFull, work_units
from service.deps import (
    APIError,
    busy,
    check_texts,
    check_work,
    get_engine,
    get_language_detector,
    require_access,
    resolve_alignment,
    resolve_pair,
)
from service.engine import Engine, Pair
from service.languages import LanguageDetector
from service.openapi import JSONRequest, exactly_one
from service.settings import Settings, get_settings

router = APIRouter(prefix="/v1", tags=["native"], dependencies=[Depends(require_access)])


class TranslationPair(JSONRequest):

    text: str = Field(description="the source text")
    translation: str = Field(description="its translation, to be aligned as given")


class AlignRequest(JSONRequest):
    model_config = ConfigDict(json_schema_extra=exactly_one(("text", "translation"), ("pairs",)))

    text: str | None = Field(None, description="one source text (with `translation`), or use `pairs`")
    translation: str | None = Field(None, description="the translation of `text`")
    pairs: list[TranslationPair] | None = Field(None, description="several pairs, aligned as one batch",
                                                json_schema_extra={"minItems": 1})
    source: str = Field("auto", description="source language code, or 'auto'")
    target: str | None = Field(None, description="target language (default: the only one served for the source)")
    level: Literal["word", "subword"] = Field("word", description="subword: also return the subword map")
    layer: int | None = Field(None, description="decoder layer (default: the model's alignment layer)")
    heads: list[int] | None = Field(None, description="heads to average (default: the model's; [] = all)")
    step_shift: bool | None = Field(None, description="read the map where the target token is the decoder input "
                                                   "(default: the model's)")

    @model_validator(mode="after")
    def _one_input(self) -> AlignRequest:
        single = self.text is not None or self.translation is not None
        if single == (self.pairs is not None):
            raise ValueError("give `text` and `translation`, or `pairs`")
        if single and (self.text is None or self.translation is None):
            raise ValueError("`text` needs `translation` and vice versa")
        return self

    def items(self) -> list[TranslationPair]:
        if self.pairs is not None:
            return self.pairs
        return [TranslationPair(text=self.text or "", translation=self.translation or "")]


class PairAlignment(BaseModel):
    text: str
    translation: str
    source_words: list[TokenSpan] = Field(description="words of the text: whitespace tokens, punctuation split off")
    target_words: list[TokenSpan] = Field(description="words of the translation")
    word_alignment: str = Field(description="hard links in Pharaoh format 'i-j' (i = source word, j = target word)")
    matrix: list[list[float]] = Field(description="soft word alignment, rows = target words, each row sums to 1")
    layer: int = Field(description="decoder layer whose cross-attention produced the map (0-based)")
    heads: list[int] | Literal["mean"]
    step_shift: bool
    subword_alignment: AlignmentMap | None = Field(None, description="the subword map (level=subword)")


class AlignResponse(BaseModel):
    alignments: list[PairAlignment]


def forced_translator(engine: Engine, pair: Pair) -> Translator:
    """The library `Translator` of a served pair (the engine's, shared with /v1/translate)."""
    translator = engine.translator(pair)
    if translator is None:
        raise APIError(501, "this server's engine cannot align given translations")
    return translator


@router.post("/align", response_model=AlignResponse, summary="Align a given translation (forced alignment)")
def align(body: AlignRequest, engine: Engine = Depends(get_engine), settings: Settings = Depends(get_settings),
          detector: Callable[[], LanguageDetector] = Depends(get_language_detector)) -> AlignResponse:
    """Per pair: the words of both texts (character offsets), the soft word matrix and the hard
    links in Pharaoh form, read from the cross-attention while the decoder is fed the given
    translation."""
    items = body.items()
    if not items:
        raise APIError(400, "Invalid request: pairs is empty")
    prefixes = [f"pairs[{index}]." for index in range(len(items))] if body.pairs is not None else [""]
    check_texts([text for item in items for text in (item.text, item.translation)], settings,
                labels=[prefix + name for prefix in prefixes for name in ("text", "translation")], items=len(items))
    pair, _ = resolve_pair(engine, detector, body.source, body.target, [item.text for item in items])
    options = AlignmentOptions(body.level, body.layer, None if body.heads is None else tuple(body.heads),
                               body.step_shift)
    options = resolve_alignment(engine, pair, options)
    translator = forced_translator(engine, pair)
    # Admission as for translations: the work cap per request and the queue bound (one
    # teacher-forced pass is a beam of one over both texts); not the fair turns, as the
    # pass runs in this thread, beside the scheduler's calls.
    texts = [text for item in items for text in (item.text, item.translation)]
    check_work(settings, texts, 1)
    try:
        with engine.reserve(pair, work_units(texts, 1)):
            results = align_given(translator, [(item.text, item.translation) for item in items], options)
    except QueueFull as full:
        raise busy(full) from None
    out = []
    for index, result in enumerate(results):
        if isinstance(result, AlignmentError):  # past check_texts: too long for the model, or the model failed
            where = f"pairs[{index}]: " if body.pairs is not None else ""
            raise APIError(500 if isinstance(result, AlignmentFailed) else 413, f"{where}{result}")
        record = result.to_record()
        out.append(PairAlignment(
            text=record.pop("source"), translation=record.pop("target"), **record))
    return AlignResponse(alignments=out)
