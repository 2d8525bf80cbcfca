"""Debian's translated package descriptions (DDTP) as pairs.

Debian's Description Translation Project (DDTP) translates the descriptions of Debian's
packages; apt fetches them as `Translation-LL` index files, each description keyed by the
md5 of its English original (`crossalign data descriptions` collects them:
data/descriptions.py). A description is a one-line summary and paragraphs of long text:
the summaries pair up, paragraphs pair up when both sides have as many, and within a
paragraph the sentences (or the items of a bulleted list) pair up when both sides have as
many; preformatted paragraphs (lines indented further) are skipped. Each side must be plain
text (`plain_message`). Pairs come as (translation, English original), like gettext.
"""

from __future__ import annotations

import bz2
import gzip
import logging
import lzma
import re
from collections.abc import Iterator
from pathlib import Path

from data.corpora.catalogs import message_pair
from data.corpora.pairs import CorpusError, Pair

log = logging.getLogger("crossalign.data")

DESCRIPTIONS_LICENSE = (
    "each package's own (Debian package descriptions; their translations by Debian's Description "
    "Translation Project, DDTP)"
)
# A sentence ends at . ! ? before a space and a capital, digit or opening quote.
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+(?=[\"„»«“]?[A-ZÄÖÜ0-9])")
_BULLET = re.compile(r"^\s*[*+\-o•] ")


def translation_file(root: Path, language: str) -> Path:
    """`root`/Translation-`language` (plain text, or compressed .bz2, .gz or .xz)."""
    for suffix in ("", ".bz2", ".gz", ".xz"):
        path = root / f"Translation-{language}{suffix}"
        if path.is_file():
            return path
    raise CorpusError(f"{root}: no Translation-{language} file (collect one with `crossalign data descriptions`)")


def description_languages(root: Path) -> list[str]:
    """The translated languages at `root`: every Translation-LL file but English."""
    if not root.is_dir():
        raise CorpusError(f"{root}: no such directory")
    names = {p.name.removeprefix("Translation-").split(".")[0] for p in root.glob("Translation-*") if p.is_file()}
    return sorted(names - {"en"})


def read_translation_file(path: Path, language: str) -> dict[str, list[str]]:
    """Description-md5 -> the description's lines (summary first; ` .` lines as "."), of an
    apt `Translation-LL` file."""
    opener = {".bz2": bz2.open, ".gz": gzip.open, ".xz": lzma.open}.get(path.suffix, open)
    field = f"Description-{language}:"
    descriptions: dict[str, list[str]] = {}
    md5, lines = "", None
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                line = line.rstrip("\n")
                if line.startswith("Description-md5:"):
                    md5 = line.partition(":")[2].strip()
                elif line.startswith(field):
                    lines = [line.partition(":")[2].strip()]
                elif line.startswith((" ", "\t")) and lines is not None:
                    lines.append(line[1:])
                elif not line.strip():
                    if md5 and lines:
                        descriptions[md5] = lines
                    md5, lines = "", None
                elif ":" not in line:
                    raise CorpusError(f"{path}:{number}: expected a 'Field: value' line, got {line[:60]!r}")
    except UnicodeDecodeError as error:
        raise CorpusError(f"{path}: invalid UTF-8 ({error.reason} at byte {error.start})") from None
    except (OSError, EOFError, lzma.LZMAError) as error:
        raise CorpusError(f"{path}: cannot read it ({error})") from None
    if md5 and lines:
        descriptions[md5] = lines
    return descriptions


def _paragraphs(lines: list[str]) -> list[list[str]]:
    paragraphs: list[list[str]] = [[]]
    for line in lines[1:]:
        if line.strip() == ".":
            paragraphs.append([])
        else:
            paragraphs[-1].append(line)
    return [paragraph for paragraph in paragraphs if paragraph]


def _units(paragraph: list[str]) -> list[str] | None:
    """A paragraph's sentences and list items in order, or None for a preformatted one.

    A list item starts at a bullet (`* `, `- `, `o `) and takes the further indented lines
    after it; text outside items is split into sentences; any other indented line makes the
    paragraph preformatted (code, tables, ASCII art).
    """
    units: list[str] = []
    text: list[str] = []  # the running text outside list items
    item: list[str] | None = None

    def flush_text() -> None:
        if text:
            units.extend(_SENTENCE_BREAK.split(" ".join(text)))
            text.clear()

    for line in paragraph:
        if _BULLET.match(line):
            flush_text()
            item = [_BULLET.sub("", line).strip()]
            units.append("")  # filled in when the item ends
        elif line.startswith((" ", "\t")):
            if item is None:
                return None
            item.append(line.strip())
        else:
            item = None
            text.append(line.strip())
        if item is not None:
            units[-1] = " ".join(item)
    flush_text()
    return units


def description_pairs(translated: list[str], original: list[str]) -> Iterator[tuple[str, str]]:
    """(translation, original) of the units that pair up (module doc)."""
    yield translated[0], original[0]
    translated_paragraphs, original_paragraphs = _paragraphs(translated), _paragraphs(original)
    if len(translated_paragraphs) != len(original_paragraphs):
        return
    for ours, theirs in zip(translated_paragraphs, original_paragraphs):
        units, originals = _units(ours), _units(theirs)
        if units is not None and originals is not None and len(units) == len(originals):
            yield from zip(units, originals)


def read_descriptions(root: Path, language: str = "") -> Iterator[Pair]:
    """Pairs of the translated package descriptions at `root` (Translation-en and one
    Translation-LL), each (translation, original) once."""
    languages = [language] if language else description_languages(root)
    if len(languages) != 1:
        raise CorpusError(
            f"{root}: expected Translation-en and one other Translation-LL file, found languages {languages}"
        )
    translations = read_translation_file(translation_file(root, languages[0]), languages[0])
    originals = read_translation_file(translation_file(root, "en"), "en")
    seen: set[tuple[str, str]] = set()
    matched = 0
    for md5, translated in translations.items():
        original = originals.get(md5)
        if original is None:
            continue
        matched += 1
        for translation, text in description_pairs(translated, original):
            pair = message_pair(text, translation)
            if pair is not None and (pair.source, pair.target) not in seen:
                seen.add((pair.source, pair.target))
                yield pair
    log.info(
        "read %d translated package descriptions (%d with their English original): %d distinct plain pairs",
        len(translations),
        matched,
        len(seen),
    )
