"""The OpenAPI document as the service really behaves, and /docs and /redoc from local files.

FastAPI's generated document promises things the service does not do and omits things
it does. `install` replaces it with one that tells the truth:

- errors: every operation answers `{"error": ...}` (the `Error` schema) with 400 for any
  bad input (FastAPI's 422 never occurs: the app's handlers send 400), 403 / 429 for
  access, 413 for an oversize body, 503 when busy; 429 and 503 carry `Retry-After`.
- constraints the service enforces are in the schema, from the running settings and the
  models actually served: texts are non-empty, printable (seq2seq.core.inputs' rules) and at
  most `char_limit` characters; lists at most `batch_limit`; languages are those served;
  beam sizes, layers, heads and heatmap sizes have their ranges.

The document depends on the loaded models, so it is built on first request (after the
lifespan loaded them) and cached.

/docs (Swagger UI) and /redoc load their scripts and styles from the `fastapi_offline`
package's copies, served under /docs-assets: the pages work with no network, and no
request leaves the machine (no fonts, no validator badge, no CDN; ReDoc's one CDN image,
its "powered by" logo, is pointed at a local file).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

from seq2seq.core.inputs import TEXT_PATTERN, TEXT_RULES
from service.settings import Settings

ASSETS = Path(fastapi_offline.__file__).resolve().parent / "static"
ASSETS_URL = "/docs-assets"
ERROR_REF = {"$ref": "#/components/schemas/Error"}
ERROR_SCHEMA = {
    "title": "Error",
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string", "description": "what was wrong, for a person to read"}},
}
RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before retrying", "schema": {"type": "integer"}}}
ERRORS = {
    "400": "Invalid request: the message says which field and why",
    "403": "missing or invalid API key (when the server requires keys)",
    "422": "well-formed, but the text is in a language this server does not translate (source 'auto')",
    "429": "rate limit exceeded (failed key attempts count too)",
    "431": "header fields larger than the server's limit",
    "408": "the request's head or body did not arrive within the server's read timeouts (the connection is closed)",
    "500": "unexpected failure of this request; the server keeps serving",
    "503": "busy (the queue is full, the heatmaps admitted fill the renderer, or the translation timed "
    "out), models not loaded, or the server is stopping",
}
# 413 also answers a request whose parts are each valid but whose whole is over a size limit
# no schema can state: characters of all texts together, work (beam x characters), map tokens.
SIZE_ERROR = {
    "413": "request too large: the body's bytes, the characters of all texts together, the "
    "work (beam_size x characters), a map's tokens or /v1/attention's weights exceed the server's limits"
}
# Fields holding text to translate: these get the input rules and the character limit.
TEXT_FIELDS = {"q", "text", "texts", "translation"}


REDOC_CDN_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"


@lru_cache(maxsize=1)
def _redoc_script() -> bytes:
    """redoc.standalone.js with its CDN logo replaced by the local favicon."""
    script = (ASSETS / "redoc.standalone.js").read_text(encoding="utf-8")
    return script.replace(REDOC_CDN_LOGO, f"{ASSETS_URL}/favicon.png").encode("utf-8")


def _text_schema(settings: Settings) -> dict[str, Any]:
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": settings.char_limit,
        "pattern": TEXT_PATTERN,
        "description": f"text to translate: {TEXT_RULES}; at most {settings.char_limit} characters in all "
        "the request's texts together",
    }


def _request_schemas(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """Every schema a request may contain: query parameters, request bodies and the
    components they reference (transitively); response schemas are left alone."""
    components = schema.get("components", {}).get("schemas", {})
    found: list[dict[str, Any]] = []
    seen: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/components/schemas/") and ref.rsplit("/", 1)[1] not in seen:
                name = ref.rsplit("/", 1)[1]
                seen.add(name)
                if name in components:
                    found.append(components[name])
                    walk(components[name])
            for value in node.values():
                walk(value)

    for item in schema.get("paths", {}).values():
        for operation in item.values():
            found.extend(operation.get("parameters", []))
            body = operation.get("requestBody")
            if body:
                found.append(body)
                walk(body)
    return found


def _constrain(node: Any, settings: Settings, languages: dict[str, list[str]], limits: dict[str, int]) -> None:
    """Add the service's constraints to every schema property (and query parameter) by name."""
    if isinstance(node, list):
        for item in node:
            _constrain(item, settings, languages, limits)
        return
    if not isinstance(node, dict):
        return
    if node.get("in") == "query" and "name" in node and "schema" in node:
        _constrain_field(node["name"], node["schema"], settings, languages, limits)
    for name, schema in (node.get("properties") or {}).items():
        _constrain_field(name, schema, settings, languages, limits)
    for value in node.values():
        _constrain(value, settings, languages, limits)


