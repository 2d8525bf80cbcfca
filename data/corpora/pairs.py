"""What every corpus reader shares: the `Pair` it yields and its kinds, `CorpusError`, the
text normalisation and split key, what counts as a sentence, the length filter, and the
UTF-8 line reader that names file and line."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SENTENCE = "sentence"
PHRASE = "phrase"


class CorpusError(ValueError):
    """Input that cannot be read as a parallel corpus; the message names file and line."""


@dataclass(frozen=True)
class Pair:
    source: str
    target: str
    kind: str = SENTENCE  # SENTENCE or PHRASE: only sentences may enter valid/test


# --------------------------------------------------------------------------- normalisation

_SPACES = re.compile(r"\s+")
_QUOTES = str.maketrans({"’": "'", "‘": "'", "´": "'", "`": "'", "\u00a0": " "})
# C0/C1 controls and invisible format characters (zero-width space, bidi marks, BOM).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060\ufeff]")


def normalize_text(text: str) -> str:
    """NFC, one kind of apostrophe, single spaces, no control characters."""
    text = unicodedata.normalize("NFC", text).translate(_QUOTES)
    text = _CONTROL.sub("", text)
    return _SPACES.sub(" ", text).strip()


def split_key(text: str) -> str:
    """The key that decides a pair's split: sources differing only in case/space collide."""
    return normalize_text(text).casefold()


_SENTENCE_END = re.compile(r"[.!?…]['\"»«“”]?$")


def is_sentence(text: str) -> bool:
    """A Ding example sentence: capitalised, ends like a sentence, at least three words."""
    return (
        bool(text)
        and (text[0].isupper() or text[0] in "\"'„»0123456789")
        and bool(_SENTENCE_END.search(text))
        and len(text.split()) >= 3
    )


class open_text:
    """Iterate (line number, text) of a UTF-8 file; invalid UTF-8 is a CorpusError."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def __enter__(self) -> Iterator[tuple[int, str]]:
        if not self.path.is_file():
            raise CorpusError(f"{self.path}: no such file")
        self._file = self.path.open("rb")
        return self._lines()

    def _lines(self) -> Iterator[tuple[int, str]]:
        for number, raw in enumerate(self._file, start=1):
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise CorpusError(
                    f"{self.path}:{number}: invalid UTF-8 ({error.reason} at byte {error.start})"
                ) from None

    def __exit__(self, *exc: object) -> None:
        self._file.close()


def keep_pair(pair: Pair, max_chars: int = 300, max_ratio: float = 3.0) -> bool:
    """Length and length-ratio filter; the +5 slack keeps very short pairs ('Ja.' / 'Yes.')."""
    ls, lt = len(pair.source), len(pair.target)
    if not ls or not lt or ls > max_chars or lt > max_chars:
        return False
    return max(ls, lt) <= max_ratio * min(ls, lt) + 5
