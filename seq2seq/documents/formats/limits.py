"""What every format reader shares: its errors, its limits, and the checked ways in.

A document is an attack surface. A ZIP format (docx, pptx, odt) is read here before any
parser sees it, and only what this reading returns goes on (`check_zip`):

- the entry count comes from the end-of-central-directory record (or its ZIP64 one) and a
  walk over the directory's records that stops one past `max_entries`, before `zipfile`
  builds an object per entry;
- path names are safe (not absolute, no `..`, no drive letter) and unique;
- each entry's declared sizes must be possible (a stored entry is as long as it says; a
  deflated one is no longer than deflate's worst case, 0.1 % over its size; it expands at
  most `max_ratio` times past 64 KiB), and the declared sizes sum within
  `max_unzipped_bytes`;
- then every entry is inflated in bounded steps, never more than its declared size + 1
  bytes: an entry that goes on past what it declared is a zip bomb, refused, and the bytes
  really inflated are counted against `max_unzipped_bytes` as well. Its CRC must match.

python-docx and python-pptx read through `zipfile` themselves: they get a clean archive
rebuilt from these bounded reads (`CheckedZip.rebuilt`), never the upload.

Files are counted while they are read (`Tally`): segments, markup tags, lines and the "<"
of the XML to parse, each refused one past its limit, before a reader builds what the next
one would cost. XML
is parsed with entities off (`seq2seq.documents.xml.parse_xml`; python-docx and python-pptx
parse with `resolve_entities=False`). A file that does not parse as its format says raises
`DocumentError` naming the format; one over a limit raises `DocumentTooLarge`, whose message
names the limit. Nothing is written to disk: files are read and written in memory.
"""

from __future__ import annotations

import io
import re
import struct
import zipfile
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import PurePosixPath


class DocumentError(ValueError):
    """The file does not parse as its format says (the service answers 400, naming the format)."""


class DocumentTooLarge(DocumentError):
    """The file is over a limit: bytes, uncompressed size, ratio, entries, characters, segments,
    tags, lines (the service answers 413); the message names the limit."""


@dataclass(frozen=True)
class Limits:
    """What a document may hold before it is parsed or translated (0: no limit)."""

    max_unzipped_bytes: int = 200 << 20  # all entries of a ZIP format, uncompressed
    max_ratio: float = 200.0  # uncompressed / compressed, per entry: beyond it a zip bomb
    max_entries: int = 5000
    max_characters: int = 0  # characters of the segments to translate
    # Counted while a file is read (`Tally`), so a file of nothing but markup stops early:
    max_segments: int = 50_000  # segments, with words or without (blocks, paragraphs, cells, cues, lines)
    max_tags: int = 100_000  # markup: HTML tags and comments; inline elements; Markdown's marks
    max_lines: int = 100_000  # lines of a text, SubRip or Markdown file
    # "<" in the XML a reader parses (an XLIFF file; a DOCX, PPTX or ODT's .xml entries, counted
    # as they are inflated): every element needs one or two, and a parsed element costs ~100 bytes.
    max_xml_tags: int = 1_000_000


class Tally:
    """What a reader has read so far, refused (`DocumentTooLarge`) the moment a count passes its
    limit: `max_segments`, `max_tags` or `max_lines` of `Limits`."""

    NAMES = {"segments": "segments", "tags": "tags", "lines": "lines", "xml_tags": 'XML tags ("<")'}

    def __init__(self, limits: Limits, kind: str):
        self.limits, self.kind, self.counts = limits, kind, Counter()

    def add(self, what: str, count: int = 1) -> None:
        """Count `count` more `what` ("segments", "tags", "lines" or "xml_tags")."""
        self.counts[what] += count
        limit = getattr(self.limits, f"max_{what}")
        if limit and self.counts[what] > limit:
            raise DocumentTooLarge(
                f"the {self.kind} file has more than {limit} {self.NAMES[what]} (the limit max_{what}): "
                "refused before reading on"
            )

    @classmethod
    def unlimited(cls, kind: str) -> Tally:
        """A tally that counts and never refuses (a text whose caller bounds it otherwise)."""
        return cls(Limits(max_segments=0, max_tags=0, max_lines=0, max_xml_tags=0), kind)


