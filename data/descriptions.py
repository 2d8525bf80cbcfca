"""`crossalign data descriptions`: Debian's translated package descriptions as a corpus.

Debian's Description Translation Project (DDTP) translates the descriptions of Debian's
packages: for German about 13,000 of them, each a one-line summary and paragraphs of long
text, written by people. apt publishes them as `Translation-LL` index files, signed with the
archive's Release files. This command runs `apt-get update` into a directory of its own
(the system's package lists are not touched; only the translation indexes are fetched, and
apt checks their signatures) and writes `Translation-en` and `Translation-LL` there as plain
text, which `crossalign data prepare --extra-corpus descriptions:DIR` then reads as sentence
pairs (`data.corpora.descriptions.read_descriptions`).
"""

from __future__ import annotations

import argparse
import logging
import re
import shutil
import subprocess
from pathlib import Path

from data.corpora.pairs import CorpusError

log = logging.getLogger("crossalign.data")

APT_HELPER = Path("/usr/lib/apt/apt-helper")  # decompresses whatever apt stored (lz4, gz, xz)


def collect_descriptions(out: Path, language: str = "de") -> dict[str, int]:
    """Fetch the package-description indexes in English and `language` with apt into
    `out/lists/` and write `out/Translation-en` and `out/Translation-{language}` (every suite
    of the system's sources, concatenated); returns descriptions per language."""
    if not re.fullmatch(r"[a-z]{2,3}(_[A-Z]{2})?", language) or language == "en":
        raise CorpusError(f"--language {language!r}: expected a language code such as de, fr or pt_BR, not en")
    if not (shutil.which("apt-get") and APT_HELPER.is_file()):
        raise CorpusError("collecting package descriptions needs Debian's apt-get and apt-helper")
    lists = out / "lists"
    (lists / "partial").mkdir(parents=True, exist_ok=True)
    config = out / "apt.conf"
    # Read after apt.conf.d, so it replaces a system's "no translations" setting (Docker images).
    config.write_text(f'#clear Acquire::Languages;\nAcquire::Languages {{ "en"; "{language}"; }};\n')
    command = [
        "apt-get",
        "update",
        "-c",
        str(config),
        "-o",
        f"Dir::State::Lists={lists.resolve()}",
        "-o",
        "Acquire::IndexTargets::deb::Packages::DefaultEnabled=false",
        "-o",
        "Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false",
        "-o",
        "Acquire::IndexTargets::deb-src::Sources::DefaultEnabled=false",
    ]
    log.info("fetching package descriptions: %s", " ".join(command))
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise CorpusError(f"apt-get update failed ({result.returncode}): {result.stderr.strip()[-400:]}")
    counts: dict[str, int] = {}
    for code in ("en", language):
        indexes = sorted(p for p in lists.glob(f"*_i18n_Translation-{code}*") if p.is_file())
        if not indexes:
            raise CorpusError(
                f"apt fetched no Translation-{code} index (does the archive in /etc/apt/sources.list* carry it?)"
            )
        target = out / f"Translation-{code}"
        with target.open("wb") as written:
            for index in indexes:
                text = subprocess.run([str(APT_HELPER), "cat-file", str(index)], capture_output=True, check=True).stdout
                written.write(text.rstrip(b"\n") + b"\n\n")
        counts[code] = sum(1 for line in target.open("rb") if line.startswith(b"Description-md5:"))
        log.info("%s: %d descriptions from %d indexes", target, counts[code], len(indexes))
    return counts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, help="directory for Translation-en and Translation-LANGUAGE")
    parser.add_argument("--language", default="de", help="the translations' language (default de)")


def main(args: argparse.Namespace) -> None:
    collect_descriptions(args.out, args.language)
