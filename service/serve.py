"""`crossalign serve`: run the HTTP service on every model bundle under --models.

The flags are generated from `service.settings.Settings` (one table, one default each);
flags that were given are exported as `CROSSALIGN_*` env vars, so uvicorn's worker
processes, which build the app through the `create_app` factory, see the same settings.

    crossalign serve --models models --host 0.0.0.0 --port 5000 --workers 2
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from service.settings import ENV_PREFIX, Settings, get_settings

log = logging.getLogger("crossalign.service")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for name, field in Settings.model_fields.items():
        kind = field.annotation if field.annotation in (int, float, str) else str
        parser.add_argument(_flag(name), dest=name, type=kind, default=argparse.SUPPRESS, metavar=name.upper(),
                            help=f"{field.description} (default {field.default}; env {ENV_PREFIX}{name.upper()})")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                        help="uvicorn log level (default info)")


def main(args: argparse.Namespace) -> int:
    import uvicorn

    for name in Settings.model_fields:
        if hasattr(args, name):
            os.environ[ENV_PREFIX + name.upper()] = str(getattr(args, name))
    get_settings.cache_clear()
    settings = get_settings()  # validates the flags and env vars once, before any worker starts
    from service.engine import find_bundles

    if not find_bundles(settings.models):
        log.error("no model bundles in %s: a bundle is a directory with bundle.json "
                  "(download the release into models/de-en, or run `crossalign export`)", settings.models)
        return 2
    uvicorn.run("service.app:create_app", factory=True, host=settings.host, port=settings.port,
                workers=settings.workers, log_level=args.log_level, timeout_graceful_shutdown=10)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="crossalign serve", description=__doc__.splitlines()[0])
    add_arguments(parser)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.exit(main(parser.parse_args()))