def _variants(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The non-null alternatives of a (possibly anyOf) field schema."""
    options = schema.get("anyOf", [schema])
    return [option for option in options if option.get("type") != "null"]


def _constrain_field(
    name: str, schema: dict[str, Any], settings: Settings, languages: dict[str, list[str]], limits: dict[str, int]
) -> None:
    for option in _variants(schema):
        kind = option.get("type")
        if name in TEXT_FIELDS and kind == "string":
            option.update(_text_schema(settings))
        elif name in TEXT_FIELDS and kind == "array" and option.get("items", {}).get("type") == "string":
            option.update(minItems=1, maxItems=settings.batch_limit)
            option["items"].update(_text_schema(settings))
        elif name == "pairs" and kind == "array":
            option.update(minItems=1, maxItems=settings.batch_limit)
        elif name == "source" and kind == "string" and languages:
            option["enum"] = ["auto", *sorted(languages)]
        elif name == "target" and kind == "string" and languages:
            option["enum"] = sorted({t for targets in languages.values() for t in targets})
        elif name in ("beam_size", "n_best") and kind == "integer":
            option.update(minimum=1, maximum=settings.max_beam_size)
        elif name == "rerank_candidates" and kind == "integer":
            option.update(maximum=settings.max_beam_size)
        elif name == "rerank" and kind == "string" and not limits.get("channel", 1):
            option["enum"] = [mode for mode in option["enum"] if "channel" not in mode]  # no reverse direction served
        elif name == "alternatives" and kind == "integer":
            option.update(minimum=0, maximum=settings.max_beam_size - 1)
        elif name in ("width", "height") and kind == "integer":
            option.update(minimum=100, maximum=settings.heatmap_max_pixels)
        elif name == "layer" and kind == "integer" and "layers" in limits:
            option.update(minimum=-limits["layers"], maximum=limits["layers"] - 1)
        elif name in ("heads", "head") and kind == "array" and "heads" in limits:
            option["items"].update(minimum=0, maximum=limits["heads"] - 1)
        elif name == "glossary" and kind == "object" and not limits.get("hints", 1):
            option["maxProperties"] = 0  # a model trained without hints takes no terms


def truthful_openapi(app: FastAPI, settings: Settings) -> dict[str, Any]:
    """The app's OpenAPI document with the errors and constraints the service really has."""
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.pop("HTTPValidationError", None)
    components.pop("ValidationError", None)
    components["Error"] = ERROR_SCHEMA
    # A key goes in `Authorization: Bearer <key>` (also accepted: X-API-Key, `api_key`). Only a
    # server with keys declares it: Swagger UI draws a lock on every route and an "Authorize"
    # button wherever a scheme is declared, and a server without keys wants none (nor answers
    # 403). Optional even then ({}): /health, /languages and the like take no key.
    errors = {**ERRORS, **SIZE_ERROR}
    if settings.api_key_set:
        schema["components"]["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer", "description": "an API key (this server has keys)"}
        }
        schema["security"] = [{"bearer": []}, {}]
    else:
        errors.pop("403")
    for item in schema.get("paths", {}).values():
        for operation in item.values():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            for status, description in errors.items():
                response = responses.setdefault(status, {"description": description})
                response["content"] = {"application/json": {"schema": ERROR_REF}}
                if status in ("429", "503"):
                    response["headers"] = RETRY_AFTER
            for status, response in responses.items():
                if status.startswith(("4", "5")):  # routes' own declarations (501) get the shape too
                    response["content"] = {"application/json": {"schema": ERROR_REF}}
    engine = getattr(app.state, "engine", None)
    languages: dict[str, list[str]] = {}
    limits: dict[str, int] = {}
    if engine is not None:
        for source, target in engine.models:
            languages.setdefault(source, []).append(target)
        configs = [model.config for model in engine.models.values()]
        if configs:
            limits = {"layers": min(c.decoder_layers for c in configs), "heads": min(c.n_heads for c in configs)}
            # A glossary needs a model trained with hints (400 otherwise): every served one, for the document.
            limits["hints"] = int(all(m.translator.tokenizer.hint_ids is not None for m in engine.models.values()))
            # A channel rerank needs the reverse direction (400 otherwise): some served pair's, for the document.
            limits["channel"] = int(any(m.translator.channel is not None for m in engine.models.values()))
    for node in _request_schemas(schema):
        _constrain(node, settings, languages, limits)
    return schema


def install(app: FastAPI, settings: Settings) -> None:
    """Serve the truthful document at /openapi.json and the offline /docs and /redoc."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = truthful_openapi(app, settings)
            if getattr(app.state, "engine", None) is None:
                return document  # not cached: the served languages are not known yet
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.get(f"{ASSETS_URL}/redoc.js", include_in_schema=False)
    def redoc_script() -> Response:  # before the mount below, which would shadow it
        return Response(
            _redoc_script(), media_type="text/javascript", headers={"Cache-Control": "public, max-age=86400"}
        )

    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        # persistAuthorization keeps a Bearer key typed into "Authorize" across reloads;
        # validatorUrl None: Swagger UI would otherwise send the document to validator.swagger.io.
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} API",
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
            swagger_ui_parameters={"validatorUrl": None, "persistAuthorization": True},
        )

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} API",
            redoc_js_url=f"{ASSETS_URL}/redoc.js",
            redoc_favicon_url=f"{ASSETS_URL}/favicon.png",
            with_google_fonts=False,
        )
