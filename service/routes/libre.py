"""LibreTranslate-compatible routes: /translate, /languages, /detect.

Existing LibreTranslate clients work unchanged: JSON or form bodies, `q` a string or a
list (translated as one padded batch), `{"error": ...}` with 400/403/429. Our extension:
`alignment: true` (or an object with level/layer/heads) adds an `alignment` map beside
each translation: the word-level map of the whole text, block-diagonal over its sentences,
and a `quality` block beside it (seq2seq.decoding.records.Quality: untranslated source words,
ungrounded target words, confidence), its sentences' blocks joined with word indices
counted over the whole text.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from seq2seq.core.languages import language_name
from seq2seq.decoding.records import AlignmentMap, Quality, TermUse
from seq2seq.decoding.texts import TranslatedText
from seq2seq.documents.html import read_html, segments
from service.http.access import get_access, request_api_key
from service.http.bodies import parse_json, read_body
from service.http.errors import APIError
from service.shared.context import ContextDep, Search
from service.shared.markup import MarkedTranslation, translate_pages
from service.shared.requests import AlignmentRequest, JSONRequest, RerankFields, TermFields

router = APIRouter(tags=["LibreTranslate"])
FORM_TRUE, FORM_FALSE = ("true",), ("false",)  # what a form says for a JSON boolean


class LibreTranslateRequest(TermFields, RerankFields):
    # Unknown fields are ignored, as LibreTranslate does.
    model_config = ConfigDict(extra="ignore")
    q: str | list[str] = Field(description="text, or a list of texts translated as one batch")
    source: str = Field(description="source language code, or 'auto'")
    target: str = Field(description="target language code")
    format: Literal["text", "html"] = Field(
        "text",
        description="html: block elements delimit segments, each translated whole with its inline markup "
        "placed by the alignment; script, style, pre, code and comments kept as written",
    )
    alternatives: int = Field(0, ge=0, description="number of alternative translations")
    api_key: str | None = None
    alignment: bool | AlignmentRequest = Field(False, description="crossalign extension: add the alignment map")


class DetectRequest(JSONRequest):
    model_config = ConfigDict(extra="ignore")

    q: str
    api_key: str | None = None


class DetectedLanguage(BaseModel):
    confidence: float = Field(description="0..100")
    language: str


class Language(BaseModel):
    code: str
    name: str
    targets: list[str]


# Fields a form cannot carry (an object): JSON bodies only; a form's are ignored, as unknown ones are.
JSON_ONLY_FIELDS = ("glossary",)


def _body_schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    schema.pop("$defs", None)
    form = {**schema, "properties": {k: v for k, v in schema["properties"].items() if k not in JSON_ONLY_FIELDS}}
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": schema},
                "application/x-www-form-urlencoded": {"schema": form},
            },
        }
    }


async def read_fields(request: Request) -> dict[str, Any]:
    """The body as a dict, from JSON (service.http.bodies.parse_json, every route's reader), urlencoded
    or multipart form; 400 on anything malformed."""
    body = await read_body(request)
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "multipart/form-data":
        try:
            form = await request.form()
        except Exception as error:  # noqa: BLE001 - any parse failure is the client's
            raise APIError(400, f"malformed multipart form: {error}") from None
        return _fields(list(form.multi_items()))
    if content_type == "application/x-www-form-urlencoded":
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as error:
            raise APIError(400, f"request body is not valid UTF-8 (byte {error.start})") from None
        try:
            return _fields(parse_qsl(text, keep_blank_values=True, encoding="utf-8", errors="strict"))
        except UnicodeDecodeError:
            raise APIError(400, "form field is not valid UTF-8 after percent-decoding") from None
    value = parse_json(body)
    if not isinstance(value, dict):
        raise APIError(400, "Invalid request: the JSON body must be an object")
    return value


def _fields(items: list[tuple[str, Any]]) -> dict[str, Any]:
    """Form items -> dict; a repeated `q` becomes a list, like a JSON list."""
    fields: dict[str, Any] = {}
    for key, value in items:
        if not isinstance(value, str):
            raise APIError(400, f"form field {key!r} must be text, not a file")
        if key == "q" and key in fields:
            fields[key] = (fields[key] if isinstance(fields[key], list) else [fields[key]]) + [value]
        else:
            fields[key] = value
    return fields


def _validation_message(error: ValidationError) -> str:
    first = error.errors()[0]
    field = ".".join(str(p) for p in first["loc"] if not isinstance(p, int) and p not in ("str", "list[str]"))
    return f"Invalid request: {field}: {first['msg']}"


async def accessed_fields(request: Request) -> dict[str, Any]:
    """The body's fields, once the client may send them: a key in a header or the query (or
    none needed) is checked before the body is read; a key in the body (LibreTranslate's
    way) as soon as it is read, before any other field is looked at."""
    access, header_key = get_access(request), request_api_key(request)
    if header_key or not access.keys:
        access.check(request, header_key)
        return await read_fields(request)
    fields = await read_fields(request)
    key = fields.get("api_key")
    access.check(request, key if isinstance(key, str) else None)
    return fields


def is_form(request: Request) -> bool:
    return request.headers.get("content-type", "").split(";")[0].strip().lower() in (
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    )


async def translate_params(
    request: Request, fields: dict[str, Any] = Depends(accessed_fields)
) -> LibreTranslateRequest:
    for name in ("q", "source", "target"):
        if fields.get(name) in (None, "", []):
            raise APIError(400, f"Invalid request: missing {name} parameter")
    q = fields["q"]
    if not (isinstance(q, str) or (isinstance(q, list) and all(isinstance(t, str) for t in q))):
        raise APIError(400, "Invalid request: q must be a string or a list of strings")
    if is_form(request):
        for name in JSON_ONLY_FIELDS:
            fields.pop(name, None)
        for name in ("dictionary_hints", *RerankFields.model_fields):
            if fields.get(name) in ("null", ""):  # a form's way to leave it unset
                fields.pop(name)
        for name in ("alignment", "dictionary_hints", "glossary_strict"):
            if isinstance(fields.get(name), str):  # a form says "true"/"false"; JSON must say true/false
                flag = fields[name].strip().lower()
                if flag not in FORM_TRUE + FORM_FALSE:
                    raise APIError(400, f"Invalid request: {name} must be true or false in a form, not {flag[:20]!r}")
                fields[name] = flag in FORM_TRUE
    try:
        # A form's values are all text ("2", "true"); JSON must have the declared types.
        return LibreTranslateRequest.model_validate(fields, strict=not is_form(request))
    except ValidationError as error:
        raise APIError(400, _validation_message(error)) from None


@router.post(
    "/translate",
    openapi_extra=_body_schema(LibreTranslateRequest),
    summary="Translate text (LibreTranslate-compatible)",
)
def translate(params: Annotated[LibreTranslateRequest, Depends(translate_params)], ctx: ContextDep) -> dict[str, Any]:
    """`{translatedText, alternatives}`, lists when `q` is a list; `alignment` and `quality` when
    the alignment is asked for (format html: a list per text, one map per translated segment,
    with the segment's plain `text` and `translation` its offsets refer to); `caseRestored`
    (when a text was shouted): per text, whether a sentence of it was read with its case
    restored (seq2seq/core/casing.py), its answer then in capitals; `terms` (when hints were
    shown: a `glossary`, or the dictionary's for rare words): per text, each hint and whether
    the translation used it (format html: a list per translated segment, as its maps, spans
    into the segment's plain text)."""
    texts = [params.q] if isinstance(params.q, str) else list(params.q)
    ctx.check_texts(texts)
    alignment = (AlignmentRequest() if params.alignment is True else params.alignment) or None
    plain = (
        [" ".join(s.marked.text for s in segments(read_html(t))) for t in texts] if params.format == "html" else texts
    )
    model, detection = ctx.resolve_pair(params.source, params.target, plain)
    options = ctx.resolve_alignment(model, alignment.options()) if alignment else None
    # LibreTranslate takes no search settings: the model's own, its beam raised to the alternatives
    # (and, with our `rerank` extension, to the candidates reranked).
    search = Search(n_best=params.alternatives + 1, rerank=params.rerank_options(ctx.settings.max_beam_size))
    config = ctx.decode_config(model, search, params.term_options(), options)
    if params.format == "html":
        pages = translate_pages(ctx, model, texts, config)
        translations = [page.text for page in pages]
        alternatives: list[list[str]] = [[] for _ in texts]
        maps: list[Any] = [_segment_maps(page) if options else None for page in pages]
        qualities: list[Any] = [[_quality(t) for _, t, _ in page.segments] if options else None for page in pages]
        restored = [any(t.case_restored for _, t, _ in page.segments) for page in pages]
        # Per text, one list per translated segment (as its maps), spans into the segment's plain text.
        terms: list[Any] = [[_terms(t) for _, t, _ in page.segments] for page in pages]
    else:
        translated = ctx.translate(model, texts, config)
        translations = [t.text for t in translated]
        alternatives = [[t.alternative(k)[0] for k in range(params.alternatives)] for t in translated]
        maps = [_map(t) if options else None for t in translated]
        qualities = [_quality(t) if options else None for t in translated]
        restored = [t.case_restored for t in translated]
        terms = [_terms(t) for t in translated]
    single = isinstance(params.q, str)
    response: dict[str, Any] = {
        "translatedText": translations[0] if single else translations,
        "alternatives": alternatives[0] if single else alternatives,
    }
    if restored is not None and any(restored):  # a plain answer keeps LibreTranslate's exact shape
        response["caseRestored"] = restored[0] if single else restored
    if detection is not None:
        detected = {"confidence": round(detection.confidence * 100, 1), "language": detection.language}
        response["detectedLanguage"] = detected if single else [detected for _ in texts]
    if _any_term(terms):  # the hints shown (a glossary, or the dictionary for rare words) and whether each was used
        listed = _dumped(terms)
        response["terms"] = listed[0] if single else listed
    if options:
        dumped = [_dumped(m) for m in maps]
        response["alignment"] = dumped[0] if single else dumped
        # With the alignment, its quality signals (seq2seq.decoding.records.Quality; word indices of the text).
        blocks = [_dumped(q) for q in qualities]
        response["quality"] = blocks[0] if single else blocks
    return response


def _dumped(value: Any) -> Any:
    """A model, a list of them (an HTML text's segments), or None, as JSON values."""
    if isinstance(value, list):
        return [_dumped(item) for item in value]
    return value.model_dump() if isinstance(value, BaseModel) else value


def _any_term(value: Any) -> bool:
    """Whether a text's terms (an HTML text's: per segment) hold any."""
    return any(_any_term(item) for item in value) if isinstance(value, list) else True


def _map(translated: TranslatedText) -> AlignmentMap:
    alignment = translated.alignment()
    assert alignment is not None  # translated with the alignment the request asked for
    return AlignmentMap.from_alignment(alignment)


def _quality(translated: TranslatedText) -> Quality | None:
    quality = translated.quality()
    return None if quality is None else Quality.from_quality(quality)


def _terms(translated: TranslatedText) -> list[TermUse]:
    return [TermUse(**term.to_dict()) for term in translated.terms]


def _segment_maps(page: MarkedTranslation) -> list[dict[str, Any]]:
    """An HTML text's maps: per translated segment its plain text and translation, and the map
    over them (the requested level)."""
    return [
        {"text": text, "translation": translated.text, **_map(translated).model_dump()}
        for text, translated, _ in page.segments
    ]


@router.get("/languages", response_model=list[Language], summary="Served languages (LibreTranslate-compatible)")
def languages(ctx: ContextDep) -> list[Language]:
    pairs = ctx.engine.models
    codes = sorted({lang for pair in pairs for lang in pair})
    return [Language(code=c, name=language_name(c), targets=sorted(t for s, t in pairs if s == c)) for c in codes]


async def detect_params(request: Request, fields: dict[str, Any] = Depends(accessed_fields)) -> DetectRequest:
    if fields.get("q") in (None, ""):
        raise APIError(400, "Invalid request: missing q parameter")
    if not isinstance(fields["q"], str):
        raise APIError(400, "Invalid request: q must be a string")
    try:
        return DetectRequest.model_validate(fields, strict=not is_form(request))
    except ValidationError as error:
        raise APIError(400, _validation_message(error)) from None


@router.post(
    "/detect",
    response_model=list[DetectedLanguage],
    openapi_extra=_body_schema(DetectRequest),
    summary="Detect the language of a text (LibreTranslate-compatible)",
)
def detect(params: Annotated[DetectRequest, Depends(detect_params)], ctx: ContextDep) -> list[DetectedLanguage]:
    ctx.check_texts([params.q])
    return [
        DetectedLanguage(confidence=round(d.confidence * 100, 1), language=d.language)
        for d in ctx.detector().rank(params.q)
    ]
