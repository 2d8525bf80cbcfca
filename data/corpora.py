"""Readers for parallel corpora: the Ding dictionary, tab-separated pairs, Moses text pairs,
gettext catalogs of translated software messages, translated Debian package descriptions.

Every reader yields :class:`Pair` records and raises :class:`CorpusError` naming the file
and line for input it cannot read, so a user bringing their own corpus learns exactly
what to fix.
"""

from __future__ import annotations

import ast
import bz2
import gettext
import gzip
import logging
import lzma
import re
import shutil
import subprocess
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

log = logging.getLogger("crossalign.data")

DING_SYSTEM_PATH = Path("/usr/share/trans/de-en")
DING_LICENSE = "GPL-2.0-or-later (Ding dictionary, Frank Richter, TU Chemnitz; Debian package trans-de-en)"
DING_HOWTO = (
    "The Ding dictionary was not found. Install it with `sudo apt-get install trans-de-en` "
    "(it lands in /usr/share/trans/de-en), or let crossalign unpack it into its cache with "
    "`apt-get download trans-de-en` available on PATH, or pass --ding-path FILE."
)

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


# --------------------------------------------------------------------------- Ding

# Annotations that are metadata, not translation: {f} gender/POS, [coll.] register/domain,
# <variant spellings>, /ABBR/ abbreviations, (glosses).
_ANNOTATIONS = [  # (opening character, pattern): the character gates the regex, for speed
    ("{", re.compile(r"\{[^{}]*\}")),
    ("[", re.compile(r"\[[^\[\]]*\]")),
    ("<", re.compile(r"<[^<>]*>")),
    ("/", re.compile(r"(?<!\S)/[^/\s][^/]*?/(?!\S)")),
    ("(", re.compile(r"\([^()]*\)")),
]
# Placeholders for valency slots; they never occur in real sentences. Ding writes the
# possessive "sb.'s", whose "'s" goes with the placeholder.
_PLACEHOLDERS = re.compile(r"(?<![\w.])(etw|jd|jdm|jdn|jds|sth|sb|sb's|sbs)\.(?:'s)?(?!\w)|(?<!\w)(sb's|one's)(?!\w)")
# "sheer/pure" -> "sheer": Ding writes interchangeable words with a slash.
_SLASH_WORDS = re.compile(r"(\w[\w'-]*)(?:/[\w'-]+)+")
_SPACED_SLASH = re.compile(r"\s/\s")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.!?;:])")
_SENTENCE_END = re.compile(r"[.!?…]['\"»«“”]?$")


def _split_top_level(text: str, separator: str) -> list[str]:
    """Split on `separator` outside (), [], {} and <> so glosses keep their semicolons."""
    parts, start, search_from = [], 0, 0
    while (index := text.find(separator, search_from)) != -1:
        prefix = text[start:index]
        # Bracket depth of the candidate: counting in C is far faster than a char loop.
        depth = sum(prefix.count(c) for c in "([{<") - sum(prefix.count(c) for c in ")]}>")
        if depth <= 0:
            parts.append(prefix)
            start = index + len(separator)
        search_from = index + len(separator)
    parts.append(text[start:])
    return parts


def clean_ding_text(text: str) -> str:
    """Strip Ding's annotations and placeholders from one alternative.

    Returns "" for alternatives we cannot turn into one clean string: a spaced slash
    ("none other gods but me / other gods before me") marks alternatives of unknown extent.
    """
    for _ in range(2):  # nested annotations, e.g. "(zoologische (Unter)familie)"
        for opener, pattern in _ANNOTATIONS:
            if opener in text:
                text = pattern.sub(" ", text)
    if "." in text or "'" in text:
        text = _PLACEHOLDERS.sub(" ", text)
    if _SPACED_SLASH.search(text) or text.rstrip().endswith("/"):
        return ""
    if "/" in text:
        text = _SLASH_WORDS.sub(r"\1", text)
    if "/" in text:  # a half-spaced variant ("centre /center of") of unknown extent
        return ""
    text = normalize_text(text)
    return _SPACE_BEFORE_PUNCT.sub(r"\1", text).strip(" ,;:")


