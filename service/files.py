"""File translation, LibreTranslate's shape: `POST /translate_file`, `GET /download_file/<id>`,
and `GET /frontend/settings` (what LibreTranslate's web page and clients read first).

An upload (multipart: `file`, `source`, `target`, `api_key`) is read in memory within
`file_max_bytes` (the app's size limit for this path), checked by its format's reader
before and while it is parsed (seq2seq/documents/files.py: ZIP entries, size and ratio,
path names, XML entities off; `file_char_limit` characters counted before translating),
translated segment by segment -- each paragraph whole, its inline formatting placed by
the alignment made in the same pass -- through the fair scheduler in calls within
`max_request_work`, each within `request_timeout` and all within `file_timeout`, and kept
for `file_ttl` seconds in the service's own directory (`files_dir`) under a random id:
nothing the client sends names a path. The answer says what could not be handled
(`partial`, `notes`: fields, embedded objects... kept as they were; segments that failed).
With keys on, the download needs the key the upload was made with.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Query, Request, Response
from python_multipart.multipart import MultipartParser, parse_options_header

from seq2seq.core.inputs import text_problem
from seq2seq.documents.files import (
    EXTENSIONS,
    DocumentError,
    DocumentTooLarge,
    FileFormat,
    Limits,
    format_of,
    read_document,
    translate_document,
    translated_name,
)
from seq2seq.documents.translate import Translation
from service.deps import APIError, RequestContext, get_access, get_context, read_body, request_api_key
from service.engine import ServedModel
from service.languages import language_name
from service.markup import scheduled_translator

router = APIRouter(tags=["files"])
UPLOAD_PATH = "/translate_file"
FILE_ID = re.compile(r"[A-Za-z0-9_-]{24}")
MAX_FIELDS = 16


# --------------------------------------------------------------------------- the store


class FileStore:
    """Translated files waiting for their download: `<id>` (the bytes), `<id>.json` (name,
    media type, expiry, the uploader's key hash, report) and `<id>.alignment.jsonl` in one
    directory of the service's own, made private; expired ones are deleted as new ones come
    and go (every worker process sees the same directory)."""

    def __init__(self, directory: Path, ttl: float):
        self.directory, self.ttl = Path(directory), ttl
        self._lock = threading.Lock()

    def _ready(self) -> Path:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        return self.directory

    def put(self, data: bytes, meta: dict[str, Any], sidecar: list[dict]) -> str:
        directory = self._ready()
        self.sweep()
        file_id = secrets.token_urlsafe(18)  # 24 characters of FILE_ID
        (directory / file_id).write_bytes(data)
        lines = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in sidecar)
        (directory / f"{file_id}.alignment.jsonl").write_text(lines, encoding="utf-8")
        meta = {**meta, "expires": time.time() + self.ttl}
        (directory / f"{file_id}.json").write_text(json.dumps(meta), encoding="utf-8")  # last: complete when seen
        return file_id

    def get(self, file_id: str) -> tuple[dict[str, Any], Path]:
        """The metadata and path of a file that is there and not expired; 404 otherwise."""
        self.sweep()
        if not FILE_ID.fullmatch(file_id):
            raise APIError(404, "no such file (ids are 24 letters, digits, - or _)")
        try:
            meta = json.loads((self.directory / f"{file_id}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise APIError(404, f"no such file, or it expired (files are kept {self.ttl:g} s)") from None
        if meta["expires"] < time.time():
            raise APIError(404, f"the file expired (files are kept {self.ttl:g} s)")
        return meta, self.directory / file_id

    def sweep(self) -> None:
        """Delete every expired file and its companions."""
        if not self.directory.is_dir():
            return
        now = time.time()
        with self._lock:
            for meta_path in self.directory.glob("*.json"):
                try:
                    expired = json.loads(meta_path.read_text(encoding="utf-8"))["expires"] < now
                except (OSError, ValueError, KeyError):
                    expired = meta_path.stat().st_mtime + self.ttl < now
                if expired:
                    file_id = meta_path.name[: -len(".json")]
                    for path in (self.directory / file_id, self.directory / f"{file_id}.alignment.jsonl", meta_path):
                        path.unlink(missing_ok=True)


def get_store(request: Request) -> FileStore:
    return request.app.state.files


def key_hash(key: str | None) -> str | None:
    return hashlib.sha256(key.encode()).hexdigest() if key else None


# --------------------------------------------------------------------------- the upload


@dataclass
class Upload:
    fields: dict[str, str]
    name: str
    data: bytes


def parse_upload(body: bytes, content_type: str) -> Upload:
    """The multipart body's text fields and its one `file`, in memory; 400 if malformed."""
    kind, options = parse_options_header(content_type)
    if kind != b"multipart/form-data" or b"boundary" not in options:
        raise APIError(400, "Invalid request: send the file as multipart/form-data (fields file, source, target)")
    parts: list[dict[str, Any]] = []
    header: dict[str, bytes] = {"field": b"", "value": b""}

    def begin() -> None:
        parts.append({"headers": {}, "data": bytearray()})
        if len(parts) > MAX_FIELDS:
            raise APIError(400, f"Invalid request: more than {MAX_FIELDS} form fields")

    def header_end() -> None:
        parts[-1]["headers"][header["field"].decode("latin-1").lower()] = header["value"]
        header["field"], header["value"] = b"", b""

    callbacks = {
        "on_part_begin": begin,
        "on_part_data": lambda data, start, end: parts[-1]["data"].extend(data[start:end]),
        "on_header_field": lambda data, start, end: header.__setitem__("field", header["field"] + data[start:end]),
        "on_header_value": lambda data, start, end: header.__setitem__("value", header["value"] + data[start:end]),
        "on_header_end": header_end,
    }
    try:
        parser = MultipartParser(options[b"boundary"], callbacks)
        parser.write(body)
        parser.finalize()
    except APIError:
        raise
    except Exception as error:  # noqa: BLE001 - any parse failure is the client's
        raise APIError(400, f"Invalid request: malformed multipart body: {error}") from None
    fields: dict[str, str] = {}
    upload: tuple[str, bytes] | None = None
    for part in parts:
        _, disposition = parse_options_header(part["headers"].get("content-disposition", b""))
        name = disposition.get(b"name", b"").decode("utf-8", "replace")
        if name == "file":
            filename = disposition.get(b"filename", b"").decode("utf-8", "replace")
            upload = (filename, bytes(part["data"]))
            continue
        try:
            fields[name] = bytes(part["data"]).decode("utf-8")
        except UnicodeDecodeError:
            raise APIError(400, f"Invalid request: form field {name!r} is not valid UTF-8") from None
    if upload is None:
        raise APIError(400, "Invalid request: missing file (a multipart field `file` with a filename)")
    return Upload(fields, *upload)


async def read_upload(request: Request) -> Upload:
    """The upload, once the client may send it: a key in a header or the query (or none
    needed) is checked before the body is read, a key in the form as soon as it is read."""
    access, header_key = get_access(request), request_api_key(request)
    if header_key or not access.keys:
        access.check(request, header_key)
    body = await read_body(request)  # the app's size limit for this path stops it at file_max_bytes (413)
    upload = parse_upload(body, request.headers.get("content-type", ""))
    if not (header_key or not access.keys):
        access.check(request, upload.fields.get("api_key"))
    upload.fields["api_key_used"] = header_key or upload.fields.get("api_key") or ""
    return upload


# --------------------------------------------------------------------------- translating


@dataclass
class FileTranslator:
    """The segments of one file through the fair scheduler: calls within `max_request_work`
    (beam x characters), the whole within `file_timeout`. A segment the input rules refuse
    (a control character) keeps its source; so does one too long for a call alone."""

    ctx: RequestContext
    model: ServedModel
    deadline: float

    def __call__(self, texts: list[str]) -> list[Translation | Exception]:
        translate = scheduled_translator(self.ctx, self.model, self.ctx.decode_config(self.model, None, 1, True))
        budget = self.ctx.settings.max_request_work // max(1, translate.config.beam_size)
        out: list[Translation | Exception | None] = [None] * len(texts)
        call: list[int] = []
        for index, text in enumerate(texts):
            problem = text_problem(text, max(budget, 1))
            if problem:
                out[index] = ValueError(problem)
                continue
            if call and sum(len(texts[i]) for i in call) + len(text) > budget:
                self._run(translate, texts, call, out)
                call = []
            call.append(index)
        if call:
            self._run(translate, texts, call, out)
        return [item if item is not None else ValueError("not translated") for item in out]

    def _run(self, translate: Any, texts: list[str], call: list[int], out: list) -> None:
        if time.monotonic() > self.deadline:
            raise APIError(
                503,
                f"the file took longer than {self.ctx.settings.file_timeout:g} s; send a smaller one",
                headers={"Retry-After": "30"},
            )
        for index, result in zip(call, translate([texts[i] for i in call])):
            out[index] = result


FILE_FORM = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file", "source", "target"],
                    "properties": {
                        "file": {"type": "string", "format": "binary", "description": "the document"},
                        "source": {"type": "string", "description": "source language code, or 'auto'"},
                        "target": {"type": "string", "description": "target language code"},
                        "api_key": {"type": "string"},
                    },
                }
            }
        },
    }
}


