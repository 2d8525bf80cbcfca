"""File translation, LibreTranslate's shape: `POST /translate_file`, `GET /download_file/<id>`,
and `GET /frontend/settings` (what LibreTranslate's web page and clients read first); and
for large files, jobs: `GET /translate_file/<id>`.

An upload (multipart: `file`, `source`, `target`, `api_key`, `async`) is read in memory within
`file_max_bytes` (the app's size limit for this path), checked by its format's reader
before and while it is parsed (seq2seq/documents/files.py: ZIP entries, size and ratio,
path names, XML entities off; `file_char_limit` characters counted before translating),
translated segment by segment -- each paragraph whole, its inline formatting placed by
the alignment made in the same pass -- through the fair scheduler in calls within
`max_request_work`, each within `request_timeout` and all within `file_timeout`, and kept
for `file_ttl` seconds in the service's own directory (`files_dir`) under a random id:
nothing the client sends names a path. The answer says what could not be handled
(`partial`, `notes`: fields, embedded objects... kept as they were; segments that failed).

Up to `file_sync_chars` characters to translate, the answer waits for the translation (what
LibreTranslate's clients expect). A larger file, or one sent with `async=true` (or `Prefer:
respond-async`), is answered 202 at once: the same translation (`ReadUpload.translate`) runs
as a job on the board (service/shared/file_jobs.py), and its status route says how far it is, why it
failed, or, once done, what the synchronous answer would have said. With keys on, the status
and the download need the key the upload was made with.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse
from python_multipart.multipart import MultipartParser, parse_options_header

from seq2seq.core.inputs import text_problem
from seq2seq.core.languages import language_name
from seq2seq.decoding.texts import sentences_of
from seq2seq.documents.files import (
    EXTENSIONS,
    Document,
    DocumentError,
    DocumentTooLarge,
    FileFormat,
    Limits,
    characters,
    format_of,
    read_document,
    translate_document,
    translated_name,
)
from seq2seq.documents.translate import Translation, has_words
from service.compute.engine import ServedModel
from service.http.access import get_access, request_api_key
from service.http.bodies import read_body
from service.http.connections import HEAD_REQUEST
from service.http.errors import APIError
from service.shared.context import ContextDep, RequestContext, Search
from service.shared.file_jobs import CANCELLED, DONE, FAILED, QUEUED, RUNNING, UNFINISHED, FileJob, JobBoard, poll_after
from service.shared.file_store import FileStore
from service.shared.markup import scheduled_translator

router = APIRouter(tags=["files"])
UPLOAD_PATH = "/translate_file"
MAX_FIELDS = 16


def get_store(request: Request) -> FileStore:
    return request.app.state.files


def get_board(request: Request) -> JobBoard:
    board = getattr(request.app.state, "jobs", None)
    if board is None:
        raise APIError(503, "the models are not loaded yet")
    return board


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
            if not filename.strip():  # the name's extension is what says the format
                raise APIError(
                    400, "Invalid request: the `file` part has no filename; send it with its name (e.g. report.docx)"
                )
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
    (beam x characters), the whole within `file_timeout` (`deadline`); a full queue is waited
    out until then. A segment the input rules refuse (a control character) keeps its source;
    one too long for a call alone is translated in calls of its sentences (issue 41, 9).
    `progress(segments done)` hears of each call."""

    ctx: RequestContext
    model: ServedModel
    deadline: float
    progress: Callable[[int], None] | None = None

    def __call__(self, texts: list[str]) -> list[Translation | Exception]:
        config = self.ctx.decode_config(self.model, Search(attention=True))
        budget = max(1, self.ctx.settings.max_request_work // max(1, config.beam_size))
        translate = scheduled_translator(self.ctx, self.model, config, self.deadline, call_chars=budget)
        out: list[Translation | Exception | None] = [None] * len(texts)
        call: list[int] = []
        for index, text in enumerate(texts):
            longest = max(map(len, sentences_of(text)), default=0)
            problem = text_problem(text) or (
                f"a sentence of {longest} characters is longer than a model call takes ({budget})"
                if longest > budget
                else None
            )
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
        if self.progress is not None:
            self.progress(sum(item is not None for item in out))


@dataclass
class ReadUpload:
    """An upload read, checked and given its model: what its translation needs, done where
    it was received (the synchronous answer) or by a job (the same work, on the board)."""

    document: Document
    model: ServedModel
    file_format: FileFormat
    name: str  # the translated file's name
    key: str | None  # the hash of the upload's key, when keys are on
    client: str  # whose quota its file counts against (an API key, or an address)
    delete_after_download: bool

    @property
    def characters(self) -> int:
        return characters(self.document)

    @property
    def segments(self) -> int:
        return sum(has_words(segment.text) for segment in self.document.segments)

    def translate(
        self,
        ctx: RequestContext,
        store: FileStore,
        file_id: str | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> dict[str, Any]:
        """Translate, store the file (under `file_id`, or a new id) and say what happened:
        the answer's fields but the URL and expiry, which depend on when and where it is asked."""
        translate = FileTranslator(ctx, self.model, time.monotonic() + ctx.settings.file_timeout, progress)
        result = translate_document(self.document, translate, self.model.target)
        meta = {
            "name": self.name,
            "media_type": self.file_format.media_type,
            "key": self.key,
            "delete_after_download": self.delete_after_download,
        }
        file_id = store.put(result.data, meta, result.alignments, self.client, file_id)
        notes = dict(result.notes)
        if result.report.failed:
            notes["segments kept in the source language"] = len(result.report.failed)
        return {
            "file_id": file_id,
            "name": self.name,
            "partial": result.partial,
            "notes": notes,
            "report": result.report.to_dict(),
        }


def file_answer(request: Request, done: dict[str, Any], expires_in: float) -> dict[str, Any]:
    """LibreTranslate's answer (`translatedFileUrl`) and ours (`name`, `partial`, `notes`,
    `report`, `expires_in`) for a translated file, its URL as the asking request sees the server."""
    fields = {key: value for key, value in done.items() if key != "file_id"}
    url = f"{str(request.base_url).rstrip('/')}/download_file/{done['file_id']}"
    return {"translatedFileUrl": url, **fields, "expires_in": round(expires_in, 1)}


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
                        "async": {
                            "type": "boolean",
                            "description": "true: answer 202 with a job to poll whatever the file's size (also: "
                            "the header `Prefer: respond-async`); files over the server's `file_sync_chars` "
                            "characters are jobs anyway",
                        },
                        "delete_after_download": {
                            "type": "boolean",
                            "description": "true: the translated file is deleted once downloaded (its alignment "
                            "sidecar with it); default: the server's `file_delete_after_download`",
                        },
                    },
                }
            }
        },
    }
}
JOB_STATUS = {
    "type": "object",
    "required": ["job_id", "state", "status_url", "name", "segments_done", "segments_total"],
    "properties": {
        "job_id": {"type": "string"},
        "state": {"type": "string", "enum": [QUEUED, RUNNING, DONE, FAILED, CANCELLED]},
        "status_url": {"type": "string"},
        "name": {"type": "string", "description": "the translated file's name"},
        "segments_done": {"type": "integer"},
        "segments_total": {"type": "integer"},
        "position": {"type": "integer", "description": "queued: jobs that arrived before it and wait too"},
        "error": {"type": "string", "description": "failed: why"},
        "error_status": {"type": "integer", "description": "failed: the status a synchronous answer would have had"},
        "translatedFileUrl": {"type": "string", "description": "done: the download"},
        "partial": {"type": "boolean", "description": "done: something was kept untranslated"},
        "notes": {"type": "object", "description": "done: what was kept as it was, counted"},
        "report": {"type": "object", "description": "done: segments translated and failed, tags placed"},
        "expires_in": {"type": "number", "description": "done: seconds the file can still be downloaded"},
    },
}
POLL_HEADERS = {
    "Location": {"description": "the job's status URL", "schema": {"type": "string"}},
    "Retry-After": {"description": "seconds to wait before asking again", "schema": {"type": "integer"}},
}
UPLOAD_RESPONSES: dict[int | str, dict[str, Any]] = {
    202: {
        "description": "a job (a file over `file_sync_chars` characters, or `async`): poll its `status_url`",
        "headers": POLL_HEADERS,
        "content": {"application/json": {"schema": JOB_STATUS}},
    }
}
TRUE, FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off", "")