def is_sentence(text: str) -> bool:
    """A Ding example sentence: capitalised, ends like a sentence, at least three words."""
    return (
        bool(text)
        and (text[0].isupper() or text[0] in "\"'„»0123456789")
        and bool(_SENTENCE_END.search(text))
        and len(text.split()) >= 3
    )


def _alternatives(sub_entry: str) -> list[str]:
    cleaned = (clean_ding_text(alt) for alt in _split_top_level(sub_entry, "; "))
    return [alt for alt in cleaned if alt]


def parse_ding_line(line: str) -> list[Pair]:
    """All pairs of one Ding entry: sub-entries (` | `) align by position across `::`."""
    german, english = line.split(" :: ", 1)
    de_subs, en_subs = _split_top_level(german, " | "), _split_top_level(english, " | ")
    if len(de_subs) != len(en_subs):
        return []  # misaligned entry: cannot tell which example translates which
    pairs: list[Pair] = []
    for de_sub, en_sub in zip(de_subs, en_subs):
        de_alts, en_alts = _alternatives(de_sub), _alternatives(en_sub)
        if not de_alts or not en_alts:
            continue
        # Pair alternatives by position and always the first with the first; a full cross
        # product would multiply synonyms ("blank; pur; rein" x "sheer; pure; plain").
        combos = {(0, 0)} | {(i, min(i, len(en_alts) - 1)) for i in range(len(de_alts))}
        combos |= {(min(j, len(de_alts) - 1), j) for j in range(len(en_alts))}
        for i, j in sorted(combos):
            de, en = de_alts[i], en_alts[j]
            kind = SENTENCE if is_sentence(de) and is_sentence(en) else PHRASE
            pairs.append(Pair(de, en, kind))
    return pairs


def find_ding(explicit: Path | None = None, cache_dir: Path | None = None) -> Path:
    """Locate the Ding file: explicit path, the system package, or unpack it into a cache."""
    if explicit is not None:
        if not explicit.is_file():
            raise CorpusError(f"{explicit}: no such file. {DING_HOWTO}")
        return explicit
    if DING_SYSTEM_PATH.is_file():
        return DING_SYSTEM_PATH
    cache_dir = cache_dir or Path.home() / ".cache" / "crossalign" / "ding"
    cached = cache_dir / "root" / "usr/share/trans/de-en"
    if cached.is_file():
        return cached
    if shutil.which("apt-get") and shutil.which("dpkg"):
        cache_dir.mkdir(parents=True, exist_ok=True)
        try:
            subprocess.run(
                ["apt-get", "download", "trans-de-en"], cwd=cache_dir, check=True, capture_output=True, timeout=300
            )
            deb = sorted(cache_dir.glob("trans-de-en_*.deb"))[-1]
            subprocess.run(
                ["dpkg", "-x", str(deb), str(cache_dir / "root")], check=True, capture_output=True, timeout=300
            )
        except (subprocess.SubprocessError, IndexError, OSError):
            pass
        if cached.is_file():
            return cached
    raise CorpusError(DING_HOWTO)


def read_ding(path: Path) -> Iterator[Pair]:
    """Yield cleaned sentence and phrase pairs from a Ding dictionary file."""
    with _open_text(path) as lines:
        for number, line in lines:
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            if " :: " not in line:
                raise CorpusError(f"{path}:{number}: expected 'German :: English', got {line[:80]!r}")
            yield from parse_ding_line(line)


# --------------------------------------------------------------------------- TSV / Moses


class _open_text:
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


def read_tsv(path: Path) -> Iterator[Pair]:
    """`source<TAB>target[<TAB>anything]` per line (Tatoeba / manythings style)."""
    with _open_text(path) as lines:
        for number, line in lines:
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) < 2:
                raise CorpusError(f"{path}:{number}: expected 'source<TAB>target', found no tab")
            source, target = normalize_text(fields[0]), normalize_text(fields[1])
            if not source or not target:
                raise CorpusError(f"{path}:{number}: empty {'source' if not source else 'target'}")
            yield Pair(source, target, SENTENCE)


