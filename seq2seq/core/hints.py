"""Target-term hints: a source word shown to the model with the term it should become.

A hint is placed after the word it explains, between two pieces SentencePiece never
splits: "Die Gießkanne ⟨watering can⟩ ist leer." (Dinu et al. 2019, "Training Neural
Machine Translation to Apply Terminology Constraints": the "append" method). A model
fine-tuned on such sources (`TrainConfig.hint_rate`) learns to copy the hint. Hints come
from the user's glossary (`Glossary`) and, for source words rare in the training data, from
the bundle's dictionary (`data.dictionary.TermIndex`).

Hints are the model's business only: every map, offset and quality signal stays over the
user's own words. The model reads `HintedSource.ids`; each of its columns counts for one of
the user's pieces (`owner`: a hint's pieces count for the last piece of the word they
explain), and `collapse_columns` adds a hint's attention to that piece, so a row still sums
to 1 and the word the hint explains receives what was drawn from its hint.

Torch-free.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from data.dictionary import TermIndex
from seq2seq.core.alignment import Alignment, Token, words
from seq2seq.core.inputs import CONTROL_CHARACTERS

ORIGINS = ("glossary", "dictionary")
# The most pieces a glossary term may have: the models were trained on hints of at most three
# words (seq2seq/training/hint_data.py), and a sentence is read in at most 250 pieces, hints
# included; a longer "term" is a sentence, and the service refuses it (400 naming it).
MAX_TERM_PIECES = 32
# The endings a term may take in a text, by language: German inflection ("Gießkanne"
# matches "Gießkannen", "Staubsauger" "Staubsaugers"; umlauts are folded so "Kinderwägen"
# matches "Kinderwagen"), English plurals and possessives ("watering cans"). A glossary term
# is matched in the source with the source language's, a target term in a translation with
# the target language's; a language not listed matches the term as written.
ENDINGS = {
    "de": ("", "e", "en", "er", "es", "em", "n", "s", "ern", "ns", "nen"),
    "en": ("", "s", "es", "'s"),
}


def endings(language: str) -> tuple[str, ...]:
    return ENDINGS.get(language, ("",))


_UMLAUTS = str.maketrans({"ä": "a", "ö": "o", "ü": "u", "ß": "ss"})


@dataclass(frozen=True)
class Hint:
    """A hint on the source words in characters [start, end) of the text as given."""

    start: int
    end: int
    term: str  # the target-language term shown to the model
    origin: str  # "glossary" or "dictionary"


@dataclass(frozen=True)
class HintedSource:
    """What the model reads for one source: the user's pieces with hints inserted."""

    ids: list[int]  # model input, EOS excluded
    owner: list[int]  # per model position: the index of the user's piece it counts for
    user_pieces: int  # how many of the model's positions are the user's own pieces
    hints: tuple[Hint, ...]  # the hints inserted, in text order

    @property
    def hinted(self) -> bool:
        return len(self.ids) != self.user_pieces

    @property
    def user_positions(self) -> list[int]:
        """The model positions that hold the user's own pieces (a hint's follow its word's)."""
        return [p for p, piece in enumerate(self.owner) if p == 0 or piece != self.owner[p - 1]]


def fold(word: str) -> str:
    """A word compared without case or umlauts."""
    return word.casefold().translate(_UMLAUTS)


def _matches(text_word: str, term_word: str, endings: Sequence[str]) -> bool:
    """`text_word` is `term_word` with another of `endings` (the term may be written
    inflected too: "roter" matches "roten"); stems keep at least three letters."""
    word, term = fold(text_word), fold(term_word)
    stems = {term} | {term[: -len(e)] for e in endings if e and term.endswith(e) and len(term) - len(e) >= 3}
    return any(word.startswith(stem) and word[len(stem) :] in endings for stem in stems)


def find_term(text_words: Sequence[Token], term: str, endings: Sequence[str], start: int = 0) -> tuple[int, int] | None:
    """The first run of `text_words` (from index `start`) that spells `term`, each word with one
    of `endings`: its word indices [first, last), or None."""
    wanted = [t.text for t in words(term)]
    if not wanted:
        return None
    for first in range(start, len(text_words) - len(wanted) + 1):
        if all(_matches(text_words[first + k].text, w, endings) for k, w in enumerate(wanted)):
            return first, first + len(wanted)
    return None


