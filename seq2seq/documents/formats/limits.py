"""What every format reader shares: its errors, its limits, and the checked ways in.

A document is an attack surface: ZIP formats (docx, pptx, odt) are checked before any
parser sees them -- entries, total uncompressed size and compression ratio (zip bombs),
and path names (absolute, `..`, drive letters) -- XML is parsed with entities off
(`seq2seq.documents.xml.parse_xml`; python-docx and python-pptx parse with
`resolve_entities=False`), and a file that does not parse as its format says raises
`DocumentError` naming the format; one over a limit raises `DocumentTooLarge`. Nothing is
written to disk: files are read and written in memory.
"""

from __future__ import annotations

import io
import re
import zipfile
from dataclasses import dataclass
from pathlib import PurePosixPath


class DocumentError(ValueError):
    """The file does not parse as its format says (the service answers 400, naming the format)."""


class DocumentTooLarge(DocumentError):
    """The file is over a limit: bytes, uncompressed size, ratio, characters (413)."""


@dataclass(frozen=True)
class Limits:
    """What a document may hold before it is parsed or translated."""

    max_unzipped_bytes: int = 200 << 20  # all entries of a ZIP format, uncompressed
    max_ratio: float = 200.0  # uncompressed / compressed, per entry: beyond it a zip bomb
    max_entries: int = 5000
    max_characters: int = 0  # characters of the segments to translate (0: no limit)


def check_zip(data: bytes, kind: str, limits: Limits) -> zipfile.ZipFile:
    """The ZIP archive of a docx/pptx/odt, checked before any parser reads it (module doc)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        entries = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as error:
        raise DocumentError(f"not a valid {kind.upper()} file (not a ZIP archive: {error})") from None
    if len(entries) > limits.max_entries:
        raise DocumentTooLarge(f"the {kind.upper()} file has {len(entries)} entries (at most {limits.max_entries})")
    total = 0
    for entry in entries:
        name = entry.filename
        path = PurePosixPath(name)
        if name.startswith(("/", "\\")) or "\\" in name or ".." in path.parts or re.match(r"^[A-Za-z]:", name):
            raise DocumentError(f"not a valid {kind.upper()} file: unsafe path name in the archive: {name[:80]!r}")
        total += entry.file_size
        if entry.file_size > 1 << 16 and entry.file_size > limits.max_ratio * max(1, entry.compress_size):
            raise DocumentTooLarge(
                f"the {kind.upper()} file's entry {name[:80]!r} expands "
                f"{entry.file_size / max(1, entry.compress_size):.0f} times (at most {limits.max_ratio:g}): "
                "refused as a zip bomb"
            )
    if total > limits.max_unzipped_bytes:
        raise DocumentTooLarge(
            f"the {kind.upper()} file expands to {total} bytes (at most {limits.max_unzipped_bytes})"
        )
    return archive


def decode_text(data: bytes, kind: str) -> str:
    """UTF-8 text (a byte order mark is dropped); DocumentError otherwise."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise DocumentError(f"not a valid {kind} file: not UTF-8 text (byte {error.start})") from None
