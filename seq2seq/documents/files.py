"""Whole files as segments with their inline markup, read and written within limits: the
table of formats (`FORMATS`), reading a file as its format, and translating it.

Each format's module in `seq2seq/documents/formats/` reads a file's bytes into a
`Document` -- its segments (`Marked`), what it kept as it was without translating
(`notes`), and how to write the file back with the placed translations -- and
`translate_document` runs one through a `Translate`. The formats: txt, html (and htm),
docx, pptx, odt, xliff (and xlf), srt and md; each one's module says what it reads as
segments and what it keeps as written.

A document is an attack surface: the limits and the checked ways in (ZIP archives, UTF-8
text, the tally of what a file holds as it is read) are shared by every reader
(`formats/limits.py`); a file that does not parse as its format says raises `DocumentError`
naming the format, one over a limit `DocumentTooLarge` naming the limit.
A new format is a module in `formats/` with a reader `(bytes, Limits) -> Document` and a
`FileFormat` in `FORMATS` here; the service, `/frontend/settings` and `crossalign translate
-f` take their lists from this table.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Protocol

from seq2seq.core.alignment import to_pharaoh
from seq2seq.documents.formats import docx, html, md, odt, pptx, srt, txt, xliff
from seq2seq.documents.formats.limits import DocumentError, DocumentTooLarge, Limits, library_error
from seq2seq.documents.markup import Marked, Placed
from seq2seq.documents.translate import PlacementReport, Translate, Translation, has_words, place_segments


class Document(Protocol):
    """A file read as segments (see the module doc)."""

    segments: list[Marked]
    notes: Counter  # what the file holds that was kept as it was, untranslated: kind -> count

    def write(self, placed: list[Placed | None], language: str = "") -> bytes:
        """The file with the placed translations, in `language` (where the format records one)."""
        ...


@dataclass(frozen=True)
class FileFormat:
    name: str
    extensions: tuple[str, ...]
    media_type: str
    read: Callable[[bytes, Limits], Document]


FORMATS = {
    f.name: f
    for f in (
        FileFormat("txt", (".txt",), "text/plain; charset=utf-8", txt.read_text),
        FileFormat("html", (".html", ".htm"), "text/html; charset=utf-8", html.read_page),
        FileFormat(
            "docx",
            (".docx",),
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            docx.read_docx,
        ),
        FileFormat("odt", (".odt",), "application/vnd.oasis.opendocument.text", odt.read_odt),
        FileFormat(
            "pptx",
            (".pptx",),
            "application/vnd.openxmlformats-officedocument.presentationml.presentation",
            pptx.read_pptx,
        ),
        FileFormat("xliff", (".xlf", ".xliff"), "application/x-xliff+xml", xliff.read_xliff),
        FileFormat("srt", (".srt",), "application/x-subrip; charset=utf-8", srt.read_subtitles),
        FileFormat("md", (".md", ".markdown"), "text/markdown; charset=utf-8", md.read_markdown),
    )
}
EXTENSIONS = {extension: f for f in FORMATS.values() for extension in f.extensions}


def format_of(name: str, forced: str | None = None) -> FileFormat:
    """The format of a file by its extension (or `forced`, a format name or extension);
    DocumentError naming the supported ones otherwise."""
    wanted = forced or PurePosixPath(name.replace("\\", "/")).suffix
    key = wanted.lower().lstrip(".")
    found = FORMATS.get(key) or EXTENSIONS.get("." + key)
    if found is None:
        supported = ", ".join(sorted(EXTENSIONS))
        raise DocumentError(f"unsupported file format {wanted or '(no extension)'!r}: supported are {supported}")
    return found


def translated_name(name: str, target: str, file_format: FileFormat) -> str:
    """`report.docx` -> `report.en.docx`: the name a translated file is offered under."""
    path = PurePosixPath(name.replace("\\", "/")).name or "document"
    stem, dot, extension = path.rpartition(".")
    if not dot or "." + extension.lower() not in file_format.extensions:
        stem, extension = path, file_format.extensions[0].lstrip(".")
    return f"{stem}.{target}.{extension}"


@dataclass
class TranslatedFile:
    """A translated file, what happened to it, and every segment's alignment (the sidecar)."""

    data: bytes
    report: PlacementReport
    notes: dict[str, int]
    alignments: list[dict]

    @property
    def partial(self) -> bool:
        """Something was kept untranslated: a failed segment, or content the format keeps whole."""
        return bool(self.report.failed or self.notes)


def characters(document: Document) -> int:
    return sum(len(segment.text) for segment in document.segments if has_words(segment.text))


def read_document(data: bytes, file_format: FileFormat, limits: Limits = Limits()) -> Document:
    """Read and check a document: DocumentError if it does not parse as its format, or
    DocumentTooLarge if it is over `limits` (its characters counted before translating)."""
    try:
        document = file_format.read(data, limits)
    except DocumentError:
        raise
    except Exception as error:  # noqa: BLE001 - whatever else a reader meets in the bytes, they are not this format
        raise library_error(file_format.name, error) from None
    count = characters(document)
    if limits.max_characters and count > limits.max_characters:
        raise DocumentTooLarge(
            f"the document has {count} characters of text to translate (at most {limits.max_characters})"
        )
    return document


def translate_document(document: Document, translate: Translate, language: str = "") -> TranslatedFile:
    """Translate a read document's segments (one `translate` call: the caller batches) and
    write it back, in `language` where the format records one; a segment that failed keeps
    its source and is counted in the report."""
    sidecar: list[dict] = []
    texts: list[str] = []

    def recorded(batch: list[str]) -> list[Translation | Exception]:
        results = translate(batch)
        texts.extend(batch)
        for text, result in zip(batch, results):
            if isinstance(result, Exception):
                sidecar.append({"source": text, "error": str(result)})
            else:
                sidecar.append(
                    {"source": text, "translation": result.text, "links": to_pharaoh(result.alignment.links)}
                )
        return results

    report = PlacementReport()
    placed = place_segments(document.segments, recorded, report)
    indexed = [index for index, segment in enumerate(document.segments) if has_words(segment.text)]
    for record, index in zip(sidecar, indexed):
        record["segment"] = index
    return TranslatedFile(document.write(placed, language), report, dict(document.notes), sidecar)