class Composed:
    """A text in Unicode's composed form (NFC), with each of its offsets mapped back into the
    text as given: a term written decomposed ("Ga\u0308rtner") or precomposed ("Gärtner") is
    one word either way, and spans found in the composed text are the user's spans."""

    def __init__(self, text: str):
        # Cut before every character that composes with nothing before it (combining class 0
        # and left alone by NFC): the pieces compose on their own, so each maps as a whole.
        starts = [i for i, ch in enumerate(text) if i == 0 or unicodedata.combining(ch) == 0]
        pieces = [unicodedata.normalize("NFC", text[a:b]) for a, b in zip(starts, starts[1:] + [len(text)])]
        if "".join(pieces) != unicodedata.normalize("NFC", text):  # starters that compose (Hangul): whole
            starts, pieces = [0], [unicodedata.normalize("NFC", text)]
        self.text = "".join(pieces)
        self.given, self.at = starts + [len(text)], [0]  # piece k: given[k] in the text, at[k] here
        for piece in pieces:
            self.at.append(self.at[-1] + len(piece))

    def start(self, offset: int) -> int:
        """The offset in the given text where the piece holding `offset` begins."""
        return self.given[bisect.bisect_right(self.at, offset) - 1]

    def end(self, offset: int) -> int:
        """The offset in the given text where the piece holding `offset - 1` ends."""
        return self.given[bisect.bisect_left(self.at, offset)]


def term_problem(term: str) -> str | None:
    """Why `term` cannot be a glossary term (a control character: never language, and shown
    to the model and echoed in the records), or None."""
    bad = CONTROL_CHARACTERS.search(term)
    return None if bad is None else f"control character U+{ord(bad.group()):04X} at column {bad.start() + 1}"


def glossary_term(term: str) -> str:
    """A term as a glossary matches and shows it: composed (NFC), without control characters
    (a caller that wants them refused asks `term_problem` first)."""
    return unicodedata.normalize("NFC", CONTROL_CHARACTERS.sub("", term))


@dataclass(frozen=True)
class Glossary:
    """The user's terms: (source term, target term) pairs; a longer source term wins where
    two match the same words. Terms and texts are compared composed (NFC) and without control
    characters; the hints' spans are in the text as given."""

    entries: tuple[tuple[str, str], ...] = ()

    def hints(self, text: str, language: str = "de") -> list[Hint]:
        """Every non-overlapping occurrence of an entry's source term in `text` (written in
        `language`: the endings its words may take)."""
        composed = Composed(text)
        text_words = words(composed.text)
        taken = np.zeros(len(text_words), dtype=bool)
        found = []
        entries = [(glossary_term(source), glossary_term(target)) for source, target in self.entries]
        for source, target in sorted(entries, key=lambda e: -len(words(e[0]))):
            start = 0
            while (span := find_term(text_words, source, endings(language), start)) is not None:
                first, last = span
                if not taken[first:last].any():
                    taken[first:last] = True
                    begin, end = composed.start(text_words[first].start), composed.end(text_words[last - 1].end)
                    found.append(Hint(begin, end, target, "glossary"))
                start = first + 1
        return sorted(found, key=lambda h: h.start)


def dictionary_hints(text: str, index: TermIndex, max_count: int, skip: Sequence[Hint] = ()) -> list[Hint]:
    """A hint for every word of `text` that the dictionary knows and that occurred at most
    `max_count` times in the training sentences (a rare word the model cannot know), except
    words inside a span of `skip` (the glossary's, which wins)."""
    found = []
    for position, word in enumerate(words(text)):
        if len(word.text) < 3 or not word.text.isalpha() or any(h.start <= word.start < h.end for h in skip):
            continue
        entry = dictionary_entry(index, word.text, position)
        if entry is not None and entry[1] <= max_count:
            found.append(Hint(word.start, word.end, entry[2], "dictionary"))
    return found


def dictionary_entry(index: TermIndex, word: str, position: int) -> tuple[str, int, str] | None:
    """(form, count, term) of the index's entry for `word` at word `position` of its sentence:
    the word as written, else, for a sentence-initial or shouted word, its lower-cased forms."""
    for form in (word, word[0] + word[1:].lower(), word.lower()):
        entry = index.lookup(form)
        if entry is not None:
            return form, *entry
        if not (position == 0 or word.isupper()):
            return None
    return None


