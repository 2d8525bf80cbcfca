"""Which model a command runs, by path or by language, and the reverse model a reranking reads.

`-m DIR` names a model directory: a bundle, an ensemble directory (ensemble.json) or, with
`--backend torch`, a training output. Without it, `--source` and `--target` pick a direction
among the bundles of the models directory, found by the one rule the service follows too
(`seq2seq.runtime.models.default_models_dir`: `--models DIR`, else `CROSSALIGN_MODELS`, else
`./models` when it holds a bundle, else the models shipped beside the package), so the
command works wherever it runs. `--source auto` detects the input's language as the service
does (`seq2seq.core.languages.detect_source`). Neither given: German -> English.

`--rerank channel` (or `mbr+channel`) reads the reverse direction's model as a noisy channel
(`Translator.channel`): the other direction's bundle in the same models directory (models/en-de
for models/de-en), or `--channel-model DIR`. `translate` reranks by default (`--rerank auto`):
the channel over the beam's own candidates where the reverse bundle is there, the search's own
best where it is not (`resolve_auto_rerank`).

Every mistake is a `UsageError` whose one line names the fix.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from data.files import BUNDLE_FILE, CONFIG_FILE, ENSEMBLE_FILE
from seq2seq.cli import UsageError
from seq2seq.core.config import RERANK_MODES, RerankOptions
from seq2seq.runtime.models import MODELS_ENV, Direction, default_models_dir, model_direction, model_directions

log = logging.getLogger("crossalign.models")

DEFAULT_DIRECTION: Direction = ("de", "en")  # with neither --source nor --target
AUTO = "auto"


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """-m/--model, --models, --source, --target."""
    parser.add_argument(
        "-m",
        "--model",
        type=Path,
        help="model directory: a bundle, an ensemble directory (ensemble.json), or a training output with "
        "--backend torch (default: the bundle of --source/--target in --models)",
    )
    parser.add_argument(
        "--models",
        type=Path,
        metavar="DIR",
        help=f"directory of bundles to pick a direction from, as `crossalign serve --models` (default: ${MODELS_ENV}, "
        "else ./models when it holds a bundle, else the models shipped beside the package)",
    )
    parser.add_argument(
        "--source",
        metavar="LANG",
        help=f"source language, or {AUTO}: detect it from the input, as the service does (default: "
        f"{DEFAULT_DIRECTION[0]}, or the source of the one model into --target)",
    )
    parser.add_argument(
        "--target",
        metavar="LANG",
        help=f"target language (default: {DEFAULT_DIRECTION[1]}, or the one the source language is translated into)",
    )


AUTO_RERANK = "auto"


def add_rerank_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, batch_default: bool = False
) -> None:
    """--rerank, --rerank-candidates, --channel-weight, --channel-model (`translate` and `eval`).
    `batch_default`: the default is `auto` (`translate`), else `none` (`eval` scores the
    bundle's own decoding unless asked)."""
    default = RerankOptions()
    auto_help = (
        f"; default {AUTO_RERANK}: channel over the beam's own candidates when the reverse direction's bundle "
        "is beside the model (1.7x the time of none, +0.5 BLEU on Ding test), else none"
    )
    parser.add_argument(
        "--rerank",
        choices=(*RERANK_MODES, AUTO_RERANK) if batch_default else RERANK_MODES,
        default=AUTO_RERANK if batch_default else default.mode,
        help="choose each sentence's translation among the search's n-best: channel = by the reverse model's "
        "log P(source | candidate), mbr = minimum Bayes risk with chrF, mbr+channel = both, none = the "
        "search's own best (docs/decoding.md, reranking the n-best"
        + (auto_help if batch_default else f"; default {default.mode}")
        + ")",
    )
    parser.add_argument(
        "--rerank-candidates",
        type=rerank_candidates,
        default=default.candidates,
        metavar="N",
        help=f"candidates reranked; the beam is widened to them (default {default.candidates}"
        + (", the beam size under auto" if batch_default else "")
        + ")",
    )
    parser.add_argument(
        "--channel-weight",
        type=channel_weight,
        default=default.channel_weight,
        metavar="LAMBDA",
        help="weight of the channel's log-prob per source piece beside the candidate's score "
        f"(default {default.channel_weight}, chosen on valid by bench/rerank.py)",
    )
    parser.add_argument(
        "--channel-model",
        type=Path,
        metavar="DIR",
        help="the reverse direction's model for the channel modes (default: the other direction's bundle "
        "beside the model, e.g. models/en-de for models/de-en)",
    )


def _checked(kind: type, field: str) -> Callable[[str], Any]:
    """An argparse type for one `RerankOptions` field: its value, checked by RerankOptions itself."""

    def parse(text: str) -> Any:
        value = kind(text)
        try:
            RerankOptions(**{field: value})
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return value

    parse.__name__ = kind.__name__  # argparse names it in "invalid int value: 'x'"
    return parse


rerank_candidates = _checked(int, "candidates")  # 2 to 32
channel_weight = _checked(float, "channel_weight")  # >= 0


def rerank_options(args: argparse.Namespace) -> RerankOptions | None:
    """The reranking the flags ask for; None for `--rerank none` (`auto` is resolved first:
    `resolve_auto_rerank`)."""
    if args.rerank == "none":
        return None
    if args.rerank == AUTO_RERANK:
        raise ValueError("--rerank auto is resolved by resolve_auto_rerank before the options are read")
    return RerankOptions(args.rerank, args.rerank_candidates, args.channel_weight)


def resolve_auto_rerank(args: argparse.Namespace, models: Path | None, before: dict | None = None) -> None:
    """Turn `--rerank auto` into a mode, in `args`: a resumed job's own (`before`, its job
    record, so it goes on as it ran), else `channel` over the beam's own candidates (no wider
    search: the beam size) when the reverse direction's model is there
    (`--channel-model`, or its bundle beside the model), else `none`. Needs `args.beam_size`
    filled in. The beam's 4 candidates reranked by the channel cost about 1.7x the search alone
    and gain on every register the release gate reads (docs/decoding.md, reranking)."""
    if args.rerank != AUTO_RERANK:
        return
    if before is not None and "rerank" in before:
        record = before["rerank"]
        args.rerank = record["mode"] if record else "none"
        if record:
            args.rerank_candidates = record["candidates"]
            if record.get("channel_weight") is not None:
                args.channel_weight = record["channel_weight"]
            if record.get("channel_model") and args.channel_model is None:
                args.channel_model = Path(record["channel_model"])
        return
    if (args.beam_size or 0) < 2:
        args.rerank = "none"
        return
    probe = RerankOptions("channel", args.beam_size, args.channel_weight)
    try:
        found = channel_model(probe, args.channel_model, args.model, models)
    except UsageError:
        found = None
    if found is None:
        log.info("rerank: none (no reverse direction's model beside %s to read as a channel)", args.model)
        args.rerank = "none"
        return
    args.rerank, args.rerank_candidates, args.channel_model = "channel", probe.candidates, found
    log.info(
        "rerank: channel over the beam's %d candidates (the default; --rerank none: faster, about 1.7x)",
        probe.candidates,
    )


def check_model_dir(path: Path, flag: str = "-m") -> Path:
    """`path` if it is a model directory (bundle.json, ensemble.json or config.json in it); else
    UsageError naming the flag to fix."""
    if not path.is_dir():
        raise UsageError(f"no model directory at {path}: give {flag} DIR, a folder with {BUNDLE_FILE}")
    if not any((path / name).is_file() for name in (BUNDLE_FILE, ENSEMBLE_FILE, CONFIG_FILE)):
        raise UsageError(
            f"{path} is not a model directory (no {BUNDLE_FILE}, {ENSEMBLE_FILE} or {CONFIG_FILE}): give {flag} DIR"
        )
    return path


def directions_text(directions: dict[Direction, Path]) -> str:
    return ", ".join(f"{s}->{t} ({path})" for (s, t), path in sorted(directions.items()))


def choose_model(args: argparse.Namespace, sample: Callable[[], list[str]]) -> tuple[Path, Path]:
    """The model directory the flags name, and the models directory beside it (where the
    channel is looked for). `sample()` gives texts of the input to detect `--source auto` on.
    Raises UsageError naming the flag to give."""
    if args.model is not None:
        model = check_model_dir(args.model)
        if args.source is None and args.target is None:
            return model, model.resolve().parent
        directions = {_direction(model): model}
        where = f"the model {model}"
        models = model.resolve().parent
    else:
        models = args.models or default_models_dir()
        directions = model_directions(models)
        if not directions:
            raise UsageError(
                f"no model bundles in {models}: give --models DIR (a folder of bundles, e.g. the checkout's "
                f"models/), set {MODELS_ENV}, or name one with -m DIR"
            )
        where = str(models)
    direction = _pick(directions, args.source, args.target, sample, where)
    log.info("model: %s (%s -> %s)", directions[direction], *direction)
    return directions[direction], models


def _direction(model: Path) -> Direction:
    try:
        return model_direction(model)
    except ValueError as error:
        raise UsageError(f"cannot read the languages of {model}: {error}") from None


def _pick(
    directions: dict[Direction, Path],
    source: str | None,
    target: str | None,
    sample: Callable[[], list[str]],
    where: str,
) -> Direction:
    """The direction among `directions` that --source (perhaps auto) and --target name."""
    if source == AUTO:
        source = _detect(directions, target, sample, where)
    if source is None and target is None:
        if DEFAULT_DIRECTION in directions or len(directions) != 1:
            source, target = DEFAULT_DIRECTION
        else:
            return next(iter(directions))
    found = [(s, t) for s, t in directions if source in (None, s) and target in (None, t)]
    if len(found) == 1:
        return found[0]
    asked = f"{source or 'any'} -> {target or 'any'}"
    if not found:
        raise UsageError(
            f"no model translates {asked} in {where} (there: {directions_text(directions)}): give --source/--target "
            "of one of them, --models DIR or -m DIR"
        )
    raise UsageError(f"several models translate {asked} in {where}: give --source and --target")


def _detect(directions: dict[Direction, Path], target: str | None, sample: Callable[[], list[str]], where: str) -> str:
    """--source auto: the input's language among the sources of the models into `target`."""
    sources = {s for s, t in directions if target in (None, t)}
    if not sources:
        raise UsageError(f"no model translates into {target} in {where} (there: {directions_text(directions)})")
    texts = sample()
    if not texts:  # nothing to read (an empty input): the one source, or the default's
        return next(iter(sources)) if len(sources) == 1 else DEFAULT_DIRECTION[0]
    try:
        from seq2seq.core.languages import UnservedLanguage, detect_source, get_detector

        detector = get_detector(frozenset(lang for pair in directions for lang in pair))
        detection = detect_source(detector, texts, sources)
    except ImportError:
        raise UsageError("--source auto needs py3langid (the `serve` extra): install it, or give --source") from None
    except UnservedLanguage as error:
        raise UsageError(f"{error}, which no model in {where} translates (if it is not, give --source LANG)") from None
    log.info("source language: %s (detected, %.0f%% confidence)", detection.language, 100 * detection.confidence)
    return detection.language


def channel_model(
    rerank: RerankOptions | None, given: Path | None, model: Path, models: Path | None = None
) -> Path | None:
    """The reverse direction's model that `rerank` reads as a channel (None when it reads
    none): `given` (--channel-model), else the bundle of the reverse direction in `models`
    (the models directory the model came from; default: the model's parent). Raises
    UsageError naming --channel-model when there is none."""
    if rerank is None or not rerank.uses_channel:
        return None
    if given is not None:
        return check_model_dir(given, "--channel-model")
    source, target = _direction(model)
    models = models or model.resolve().parent
    reverse = model_directions(models).get((target, source))
    if reverse is None:
        raise UsageError(
            f"--rerank {rerank.mode} reads the reverse direction's model ({target}->{source}) as a channel, and "
            f"{models} has none: give --channel-model DIR"
        )
    log.info("channel: %s (%s -> %s)", reverse, target, source)
    return reverse