def check_format(upload: Upload) -> FileFormat:
    try:
        return format_of(upload.name)
    except DocumentError as error:
        raise APIError(400, f"Invalid request: {error}") from None


def form_flag(upload: Upload, name: str, default: bool) -> bool:
    """A boolean form field (`default` when absent or empty); 400 for one that is no boolean."""
    value = upload.fields.get(name, "").strip().lower()
    if value not in TRUE + FALSE:
        raise APIError(400, f"Invalid request: {name} must be true or false, not {value[:20]!r}")
    return value in TRUE if value else default


def asks_for_a_job(request: Request, upload: Upload) -> bool:
    """`async=true` in the form, or `Prefer: respond-async` (RFC 7240); 400 for an `async` that is no boolean."""
    prefer = request.headers.get("prefer", "").lower()
    return form_flag(upload, "async", False) or "respond-async" in (part.strip() for part in re.split(r"[,;]", prefer))


def read_file(request: Request, upload: Upload, ctx: RequestContext) -> ReadUpload:
    """The upload read and checked, with the model of its languages: 400 for a missing field or
    a file that does not parse as its extension says, 413 over a limit; nothing translated yet."""
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
    key = key_hash(upload.fields["api_key_used"]) if get_access(request).keys else None
    name = translated_name(upload.name, model.target, file_format)
    once = form_flag(upload, "delete_after_download", settings.file_delete_after_download)
    return ReadUpload(document, model, file_format, name, key, ctx.client, once)


