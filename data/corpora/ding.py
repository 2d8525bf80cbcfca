"""The Ding dictionary (Debian's trans-de-en): its entries cleaned into sentence and
phrase pairs, and where to find the file."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from data.corpora.pairs import PHRASE, SENTENCE, CorpusError, Pair, is_sentence, normalize_text, open_text

DING_SYSTEM_PATH = Path("/usr/share/trans/de-en")
DING_LICENSE = "GPL-2.0-or-later (Ding dictionary, Frank Richter, TU Chemnitz; Debian package trans-de-en)"
DING_HOWTO = (
    "The Ding dictionary was not found. Install it with `sudo apt-get install trans-de-en` "
    "(it lands in /usr/share/trans/de-en), or let crossalign unpack it into its cache with "
    "`apt-get download trans-de-en` available on PATH, or pass --ding-path FILE."
)


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
    with open_text(path) as lines:
        for number, line in lines:
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            if " :: " not in line:
                raise CorpusError(f"{path}:{number}: expected 'German :: English', got {line[:80]!r}")
            yield from parse_ding_line(line)
