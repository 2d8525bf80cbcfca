"""The translation a body asks for, checked and resolved once for every route that translates.

`TranslateFields` are the fields /v1/translate and its stream take (each route's request
model includes them); `translation_job` checks such a body and resolves what it asks (the
texts, the served model, the search settings with the alignment options). `explored_config`
is the search of a translation whose maps are explored (/v1/attention, the model view), and
`sentence_source_lengths` what the routes know of a text before translating it. The text
level itself (split, one batch, join; the text's map, quality, terms and score) is the
library's, `seq2seq.decoding.texts`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ConfigDict, Field, model_validator

from seq2seq.core.config import AlignmentOptions, DecodeConfig, RerankOptions, TermOptions
from seq2seq.decoding.texts import sentences_of
from service.compute.engine import ServedModel
from service.shared.context import RequestContext, Search
from service.shared.requests import (
    AlignmentRequest,
    BeamSize,
    NoRepeatNgramSize,
    RerankFields,
    Source,
    Target,
    TermFields,
    exactly_one,
)


def sentence_source_lengths(model: ServedModel, text: str, config: DecodeConfig) -> list[int]:
    """The source pieces the model will read of each sentence of `text` (EOS excluded), known
    before translating it with `config`: the routes refuse a text too long for a map early."""
    return model.translator.source_lengths(sentences_of(text), config)


class TranslateFields(TermFields, RerankFields):
    """The fields of a /v1/translate body that its stream takes too."""

    model_config = ConfigDict(json_schema_extra=exactly_one(("text",), ("texts",)))

    text: str | None = Field(None, description="one text (give `text` or `texts`)")
    texts: list[str] | None = Field(None, description="several texts, translated as one batch")
    source: Source
    target: Target
    beam_size: BeamSize
    no_repeat_ngram_size: NoRepeatNgramSize
    n_best: int = Field(
        1, description="hypotheses per sentence, each with its own alignment (a smaller beam_size is raised to n_best)"
    )
    alignment: AlignmentRequest | bool = Field(True, description="alignment options, or false for none")
    early_exit: bool = Field(
        False,
        description="stop each sentence's beam search as soon as its best continuation ends it, instead of "
        "waiting for beam_size finished hypotheses: faster, but shorter and less accurate translations",
    )

    @model_validator(mode="after")
    def _one_input(self) -> TranslateFields:
        if (self.text is None) == (self.texts is None):
            raise ValueError("give exactly one of `text` or `texts`")
        return self


@dataclass(frozen=True)
class TranslationJob:
    """What a /v1/translate body asks, checked and resolved: the texts, the served model and
    the search settings (with the alignment options, when it asks for maps)."""

    texts: list[str]
    model: ServedModel
    config: DecodeConfig


def translation_job(body: TranslateFields, ctx: RequestContext) -> TranslationJob:
    """Check a /v1/translate body (or its stream's) and resolve what it asks; 4xx if it cannot be done."""
    texts = [body.text] if body.text is not None else list(body.texts or [])
    ctx.check_texts(texts, "text" if body.text is not None else "texts")
    model, _ = ctx.resolve_pair(body.source, body.target, texts)
    alignment = AlignmentRequest() if body.alignment is True else body.alignment or None
    options = ctx.resolve_alignment(model, alignment.options()) if alignment else None
    rerank = body.rerank_options(ctx.settings.max_beam_size)
    search = Search(body.beam_size, body.n_best, body.no_repeat_ngram_size, body.early_exit, rerank=rerank)
    config = ctx.decode_config(model, search, body.term_options(), options)
    return TranslationJob(texts, model, config)


def explored_config(
    ctx: RequestContext,
    model: ServedModel,
    beam_size: int | None,
    no_repeat_ngram_size: int | None,
    terms: TermOptions = TermOptions(),
    rerank: RerankOptions | None = None,
) -> DecodeConfig:
    """The search settings of a translation whose maps are explored (/v1/attention, the model
    view): one hypothesis (the reranked one's, with `rerank`), with the model's own word map
    built with it for its quality signals."""
    options = ctx.resolve_alignment(model, AlignmentOptions())
    search = Search(beam_size, 1, no_repeat_ngram_size, attention=True, rerank=rerank)
    return ctx.decode_config(model, search, terms, options)
