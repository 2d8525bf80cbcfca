"""A text is its sentences: the one text pipeline of every surface.

The model is trained on sentences, so a text is split into them (`sentence_spans`:
seq2seq.core.segment, always, whatever the text's length), the sentences of all texts are
translated as one batch by whatever the caller hands in (`TranslateSentences`: the
library's `Translator` on the command line and in documents, the scheduled model call in
the service), and each text's sentence translations are joined with the spacing its
sentences had (`TranslatedText.joined`). What a whole text has is then built here, once:

- its map: the sentences' maps, each built with its translation, placed block-diagonally
  (`alignment`, the level asked for; `word_map`, words, what markup is placed by);
- its quality block: the sentences' blocks joined, word indices counted over the text;
- its terms: each sentence's hints and whether its translation used them, spans into the text;
- its score, by one rule: the sentences' scores (each length-normalised) averaged weighted
  by the pieces each produced (its target pieces + EOS), so every piece of the text counts
  the same, as in one long hypothesis over the whole text and as the joined quality block
  weighs its sentences (seq2seq.analysis.quality.join); a one-word sentence does not
  weigh as much as a long one.

The HTTP API (`/translate`, `/v1/translate`, its stream, marked text, files), documents and
`crossalign translate` all build their texts here, so they answer the same input the same.
Torch-free.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from seq2seq.analysis.quality import SentenceQuality
from seq2seq.analysis.quality import join as join_quality
from seq2seq.core.alignment import Alignment, concat
from seq2seq.core.config import AlignmentOptions
from seq2seq.core.hints import TermOutcome
from seq2seq.core.segment import join_sentences, split_sentences
from seq2seq.decoding.translator import TranslationResult

Span = tuple[int, int]
# Sentences in, one result per sentence out, in order.
TranslateSentences = Callable[[list[str]], list[TranslationResult]]
Split = Callable[[str], list[Span]]
WORD_MAP = AlignmentOptions(level="word")


def sentence_spans(text: str) -> list[Span]:
    """The one split policy: every text is its sentences (seq2seq.core.segment), whatever
    its length; a text of one sentence is one span (without its surrounding whitespace)."""
    return split_sentences(text)


def sentences_of(text: str) -> list[str]:
    """The sentences `translate_texts` translates `text` as."""
    return [text[start:end] for start, end in sentence_spans(text)]


def text_score(results: Sequence[TranslationResult]) -> float:
    """The one score rule of a text: its sentences' scores weighted by the pieces each
    produced (target pieces + EOS); 0.0 for a text without sentences."""
    weights = [len(result.target_ids) + 1 for result in results]
    if not weights:
        return 0.0
    return sum(result.score * weight for result, weight in zip(results, weights)) / sum(weights)


@dataclass
class TranslatedText:
    """One text translated sentence by sentence, and what the whole text has."""

    source: str  # the input text
    spans: list[Span]  # its sentences' spans in `source`
    results: list[TranslationResult]  # one per sentence
    text: str  # the joined translation
    target_spans: list[Span]  # each sentence translation's span in `text`

    @classmethod
    def joined(cls, source: str, spans: list[Span], results: list[TranslationResult]) -> TranslatedText:
        """The text whose sentences (`spans` in `source`) were translated as `results`: the
        translations joined with the whitespace found between the source sentences."""
        text, target_spans = join_sentences(source, spans, [result.text for result in results])
        return cls(source, spans, results, text, target_spans)

    @property
    def score(self) -> float:
        """The text's score (`text_score`: sentence scores weighted by produced pieces)."""
        return text_score(self.results)

    def alternative(self, k: int) -> tuple[str, float]:
        """The k-th alternative of the whole text: every sentence's k-th (or its best), joined,
        scored by the same rule."""
        picked = [r.alternatives[k] if k < len(r.alternatives) else r for r in self.results]
        return join_sentences(self.source, self.spans, [p.text for p in picked])[0], text_score(picked)

    @property
    def case_restored(self) -> bool:
        """Some sentence of it was read with its case restored (seq2seq.core.casing)."""
        return any(result.case_restored for result in self.results)

    @property
    def terms(self) -> list[TermOutcome]:
        """The hints of every sentence and whether its translation used each, spans into `source`."""
        return [term.shifted(start) for (start, _), result in zip(self.spans, self.results) for term in result.terms]

    @property
    def source_tokens(self) -> int:
        return sum(len(result.source_ids) for result in self.results)

    @property
    def target_tokens(self) -> int:
        return sum(len(result.target_ids) for result in self.results)

    def _maps(self, level: str | None) -> list[tuple[Alignment, int, int]]:
        """Each sentence's map (`level`, or the level it was asked at), with its offsets."""
        return [
            (result.alignment.requested if level is None else result.alignment.at(level), start, target_start)
            for (start, _), (target_start, _), result in zip(self.spans, self.target_spans, self.results)
            if result.alignment is not None
        ]

    def alignment(self) -> Alignment | None:
        """One map of the whole text at the level its sentences were translated with: their
        maps placed block-diagonally; None when they were translated without one."""
        parts = self._maps(None)
        return concat(parts) if parts else None

    def word_map(self) -> Alignment:
        """The word map of the whole text, block-diagonal over its sentences (whatever level
        was asked, markup is placed by words); empty without maps."""
        return concat(self._maps("word"), WORD_MAP)

    def quality(self) -> SentenceQuality | None:
        """One quality block for the whole text: its sentences' blocks (built with their maps)
        joined, word indices counted over the text as in `word_map`, terms' spans into `source`."""
        parts, offsets = [], []
        for (start, _), result in zip(self.spans, self.results):
            if result.quality is not None:
                parts.append((result.quality, len(result.target_ids) + 1))
                offsets.append(start)
        return join_quality(parts, offsets) if parts else None


def translate_texts(
    texts: list[str], translate_sentences: TranslateSentences, split: Split = sentence_spans, call_chars: int = 0
) -> list[TranslatedText]:
    """Translate whole texts: each `split` into its sentences, all sentences of all texts
    one call of `translate_sentences` (one batch), each text's translations joined. With
    `call_chars`, in calls of at most that many characters instead (whole sentences in order;
    a sentence longer alone is a call of its own): a text too long for one call (a file's
    paragraph beside a work bound) is translated all the same, its map still block-diagonal."""
    all_spans = [split(text) for text in texts]
    sentences = [text[start:end] for text, spans in zip(texts, all_spans) for start, end in spans]
    calls: list[list[str]] = []
    for sentence in sentences:
        if not calls or (call_chars and sum(map(len, calls[-1])) + len(sentence) > call_chars):
            calls.append([])
        calls[-1].append(sentence)
    results = iter([result for call in calls for result in translate_sentences(call)])
    return [TranslatedText.joined(text, spans, [next(results) for _ in spans]) for text, spans in zip(texts, all_spans)]
