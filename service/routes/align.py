"""`POST /v1/align`: the word alignment of a translation the client already has.

The translation is teacher-forced through the decoder (seq2seq.decoding.forced, the library code
behind `crossalign align`), and the map is read by the one rule of seq2seq.core.alignment, so
a pair aligned here, by the CLI or by `crossalign eval --gold` gets the same links. Each
pair is aligned as one unit (it is not split into sentences: the sentences of a source
and of its translation need not correspond one to one). Word indices are those of
`seq2seq.core.alignment.words()` over the texts as sent, as in the gold set. With `format`
(html or xml) the text carries inline markup: its plain text is aligned with the
translation, and the markup is placed on the translation by that map (`marked_translation`:
what a translator's tool needs after post-editing).
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, model_validator

from seq2seq.core.config import AlignmentError
from seq2seq.decoding.forced import AlignmentFailed
from seq2seq.decoding.records import AlignmentMap, Quality, TokenSpan
from seq2seq.documents.markup import transfer
from seq2seq.documents.translate import has_words
from service.http.access import CheckedRoute
from service.http.errors import APIError
from service.shared.context import ContextDep
from service.shared.markup import read_inline_texts
from service.shared.requests import AlignmentRequest, JSONRequest, MarkupFormat, Source, Target, exactly_one

router = APIRouter(prefix="/v1", tags=["native"], route_class=CheckedRoute)


class TranslationPair(JSONRequest):
    text: str = Field(description="the source text")
    translation: str = Field(description="its translation, to be aligned as given")


class GivenPairs(JSONRequest):
    """What /v1/align aligns: one pair, or several, and their languages."""

    text: str | None = Field(None, description="one source text (with `translation`), or use `pairs`")
    translation: str | None = Field(None, description="the translation of `text`")
    pairs: list[TranslationPair] | None = Field(
        None, description="several pairs, aligned as one batch", json_schema_extra={"minItems": 1}
    )
    source: Source
    target: Target

    @model_validator(mode="after")
    def _one_input(self) -> GivenPairs:
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


# The pairs and their languages, then the alignment source: pydantic lays the bases' fields out right to left.
class AlignRequest(AlignmentRequest, GivenPairs):
    model_config = ConfigDict(json_schema_extra=exactly_one(("text", "translation"), ("pairs",)))

    format: MarkupFormat = None


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
    quality: Quality = Field(
        description="quality signals of the given translation: source words it left "
        "untranslated, target words not grounded in the source, a confidence"
    )
    case_restored: bool = Field(
        False,
        description="a side was shouted (all caps, or shouted words) and the model read it with its "
        "case restored; words and offsets are those of the texts as given",
    )
    marked_translation: str | None = Field(
        None,
        description="with `format`: the translation with the text's inline markup placed on it by this "
        "alignment (`text` is then the text's plain text, which the words and offsets refer to)",
    )


class AlignResponse(BaseModel):
    alignments: list[PairAlignment]


@router.post("/align", response_model=AlignResponse, summary="Align a given translation (forced alignment)")
def align(body: AlignRequest, ctx: ContextDep) -> AlignResponse:
    """Per pair: the words of both texts (character offsets), the soft word matrix and the hard
    links in Pharaoh form, read from the cross-attention while the decoder is fed the given
    translation, and its `quality` block (which source words the translation left out)."""
    items = body.items()
    if not items:
        raise APIError(400, "Invalid request: pairs is empty")
    prefixes = [f"pairs[{index}]." for index in range(len(items))] if body.pairs is not None else [""]
    ctx.check_texts(
        [text for item in items for text in (item.text, item.translation)],
        labels=[prefix + name for prefix in prefixes for name in ("text", "translation")],
        items=len(items),
    )
    inline = read_inline_texts([item.text for item in items], body.format, [p + "text" for p in prefixes])
    texts = [marked.marked.text for marked in inline] if body.format else [item.text for item in items]
    for prefix, text in zip(prefixes, texts):
        if not has_words(text):
            raise APIError(400, f"Invalid request: {prefix}text has no words outside its markup")
    model, _ = ctx.resolve_pair(body.source, body.target, texts)
    options = ctx.resolve_alignment(model, body.options())
    # Scheduled as a translation is: the work cap, the queue bound, the fair turns, the timeout.
    results = ctx.align(model, [(text, item.translation) for text, item in zip(texts, items)], options)
    out = []
    for index, result in enumerate(results):
        if isinstance(result, AlignmentError):  # past check_texts: too long for the model, or the model failed
            where = f"pairs[{index}]: " if body.pairs is not None else ""
            raise APIError(500 if isinstance(result, AlignmentFailed) else 413, f"{where}{result}")
        record = result.to_record()
        if body.format:
            record["marked_translation"] = inline[index].write(
                transfer(inline[index].marked, items[index].translation, result.word)
            )
        out.append(PairAlignment(text=record.pop("source"), translation=record.pop("target"), **record))
    return AlignResponse(alignments=out)