def insert_hints(
    ids: Sequence[int],
    offsets: Sequence[tuple[int, int]],
    hints: Sequence[Hint],
    encode_term: Callable[[str], list[int]],
    hint_ids: tuple[int, int],
) -> HintedSource:
    """The user's piece `ids` (with character `offsets`) with each hint's pieces, between
    the hint markers, after the last piece of the words it explains. `encode_term` is the
    tokenizer's encode: a term is read as the model writes it in a translation."""
    open_id, close_id = hint_ids
    after: dict[int, list[Hint]] = {}
    for hint in hints:
        last = max((i for i, (start, _) in enumerate(offsets) if start < hint.end), default=None)
        if last is not None:
            after.setdefault(last, []).append(hint)
    model, owner, placed = [], [], []
    for index, piece in enumerate(ids):
        model.append(piece)
        owner.append(index)
        for hint in after.get(index, []):
            pieces = [open_id, *encode_term(hint.term), close_id]
            model += pieces
            owner += [index] * len(pieces)
            placed.append(hint)
    return HintedSource(model, owner, len(ids), tuple(placed))


def fit_hints(
    ids: Sequence[int],
    offsets: Sequence[tuple[int, int]],
    hints: Sequence[Hint],
    encode_term: Callable[[str], list[int]],
    hint_ids: tuple[int, int],
    length: int,
) -> HintedSource:
    """`insert_hints` within `length` model positions: the user's first `length` pieces are
    read, and of `hints` (in text order) each whose words are among them and whose pieces with
    their two markers still fit; a hint that does not fit is left out whole, never cut (a cut
    hint would have the model read half a term, and the columns would no longer be the user's
    pieces: issue 41, 5)."""
    ids, offsets = list(ids[:length]), list(offsets[:length])
    room, shown = length - len(ids), []
    for hint in hints:
        cost = len(encode_term(hint.term)) + 2
        if offsets and hint.start < offsets[-1][1] and cost <= room:
            shown.append(hint)
            room -= cost
    return insert_hints(ids, offsets, shown, encode_term, hint_ids)


def plain_source(ids: Sequence[int]) -> HintedSource:
    return HintedSource(list(ids), list(range(len(ids))), len(ids), ())


def collapse_columns(attention: np.ndarray, source: HintedSource, kept: int) -> np.ndarray:
    """attention (..., S+1) over the first `kept` model positions plus EOS -> (..., U+1) over
    the user's pieces among them plus EOS: each hint column added to the piece it explains."""
    if not source.hinted:
        return attention
    owner = np.asarray(source.owner[:kept])
    users = int(owner.max()) + 1 if len(owner) else 0
    collapsed = np.zeros((*attention.shape[:-1], users + 1), dtype=attention.dtype)
    np.add.at(collapsed, (..., owner), attention[..., :kept])
    collapsed[..., users] = attention[..., kept]
    return collapsed


@dataclass(frozen=True)
class TermOutcome:
    """Whether a translation used a hint it was shown: the quality block's `terms`."""

    source: str  # the hinted source words, as the text has them
    start: int  # their character span in the source text
    end: int
    term: str  # the target term shown
    origin: str  # "glossary" or "dictionary"
    appears: bool  # the term's words are in the translation (an English ending allowed)
    used: bool  # it appears and one of its words is aligned to a hinted source word

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def shifted(self, offset: int) -> TermOutcome:
        """The same outcome with its span moved by the sentence's offset in a longer text."""
        return dataclasses.replace(self, start=self.start + offset, end=self.end + offset)


def term_outcomes(
    hints: Sequence[Hint],
    source_text: str,
    word_alignment: Alignment | None,
    translation: str,
    language: str = "en",
) -> list[TermOutcome]:
    """For each hint: whether `translation` (of `source_text`) uses it. It appears when the
    term's words are in the translation, each with an ending of the translation's `language`
    or none; it is used when one of those words is also linked, in the word alignment, to a
    source word of the hint's span (without an alignment: when it appears)."""
    outcomes = []
    target_words = words(translation) if word_alignment is None else word_alignment.target_tokens
    for hint in hints:
        span = find_term(target_words, hint.term, endings(language))
        used = span is not None
        if word_alignment is not None and span is not None:
            hinted = {i for i, t in enumerate(word_alignment.source_tokens) if hint.start <= t.start < hint.end}
            used = any(i in hinted for i, j in word_alignment.links if span[0] <= j < span[1])
        text = source_text[hint.start : hint.end]
        outcomes.append(TermOutcome(text, hint.start, hint.end, hint.term, hint.origin, span is not None, used))
    return outcomes


_TERM_SPACE = re.compile(r"\s+")


def clean_term(term: str) -> str:
    """A term as it is shown to the model: single spaces, no hint markers."""
    return _TERM_SPACE.sub(" ", term.replace("⟨", "").replace("⟩", "")).strip()
