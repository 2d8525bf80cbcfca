"""The one error shape, LibreTranslate's `{"error": message}`, and the handlers that give every error it.

Every problem a client can cause is raised as `APIError(status, message)`; the app's
exception handlers (`install_error_handlers`) turn it, FastAPI's validation errors and
malformed bodies into the same shape with a 4xx status, so no bad input reaches a 500. A
method a path does not serve gets 405 with `Allow` (`allowed_methods`).
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import Match, Mount

CLIENT_GONE = 499  # nginx's "client closed request": counted in the metrics, never seen by the client
# Every method a route answers (HEAD through HeadAsGet, counted as the GET it runs; OPTIONS:
# CORS preflight): the metrics label any other method "other", so no request line can add
# series (tested against the routes).
SERVED_METHODS = frozenset({"GET", "HEAD", "POST", "OPTIONS"})


# A value of the request that a message shows is cut to this many characters: an error
# names what was wrong, it never echoes a 5 MiB field back (issue 41, 16).
ECHO_CHARS = 40


def clipped(value: str, limit: int = ECHO_CHARS) -> str:
    """`value` as a message shows what the client sent: quoted, and cut to `limit` characters."""
    return repr(value if len(value) <= limit else value[:limit] + "…")


class APIError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The one error shape, LibreTranslate's: `{"error": message}`."""
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def internal_error_message(error: BaseException) -> str:
    """What a client is told of an unexpected failure (the log has the traceback)."""
    return f"internal error ({type(error).__name__}); the request was not completed"


def _validation_message(error: RequestValidationError) -> str:
    problems = []
    for item in error.errors()[:5]:
        if item.get("type") == "json_invalid":
            problems.append(f"malformed JSON body: {item.get('ctx', {}).get('error', item['msg'])}")
            continue
        where = ".".join(str(p) for p in item.get("loc", ()) if p not in ("body", "query"))
        problems.append(f"{where}: {item['msg']}" if where else item["msg"])
    return "Invalid request: " + "; ".join(problems)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def api_error(request: Request, error: APIError) -> JSONResponse:
        return error_response(error.status, error.message, error.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
        return error_response(400, _validation_message(error))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        message = error.detail if isinstance(error.detail, str) else str(error.detail)
        if error.status_code == 400 and "parsing the body" in message:
            message = "malformed request body (invalid JSON or not UTF-8)"
        headers = dict(error.headers or {})
        if error.status_code == 405:  # Starlette names only the first route's methods
            headers["Allow"] = ", ".join(allowed_methods(request.app, request.scope))
        return error_response(error.status_code, message, headers)


def allowed_methods(app: FastAPI, scope: dict) -> list[str]:
    """Every method served at this request's path (GET and POST may be two routes), HEAD
    wherever GET is (`HeadAsGet`): each method of SERVED_METHODS is tried against the
    routes, by the router's own matching (FastAPI nests included routers, so their routes
    are not a flat list to read methods from)."""
    # Inside a mount (/static) the scope's root_path has grown by the mount's path: probe as the app saw it.
    top = {**scope, "root_path": scope.get("app_root_path", scope.get("root_path", ""))}
    methods = set()
    for route in app.router.routes:
        if isinstance(route, Mount):  # matches any method; the app's mounts serve files, by GET
            methods |= {"GET"} if route.matches(top)[0] == Match.FULL else set()
            continue
        methods |= {m for m in SERVED_METHODS - {"HEAD"} if route.matches({**top, "method": m})[0] == Match.FULL}
    return sorted(methods | ({"HEAD"} if "GET" in methods else set()))
