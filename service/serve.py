"""`crossalign serve`: run the HTTP service on every model bundle under --models.

The flags are generated from `service.settings.Settings` (one table, one default each);
flags that were given are exported as `CROSSALIGN_*` env vars, so uvicorn's worker
processes, which build the app through the `create_app` factory, see the same settings.

    crossalign serve --models models --host 0.0.0.0 --port 5000 --workers 2

Before the server starts, every bundle's manifest is read: a bad one is named in one
line and skipped (the others are served, and /health lists it under `failed`); if none
is usable, serve exits with status 2. The server parses HTTP with h11, which enforces
--max-header-bytes, with the read timeouts --head-timeout-s and --body-timeout-s
(service.http.connections.ReadTimeouts); the access log never shows an API key (the value of a
query parameter whose percent-decoded name is `api_key`, in any spelling, is redacted).
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import sys
from pathlib import Path
from urllib.parse import unquote_plus

from service.settings import ENV_PREFIX, Settings, get_settings

log = logging.getLogger("crossalign.service")
KEY_PARAMETER = "api_key"  # the explorer's and LibreTranslate's way to pass a key in the query
REDACTED = "[redacted]"


def redact_keys(text: str) -> str:
    """`text` with the value of every query parameter named `api_key` replaced by [redacted].

    The name is compared as the app reads it, percent-decoded (`api%5Fkey` is `api_key`), and
    in any case, and every query in the text is read (a log line holds a path with its query),
    so no spelling of the parameter carries its key into a log."""
    if "?" not in text:
        return text
    path, _, query = text.partition("?")
    query, space, rest = query.partition(" ")  # the query ends where the log line's next field starts
    parts = []
    for part in query.split("&"):
        name, equals, _ = part.partition("=")
        if equals and unquote_plus(name, errors="replace").strip().lower() == KEY_PARAMETER:
            part = f"{name}={REDACTED}"
        parts.append(part)
    return f"{path}?{'&'.join(parts)}{space}{redact_keys(rest) if space else ''}"


class RedactKeys(logging.Filter):
    """Replaces API key values in log lines (uvicorn's access log) with `[redacted]`."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact_keys(a) if isinstance(a, str) else a for a in record.args)
        if isinstance(record.msg, str):
            record.msg = redact_keys(record.msg)
        return True


def log_config() -> dict:
    """uvicorn's logging configuration with `RedactKeys` on the access log (every worker gets it)."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["redact_keys"] = {"()": RedactKeys}
    for handler in config["handlers"].values():  # the access log and every other line uvicorn writes
        handler["filters"] = ["redact_keys"]
    return config


def head_limit(settings: Settings) -> int:
    """Bytes of request line + headers the parser buffers: the header limit, plus a request
    line long enough for a GET carrying `char_limit` characters percent-encoded (up to 12
    bytes each: 4 UTF-8 bytes as %XX)."""
    return settings.max_header_bytes + 12 * settings.char_limit + 1024


def usable_bundles(models: Path) -> list[Path]:
    """The bundles under `models` whose manifest reads; each bad one logged in one line."""
    from seq2seq.runtime.bundle import load_bundle_manifest
    from seq2seq.runtime.models import bundle_languages, find_bundles
    from service.compute.engine import one_line

    usable = []
    for directory in find_bundles(models):
        try:
            bundle_languages(directory)
            load_bundle_manifest(directory, verify=False)  # the sha256 check runs when the server loads it
        except Exception as error:  # noqa: BLE001 - any problem with a bundle is reported, not raised
            log.error("not serving %s: %s", directory, one_line(error))
            continue
        usable.append(directory)
    return usable


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for name, field in Settings.model_fields.items():
        kind = field.annotation if field.annotation in (int, float, str) else str
        parser.add_argument(
            _flag(name),
            dest=name,
            type=kind,
            default=argparse.SUPPRESS,
            metavar=name.upper(),
            help=f"{field.description} (default {field.get_default(call_default_factory=True)}; "
            f"env {ENV_PREFIX}{name.upper()})",
        )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
        help="uvicorn log level (default info)",
    )


def main(args: argparse.Namespace) -> int:
    import uvicorn

    from service.http.connections import ReadTimeouts

    for name in Settings.model_fields:
        if hasattr(args, name):
            os.environ[ENV_PREFIX + name.upper()] = str(getattr(args, name))
    get_settings.cache_clear()
    settings = get_settings()  # validates the flags and env vars once, before any worker starts
    from seq2seq.runtime.models import find_bundles

    if not find_bundles(settings.models):
        log.error(
            "no model bundles in %s: a bundle is a directory with bundle.json "
            "(download the release into models/de-en, or run `crossalign export`)",
            settings.models,
        )
        return 2
    if not usable_bundles(settings.models):
        log.error("no usable model bundle in %s (see above)", settings.models)
        return 2
    uvicorn.run(
        "service.app:create_app",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        log_level=args.log_level,
        timeout_graceful_shutdown=10,
        timeout_keep_alive=settings.keep_alive_s,
        log_config=log_config(),
        http=ReadTimeouts,  # h11, with read timeouts for heads and bodies
        h11_max_incomplete_event_size=head_limit(settings),
    )
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="crossalign serve", description=__doc__.splitlines()[0])
    add_arguments(parser)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.exit(main(parser.parse_args()))
