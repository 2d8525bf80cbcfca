"""Hostile files made by hand, for the tests and bench/hostile_documents.py: ZIP archives whose
headers lie (an entry that inflates far past the size it declares, a central directory of
400,000 entries behind an end record that may say otherwise), and text formats built to make
a reader allocate (2 MiB of empty paragraphs, of unclosed tags, of blank lines).

The ZIP records are written field by field (APPNOTE.TXT 4.3.7, 4.3.12, 4.3.16), so an entry
can say anything about itself: `zipfile` would write the truth.
"""

from __future__ import annotations

import struct
import zipfile
import zlib

ODT_MIMETYPE = b"application/vnd.oasis.opendocument.text"
ODT_CONTENT = (
    b'<?xml version="1.0" encoding="UTF-8"?>'
    b'<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
    b'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" office:version="1.2">'
    b"<office:body><office:text><text:p>Das Haus ist klein.</text:p></office:text></office:body>"
    b"</office:document-content>"
)


def deflated_spaces(mebibytes: int, head: bytes = b"") -> bytes:
    """A raw deflate stream of `head` and then `mebibytes` MiB of spaces, about 1,000 to 1 (so
    1,024 of them make a 1 MB stream). Each MiB is one block after a full flush, which resets
    the compressor: the same bytes every time, so the stream is built by repeating them."""
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    start = packer.compress(head) + packer.flush(zlib.Z_FULL_FLUSH)
    block = packer.compress(b" " * (1 << 20)) + packer.flush(zlib.Z_FULL_FLUSH)
    return start + block * mebibytes + packer.flush()


def _entry(name: bytes, method: int, crc: int, packed: int, size: int, offset: int) -> tuple[bytes, bytes]:
    """The local header (without its data) and the central directory record of one entry."""
    local = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, method, 0, 0x21, crc, packed, size, len(name), 0) + name
    sizes = (crc, packed, size, len(name))
    central = (
        struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, method, 0, 0x21, *sizes, 0, 0, 0, 0, 0, offset) + name
    )
    return local, central


def _end(count: int, directory_size: int, directory_offset: int) -> bytes:
    """The end of central directory record; past 65,535 entries a ZIP64 record and its locator
    before it hold the count (APPNOTE.TXT 4.3.14-16)."""
    if count <= 0xFFFF:
        return struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, count, count, directory_size, directory_offset, 0)
    at = directory_offset + directory_size
    record = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, directory_size, directory_offset)
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, at, 1)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, directory_size, directory_offset, 0)
    return record + locator + end


def lying_zip(entries: list[tuple[str, bytes, int, bytes | tuple[int, int]]]) -> bytes:
    """An archive of (name, data as stored, method, what it says it holds) entries: each
    entry's size and CRC in its headers are those of the last field (bytes, or their (size,
    CRC)), whatever the stored data inflates to."""
    body, directory = b"", b""
    for name, stored, method, said in entries:
        size, crc = said if isinstance(said, tuple) else (len(said), zlib.crc32(said))
        local, central = _entry(name.encode(), method, crc, len(stored), size, len(body))
        body += local + stored
        directory += central
    return body + directory + _end(len(entries), len(directory), len(body))


def odt_bomb(megabytes: int, plausible: bool = False) -> bytes:
    """A `megabytes` MB ODT whose content.xml says it is a small valid document (its size and CRC are those of
    ODT_CONTENT) while its deflate stream goes on with about 1 GiB of spaces per MB: `zipfile`'s
    `read` inflates the whole stream before it cuts it to the declared size. `plausible`: it
    declares as many bytes as it has compressed (ODT_CONTENT and spaces, with their CRC), which
    no check of the headers can tell from a true entry; only inflating tells."""
    stream = deflated_spaces(megabytes << 10, ODT_CONTENT)
    said = ODT_CONTENT.ljust(len(stream)) if plausible else ODT_CONTENT
    return lying_zip(
        [
            ("mimetype", ODT_MIMETYPE, zipfile.ZIP_STORED, ODT_MIMETYPE),
            ("content.xml", stream, zipfile.ZIP_DEFLATED, said),
        ]
    )


