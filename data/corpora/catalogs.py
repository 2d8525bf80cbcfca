"""gettext catalogs of translated software messages (.po and .mo) as pairs.

Every translated program ships its messages as a catalog: the English original (msgid) and
its translation (msgstr). Debian's packages carry tens of thousands of German ones
(`crossalign data catalogs` collects them: data/catalogs.py). A message becomes a pair only
when it is plain text: entries with format placeholders (`%s`, `{name}`, `$VAR`), markup,
escapes, URLs, file names or several lines are skipped, and keyboard accelerators (`_Open`,
`&Save`, `~Print`) are dropped. Pairs come as (translation, English original), so a German
catalog reads German -> English like Ding, and `--reverse` gives English -> German.
"""

from __future__ import annotations

import ast
import gettext
import logging
import re
from collections.abc import Iterator
from pathlib import Path

from data.corpora.pairs import PHRASE, SENTENCE, CorpusError, Pair, is_sentence, normalize_text

log = logging.getLogger("crossalign.data")

GETTEXT_LICENSE = "each catalog's own (the licenses of the programs whose messages these are)"

# What a plain-text message never holds: printf/format placeholders, braces, shell
# variables, markup, backslash escapes, URLs, mail addresses, paths, file names, pipes.
_NOT_PLAIN = re.compile(r"[%{}$<>\\@|\t\n]|https?:|(?<![\w.])/\w|\w\.[a-z]{2,4}\b")
# A keyboard accelerator marks the letter after it: "_Open", "&Save", "~Print".
_ACCELERATOR = re.compile(r"[_&~](?=\w)")
# Chinese/Japanese/Korean-style accelerators appended in brackets: "Öffnen (_O)".
_BRACKET_ACCELERATOR = re.compile(r"\s*\(\w\)$")


def plain_message(text: str) -> str:
    """The message as a reader sees it, or "" where it is not plain text."""
    if not text or _NOT_PLAIN.search(text):
        return ""
    text = _BRACKET_ACCELERATOR.sub("", _ACCELERATOR.sub("", text))
    text = normalize_text(text)
    return text if re.search(r"[^\W\d_]{2}", text) else ""


def message_pair(original: str, translation: str) -> Pair | None:
    """(translation, original) as a Pair, or None where either side is not plain text or
    the translation is the original (untranslated, or a name)."""
    source, target = plain_message(translation), plain_message(original)
    if not source or not target or source.casefold() == target.casefold():
        return None
    kind = SENTENCE if is_sentence(source) and is_sentence(target) else PHRASE
    return Pair(source, target, kind)


# --------------------------------------------------------------------------- .mo


def read_mo(path: Path) -> Iterator[tuple[str, str]]:
    """(msgid, msgstr) of a compiled catalog; a plural entry gives its singular forms."""
    try:
        with open(path, "rb") as handle:
            catalog = gettext.GNUTranslations(handle)._catalog  # noqa: SLF001 - the only way to list it
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise CorpusError(f"{path}: not a readable gettext catalog ({error})") from None
    for key, translation in catalog.items():
        if isinstance(key, tuple):  # (msgid, plural index): keep the singular
            if key[1] != 0:
                continue
            key = key[0]
        original = key.split("\x04", 1)[-1]  # drop the msgctxt
        if original and translation:
            yield original, translation


# --------------------------------------------------------------------------- .po

_PO_LINE = re.compile(r'^(msgctxt|msgid|msgid_plural|msgstr(?:\[(\d+)\])?)\s+(".*")\s*$')


def _po_string(literal: str, path: Path, number: int) -> str:
    try:
        value = ast.literal_eval(literal)
    except (SyntaxError, ValueError):
        raise CorpusError(f"{path}:{number}: malformed string {literal[:60]!r}") from None
    if not isinstance(value, str):
        raise CorpusError(f"{path}:{number}: malformed string {literal[:60]!r}")
    return value


def read_po(path: Path) -> Iterator[tuple[str, str]]:
    """(msgid, msgstr) of a source catalog: fuzzy and obsolete entries skipped, plurals give
    their singular forms, the header entry (empty msgid) skipped."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise CorpusError(f"{path}: invalid UTF-8 ({error.reason} at byte {error.start})") from None
    entry: dict[str, str] = {}
    fuzzy = False  # the entry being read is marked fuzzy (a guess, not a translation)
    field = ""

    def finish() -> Iterator[tuple[str, str]]:
        original, translation = entry.get("msgid", ""), entry.get("msgstr", entry.get("msgstr[0]", ""))
        if original and translation and not fuzzy:
            yield original, translation

    def complete() -> bool:  # the entry has its translation, so a comment or msgid starts the next
        return any(key.startswith("msgstr") for key in entry)

    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):  # comments, flags and obsolete (#~) entries precede an entry
            if complete():
                yield from finish()
                entry, field, fuzzy = {}, "", False
            if stripped.startswith("#,") and "fuzzy" in stripped:
                fuzzy = True
            continue
        if stripped.startswith('"'):
            if not field:
                raise CorpusError(f"{path}:{number}: a string continues no keyword")
            entry[field] += _po_string(stripped, path, number)
            continue
        match = _PO_LINE.match(stripped)
        if match is None:
            raise CorpusError(f"{path}:{number}: expected msgctxt, msgid or msgstr, got {stripped[:60]!r}")
        field = match.group(1)
        if field in ("msgctxt", "msgid") and complete():
            yield from finish()
            entry, fuzzy = {}, False
        entry[field] = _po_string(match.group(3), path, number)
    yield from finish()


# --------------------------------------------------------------------------- gettext: catalogs


def catalog_files(root: Path) -> list[Path]:
    """The catalogs at `root`: the file itself, or every .po/.mo below a directory."""
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise CorpusError(f"{root}: no such file or directory")
    files = sorted(p for p in root.rglob("*") if p.suffix in (".po", ".mo") and p.is_file())
    if not files:
        raise CorpusError(f"{root}: no .po or .mo catalogs below it")
    return files


def read_gettext(root: Path) -> Iterator[Pair]:
    """Pairs of every catalog at `root`, each (translation, original) once.

    A catalog that cannot be read is logged and skipped when `root` is a directory (one
    broken catalog among hundreds should not stop the rest) and raised when it is the file.
    """
    files = catalog_files(root)
    seen: set[tuple[str, str]] = set()
    skipped = 0
    for path in files:
        reader = read_mo if path.suffix == ".mo" else read_po
        try:
            messages = list(reader(path))
        except CorpusError as error:
            if root.is_file():
                raise
            log.warning("skipping %s", error)
            skipped += 1
            continue
        for original, translation in messages:
            pair = message_pair(original, translation)
            if pair is not None and (pair.source, pair.target) not in seen:
                seen.add((pair.source, pair.target))
                yield pair
    log.info("read %d gettext catalogs (%d skipped): %d distinct plain pairs", len(files), skipped, len(seen))
