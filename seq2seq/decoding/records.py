"""The shapes of aligned translations: one schema for the HTTP API and the batch CLI.

Pydantic models; `AlignedTranslation.model_json_schema()` is the JSON Schema that the
batch CLI's JSONL records and the API's `/v1/translate` results both validate against.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from seq2seq.analysis.quality import SentenceQuality
from seq2seq.core.alignment import Alignment, Token
from seq2seq.decoding.texts import TranslatedText
from seq2seq.decoding.translator import TranslationResult


class TokenSpan(BaseModel):
    text: str
    start: int = Field(description="character offset into the source or translation text, inclusive")
    end: int = Field(description="character offset, exclusive")


class AlignmentMap(BaseModel):
    level: Literal["word", "subword"]
    source_tokens: list[TokenSpan] = Field(description="columns of the matrix")
    target_tokens: list[TokenSpan] = Field(description="rows of the matrix")
    matrix: list[list[float]] = Field(description="soft alignment, rows = target tokens, each row sums to 1")
    links: str = Field(description="hard links in Pharaoh format 'i-j' (i = source word, j = target word)")
    layer: int = Field(description="decoder layer whose cross-attention produced the map (0-based)")
    heads: list[int] | Literal["mean"] = Field(description="heads averaged, or 'mean' for all heads")
    step_shift: bool = Field(description="read at the step where the target token is the decoder input")

    @classmethod
    def from_alignment(cls, alignment: Alignment, decimals: int = 4) -> AlignmentMap:
        return cls.model_validate(alignment.to_dict(decimals))


class TermUse(BaseModel):
    """A target-term hint the model was shown (the caller's glossary, or the dictionary for a
    rare word) and whether the translation used it."""

    source: str = Field(description="the source words the term is for, as the text has them")
    start: int = Field(description="their character offset into the source text, inclusive")
    end: int = Field(description="character offset, exclusive")
    term: str = Field(description="the target term shown to the model")
    origin: Literal["glossary", "dictionary"] = Field(description="the caller's glossary, or the bundle's dictionary")
    appears: bool = Field(description="the term's words are in the translation (an English plural ending allowed)")
    used: bool = Field(
        description="it appears and, in the word alignment, one of its words is linked to a source word it is for "
        "(without an alignment: it appears)"
    )


class CalibratedConfidence(BaseModel):
    """The sentence confidence read by the model's calibration (seq2seq/analysis/calibration.py),
    fitted on its held-out valid split (the bundle's calibration.json)."""

    usable: float = Field(
        description="probability that the translation is usable: the share of held-out sentences with this "
        "confidence whose sentence chrF reached calibration.json's `usable_chrf` (40 for the shipped models)"
    )
    expected_chrf: float = Field(description="mean sentence chrF (0-100) of held-out sentences with this confidence")
    band: Literal["low", "medium", "high"] = Field(
        description="low: check or rewrite the translation; medium: read it with care; high: usually fine "
        "(the bands' limits on `usable` are in calibration.json)"
    )


class Quality(BaseModel):
    """Warnings read from the word alignment map (seq2seq/analysis/quality.py; thresholds: the model's
    quality.json). Word indices refer to `alignment.source_tokens` / `target_tokens` at word
    level (`source_words` / `target_words` of /v1/translate)."""

    source_attention_mass: list[float] = Field(
        description="per source word: the attention mass it received, the sum of its column of the map "
        "(0 = no target word drew on it, about 1 = one target word's worth, above 1 when several did); "
        "a sum, not a fraction: `coverage` is the sentence's fraction, each word's mass capped at 1"
    )
    source_coverage: list[float] = Field(
        deprecated="renamed source_attention_mass (the same values); source_coverage goes after 0.2",
        description="deprecated alias of `source_attention_mass` (the same values, under the name that read "
        "as a fraction); kept for one release, removed after 0.2",
    )
    untranslated: list[int] = Field(
        description="source words probably left out of the translation (the model's "
        "detector over coverage and decoder surprise, or its coverage "
        "threshold)"
    )
    target_peak: list[float] = Field(description="per target word: its largest weight on one source word")
    target_entropy: list[float] = Field(
        description="per target word: entropy of its row / log(source words), 0 = one source word, 1 = spread evenly"
    )
    ungrounded: list[int] = Field(
        description="target words probably not drawn from the source (the model's "
        "detector over decoder surprise and attention, or its peak "
        "threshold)"
    )
    coverage: float = Field(description="mean over source words (punctuation excepted) of min(coverage, 1), 0..1")
    length_ratio: float = Field(description="target words / source words, punctuation not counted")
    mean_log_prob: float | None = Field(description="log-probability per target token, EOS included, <= 0")
    confidence: float | None = Field(
        description="0..1, an estimate of the sentence chrF / 100 from log-prob, "
        "coverage and length (fitted on the model's valid split)"
    )
    calibrated: CalibratedConfidence | None = Field(
        None, description="the confidence on a scale to act on; null for a model without a calibration"
    )
    target_surprise: list[float] | None = Field(
        None, description="per target word: -log p under the decoder (mean over its pieces); null when not known"
    )
    # seq2seq.analysis.quality.UNTRANSLATED_BY (a test keeps the two the same)
    untranslated_by: Literal["occlusion", "attention", "coverage threshold"] = Field(
        description="what flagged `untranslated`: the detector with source occlusion (quality mode "
        "thorough), the attention-only detector (mode fast, or a model without the occlusion "
        "features), or the coverage threshold (a model without detectors)"
    )

    terms: list[TermUse] = Field(
        default_factory=list,
        description="the target-term hints the model was shown (glossary entries, and dictionary hints for rare "
        "words) and whether the translation used each",
    )

    @classmethod
    def from_quality(cls, quality: SentenceQuality, decimals: int = 4, source_offset: int = 0) -> Quality:
        """The block of `quality`; the terms' spans moved by `source_offset` (a sentence's
        place in a longer text, as the maps are shifted)."""
        values = quality.to_dict(decimals)
        values["terms"] = [term.shifted(source_offset).to_dict() for term in quality.terms]
        return cls.model_validate(values)


class AlignedTranslation(BaseModel):
    text: str = Field(description="the translation")
    score: float = Field(description="length-normalised log-probability of the translation")
    case_restored: bool = Field(
        False,
        description="the source was shouted (all capitals): the model read it with its case restored "
        "and the translation is in capitals; offsets still refer to the text as given (seq2seq/core/casing.py)",
    )
    alignment: AlignmentMap | None = None
    quality: Quality | None = Field(None, description="quality signals, with the alignment")
    # Added for the HTTP API's /v1/translate; optional, so records without them stay valid.
    source_tokens: list[TokenSpan] | None = Field(None, description="SentencePiece pieces of the source")
    target_tokens: list[TokenSpan] | None = Field(None, description="SentencePiece pieces of the translation")
    source_words: list[TokenSpan] | None = Field(
        None, description="source words: whitespace tokens with punctuation split off"
    )
    target_words: list[TokenSpan] | None = Field(None, description="translation words")
    word_links: str | None = Field(
        None,
        description="hard word links, Pharaoh 'i-j' (i = source word, j = target word), whatever the alignment's level",
    )
    alternatives: list[AlignedTranslation] = Field(
        default_factory=list,
        description="n-best alternatives after the best, each with its own alignment; "
        "their target offsets refer to their own text",
    )


class AlignedSentence(AlignedTranslation):
    """One sentence of a longer input; every offset refers to the whole input / translation."""

    source_start: int = Field(description="the sentence's span in the input text")
    source_end: int
    target_start: int = Field(description="the sentence translation's span in the whole translation")
    target_end: int


class Hypothesis(BaseModel):
    text: str
    score: float


class TextTranslation(BaseModel):
    """The translation of one input text of /v1/translate, sentence by sentence."""

    text: str = Field(description="the whole translation: sentence translations joined by the input's spacing")
    score: float = Field(
        description="the sentence scores averaged weighted by the pieces each produced (target pieces + EOS): "
        "every piece of the text counts the same (seq2seq/decoding/texts.py)"
    )
    source: str = Field(description="source language (detected when the request said 'auto')")
    target: str
    sentences: list[AlignedSentence]
    alternatives: list[Hypothesis] = Field(
        default_factory=list, description="n-best alternatives of the whole text (k-th of every sentence)"
    )
    marked_text: str | None = Field(
        None,
        description="with `format` html or xml: the translation with the input's inline markup placed on it "
        "by the word alignment; `text`, `plain_source` and every offset are those of the plain text",
    )
    plain_source: str | None = Field(None, description="with `format`: the input's plain text (markup taken out)")


def aligned_translation(result: TranslationResult, alignment: Alignment | None) -> AlignedTranslation:
    return AlignedTranslation(
        text=result.text,
        score=round(result.score, 4),
        case_restored=result.case_restored,
        alignment=None if alignment is None else AlignmentMap.from_alignment(alignment),
        quality=None if result.quality is None else Quality.from_quality(result.quality),
    )


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
    """/v1/translate's view of one sentence of a text: its translation `result`, the
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


def text_translation(translated: TranslatedText, source: str, target: str, n_best: int) -> TextTranslation:
    """/v1/translate's view of one translated text (with the alignments it was translated with)."""
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
        source=source,
        target=target,
        sentences=sentences,
        alternatives=alternatives,
    )


class TranslationRecord(AlignedTranslation):
    """One record of `crossalign translate --format jsonl`: an `AlignedTranslation` plus its line.

    A line that could not be translated keeps its place in the output with `error` set, an
    empty `text` and no score, so a file of N lines always gives N records in input order.
    """

    line: int = Field(description="1-based line number in the input")
    id: str | int | None = Field(None, description="the `id` of a JSONL input line")
    source: str = Field(description="the input text (undecodable bytes shown as U+FFFD)")
    score: float | None = Field(None, description="length-normalised log-probability; absent when `error` is set")
    sentences: list[TokenSpan] | None = Field(
        None,
        description="the sentences a line of several was split into and translated one by one (every line is "
        "split, as the service splits a text); alignment offsets still refer to the whole line and the joined "
        "translation",
    )
    error: str | None = Field(None, description="why the line was not translated")