def read_moses(source_path: Path, target_path: Path) -> Iterator[Pair]:
    """Two plain-text files, line i of one translating line i of the other."""
    with _open_text(source_path) as sources, _open_text(target_path) as targets:
        # zip_longest, not zip: zip would silently swallow one extra line of the source file.
        for source_item, target_item in zip_longest(sources, targets):
            if source_item is None or target_item is None:
                longer, (number, _) = (target_path, target_item) if source_item is None else (source_path, source_item)
                raise CorpusError(f"{longer}:{number}: the two Moses files have different line counts")
            (number, source), (_, target) = source_item, target_item
            source, target = normalize_text(source), normalize_text(target)
            if not source and not target:
                continue
            if not source or not target:
                side = source_path if not source else target_path
                raise CorpusError(f"{side}:{number}: empty line where the other file has text")
            yield Pair(source, target, SENTENCE)


# --------------------------------------------------------------------------- gettext catalogs
#
# Every translated program ships its messages as a catalog: the English original (msgid) and
# its translation (msgstr). Debian's packages carry tens of thousands of German ones
# (`crossalign data catalogs` collects them: data/catalogs.py). A message becomes a pair only
# when it is plain text: entries with format placeholders (`%s`, `{name}`, `$VAR`), markup,
# escapes, URLs, file names or several lines are skipped, and keyboard accelerators (`_Open`,
# `&Save`, `~Print`) are dropped. Pairs come as (translation, English original), so a German
# catalog reads German -> English like Ding, and `--reverse` gives English -> German.

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


# --------------------------------------------------------------------------- package descriptions
#
# Debian's Description Translation Project (DDTP) translates the descriptions of Debian's
# packages; apt fetches them as `Translation-LL` index files, each description keyed by the
# md5 of its English original (`crossalign data descriptions` collects them:
# data/descriptions.py). A description is a one-line summary and paragraphs of long text:
# the summaries pair up, paragraphs pair up when both sides have as many, and within a
# paragraph the sentences (or the items of a bulleted list) pair up when both sides have as
# many; preformatted paragraphs (lines indented further) are skipped. Each side must be plain
# text (`plain_message`). Pairs come as (translation, English original), like gettext.

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
    """(translation, original) of the units that pair up (module comment above)."""
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


# --------------------------------------------------------------------------- corpus


def read_corpus(spec: str, ding_path: Path | None = None) -> tuple[Iterator[Pair], list[Path], str]:
    """Parse a `--corpus` spec (`ding`, `tsv:PATH`, `moses:SRC,TGT`, `gettext:PATH`,
    `descriptions:DIR`).

    Returns the pair iterator, the input files (for the manifest's sha256) and the license.
    """
    if spec == "ding":
        path = find_ding(ding_path)
        return read_ding(path), [path], DING_LICENSE
    kind, _, rest = spec.partition(":")
    if kind == "tsv" and rest:
        path = Path(rest).expanduser()
        return read_tsv(path), [path], "user-supplied (see the corpus's own license)"
    if kind == "moses" and "," in rest:
        src, tgt = (Path(p).expanduser() for p in rest.split(",", 1))
        return read_moses(src, tgt), [src, tgt], "user-supplied (see the corpus's own license)"
    if kind == "gettext" and rest:
        root = Path(rest).expanduser()  # "gettext:~/..." is not a word the shell expands
        return read_gettext(root), catalog_files(root), GETTEXT_LICENSE
    if kind == "descriptions" and rest:
        root = Path(rest).expanduser()
        languages = description_languages(root)
        files = [translation_file(root, "en"), *(translation_file(root, language) for language in languages)]
        return read_descriptions(root), files, DESCRIPTIONS_LICENSE
    raise CorpusError(
        f"unknown corpus spec {spec!r}: use ding, tsv:PATH, moses:SRC,TGT, gettext:PATH or descriptions:DIR"
    )


# --------------------------------------------------------------------------- filters


def keep_pair(pair: Pair, max_chars: int = 300, max_ratio: float = 3.0) -> bool:
    """Length and length-ratio filter; the +5 slack keeps very short pairs ('Ja.' / 'Yes.')."""
    ls, lt = len(pair.source), len(pair.target)
    if not ls or not lt or ls > max_chars or lt > max_chars:
        return False
    return max(ls, lt) <= max_ratio * min(ls, lt) + 5
