"""`crossalign` command line: one entry point, subcommands imported lazily.

Only the module of the subcommand being run is imported, so `crossalign serve` and
`crossalign translate --backend onnx` never import torch. A command lives in the layer of
what it runs (`export` in `export/cli.py`, `serve` in `service/`, `train` in
`seq2seq/training/`) and is named here by its module, never imported: `seq2seq/` imports
neither `export/` nor `service/` (tests/test_layers.py).

A mistake the user can fix ends in one line that names the fix, exit status 2, without a
traceback: argparse's errors (`Parser`) and a command's `UsageError` alike (the documented
cases: docs/cli.md, "When a command goes wrong", run by tests/test_cli_errors.py).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import NoReturn

EXIT_USAGE = 2  # a mistake in the arguments or what they name: one line says what to change


class UsageError(Exception):
    """A mistake in how a command was called or in what it was given (a model, a file, a
    setting) that the user can fix: `crossalign` prints the message, which names the fix, as one
    line and exits with status 2, without a traceback. (`data/` and `export/`, below this
    package, end their commands so on their own.)"""


class Parser(argparse.ArgumentParser):
    """argparse's parser with its errors in one line that points at --help (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# name -> (module with add_arguments(parser) and main(args), one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("seq2seq.training.train", "train a transformer on a prepared data directory"),
    "translate": (
        "seq2seq.cli.translate",
        "translate texts, lines of a file or stdin, or a document (DOCX, ODT, PPTX, HTML, XLIFF, SRT, Markdown) "
        "with -i/-o",
    ),
    "align": ("seq2seq.cli.align", "align given translation pairs (source<TAB>target) by teacher forcing"),
    "eval": ("seq2seq.cli.evaluate", "score a model or a translation file with sacreBLEU (BLEU, chrF)"),
    "export": ("export.cli", "export a trained model to an ONNX release bundle"),
    "serve": ("service.serve", "run the HTTP service (LibreTranslate-compatible, with alignment maps)"),
}
DATA_COMMANDS: dict[str, tuple[str, str]] = {
    "prepare": ("data.prepare", "read a corpus, clean, split, train SentencePiece, write a manifest"),
    "catalogs": ("data.catalogs", "download Debian packages' translated messages (gettext catalogs) as a corpus"),
    "descriptions": (
        "data.descriptions",
        "fetch Debian's translated package descriptions (DDTP) with apt as a corpus",
    ),
    "hints": ("seq2seq.cli.hints", "ready prepared data for target-term hints: candidates, term index, hint pieces"),
}


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    positional = [a for a in argv if not a.startswith("-")]
    chosen = positional[:2]
    parser = Parser(prog="crossalign", description="German-English translation with alignment maps.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    data = commands.add_parser("data", help="corpus preparation", description="corpus preparation")
    data_commands = data.add_subparsers(dest="data_command", required=True, metavar="DATA_COMMAND")
    for name, (module, help_) in DATA_COMMANDS.items():
        sub = data_commands.add_parser(name, help=help_, description=help_)
        sub.set_defaults(module=module)
        if chosen == ["data", name]:
            importlib.import_module(module).add_arguments(sub)
    for name, (module, help_) in COMMANDS.items():
        sub = commands.add_parser(name, help=help_, description=help_)
        sub.set_defaults(module=module)
        if chosen[:1] == [name]:
            importlib.import_module(module).add_arguments(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(importlib.import_module(args.module).main(args) or 0)
    except UsageError as error:
        command = " ".join(["crossalign", args.command] + ([args.data_command] if args.command == "data" else []))
        print(f"{command}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