def line_count(text: str) -> int:
    """The lines `str.splitlines` cuts `text` into, counted without cutting it."""
    breaks = sum(text.count(mark) for mark in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029") - text.count("\r\n")
    return breaks + (1 if text and not text.endswith(tuple("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")) else 0)


# ZIP records (APPNOTE.TXT 4.3): the end of central directory, its ZIP64 locator and record,
# a central directory record's fixed part, a local header's.
END = struct.Struct("<4s4H2LH")
END64_LOCATOR = struct.Struct("<4sLQL")
END64 = struct.Struct("<4sQ2H2L4Q")
CENTRAL = struct.Struct("<4s6H3L5H2L")
LOCAL = struct.Struct("<4s5H3L2H")
INFLATE_STEP = 1 << 16  # compressed bytes fed, and most bytes taken out, per step


def _directory(data: bytes, kind: str) -> tuple[int, int, int]:
    """(entries the end record declares, where the central directory starts, its size), found
    as `zipfile` finds them (the end record last, after a comment of up to 64 KiB; a ZIP64
    record just before it; an archive may follow other bytes)."""
    at = len(data) - END.size
    if not (at >= 0 and data.startswith(b"PK\x05\x06", at) and data.endswith(b"\0\0")):
        at = data.rfind(b"PK\x05\x06", max(0, len(data) - END.size - 0xFFFF))
    if at < 0 or at + END.size > len(data):
        raise DocumentError(f"not a valid {kind.upper()} file (not a ZIP archive: no end of central directory)")
    _, _, _, _, count, size, offset, _ = END.unpack_from(data, at)
    concat = at - size - offset
    locator = at - END64_LOCATOR.size
    if locator >= END64.size and data.startswith(b"PK\x06\x07", locator):
        record = locator - END64.size
        if not data.startswith(b"PK\x06\x06", record):
            raise DocumentError(f"not a valid {kind.upper()} file (a ZIP64 locator without its record)")
        _, _, _, _, _, _, _, count, size, offset = END64.unpack_from(data, record)
        concat = record - size - offset
    start = offset + concat
    if concat < 0 or start < 0 or start + size > len(data):
        raise DocumentError(f"not a valid {kind.upper()} file (its central directory is not where it says)")
    return count, start, size


def _count_entries(data: bytes, kind: str, limits: Limits) -> None:
    """Refuse an archive of more than `max_entries` entries by its end record, then by walking
    its central directory (which may hold more than the record says), before `zipfile` does."""
    declared, start, size = _directory(data, kind)
    over = f"the {kind.upper()} file has {{}} entries (at most {limits.max_entries}: the limit max_entries)"
    if declared > limits.max_entries:
        raise DocumentTooLarge(over.format(declared))
    position, end, found = start, start + size, 0
    while position < end:
        if position + CENTRAL.size > end or not data.startswith(b"PK\x01\x02", position):
            raise DocumentError(f"not a valid {kind.upper()} file (a broken central directory record)")
        name, extra, comment = struct.unpack_from("<3H", data, position + 28)
        position += CENTRAL.size + name + extra + comment
        found += 1
        if found > limits.max_entries:
            raise DocumentTooLarge(over.format(f"more than {found - 1}"))
    if found != declared:
        raise DocumentError(
            f"not a valid {kind.upper()} file (its central directory holds {found} entries, "
            f"its end record says {declared})"
        )


def _largest_deflate(size: int) -> int:
    """The most bytes a deflate stream of `size` bytes takes: stored blocks of 64 KiB, each with
    a 5-byte header, and a little over (zlib's deflateBound is tighter)."""
    return size + size // 1000 + 64


def _check_entry(entry: zipfile.ZipInfo, kind: str, limits: Limits) -> None:
    """Refuse an entry whose headers cannot be true, or that expands too much (module doc)."""
    name, label = entry.filename, f"the {kind.upper()} file's entry {entry.filename[:80]!r}"
    path = PurePosixPath(name)
    if name.startswith(("/", "\\")) or "\\" in name or ".." in path.parts or re.match(r"^[A-Za-z]:", name):
        raise DocumentError(f"not a valid {kind.upper()} file: unsafe path name in the archive: {name[:80]!r}")
    if entry.flag_bits & 0x1:
        raise DocumentError(f"not a valid {kind.upper()} file: {label} is encrypted")
    if entry.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise DocumentError(f"not a valid {kind.upper()} file: {label} uses compression method {entry.compress_type}")
    stored = entry.compress_type == zipfile.ZIP_STORED
    if (stored and entry.compress_size != entry.file_size) or entry.compress_size > _largest_deflate(entry.file_size):
        raise DocumentTooLarge(
            f"{label} holds {entry.compress_size} compressed bytes for the {entry.file_size} it declares, more than "
            "any compressor writes: refused as a zip bomb"
        )
    if entry.file_size > 1 << 16 and entry.file_size > limits.max_ratio * max(1, entry.compress_size):
        raise DocumentTooLarge(
            f"{label} expands {entry.file_size / max(1, entry.compress_size):.0f} times (at most "
            f"{limits.max_ratio:g}: the limit max_ratio): refused as a zip bomb"
        )


def _inflate(data: bytes, entry: zipfile.ZipInfo, kind: str, tally: Tally) -> bytes:
    """An entry's bytes, inflated in steps of at most INFLATE_STEP and never past its declared
    size + 1: one byte more is a zip bomb, refused before anything else is inflated. An XML
    entry's "<" are counted in `tally` step by step."""
    xml = entry.filename.endswith((".xml", ".rels"))
    label = f"the {kind.upper()} file's entry {entry.filename[:80]!r}"
    header = entry.header_offset
    if header < 0 or header + LOCAL.size > len(data) or not data.startswith(b"PK\x03\x04", header):
        raise DocumentError(f"not a valid {kind.upper()} file: {label} has no local header")
    fields_ = LOCAL.unpack_from(data, header)
    start = header + LOCAL.size + fields_[9] + fields_[10]
    encoding = "utf-8" if fields_[2] & 0x800 else "cp437"
    if data[header + LOCAL.size : header + LOCAL.size + fields_[9]].decode(encoding, "replace") != entry.orig_filename:
        raise DocumentError(f"not a valid {kind.upper()} file: {label} has another name in its local header")
    packed = memoryview(data)[start : start + entry.compress_size]
    if len(packed) != entry.compress_size:
        raise DocumentError(f"not a valid {kind.upper()} file: {label} is cut short")
    if entry.compress_type == zipfile.ZIP_STORED:
        content = bytes(packed)
        if xml:
            tally.add("xml_tags", content.count(b"<"))
    else:
        inflater, parts, made, fed = zlib.decompressobj(-15), [], 0, 0
        pending = b""
        while not inflater.eof:
            if not pending:
                if fed >= len(packed):
                    break
                pending, fed = packed[fed : fed + INFLATE_STEP], fed + INFLATE_STEP
            try:
                part = inflater.decompress(pending, min(INFLATE_STEP, entry.file_size + 1 - made))
            except zlib.error as error:
                raise DocumentError(f"not a valid {kind.upper()} file: {label}: {error}") from None
            pending = inflater.unconsumed_tail
            made += len(part)
            parts.append(part)
            if xml:
                tally.add("xml_tags", part.count(b"<"))
            if made > entry.file_size:
                raise DocumentTooLarge(
                    f"{label} inflates past the {entry.file_size} bytes it declares: refused as a zip bomb"
                )
        if not inflater.eof:
            raise DocumentError(f"not a valid {kind.upper()} file: {label}'s compressed data ends early")
        content = b"".join(parts)
    if len(content) != entry.file_size or zlib.crc32(content) != entry.CRC:
        raise DocumentError(f"not a valid {kind.upper()} file: {label} is not what its headers say (size or CRC)")
    return content


@dataclass
class CheckedZip:
    """A ZIP archive read within its limits (module doc): its entries in order and their bytes."""

    entries: list[zipfile.ZipInfo]
    contents: dict[str, bytes]

    def namelist(self) -> list[str]:
        return [entry.filename for entry in self.entries]

    def infolist(self) -> list[zipfile.ZipInfo]:
        return list(self.entries)

    def read(self, name: str | zipfile.ZipInfo) -> bytes:
        return self.contents[name.filename if isinstance(name, zipfile.ZipInfo) else name]

    def rebuilt(self) -> bytes:
        """A clean archive of the checked bytes (stored: python-docx and python-pptx only read
        it), for a library that reads through `zipfile` itself."""
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as written:
            for entry in self.entries:
                written.writestr(zipfile.ZipInfo(entry.filename, entry.date_time), self.contents[entry.filename])
        return out.getvalue()


def check_zip(data: bytes, kind: str, limits: Limits, tally: Tally | None = None) -> CheckedZip:
    """The ZIP archive of a docx/pptx/odt, read within `limits` before any parser sees it
    (module doc), its XML's "<" counted in `tally` (the file's, if the reader keeps counting);
    DocumentTooLarge over a limit, DocumentError if it is no honest archive."""
    tally = tally or Tally(limits, kind.upper())
    _count_entries(data, kind, limits)
    try:
        entries = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError) as error:
        raise DocumentError(f"not a valid {kind.upper()} file (not a ZIP archive: {error})") from None
    seen: set[str] = set()
    for entry in entries:
        _check_entry(entry, kind, limits)
        if entry.filename in seen:
            raise DocumentError(f"not a valid {kind.upper()} file: the entry {entry.filename[:80]!r} is there twice")
        seen.add(entry.filename)
    total = sum(entry.file_size for entry in entries)
    over = f"the {kind.upper()} file expands to {{}} bytes (at most {limits.max_unzipped_bytes}: the limit "
    over += "max_unzipped_bytes)"
    if total > limits.max_unzipped_bytes:
        raise DocumentTooLarge(over.format(total))
    contents, inflated = {}, 0
    for entry in entries:
        contents[entry.filename] = _inflate(data, entry, kind, tally)
        inflated += len(contents[entry.filename])
        if inflated > limits.max_unzipped_bytes:  # the declared sizes were checked: a guard all the same
            raise DocumentTooLarge(over.format(f"more than {inflated}"))
    return CheckedZip(entries, contents)


# How a library names the stream it was given, in its messages: never the client's business.
_OBJECT_REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-fA-F]+>")


def library_error(kind: str, error: Exception) -> DocumentError:
    """A parser's exception as the DocumentError of a file that is not `kind`, with any Python
    object's repr in its message (python-docx names its `BytesIO`) said as "the file"."""
    message = _OBJECT_REPR.sub("the file", str(error))
    return DocumentError(f"not a valid {kind.upper()} file: {type(error).__name__}: {message}")


def decode_text(data: bytes, kind: str) -> str:
    """UTF-8 text (a byte order mark is dropped); DocumentError otherwise."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise DocumentError(f"not a valid {kind} file: not UTF-8 text (byte {error.start})") from None