def check_format(upload: Upload) -> FileFormat:
    try:
        return format_of(upload.name)
    except DocumentError as error:
        raise APIError(400, f"Invalid request: {error}") from None


@router.post(UPLOAD_PATH, openapi_extra=FILE_FORM, summary="Translate a file (LibreTranslate-compatible)")
def translate_file(
    request: Request,
    upload: Upload = Depends(read_upload),
    ctx: RequestContext = Depends(get_context),
    store: FileStore = Depends(get_store),
) -> dict[str, Any]:
    """`{"translatedFileUrl": ".../download_file/<id>"}`, and (crossalign) `partial`, `notes`
    (what was kept as it was) and `report` (segments translated, tags placed). Formats:
    the extension of the file's name (GET /frontend/settings lists them)."""
    settings = ctx.settings
    file_format = check_format(upload)
    for name in ("source", "target"):
        if not upload.fields.get(name):
            raise APIError(400, f"Invalid request: missing {name} parameter")
    limits = Limits(max_unzipped_bytes=settings.file_max_unzipped_bytes, max_characters=settings.file_char_limit)
    try:
        document = read_document(upload.data, file_format, limits)
    except DocumentTooLarge as error:
        raise APIError(413, str(error)) from None
    except DocumentError as error:
        raise APIError(400, str(error)) from None
    sample = " ".join(segment.text for segment in document.segments)[:2000]
    model, _ = ctx.resolve_pair(upload.fields["source"], upload.fields["target"], [sample or "-"])
    translate = FileTranslator(ctx, model, time.monotonic() + settings.file_timeout)
    result = translate_document(document, translate, model.target)
    name = translated_name(upload.name, model.target, file_format)
    meta = {
        "name": name,
        "media_type": file_format.media_type,
        "key": key_hash(upload.fields["api_key_used"]) if get_access(request).keys else None,
    }
    file_id = store.put(result.data, meta, result.alignments)
    notes = dict(result.notes)
    if result.report.failed:
        notes["segments kept in the source language"] = len(result.report.failed)
    return {
        "translatedFileUrl": f"{str(request.base_url).rstrip('/')}/download_file/{file_id}",
        "name": name,
        "partial": result.partial,
        "notes": notes,
        "report": result.report.to_dict(),
        "expires_in": settings.file_ttl,
    }