def docx_bomb(megabytes: int) -> bytes:
    """A DOCX whose word/document.xml lies the same way (python-docx reads it through zipfile)."""
    import io

    import docx

    out = io.BytesIO()
    document = docx.Document()
    document.add_paragraph("Das Haus ist klein.")
    document.save(out)
    entries = []
    with zipfile.ZipFile(out) as archive:
        for info in archive.infolist():
            data = archive.read(info)
            if info.filename == "word/document.xml":
                entries.append((info.filename, deflated_spaces(megabytes << 10, data), zipfile.ZIP_DEFLATED, data))
            else:
                entries.append((info.filename, data, zipfile.ZIP_STORED, data))
    return lying_zip(entries)


def docx_xml_bomb(mebibytes: int = 150) -> bytes:
    """An honest DOCX (true sizes and CRCs) whose word/document.xml is `mebibytes` MiB of tiny
    paragraphs, with a comment of random text that keeps it under 200 times its compressed
    size: within the per-entry ratio and the unzipped limit, it would be parsed whole (a node
    per element); only the count of its tags tells."""
    import base64
    import io
    import os

    import docx

    out = io.BytesIO()
    docx.Document().save(out)
    with zipfile.ZipFile(out) as archive:
        entries = [(info.filename, archive.read(info)) for info in archive.infolist()]
    original = dict(entries)["word/document.xml"]
    head, tail = original[: original.index(b"<w:body>") + 8], b"</w:body></w:document>"
    chunk = b"<w:p><w:r><w:t>a</w:t></w:r></w:p>" * ((1 << 20) // 35)
    padding = b"<!--" + base64.b64encode(os.urandom(mebibytes * 5600)) + b"-->"
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    start = packer.compress(head) + packer.flush(zlib.Z_FULL_FLUSH)
    block = packer.compress(chunk) + packer.flush(zlib.Z_FULL_FLUSH)
    stream = start + block * mebibytes + packer.compress(padding + tail) + packer.flush()
    crc = zlib.crc32(head)
    for _ in range(mebibytes):
        crc = zlib.crc32(chunk, crc)
    said = (len(head) + len(chunk) * mebibytes + len(padding) + len(tail), zlib.crc32(padding + tail, crc))
    return lying_zip(
        [
            (name, stream, zipfile.ZIP_DEFLATED, said) if name == "word/document.xml" else (name, data, 0, data)
            for name, data in entries
        ]
    )


def many_entries(count: int, said: int | None = None) -> bytes:
    """An archive whose central directory lists `count` empty entries (all the same local
    header: cheap to build, about 50 bytes an entry); its end record says `said` (default the
    truth)."""
    local, _ = _entry(b"a", 0, 0, 0, 0, 0)
    records = b"".join(_entry(f"{k:x}".encode(), 0, 0, 0, 0, 0)[1] for k in range(count))
    return local + records + _end(said if said is not None else count, len(records), len(local))


def entries_zip(count: int) -> bytes:
    """A true archive of `count` empty entries, written by zipfile."""
    import io

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for k in range(count):
            archive.writestr(f"e{k}", b"")
    return out.getvalue()


# 2 MiB text files, each as unkind to its reader as it can be while staying valid.
def empty_paragraphs(megabytes: int = 2) -> bytes:
    return b"<p>.</p>" * (megabytes << 17)


def open_tags(megabytes: int = 2) -> bytes:
    return b"<b>" * ((megabytes << 20) // 3)


def blank_lines(megabytes: int = 2) -> bytes:
    return b"\n" * (megabytes << 20)


def markdown_marks(megabytes: int = 2) -> bytes:
    return b"*a* " * (megabytes << 18)


def xliff_codes(megabytes: int = 2) -> bytes:
    head = b'<xliff version="1.2"><file><body><trans-unit id="1"><source>Das Haus'
    return head + b"<x/>" * (megabytes << 18) + b"</source></trans-unit></body></file></xliff>"
