"""Inline markup carried through translation by the word alignment.

A segment (a paragraph, a table cell, a subtitle cue) is translated as one plain text, not
node by node: cutting a sentence at every inline tag ("Das ist ein <b>kleines</b> Haus.")
would hand the model fragments it cannot translate. Its inline elements are lifted out as
tags over the plain text (`Marked`: each tag a character span, so every character has a
stack of open elements), the plain text is translated (or a given translation is
teacher-forced) with its word alignment, and each tag is put back on the target words that
the source words it wrapped align to -- the approach of Bergamot (Mozilla) and TransIns
(Steffen & van Genabith 2021), here with our own cross-attention map.

`transfer(source, target, alignment)`, the rule, per tag:

1. Its source words: the words (`seq2seq.core.alignment.words`) its span overlaps. A tag
   over every word of the source covers every word of the target.
2. **The span by share** (the default, `method="share"`): each target word's share of its
   soft row that falls on the tagged words; the tag covers the contiguous target span that
   maximises the sum of (share - 1/2), the words drawing mostly on the tagged words
   outweighing those that do not. Measured on the gold pairs (bench/markup.py) it beats the
   complete mapping below: a stray hard link (a word linked to the tag that draws a third
   of its row from it) no longer drags the tag over an unrelated word, and a word that
   draws on the tag without being its argmax is no longer left out. Where no target word
   draws mostly on the tag, the complete mapping decides.
3. **Complete mapping** (`method="links"`, and the fallback): every target word whose hard
   link points at one of the tagged words; a tagged word that no target word links to
   (hard links are argmax per target row) adds the target word that draws most on it (its
   soft column's argmax). Repairs: a one-word gap between two pieces is filled; with the
   share, pieces after the heaviest are left (a contiguous source span, one target span).
4. Punctuation at a span's edges is left out unless the source element began or ended
   with punctuation. Pieces are character ranges from the first word's start to the last
   word's end: the whitespace inside a piece is inside the element, the whitespace at its
   edges outside (closing tags before whitespace, opening tags after).
5. A tag that reaches no target word (an empty translation, a map with nothing in its
   column) is put at the target word at the same relative position and counted in
   `Placed.approximated`: nothing is ever dropped.

Empty elements (`<br/>`, `<img>`, XLIFF `<x/>`, a DOCX tab or bookmark) stay anchored to the
word they followed: after the last target word linked to it (or its column's argmax).

The result, `Placed`, gives every target character its stack of tags, ordered as the
source opened them (a parent before its children), and `events()` turns the stacks into
open/close/text/empty events: where two tags' target spans cross, the inner one is closed
and reopened, so the output is always well-formed. Format writers (HTML, XML, DOCX runs)
consume the events. Torch-free.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from seq2seq.core.alignment import Alignment, Token, concat, is_punctuation, words
from seq2seq.documents.formats.limits import Tally

# A target word belongs to a tag when more than this share of its soft row falls on the
# tagged words (step 2): a majority. bench/markup.py prints the exact-span rate at others.
SHARE = 0.5
METHODS = ("share", "links")


@dataclass(frozen=True)
class Tag:
    """One inline element of a segment, over `[start, end)` of its plain text.

    `empty`: an element without content (`<br/>`, `<x/>`), placed at `start` (== `end`).
    `data`: what the format needs to write it back (an HTML start tag, DOCX run properties).
    """

    start: int
    end: int
    data: Any = None
    empty: bool = False


@dataclass
class Marked:
    """A segment: its plain text and its inline tags, in the order the source opened them
    (a parent before its children; an empty element where it stood)."""

    text: str
    tags: list[Tag] = field(default_factory=list)

    def stacks(self) -> list[tuple[int, ...]]:
        """Per character of `text`, the indices of the content tags open over it, outermost first."""
        open_over: list[list[int]] = [[] for _ in self.text]
        for index, tag in enumerate(self.tags):
            if not tag.empty:
                for position in range(tag.start, tag.end):
                    open_over[position].append(index)
        return [tuple(stack) for stack in open_over]


class MarkupBuilder:
    """Builds a `Marked` while a format's reader walks a segment: text, open, close, empty.
    `tally`: counts the segment and each tag against the file's limits as they are read
    (`seq2seq.documents.formats.limits.Tally`)."""

    def __init__(self, tally: Tally | None = None) -> None:
        self.parts: list[str] = []
        self.length = 0
        self.tags: list[Tag] = []
        self._open: dict[int, tuple[int, Any]] = {}
        self.tally = tally
        if tally is not None:
            tally.add("segments")

    def text(self, text: str) -> None:
        self.parts.append(text)
        self.length += len(text)

    def open(self, data: Any) -> int:
        """Start an element here; returns its handle for `close`."""
        if self.tally is not None:
            self.tally.add("tags")
        self.tags.append(Tag(self.length, self.length, data))
        self._open[len(self.tags) - 1] = (self.length, data)
        return len(self.tags) - 1

    def close(self, handle: int) -> None:
        """End the element `open` returned (an element without text becomes an empty one)."""
        start, data = self._open.pop(handle)
        self.tags[handle] = Tag(start, self.length, data, empty=start == self.length)

    def empty(self, data: Any, stand_in: str = "") -> None:
        """An element without content here; `stand_in`: the text it stands for in the plain
        text (a line break's "\n", so words on either side stay apart), not written back."""
        self.tags.append(Tag(self.length, self.length, data, empty=True))
        if stand_in:
            self.text(stand_in)

    @property
    def is_open(self) -> bool:
        return bool(self._open)

    def build(self) -> Marked:
        """The segment; elements still open end with it."""
        for handle in list(self._open):
            self.close(handle)
        return Marked("".join(self.parts), list(self.tags))


@dataclass
class Placed:
    """A translation with the source's tags put on it.

    `stacks[c]`: the tags over target character c, in source order; `empties`: (target
    offset, tag index) of the empty elements, in source order among equal offsets;
    `words[t]`: the target word indices each content tag covers (empty for empties);
    `approximated`: tags that reached no target word and were put at the nearest position.
    """

    text: str
    tags: list[Tag]
    stacks: list[tuple[int, ...]]
    empties: list[tuple[int, int]]
    words: list[list[int]]
    approximated: list[int] = field(default_factory=list)

    def events(self) -> Iterator[tuple[str, Any]]:
        """("open", tag), ("close", tag), ("text", str), ("empty", tag): well-formed by
        construction (a stack change closes down to the common prefix, then opens)."""
        empties: dict[int, list[int]] = {}
        for offset, index in self.empties:
            empties.setdefault(offset, []).append(index)
        current: tuple[int, ...] = ()
        position = 0
        while position <= len(self.text):
            following = self.stacks[position] if position < len(self.text) else ()
            if following != current or position in empties:
                common = 0
                while common < min(len(current), len(following)) and current[common] == following[common]:
                    common += 1
                for index in reversed(current[common:]):
                    yield "close", index
                for index in empties.get(position, []):
                    yield "empty", index
                for index in following[common:]:
                    yield "open", index
                current = following
            if position == len(self.text):
                break
            end = position + 1
            while end < len(self.text) and self.stacks[end] == following and end not in empties:
                end += 1
            yield "text", self.text[position:end]
            position = end

    def splits(self) -> int:
        """How many times an element had to be opened again (crossing scopes, or a tag whose
        target words are not contiguous)."""
        opened = [0] * len(self.tags)
        for kind, index in self.events():
            if kind == "open":
                opened[index] += 1
        return sum(max(0, count - 1) for count in opened)


def identity(source: Marked) -> Placed:
    """The source itself as a `Placed` (a segment left untranslated keeps its markup)."""
    return Placed(
        source.text,
        source.tags,
        source.stacks(),
        [(tag.start, index) for index, tag in enumerate(source.tags) if tag.empty],
        [[] for _ in source.tags],
    )


def with_margins(source_text: str, translation: str, alignment: Alignment) -> tuple[str, Alignment]:
    """The translation with the source's leading and trailing whitespace around it, and its
    map with target offsets moved to match (translations are made of the stripped text)."""
    lead = source_text[: len(source_text) - len(source_text.lstrip())]
    trail = source_text[len(source_text.rstrip()) :] if source_text.strip() else ""
    return lead + translation + trail, concat([(alignment, 0, len(lead))])


def fits(alignment: Alignment, source_text: str, target_text: str) -> bool:
    """Whether `alignment` is a word map of these texts (its words are theirs, at their offsets).
    A translation whose pieces do not spell its text (an unknown piece the tokenizer decodes
    otherwise) has a map of other words."""
    return [(t.start, t.end) for t in alignment.source_tokens] == [(w.start, w.end) for w in words(source_text)] and [
        (t.start, t.end) for t in alignment.target_tokens
    ] == [(w.start, w.end) for w in words(target_text)]


def proportional(source_text: str, target_text: str) -> Alignment:
    """A monotone word map by relative position: where no map of the pair fits, tags still go
    to the target words at the same place in the sentence."""
    source_words, target_words = words(source_text), words(target_text)
    matrix = np.zeros((len(target_words), len(source_words)))
    for j in range(len(target_words)):
        if source_words:
            matrix[j, min(len(source_words) - 1, int((j + 0.5) * len(source_words) / len(target_words)))] = 1.0
    links = [(int(row.argmax()), j) for j, row in enumerate(matrix) if row.size and row.max() > 0]
    return Alignment("word", source_words, target_words, matrix, sorted(links), 0, (), False)


def _source_words(tag: Tag, source_words: list[Token]) -> list[int]:
    return [i for i, word in enumerate(source_words) if word.start < tag.end and tag.start < word.end]


def _column_argmax(matrix: np.ndarray, source_index: int) -> int | None:
    """The target word that draws most on a source word, if any draws on it at all."""
    if matrix.size == 0 or source_index >= matrix.shape[1]:
        return None
    column = matrix[:, source_index]
    return int(column.argmax()) if column.max() > 0 else None


def _linked_targets(sources: list[int], alignment: Alignment) -> set[int]:
    """Complete mapping: every target word hard-linked to one of `sources`; a source word
    without any hard link adds its soft column's argmax."""
    wanted = set(sources)
    targets = {j for i, j in alignment.links if i in wanted}
    linked_sources = {i for i, _ in alignment.links}
    for i in sources:
        if i not in linked_sources:
            j = _column_argmax(alignment.matrix, i)
            if j is not None:
                targets.add(j)
    return targets


def _runs(indices: set[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for index in sorted(indices):
        if runs and runs[-1][-1] == index - 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return runs


def _trim(targets: set[int], sources: list[int], source_words: list[Token], target_words: list[Token]) -> set[int]:
    """Each piece without punctuation at its edges, unless the source element had it there
    (a piece of nothing but punctuation that the element did not hold is left out)."""
    keep_lead = bool(sources) and is_punctuation(source_words[sources[0]].text)
    keep_trail = bool(sources) and is_punctuation(source_words[sources[-1]].text)
    kept: set[int] = set()
    for run in _runs(targets):
        while len(run) > 1 and not keep_lead and is_punctuation(target_words[run[0]].text):
            run = run[1:]
        while len(run) > 1 and not keep_trail and is_punctuation(target_words[run[-1]].text):
            run = run[:-1]
        if all(is_punctuation(target_words[j].text) for j in run) and not (keep_lead or keep_trail):
            continue
        kept.update(run)
    return kept or targets


def _gap_filled(targets: set[int], length: int) -> set[int]:
    filled = set(targets)
    for j in range(1, length - 1):
        if j - 1 in targets and j + 1 in targets:
            filled.add(j)  # a one-word gap between two pieces
    return filled


def _share_span(share: np.ndarray, threshold: float) -> set[int]:
    """The contiguous span maximising the sum of (share - threshold); empty if none is positive."""
    best, best_span, total, start = 0.0, (0, -1), 0.0, 0
    for j, value in enumerate(share - threshold):  # Kadane's maximum subarray
        if total <= 0:
            total, start = 0.0, j
        total += value
        if total > 0 and total >= best:  # on a tie the longer span: as much evidence, more covered
            best, best_span = total, (start, j)
    return set(range(best_span[0], best_span[1] + 1))


def _targets(
    sources: list[int], alignment: Alignment, source_words: list[Token], target_words: list[Token], method: str
) -> set[int]:
    """The target words a tag over `sources` covers (module doc, steps 1-4)."""
    content = [i for i, word in enumerate(source_words) if not is_punctuation(word.text)]
    if content and set(content) <= set(sources):
        return _trim(set(range(len(target_words))), sources, source_words, target_words)
    linked = _gap_filled(_linked_targets(sources, alignment), len(target_words))
    if method == "links":
        return _trim(linked, sources, source_words, target_words)
    share = alignment.matrix[:, sources].sum(axis=1) if alignment.matrix.size else np.zeros(len(target_words))
    targets = _share_span(share, SHARE)
    if not targets and linked:  # no word draws mostly on the tag: its heaviest linked piece
        targets = set(max(_runs(linked), key=lambda run: share[run].sum()))
    return _trim(targets, sources, source_words, target_words)


def _nearest(position: int, source_length: int, target_words: list[Token], target_length: int) -> int:
    """The target word at the same relative position as a source character."""
    relative = position / max(1, source_length)
    wanted = relative * target_length
    return min(range(len(target_words)), key=lambda j: abs((target_words[j].start + target_words[j].end) / 2 - wanted))


def _anchor(
    tag: Tag, source_text: str, source_words: list[Token], target_text: str, target_words: list[Token], alignment
) -> int:
    """Target offset of an empty element: after the target word(s) of the source word it followed."""
    before = [i for i, word in enumerate(source_words) if word.end <= tag.start]
    if not before:  # before every word: in the same leading margin
        lead = len(target_text) - len(target_text.lstrip())
        return min(tag.start, lead)
    if len(before) == len(source_words):  # after every word: in the same trailing margin
        last = target_words[-1].end if target_words else 0
        return last + min(tag.start - source_words[-1].end, len(target_text) - last)
    anchor = before[-1]
    linked = [j for i, j in alignment.links if i == anchor] or [
        j for j in [_column_argmax(alignment.matrix, anchor)] if j is not None
    ]
    if not linked:
        word = target_words[_nearest(source_words[anchor].end, len(source_text), target_words, len(target_text))]
        offset = word.end
    else:
        offset = target_words[max(linked)].end
    # "Haus <br/>ist": the element stood after the space; so it does in the target.
    if source_text[source_words[anchor].end : tag.start].isspace():
        while offset < len(target_text) and target_text[offset].isspace():
            offset += 1
    return offset


def transfer(source: Marked, target_text: str, alignment: Alignment, method: str = "share") -> Placed:
    """Put `source`'s tags on `target_text`, its translation, by their word `alignment`.

    `alignment` is a word-level map whose source words are `words(source.text)` (offsets
    into `source.text`) and whose target words are `words(target_text)`: the map a
    translation of `source.text` carries (`TranslationResult.alignment`, joined over its
    sentences) or that teacher forcing gives (`seq2seq.decoding.forced`). `method`: "share"
    (the default) or "links" (the complete mapping alone). See the module doc.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
    if alignment.level != "word":
        raise ValueError("markup is placed by a word-level map")
    source_words, target_words = words(source.text), words(target_text)
    if len(source_words) != len(alignment.source_tokens) or len(target_words) != len(alignment.target_tokens):
        raise ValueError(
            f"the map has {len(alignment.source_tokens)} x {len(alignment.target_tokens)} words, the texts "
            f"{len(source_words)} x {len(target_words)}: it is not the map of this pair"
        )
    covered: list[list[int]] = []
    empties: list[tuple[int, int]] = []
    approximated: list[int] = []
    for index, tag in enumerate(source.tags):
        sources = _source_words(tag, source_words)
        if tag.empty or not sources:
            if not tag.empty and tag.end > tag.start:
                approximated.append(index)  # an element around whitespace only: kept, empty
            empties.append((_anchor(tag, source.text, source_words, target_text, target_words, alignment), index))
            covered.append([])
            continue
        targets = _targets(sources, alignment, source_words, target_words, method)
        if not targets and target_words:
            targets = {_nearest((tag.start + tag.end) / 2, len(source.text), target_words, len(target_text))}
            approximated.append(index)
        elif not targets:  # nothing to wrap at all: the element stays, empty, where it began
            approximated.append(index)
            empties.append((_anchor(tag, source.text, source_words, target_text, target_words, alignment), index))
        covered.append(sorted(targets))
    stacks: list[list[int]] = [[] for _ in target_text]
    for index, targets in enumerate(covered):
        for run in _runs(set(targets)):
            for position in range(target_words[run[0]].start, target_words[run[-1]].end):
                stacks[position].append(index)  # tags in source order: indices ascend
    empties.sort(key=lambda item: item[0])  # stable: source order among equal offsets
    return Placed(target_text, list(source.tags), [tuple(s) for s in stacks], empties, covered, approximated)
