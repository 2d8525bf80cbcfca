"""Readers for parallel corpora, one module per kind: the Ding dictionary (`ding`),
tab-separated pairs and Moses text pairs (`lines`), gettext catalogs of translated software
messages (`catalogs`), translated Debian package descriptions (`descriptions`); what they
share, `Pair`, its kinds and `CorpusError`, in `pairs`. `read_corpus` picks the reader of a
`--corpus` spec.

Every reader yields :class:`Pair` records and raises :class:`CorpusError` naming the file
and line for input it cannot read, so a user bringing their own corpus learns exactly
what to fix.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from data.corpora.catalogs import GETTEXT_LICENSE, catalog_files, read_gettext
from data.corpora.descriptions import DESCRIPTIONS_LICENSE, description_languages, read_descriptions, translation_file
from data.corpora.ding import DING_LICENSE, find_ding, read_ding
from data.corpora.lines import read_moses, read_tsv
from data.corpora.pairs import CorpusError, Pair


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