@router.post(
    UPLOAD_PATH,
    openapi_extra=FILE_FORM,
    responses=UPLOAD_RESPONSES,
    summary="Translate a file (LibreTranslate-compatible; a job for large files)",
)
def translate_file(
    request: Request,
    upload: Annotated[Upload, Depends(read_upload)],
    ctx: ContextDep,
    store: Annotated[FileStore, Depends(get_store)],
    board: Annotated[JobBoard, Depends(get_board)],
) -> Any:
    """`{"translatedFileUrl": ".../download_file/<id>"}`, and (crossalign) `name`, `partial`,
    `notes` (what was kept as it was), `report` (segments translated, tags placed) and
    `expires_in`. A file over `file_sync_chars` characters to translate, or one sent with
    `async=true`, is answered 202 at once: a job whose `status_url` (also `Location`) says
    how far it is and, once done, the same fields. Formats: the extension of the file's name
    (GET /frontend/settings lists them)."""
    job_asked = asks_for_a_job(request, upload)
    store.check_room(ctx.client, len(upload.data))  # before parsing it: the translation is about its size
    read = read_file(request, upload, ctx)
    if not job_asked and read.characters <= ctx.settings.file_sync_chars:
        return file_answer(request, read.translate(ctx, store), ctx.settings.file_ttl)
    background = ctx.detached()  # its own cancel token: the job outlives this request
    job = FileJob(
        work=lambda file_id, progress: read.translate(background, store, file_id, progress),
        client=ctx.client,
        key=read.key,
        name=read.name,
        total=read.segments,
        token=background.token,
    )
    board.submit(job)
    # From the job itself, not its record on disk (which a full disk may have kept from being written).
    record = job.record(time.time() + ctx.settings.file_ttl, board.owner)
    status = job_status(request, record)
    headers = {"Location": status["status_url"], "Retry-After": str(poll_after(record))}
    return JSONResponse(status, status_code=202, headers=headers)


def job_status(request: Request, record: dict[str, Any]) -> dict[str, Any]:
    """What a job's status says: its state and progress; the error of a failed one; the
    answer of a done one (as the synchronous upload would have had it)."""
    base = str(request.base_url).rstrip("/")
    status: dict[str, Any] = {
        "job_id": record["id"],
        "state": record["state"],
        "status_url": f"{base}{UPLOAD_PATH}/{record['id']}",
        "name": record["name"],
        "segments_done": record["segments_done"],
        "segments_total": record["segments_total"],
    }
    if record["state"] == QUEUED:
        status["position"] = record["position"]
    elif record["state"] == FAILED:
        status.update(error=record["error"], error_status=record["error_status"])
    elif record["state"] == DONE:
        status.update(file_answer(request, record["answer"], record["expires"] - time.time()))
    return status


def job_answer(request: Request, response: Response, record: dict[str, Any]) -> dict[str, Any]:
    """A job's status, with `Retry-After` while it is unfinished."""
    if record["state"] in UNFINISHED:
        response.headers["Retry-After"] = str(poll_after(record))
    return job_status(request, record)