def attachment(name: str) -> str:
    """A Content-Disposition naming the download (RFC 6266: ASCII fallback and UTF-8 name)."""
    fallback = re.sub(r"[^A-Za-z0-9._ -]", "_", name)
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(name)}"


DOWNLOAD_RESPONSES = {
    200: {"content": {"application/octet-stream": {}}, "description": "the translated file (or its alignment)"},
    404: {"description": "no such file, or it expired"},
}


@router.get(
    "/download_file/{file_id}",
    response_class=Response,
    responses=DOWNLOAD_RESPONSES,
    summary="Download a translated file",
)
def download_file(
    file_id: str,
    request: Request,
    alignment: bool = Query(False, description="the segments' alignment (JSONL) instead of the file"),
    store: FileStore = Depends(get_store),
) -> Response:
    """The translated file, named like `report.en.docx`; with `alignment=true` a JSONL line
    per segment (index, plain source, plain translation, word links in Pharaoh form)."""
    access = get_access(request)
    key = request_api_key(request)
    access.check(request, key)
    meta, path = store.get(file_id)
    if meta.get("key") and meta["key"] != key_hash(key):
        raise APIError(403, "this file was uploaded with another API key")
    if alignment:
        data, name = path.with_name(f"{file_id}.alignment.jsonl").read_bytes(), meta["name"] + ".alignment.jsonl"
        media = "application/x-ndjson"
    else:
        data, name, media = path.read_bytes(), meta["name"], meta["media_type"]
    return Response(data, media_type=media, headers={"Content-Disposition": attachment(name)})


@router.get("/frontend/settings", summary="What the web page and clients need (LibreTranslate-compatible)")
def frontend_settings(request: Request, ctx: RequestContext = Depends(get_context)) -> dict[str, Any]:
    """LibreTranslate's settings object: limits, whether keys are needed, the file formats."""
    settings = ctx.settings
    keys = bool(get_access(request).keys)
    pairs = sorted(ctx.engine.models)
    source, target = pairs[0] if pairs else ("auto", "en")
    return {
        "charLimit": settings.char_limit,
        "frontendTimeout": 500,
        "apiKeys": keys,
        "keyRequired": keys,
        "suggestions": False,
        "filesTranslation": True,
        "supportedFilesFormat": sorted(EXTENSIONS),
        "language": {
            "source": {"code": source, "name": language_name(source)},
            "target": {"code": target, "name": language_name(target)},
        },
        "fileSizeLimit": settings.file_max_bytes,
        "fileCharLimit": settings.file_char_limit,
        "fileTtl": settings.file_ttl,
    }
