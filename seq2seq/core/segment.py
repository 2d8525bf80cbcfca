"""Sentence splitting for long input: character spans, so alignments keep their offsets.

The model is trained on sentences, so a paragraph is split, its sentences are translated
as one batch, and every alignment is shifted back by its sentence's start. The rule, in
order of precedence:

1. A line break always ends a sentence (paragraphs, lists, subtitles).
2. `.`, `!`, `?` or `…` (with any closing quotes/brackets after them) end a sentence when
   whitespace follows and the next word starts with an upper-case letter, a digit, or an
   opening quote/bracket. German capitalises nouns, so "upper-case next" alone would split
   too often; hence:
3. ...except after a known abbreviation ("z.B.", "Dr.", "usw.") or a number with a period
   (German ordinals and dates: "am 3. Mai", "1. FC Köln"), or a single letter ("A. Merkel").
4. A sentence longer than `max_chars` is cut at the last `;`, `:` or `,` before the limit,
   else at the last space, else hard, so no piece exceeds the model's source length.

Spans exclude the surrounding whitespace and never overlap; text outside every span is
whitespace. Torch-free: the service and the batch CLI both use it.
"""

from __future__ import annotations

import re

# Lower-cased, without the final period. German first, then the English ones that a German
# text quotes often. A missed abbreviation only costs one needless split.
ABBREVIATIONS = frozenset(
    [
        "abb",
        "abs",
        "abt",
        "adr",
        "allg",
        "anm",
        "apr",
        "art",
        "aug",
        "bd",
        "bzw",
        "bsp",
        "ca",
        "chr",
        "dez",
        "di",
        "dipl",
        "do",
        "dr",
        "evtl",
        "etc",
        "fa",
        "feb",
        "fr",
        "frl",
        "ggf",
        "hr",
        "hrsg",
        "inkl",
        "jan",
        "jh",
        "jr",
        "jul",
        "jun",
        "kap",
        "kl",
        "max",
        "mi",
        "min",
        "mio",
        "mo",
        "mrd",
        "mr",
        "mrs",
        "ms",
        "nov",
        "nr",
        "okt",
        "prof",
        "s",
        "sa",
        "so",
        "sep",
        "sept",
        "st",
        "str",
        "tel",
        "usw",
        "u.a",
        "u.ä",
        "vgl",
        "vs",
        "z.b",
        "z.t",
        "d.h",
        "o.ä",
        "u.u",
        "i.d.r",
        "e.v",
        "bzw",
        "evtl",
        "e.g",
        "i.e",
        "ca",
        "co",
        "corp",
        "inc",
        "ltd",
        "no",
        "vol",
    ]
)

# End punctuation, then closing quotes/brackets, then the whitespace that separates.
_BOUNDARY = re.compile(r"[.!?…]+[\"'”’»«)\]]*(?=\s)")
_NEXT_STARTS_SENTENCE = re.compile(r"\s+[\"'„“‚‘»«(\[]?[\w]")
DEFAULT_MAX_CHARS = 500


def _previous_word(text: str, end: int) -> str:
    """The token (letters, digits and inner periods) ending right before `text[end]`."""
    start = end
    while start > 0 and not text[start - 1].isspace() and text[start - 1] not in "\"'„“(«»[":
        start -= 1
    return text[start:end]


def _ends_sentence(text: str, match: re.Match[str]) -> bool:
    after = _NEXT_STARTS_SENTENCE.match(text, match.end())
    if after is None:
        return False
    first = text[after.end() - 1]
    if not (first.isupper() or first.isdigit() or after.group().strip()[:1] in "\"'„“‚‘»«(["):
        return False
    if match.group()[0] != ".":
        return True  # ! ? … always end a sentence
    word = _previous_word(text, match.start())
    if not word:
        return True
    if word.isdigit() or (len(word) == 1 and word.isalpha()):
        return False  # "am 3. Mai", "A. Merkel"
    return word.lower().rstrip(".") not in ABBREVIATIONS


def _trimmed(text: str, start: int, end: int) -> tuple[int, int] | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def _cut_long(text: str, start: int, end: int, max_chars: int) -> list[tuple[int, int]]:
    spans = []
    while end - start > max_chars:
        window = text[start : start + max_chars]
        cut = max(window.rfind(mark) for mark in ";:,")
        if cut <= 0:
            cut = window.rfind(" ")
        cut = start + (cut + 1 if cut > 0 else max_chars)
        piece = _trimmed(text, start, cut)
        if piece:
            spans.append(piece)
        start = cut
        while start < end and text[start].isspace():
            start += 1
    piece = _trimmed(text, start, end)
    return spans + ([piece] if piece else [])


def split_sentences(text: str, max_chars: int = DEFAULT_MAX_CHARS) -> list[tuple[int, int]]:
    """Split `text` into sentences; returns (start, end) character spans, in order.

    `text[start:end]` is a sentence without surrounding whitespace; an empty or
    whitespace-only text has no sentences.
    """
    spans: list[tuple[int, int]] = []
    line_start = 0
    for line in text.splitlines(keepends=True):
        line_end = line_start + len(line)
        start = line_start
        for match in _BOUNDARY.finditer(text, line_start, line_end):
            if _ends_sentence(text[:line_end], match):
                spans += _cut_long(text, start, match.end(), max_chars)
                start = match.end()
        spans += _cut_long(text, start, line_end, max_chars)
        line_start = line_end
    return spans


def join_sentences(source: str, spans: list[tuple[int, int]], parts: list[str]) -> tuple[str, list[tuple[int, int]]]:
    """Join sentence translations with the whitespace found between the source sentences."""
    text, target_spans = "", []
    for index, part in enumerate(parts):
        if index:
            gap = source[spans[index - 1][1] : spans[index][0]]
            text += gap if gap else " "
        target_spans.append((len(text), len(text) + len(part)))
        text += part
    return text, target_spans