def current_board(request: Request) -> JobBoard | None:
    """The board, if the server runs one now (a status is read from the store without one)."""
    return getattr(request.app.state, "jobs", None)


@router.get(
    UPLOAD_PATH + "/{job_id}",
    responses={
        200: {
            "description": "the job's state (`Retry-After` while it is unfinished)",
            "headers": {"Retry-After": POLL_HEADERS["Retry-After"]},
            "content": {"application/json": {"schema": JOB_STATUS}},
        },
        404: {"description": "no such job, or it expired"},
    },
    summary="A file job's state and progress; its file once done",
)
def file_job(job_id: str, request: Request, response: Response, store: FileStore = Depends(get_store)) -> Any:
    """`state`: `queued` (`position`: jobs before it), `running`, `done` (with
    `translatedFileUrl` and the rest of the synchronous answer), `failed` (`error`, and
    `error_status`: the status a synchronous answer would have had; also when the server
    running it died) or `cancelled`; `segments_done` of `segments_total` throughout. While
    the job is unfinished, `Retry-After` says when to ask again. Any server sharing the
    store answers. With keys on, only the upload's key may ask."""
    key = checked_key(request)
    record = owned(store.get_job(job_id), key, "job")
    board = current_board(request)
    return job_answer(request, response, board.status(record) if board else record)


@router.post(
    UPLOAD_PATH + "/{job_id}/cancel",
    responses={
        200: {"description": "the job's state now", "content": {"application/json": {"schema": JOB_STATUS}}},
        404: {"description": "no such job, or it expired"},
    },
    summary="Cancel a file job (from any server sharing the store)",
)
def cancel_file_job(
    job_id: str,
    request: Request,
    response: Response,
    store: Annotated[FileStore, Depends(get_store)],
    board: Annotated[JobBoard, Depends(get_board)],
) -> Any:
    """A queued job never starts and a running one stops at its next model call (on
    whichever server runs it); a done job's file is deleted. The state is `cancelled` from
    then on (a failed job stays `failed`). With keys on, only the upload's key may cancel."""
    key = checked_key(request)
    record = owned(store.get_job(job_id), key, "job")
    return job_answer(request, response, board.cancel(record))


def checked_key(request: Request) -> str | None:
    """The request's API key, checked (403 or 429) before anything is read for it."""
    key = request_api_key(request)
    get_access(request).check(request, key)
    return key


def owned(record: dict[str, Any], key: str | None, kind: str) -> dict[str, Any]:
    """`record` (a file's or a job's), if `key` is the upload's (when keys are on); 403 otherwise."""
    if record.get("key") and record["key"] != key_hash(key):
        raise APIError(403, f"this {kind} was uploaded with another API key")
    return record


def attachment(name: str) -> str:
    """A Content-Disposition naming the download (RFC 6266: ASCII fallback and UTF-8 name)."""
    fallback = re.sub(r"[^A-Za-z0-9._ -]", "_", name)
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(name)}"


DOWNLOAD_RESPONSES = {
    200: {"content": {"application/octet-stream": {}}, "description": "the translated file (or its alignment)"},
    404: {"description": "no such file: it expired, was deleted after its download, or never was"},
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
    per segment (index, plain source, plain translation, word links in Pharaoh form). A file
    uploaded with `delete_after_download` is deleted by its first download (a GET of the
    file itself: neither a HEAD nor the alignment's), which one request alone gets."""
    key = checked_key(request)
    meta = owned(store.get(file_id), key, "file")
    if alignment:
        data, name = store.read(file_id, alignment=True), meta["name"] + ".alignment.jsonl"
        media = "application/x-ndjson"
    else:
        once = meta.get("delete_after_download") and not request.scope.get(HEAD_REQUEST)
        data, name, media = store.take(file_id) if once else store.read(file_id), meta["name"], meta["media_type"]
    return Response(data, media_type=media, headers={"Content-Disposition": attachment(name)})


@router.get("/frontend/settings", summary="What the web page and clients need (LibreTranslate-compatible)")
def frontend_settings(request: Request, ctx: ContextDep) -> dict[str, Any]:
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
        "fileSyncChars": settings.file_sync_chars,
    }
