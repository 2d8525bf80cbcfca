"""Shouted (all-caps) input: detect it, let the model read it in a plausible case, answer in capitals.

Why: the joint SentencePiece model was trained on normally cased text, where a capital
mostly begins a word. "ICH HABE MEINEN REGENSCHIRM IM BUS VERGESSEN" falls apart into
single letters ("▁I C H ▁H A B E ..."), a source the model has hardly seen, and the shipped
model answers with letters up to the length limit ("ICCCCNNNNATTTT..."); the same sentence
in normal case translates. So the translator reads a shouted text with its case restored
and shouts the translation back (as DeepL and Google do); `DecodeConfig.restore_case`
turns it off.

**Detection** (`is_shouting`), on one text as the translator gets it (the service and the
batch CLI give it one sentence at a time, and a line break always ends a sentence):

- count the *cased* letters, those whose one-character upper and lower forms differ ("ß",
  upper case "SS", and letters without case count neither way);
- the text is shouted when at least `MIN_UPPER_LETTERS` (4) of them are upper-case and
  they are at least `UPPER_SHARE` (90%) of them.

Why these numbers: "USA", "EU", "OK", "BMW" alone are abbreviations the model reads as they
are, and 3 capitals cannot tell them from shouting; "NATO" or "ACHTUNG!" do fire, and the
restoration keeps a capitalised form the vocabulary knows ("EU" in "EU-KOMMISSION"). 90%,
not 100%: a shouter's "5 kg" or "iPHONE" is still shouting, while a normal sentence with one
shouted word ("Das ist UNGLAUBLICH.": 72%) or with abbreviations ("Die EU-Kommission und die
USA") is left alone.

**Restoration** (`Truecaser.restore`), word by word (each run of letters: the parts of
"EU-KOMMISSION" separately): of the candidate forms lower, Capitalised and as given, keep
the one whose best SentencePiece segmentation is the most likely
(`Tokenizer.segmentation_score`): the unigram model knows which casing of a word its
training text held ("▁Regenschirm" is likely; "▁regen schirm" less; "▁R E G E N ..." very
unlikely), so German nouns come out capitalised and an abbreviation the vocabulary knows
("EU") stays in capitals. Two corrections, from the errors on the training split's
sentences: the lower-case form gets `LOWER_BONUS`, because sentence starts inflate the
capitalised forms of common words ("Ich", "Die", "Klein"); and in German after a
determiner ("der", "meinen", "im") the capitalised form gets `NOUN_BONUS`, because a noun or
its adjective follows and otherwise the joint vocabulary's English words win ("▁bus" is one
piece, "Bus" two; "im bus" made the model translate "in the rain"). The first word is
capitalised (or kept as given if that scores better). On the valid split 89.7% of the words
come back in their original case, against 79.8% for "all lower case but the first word"
(docs/decoding.md, "Shouted input").

**A shouted word in a normal text** (`Truecaser.restore_emphasised`): a run of 4+
capitals in a text that is not shouted as a whole ("Das ist UNGLAUBLICH teuer.") is cut into
letters just the same, so it is restored word by word too; the translation is not shouted
back, since the sentence was not.

**Offsets stay valid**: every change of case is one character for one character; a
character whose other case has another length ("ß" -> "SS", "İ" -> "i̇") is left as it is.
So the restored text has the input's length, each SentencePiece offset into it is an offset
into the input, and alignment tokens show the user's own characters. The translation is
upper-cased the same way (`shout`), so its token offsets hold too.

Torch-free: the translator (and so the service and the CLIs) uses it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from functools import lru_cache

from seq2seq.core.alignment import pieces_with_offsets

MIN_UPPER_LETTERS = 4  # fewer capitals may be an abbreviation ("USA", "EU", "OK")
UPPER_SHARE = 0.9  # of the cased letters; a shouter's "kg" or "iPHONE" still shouts
# Both chosen on the 18,791 sentences of the training split, by the share of words restored to
# their original case: 0.863 with neither bonus, 0.879 / 0.877 with either, 0.905 with both
# (flat for LOWER_BONUS 2-3 and NOUN_BONUS 4-6); on valid 0.849 -> 0.897.
LOWER_BONUS = 2.0  # log-probability added to the lower-case form (sentence starts inflate capitals)
NOUN_BONUS = 6.0  # added to the capitalised (and the as-given) form after a German determiner: a noun follows
# German determiners and preposition-article contractions, lower case: a word after one of
# them is a noun or the noun's adjective (the adjective's lower-case form outscores the
# bonus: "den großen Bus"). A missing word costs only that bonus.
_DETERMINERS = """der die das den dem des ein eine einen einem einer eines kein keine keinen keinem keiner keines
    mein meine meinen meinem meiner meines dein deine deinen deinem deiner deines sein seine seinen
    seinem seiner seines ihr ihre ihren ihrem ihrer ihres unser unsere unseren unserem unserer unseres
    euer eure euren eurem eurer eures dieser diese diesen diesem dieses jeder jede jeden jedem jedes
    welcher welche welchen welchem welches im am zum zur vom beim ins ans aufs"""
GERMAN_DETERMINERS = frozenset(_DETERMINERS.split())
WORD_LETTERS = re.compile(r"[^\W\d_]+")  # a run of letters: a word, or one part of "EU-KOMMISSION"


def _lower(character: str) -> str:
    lowered = character.lower()
    return lowered if len(lowered) == 1 else character


def _upper(character: str) -> str:
    raised = character.upper()
    return raised if len(raised) == 1 else character


def lower(text: str) -> str:
    """`text` in lower case, character for character (a character whose lower case is
    longer, "İ", is kept): the same length, the same offsets."""
    return "".join(map(_lower, text))


def shout(text: str) -> str:
    """`text` in upper case, character for character ("ß", whose upper case is "SS", is
    kept): the same length, the same offsets. Also how the measurement shouted its sources,
    as caps lock types them."""
    return "".join(map(_upper, text))


def capitalise(word: str) -> str:
    """First character upper case, the rest lower, character for character."""
    return shout(word[:1]) + lower(word[1:])


def is_cased(character: str) -> bool:
    """A letter with a one-character upper and lower form that differ (not "ß", not "1")."""
    return _upper(character) != _lower(character)


@lru_cache(maxsize=4096)
def _letter_case(character: str) -> tuple[bool, bool]:
    """(is cased, is upper case) of one character, as `is_shouting` counts it."""
    cased = is_cased(character)
    return cased, cased and character == _upper(character)


def case_counts(text: str) -> tuple[int, int]:
    """(cased letters, upper-case ones) of `text`.

    Every text the translator gets passes through here, so each distinct character is
    classified once (cached) and counted by `Counter` in C: 2.5x faster than a Python loop
    over the characters (docs/performance.md, lever 14)."""
    cased = upper = 0
    for character, count in Counter(text).items():
        is_letter, is_upper = _letter_case(character)
        cased += count * is_letter
        upper += count * is_upper
    return cased, upper


def is_shouting(text: str) -> bool:
    """Whether `text` is shouted: at least MIN_UPPER_LETTERS of its cased letters are upper
    case, and they are at least UPPER_SHARE of them (the rule and its reasons: module doc)."""
    return _shouting(*case_counts(text))


def _shouting(cased: int, upper: int) -> bool:
    return upper >= MIN_UPPER_LETTERS and upper >= UPPER_SHARE * cased


class Truecaser:
    """Restores a plausible case to shouted text, scoring candidate forms with `score` (the
    log-probability of a form's best segmentation, `Tokenizer.segmentation_score`).

    `language` is the source language: the determiner rule applies to German ("de") only.
    Thread-safe; the scores of forms are cached (bounded)."""

    def __init__(self, score: Callable[[str], float], language: str = "de", cache_size: int = 1 << 16):
        self.score = lru_cache(maxsize=cache_size)(score)
        self.determiners = GERMAN_DETERMINERS if language == "de" else frozenset()

    def restore(self, text: str) -> str:
        """`text` with each word in its most plausible case; the same length, every character
        the input's or its other case. Applied to any text; the translator applies it to
        shouted ones (`restore_shouted`)."""
        return self._restore_words(text, lambda word: True)

    def _restore_words(self, text: str, chosen: Callable[[str], bool]) -> str:
        """`text` with the words (runs of letters) that are `chosen` in their most plausible
        case, the rest as given."""
        parts, position, previous = [], 0, ""
        for index, match in enumerate(WORD_LETTERS.finditer(text)):
            word = match.group()
            if chosen(word):
                word = self.restore_word(word, first=index == 0, after=previous)
            parts += [text[position : match.start()], word]
            position, previous = match.end(), lower(word)
        return "".join(parts) + text[position:]

    def restore_word(self, word: str, first: bool = False, after: str = "") -> str:
        """The most plausible case of one run of letters: the first word of a sentence is
        capitalised or kept as given; `after` is the previous word (lower case), for the
        determiner rule."""
        lowered, capitalised = lower(word), capitalise(word)
        # A determiner after a determiner is a pronoun ("..., die die Betreiber ..."): no noun next.
        noun = NOUN_BONUS if after in self.determiners and lowered not in self.determiners else 0.0
        scores = {capitalised: self.score(capitalised) + noun}
        scores.setdefault(word, self.score(word) + noun)  # as given: an abbreviation it knows ("die EU")
        if not first:
            scores[lowered] = self.score(lowered) + LOWER_BONUS
        return max(scores, key=lambda form: scores[form])

    def restore_shouted(self, text: str) -> str | None:
        """`text` with its case restored if it is shouted (`is_shouting`), else None."""
        return self.restore(text) if is_shouting(text) else None

    def restored(self, text: str) -> str | None:
        """`text` as the model should read it, when that is not as given: its case restored if
        it is shouted as a whole (`restore_shouted`) or in words (`restore_emphasised`); else None.
        For given texts (forced alignment), where nothing is answered in capitals."""
        return self.restore_shouted(text) or self.restore_emphasised(text)

    def restore_emphasised(self, text: str) -> str | None:
        """A normal text's shouted words ("Das ist UNGLAUBLICH teuer.", "WICHTIG: Bitte ...")
        in their most plausible case, the rest as given; None if it has none (or is shouted as
        a whole: `restore_shouted`).

        A shouted word is a run of letters with at least MIN_UPPER_LETTERS cased letters, all
        upper case; shorter ones ("USA", "EU") are abbreviations the vocabulary often knows.
        Left as typed, such a word is cut into single letters, and the model writes letters
        ("Das ist UNGLAUBLICH teuer." -> "This is a UNNNNLLL."). An acronym of four letters or
        more ("NATO") is restored too ("Nato", the form British English writes): the model
        cannot read it in capitals either.
        """
        cased, upper = case_counts(text)
        # Fewer capitals than one shouted word has (most sentences): no word walk.
        if upper < MIN_UPPER_LETTERS or _shouting(cased, upper):
            return None
        restored = self._restore_words(text, is_shouted_word)
        return None if restored == text else restored


def is_shouted_word(word: str) -> bool:
    """A run of letters with at least MIN_UPPER_LETTERS cased letters, all upper case."""
    cased = [character for character in word if is_cased(character)]
    return len(cased) >= MIN_UPPER_LETTERS and all(character == _upper(character) for character in cased)


def cased_pieces(pieces: list[tuple[str, int, int]], read: str, original: str) -> list[str]:
    """SentencePiece pieces of `read` (with (start, end) character offsets into it) shown in
    the case of `original`, of which `read` is a case change of the same length: a piece whose
    visible characters are those of its span takes the original's characters there ("▁Regen"
    of "REGENSCHIRM" -> "▁REGEN"); any other (normalised by SentencePiece) is kept."""
    shown = []
    for piece, start, end in pieces:
        visible = piece.lstrip("▁")
        if visible and read[start:end].endswith(visible):
            piece = piece[: len(piece) - len(visible)] + original[end - len(visible) : end]
        shown.append(piece)
    return shown


def keep_shouted_words(source: str, text: str, pieces: list[str]) -> tuple[str, list[str]]:
    """A translation (`text` and its SentencePiece `pieces`) with every word that copies a
    shouted word of the `source` back in its capitals.

    The model reads a shouted word of a normal sentence in its restored case
    (`Truecaser.restore_emphasised`: "NATO" as "Nato") and may copy it in that case ("The
    nato has ..."); a name or an acronym should come back as the user wrote it. Only whole
    words whose letters are a shouted source word's, case aside, change, character for
    character, in the text and in the pieces, so the pieces still spell the text and every
    offset holds. Nothing changes where the pieces do not spell the text exactly.
    """
    shouted = {lower(m.group()): m.group() for m in WORD_LETTERS.finditer(source) if is_shouted_word(m.group())}
    characters = list(text)
    for match in WORD_LETTERS.finditer(text):
        original = shouted.get(lower(match.group()))
        if original is not None and len(original) == len(match.group()):
            characters[match.start() : match.end()] = original
    return _recased(text, "".join(characters), pieces)


def keep_case_pattern(source: str, text: str, pieces: list[str]) -> tuple[str, list[str]]:
    """A translation (`text` and its `pieces`) in the casing pattern of its `source` segment:
    a title-cased source (`is_title_cased`: "Neue Funktionen", "Terms of Service") gets each
    lower-case word of the translation capitalised, its small words after the first excepted;
    a capitalised source ("Willkommen", "Bericht über das Projekt") gets its first word
    capitalised when the model wrote it in lower case ("welcome", "report on the project").

    Why: the model learnt sentences, whose first word its training text capitalised; a
    heading or a single word is not one, and it often answers in lower case. Only words
    written all in lower case change ("iPhone", "NATO" stay), character for character, in
    the text and the pieces alike, so every offset holds; nothing changes where the pieces
    do not spell the text exactly.
    """
    first = next(WORD_LETTERS.finditer(source), None)
    if first is None or not _capitalised(first.group()):
        return text, pieces
    title = is_title_cased(source)
    characters = list(text)
    for index, match in enumerate(WORD_LETTERS.finditer(text)):
        word = match.group()
        if word == lower(word) and (index == 0 or (title and word not in SMALL_WORDS)):
            characters[match.start() : match.end()] = capitalise(word)
        if not title:
            break
    return _recased(text, "".join(characters), pieces)


# Words a title leaves in lower case (after its first word): English and German articles,
# conjunctions and short prepositions, as English style guides (and German, which capitalises
# only nouns anyway) keep them.
_SMALL_WORDS = """a an the and or but nor so yet if than of on in at to by for with from into onto over off out up
    as per via vs der die das den dem des ein eine einen einem einer eines und oder aber für mit von zu zum zur
    im am an auf aus bei in über unter vor nach um ohne durch bis als"""
SMALL_WORDS = frozenset(_SMALL_WORDS.split())
SENTENCE_END = re.compile(r"[.!?…]\W*$")


def _capitalised(word: str) -> bool:
    """Begins with an upper-case letter and is not all capitals (an acronym, a shouted word)."""
    return word[:1] == _upper(word[:1]) != _lower(word[:1]) and not (len(word) > 1 and word == shout(word))


def is_title_cased(text: str) -> bool:
    """A heading in title case: two words or more, no sentence-ending punctuation, and every
    word capitalised but the small words after the first ("Neue Funktionen", "Terms of Service")."""
    found = [m.group() for m in WORD_LETTERS.finditer(text)]
    if len(found) < 2 or SENTENCE_END.search(text):
        return False
    return _capitalised(found[0]) and all(_capitalised(w) or w in SMALL_WORDS for w in found[1:])


def _recased(text: str, restored: str, pieces: list[str]) -> tuple[str, list[str]]:
    """`restored` (a case change of `text`, character for character) with `pieces` changed
    the same; (`text`, `pieces`) unchanged when nothing changed or the pieces do not spell it."""
    spelled, spans = pieces_with_offsets(pieces)
    if restored == text or spelled != text:
        return text, pieces
    return restored, [
        piece[: len(piece) - (span.end - span.start)] + restored[span.start : span.end]
        for piece, span in zip(pieces, spans, strict=True)
    ]
