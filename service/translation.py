"""The thin service over the library: texts -> sentences -> one batch -> texts with alignments.

Every route goes through `translate_texts`: each input is split into sentences
(seq2seq.core.segment), all sentences of all inputs go to the served model as one list (one padded
batch, shared with concurrent requests by the micro-batcher), and the sentence
translations are joined back with the spacing the input had between its sentences.
Each sentence's alignment is built by the library together with its translation (when the
`DecodeConfig` asks for one) and shifted so that its offsets refer to the whole input and
the whole translation; `seq2seq.core.alignment.concat` joins them into one block-diagonal map for
the LibreTranslate extension and the heatmap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from seq2seq.analysis.quality import join as join_quality
from seq2seq.core.alignment import Alignment, Token, concat
from seq2seq.core.config import AlignmentOptions, DecodeConfig
from seq2seq.core.segment import join_sentences, split_sentences
from seq2seq.decoding.records import (
    AlignedSentence,
    AlignedTranslation,
    AlignmentMap,
    Hypothesis,
    Quality,
    TermUse,
    TextTranslation,
    TokenSpan,
)
from seq2seq.decoding.translator import TranslationResult
from service.batching import CancelToken
from service.engine import ServedModel


@dataclass
class TranslatedText:
    source: str  # the input text
    spans: list[tuple[int, int]]  # sentence spans in `source`
    results: list[TranslationResult]  # one per sentence
    text: str  # the joined translation
    target_spans: list[tuple[int, int]]  # each sentence translation's span in `text`

    @property
    def score(self) -> float:
        return float(np.mean([r.score for r in self.results])) if self.results else 0.0

    def alternative(self, k: int) -> tuple[str, float]:
        """The k-th alternative of the whole text: every sentence's k-th (or its best)."""
        picked = [r.alternatives[k] if k < len(r.alternatives) else r for r in self.results]
        return self._join([p.text for p in picked])[0], float(np.mean([p.score for p in picked])) if picked else 0.0

    def _join(self, parts: list[str]) -> tuple[str, list[tuple[int, int]]]:
        return join_sentences(self.source, self.spans, parts)

    @property
    def terms(self) -> list[TermUse]:
        """The hints of every sentence and whether its translation used each, spans into `source`."""
        return [
            TermUse(**term.shifted(start).to_dict())
            for (start, _), result in zip(self.spans, self.results)
            for term in result.terms
        ]

    @property
    def source_tokens(self) -> int:
        return sum(len(r.source_ids) for r in self.results)

    @property
    def target_tokens(self) -> int:
        return sum(len(r.target_ids) for r in self.results)


def sentences_of(text: str) -> list[str]:
    """The sentences `translate_texts` translates `text` as."""
    return [text[start:end] for start, end in split_sentences(text)]


def sentence_source_lengths(model: ServedModel, text: str, config: DecodeConfig) -> list[int]:
    """The source pieces the model will read of each sentence of `text` (EOS excluded), known
    before translating it with `config`: the routes refuse a text too long for a map early."""
    return model.translator.source_lengths(sentences_of(text), config)


def translate_texts(
    model: ServedModel,
    texts: list[str],
    config: DecodeConfig,
    timeout: float | None = None,
    client: str = "",
    token: CancelToken | None = None,
) -> list[TranslatedText]:
    """Translate whole texts, all their sentences in one request to the model (on `client`'s
    turns, dropped once `token` is cancelled)."""
    all_spans = [split_sentences(text) for text in texts]
    sentences = [text[start:end] for text, spans in zip(texts, all_spans) for start, end in spans]
    results = model.translate(sentences, config, timeout, client, token) if sentences else []
    out, position = [], 0
    for text, spans in zip(texts, all_spans):
        mine = results[position : position + len(spans)]
        position += len(spans)
        joined, target_spans = join_sentences(text, spans, [r.text for r in mine])
        out.append(TranslatedText(text, spans, mine, joined, target_spans))
    return out


def text_alignment(translated: TranslatedText, options: AlignmentOptions) -> Alignment:
    """One map for a whole text: its sentences' maps (built with them, `options` resolved),
    placed block-diagonally."""
    parts = [
        (result.alignment.requested, start, target_start)
        for (start, _), (target_start, _), result in zip(translated.spans, translated.target_spans, translated.results)
        if result.alignment is not None
    ]
    return concat(parts, options)


def text_quality(translated: TranslatedText) -> Quality | None:
    """One quality block for a whole text: its sentences' blocks (built with their maps)
    joined, word indices counted over the whole text as in `text_alignment`'s word map."""
    parts, offsets = [], []
    for (start, _), result in zip(translated.spans, translated.results):
        if result.quality is not None:
            parts.append((result.quality, len(result.target_ids) + 1))
            offsets.append(start)
    return Quality.from_quality(join_quality(parts, offsets)) if parts else None


def _spans(tokens: list[Token]) -> list[TokenSpan]:
    return [TokenSpan(text=t.text, start=t.start, end=t.end) for t in tokens]


def _aligned(result: TranslationResult, source_offset: int, target_offset: int) -> AlignedTranslation:
    """A sentence translation with tokens, words and (when it has one) its alignment."""
    if result.alignment is None:
        return AlignedTranslation(text=result.text, score=round(result.score, 4), case_restored=result.case_restored)
    maps = result.alignment.shifted(source_offset, target_offset)
    subword, word = maps.subword, maps.word
    return AlignedTranslation(
        text=result.text,
        score=round(result.score, 4),
        case_restored=result.case_restored,
        alignment=AlignmentMap.from_alignment(maps.requested),
        source_tokens=_spans(subword.source_tokens),
        target_tokens=_spans(subword.target_tokens),
        source_words=_spans(word.source_tokens),
        target_words=_spans(word.target_tokens),
        word_links=word.pharaoh,
        quality=None if result.quality is None else Quality.from_quality(result.quality, source_offset=source_offset),
    )


def aligned_sentence(result: TranslationResult, span: tuple[int, int], target_span: tuple[int, int]) -> AlignedSentence:
    """The native API's view of one sentence of a text: its translation `result`, the
    sentence's `span` in the input and its translation's `target_span` in the whole translation."""
    (start, end), (target_start, target_end) = span, target_span
    best = _aligned(result, start, target_start)
    return AlignedSentence(
        **best.model_dump(exclude={"alternatives"}),
        alternatives=[_aligned(alternative, start, 0) for alternative in result.alternatives],
        source_start=start,
        source_end=end,
        target_start=target_start,
        target_end=target_end,
    )


def text_translation(model: ServedModel, translated: TranslatedText, n_best: int) -> TextTranslation:
    """The native API's view of one translated text (with the alignments it was translated with)."""
    sentences = [
        aligned_sentence(result, span, target_span)
        for span, target_span, result in zip(translated.spans, translated.target_spans, translated.results)
    ]
    alternatives = []
    for k in range(n_best - 1):
        text, score = translated.alternative(k)
        alternatives.append(Hypothesis(text=text, score=round(score, 4)))
    return TextTranslation(
        text=translated.text,
        score=round(translated.score, 4),
        source=model.source,
        target=model.target,
        sentences=sentences,
        alternatives=alternatives,
    )
