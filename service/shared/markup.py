"""Marked text through the service: HTML and XML translated whole sentence by whole sentence,
their inline markup put back by the alignment made in the same pass (seq2seq/documents).

The routes' shared part: `scheduled_translator` is the library's `Translate` over the
request context (the fair scheduler, the work and queue bounds, the request timeout), and
`translate_pages` / `marked_translations` read, translate and write the texts of
`/translate` (`format: html`: blocks delimit segments) and `/v1/translate` (`format: html |
xml`: each text one segment).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from seq2seq.core.config import DecodeConfig
from seq2seq.decoding.records import TextTranslation, text_translation
from seq2seq.decoding.texts import WORD_MAP, TranslatedText
from seq2seq.documents.html import read_html, segments, write_html
from seq2seq.documents.inline import InlineText, read_inline
from seq2seq.documents.markup import Placed
from seq2seq.documents.translate import Translation, place_segments
from seq2seq.documents.xml import XMLInputError
from service.compute.engine import ServedModel
from service.http.errors import APIError
from service.shared.context import RequestContext


def markup_config(ctx: RequestContext, model: ServedModel, config: DecodeConfig) -> DecodeConfig:
    """`config` with the word map made in the same pass (the model's own alignment source
    unless the request chose one), its quality blocks only if the request asked for them."""
    if config.alignment is not None:
        return config
    return replace(config, return_attention=True, alignment=ctx.resolve_alignment(model, WORD_MAP), quality=False)


@dataclass
class Scheduled:
    """A `Translate` over the request context, keeping each text's `TranslatedText` (for
    the alignment and quality blocks of the response)."""

    ctx: RequestContext
    model: ServedModel
    config: DecodeConfig
    wait_until: float | None = None  # a full queue waited out until then (RequestContext.translate)
    call_chars: int = 0  # model calls of at most this many characters (RequestContext.translate)

    def __post_init__(self) -> None:
        self.translated: list[TranslatedText] = []

    def __call__(self, texts: list[str]) -> list[Translation | Exception]:
        translated = self.ctx.translate(self.model, texts, self.config, self.wait_until, self.call_chars)
        self.translated += translated
        return [Translation(t.text, t.word_map(), t) for t in translated]


def scheduled_translator(
    ctx: RequestContext, model: ServedModel, config: DecodeConfig, wait_until: float | None = None, call_chars: int = 0
) -> Scheduled:
    return Scheduled(ctx, model, markup_config(ctx, model, config), wait_until, call_chars)


@dataclass
class MarkedTranslation:
    """One marked text translated: the marked translation, and per translated segment its
    plain source, its `TranslatedText` (maps, quality) and its placement."""

    text: str
    segments: list[tuple[str, TranslatedText, Placed]]


def translate_pages(
    ctx: RequestContext, model: ServedModel, texts: list[str], config: DecodeConfig
) -> list[MarkedTranslation]:
    """HTML pages or fragments (`/translate`, `format: html`), all their segments as one batch."""
    pages = [read_html(text) for text in texts]
    found = [segments(parts) for parts in pages]
    translate = scheduled_translator(ctx, model, config)
    placed = place_segments([s.marked for page in found for s in page], translate)
    made = iter(translate.translated)
    out, position = [], 0
    for parts, page in zip(pages, found):
        mine = placed[position : position + len(page)]
        position += len(page)
        kept = [(s.marked.text, next(made), p) for s, p in zip(page, mine) if p is not None]
        out.append(MarkedTranslation(write_html(parts, mine), kept))
    return out


def read_inline_texts(
    texts: list[str], kind: str | None, labels: list[str], attributes: bool = False
) -> list[InlineText]:
    """Each text as one marked segment (none without a `kind`); 400 naming the text whose XML
    does not parse. `attributes`: read HTML attribute values a reader sees, to translate."""
    if kind is None:
        return []
    read = []
    for text, label in zip(texts, labels):
        try:
            read.append(read_inline(text, kind, attributes))
        except XMLInputError as error:
            raise APIError(400, f"Invalid request: {label}: {error}") from None
    return read


def marked_translations(
    ctx: RequestContext, model: ServedModel, texts: list[str], kind: str, config: DecodeConfig, n_best: int
) -> list[TextTranslation]:
    """`/v1/translate` with `format`: each text one marked segment; its record describes the
    plain text, with the marked translation beside it (a text without words is kept). The
    HTML attribute values a reader sees (alt, title, ...) are translated too, in one batch of
    their own, and written into their tags; the records and maps stay the text's."""
    labels = [f"texts[{i}]" for i in range(len(texts))] if len(texts) > 1 else ["text"]
    inline = read_inline_texts(texts, kind, labels, attributes=True)
    translate = scheduled_translator(ctx, model, config)
    placed = place_segments([item.marked for item in inline], translate)
    values = [value for item in inline for value in item.attributes]
    placed_values = iter(place_segments(values, scheduled_translator(ctx, model, config)) if values else [])
    made = iter(translate.translated)
    out = []
    for item, placement in zip(inline, placed):
        mine = [next(placed_values) for _ in item.attributes]
        if placement is None:
            record = TextTranslation(
                text=item.marked.text, score=0.0, source=model.source, target=model.target, sentences=[]
            )
        else:
            record = text_translation(next(made), model.source, model.target, n_best)
        record.marked_text, record.plain_source = item.write(placement, mine), item.marked.text
        out.append(record)
    return out
