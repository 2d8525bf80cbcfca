"""Segments through a translator, their markup placed by the alignment made in the same pass.

A `Translate` is what a document needs of a translator: plain segment texts in, each
one's translation and word map out (`Translation`), or the exception that stopped it. The
library's (`sentence_translator`) is the one text pipeline (seq2seq.decoding.texts: each
text split into sentences, all of them one batch with `DecodeConfig.alignment` set, so the
translator fills every result's map in the same pass, joined, the maps block-diagonally)
over the `Translator`; the service's is the same pipeline over its fair scheduler.
`place_segments` runs the segments that have words through one and puts each segment's
tags on its translation (`seq2seq.documents.markup.transfer`);
`place_on_given` does it for translations a client already has, by teacher forcing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from seq2seq.core.alignment import Alignment, words
from seq2seq.core.config import AlignmentError, AlignmentOptions, DecodeConfig
from seq2seq.decoding.forced import align_given
from seq2seq.decoding.texts import WORD_MAP, TranslatedText, translate_texts
from seq2seq.decoding.translator import Translator
from seq2seq.documents.markup import Marked, Placed, fits, proportional, transfer, with_margins


@dataclass
class Translation:
    """A segment's translation and its word map (source offsets into the segment's text,
    target offsets into `text`)."""

    text: str
    alignment: Alignment
    translated: TranslatedText | None = None  # the text it was made as: its score, terms, sentences


Translate = Callable[[list[str]], list["Translation | Exception"]]


def has_words(text: str) -> bool:
    """A segment worth translating: it has a letter or a digit."""
    return any(character.isalnum() for character in text)


def sentence_translator(translator: Translator, config: DecodeConfig | None = None) -> Translate:
    """A `Translate` over the library's translator: the one text pipeline
    (seq2seq.decoding.texts.translate_texts) with the word map made in the same pass, and the
    quality blocks of the fast mode (attention only), whose `untranslated` flags a report counts."""
    base = translator.decode_defaults if config is None else config
    # The quality flags of the fast mode (attention only, no occlusion pass): a file report counts them.
    config = replace(base, return_attention=True, alignment=base.alignment or WORD_MAP, quality=True, occlusion=False)

    def run(texts: list[str]) -> list[Translation | Exception]:
        translated = translate_texts(texts, lambda sentences: translator.translate_batch(sentences, config))
        return [Translation(t.text, t.word_map(), t) for t in translated]

    return run


@dataclass
class PlacementReport:
    """What happened to a document's segments and their tags."""

    segments: int = 0  # segments with words, sent to the translator
    translated: int = 0
    failed: list[str] = field(default_factory=list)  # why a segment kept its source text
    tags: int = 0  # tags of the translated segments
    approximated: int = 0  # tags put at the nearest position (markup.transfer, step 5)
    splits: int = 0  # times an element was opened again (crossing scopes, discontiguous words)
    # Segments whose translation has `untranslated` flags (source words probably left out;
    # seq2seq.analysis.quality), by segment index; the sidecar names the words.
    untranslated: list[int] = field(default_factory=list)
    unsupported: int = 0  # tags put on words the alignment does not support (`Placed.unsupported`)

    def to_dict(self) -> dict:
        return {
            "segments": self.segments,
            "translated": self.translated,
            "failed": len(self.failed),
            "segments_untranslated": len(self.untranslated),
            "tags": self.tags,
            "tags_approximated": self.approximated,
            "tags_unsupported": self.unsupported,
            "tags_split": self.splits,
        }


def untranslated_words(translation: Translation) -> list[str]:
    """The source words the translation's quality flags as left out (none without a quality block)."""
    quality = None if translation.translated is None else translation.translated.quality()
    if quality is None:
        return []
    return [translation.alignment.source_tokens[i].text for i in quality.untranslated]


def unsupported_tags(source: Marked, placed: Placed) -> list[dict[str, str]]:
    """Each tag put on words the alignment does not support: the source text it wrapped and
    the target text it was put on."""
    target_words = words(placed.text)
    named = []
    for index in placed.unsupported:
        tag, covered = source.tags[index], placed.words[index]
        on = placed.text[target_words[covered[0]].start : target_words[covered[-1]].end] if covered else ""
        named.append({"source": source.text[tag.start : tag.end], "placed_on": on})
    return named


def place_translation(source: Marked, translation: Translation) -> Placed:
    """One segment's tags on its translation (the source's margins kept around it). Where
    the map does not fit the texts (`markup.fits`: a piece that does not spell its text), by
    relative position, every tag counted as approximated."""
    target_text, alignment = with_margins(source.text, translation.text, translation.alignment)
    if fits(alignment, source.text, target_text):
        return transfer(source, target_text, alignment)
    placed = transfer(source, target_text, proportional(source.text, target_text))
    placed.approximated = sorted(set(range(len(source.tags))))
    placed.unsupported = list(placed.approximated)  # no map supports them
    return placed


def place_segments(
    segments: Sequence[Marked], translate: Translate, report: PlacementReport | None = None
) -> list[Placed | None]:
    """Every segment placed on its translation; None for a segment without words, or whose
    translation failed (counted in `report.failed`): it stays as it was."""
    report = report if report is not None else PlacementReport()
    todo = [index for index, segment in enumerate(segments) if has_words(segment.text)]
    report.segments += len(todo)
    placed: list[Placed | None] = [None] * len(segments)
    if not todo:
        return placed
    for index, translation in zip(todo, translate([segments[i].text for i in todo])):
        if isinstance(translation, Exception):
            report.failed.append(f"segment {index}: {translation}")
            continue
        placed[index] = place_translation(segments[index], translation)
        report.translated += 1
        report.tags += len(segments[index].tags)
        report.approximated += len(placed[index].approximated)
        report.unsupported += len(placed[index].unsupported)
        if untranslated_words(translation):
            report.untranslated.append(index)
        report.splits += placed[index].splits()
    return placed


def place_on_given(
    translator: Translator,
    pairs: Sequence[tuple[Marked, str]],
    options: AlignmentOptions = WORD_MAP,
    restore_case: bool = True,
) -> list[Placed | AlignmentError]:
    """The tags of each marked source put on its given plain translation, by the word map of
    teacher forcing (seq2seq.decoding.forced: what a translator's tool needs after
    post-editing); a pair that cannot be aligned gets its AlignmentError in its place."""
    word = replace(options, level="word")
    aligned = align_given(
        translator, [(marked.text, target) for marked, target in pairs], word, restore_case=restore_case
    )
    return [
        result if isinstance(result, AlignmentError) else transfer(marked, target, result.word)
        for (marked, target), result in zip(pairs, aligned)
    ]
