"""The engine behind the routes: language pairs -> `Translator`s, with micro-batching.

Routes see only the `Engine` interface (after LibreTranslate's `ITranslation`): which
pairs are served, translate a list of sentences (with their alignments when the
`DecodeConfig` asks for them). `TranslatorEngine`
implements it over the library's `Translator`s, one per bundle found under the models
directory; the tests also build it over a scripted backend. Torch-free: bundles run on
onnxruntime through `seq2seq.loading`.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from seq2seq.bundle import BUNDLE_FILE
from seq2seq.config import DecodeConfig, ModelConfig
from seq2seq.translator import TranslationResult, Translator
from service.batching import MicroBatcher

log = logging.getLogger("crossalign.service")
Pair = tuple[str, str]


@dataclass(frozen=True)
class ModelInfo:
    name: str                       # the bundle directory's name, e.g. "de-en"
    source: str
    target: str
    config: ModelConfig             # what alignment options are resolved against

    @property
    def decoder_layers(self) -> int:
        return self.config.decoder_layers

    @property
    def n_heads(self) -> int:
        return self.config.n_heads

    @property
    def alignment_layer(self) -> int:
        """The default alignment source, 0-based."""
        return self.config.resolved_alignment_layer

    @property
    def alignment_heads(self) -> tuple[int, ...]:
        """() = the mean of all heads."""
        return tuple(self.config.alignment_heads)

    @property
    def alignment_step_shift(self) -> bool:
        """Read where the target token is the decoder input."""
        return self.config.alignment_step_shift


class Engine(Protocol):
    models: dict[Pair, ModelInfo]
    failed: dict[str, str]          # bundle name -> why it is not served (one line)

    def translate(self, pair: Pair, texts: list[str], config: DecodeConfig, timeout: float | None = None,
                  client: str = "") -> list[TranslationResult]:
        """Blocking: translate sentences (micro-batched with concurrent callers, turns shared
        fairly between `client`s), in order. Raises service.batching.QueueFull when the queue
        is full, TimeoutError after `timeout` seconds (the rest of the request is dropped)."""
        ...

    def reserve(self, pair: Pair, cost: int) -> AbstractContextManager[None]:
        """Count `cost` work units of model work done outside `translate` (forced alignment)
        in `pair`'s queue bound while the block runs; raises QueueFull when it is full."""
        ...

    def translator(self, pair: Pair) -> Translator | None:
        """The library `Translator` behind `pair`, for features beyond translating (the
        explorer's attention maps, forced alignment of given translations); None if the
        engine has none."""
        ...

    def close(self) -> None:
        ...


class TranslatorEngine:
    """One `Translator` and one `MicroBatcher` per language pair."""

    def __init__(self, translators: dict[Pair, tuple[str, Translator]], window_s: float = 0.005,
                 max_sentences: int = 128, on_batch: Callable[[str, int], None] | None = None,
                 max_rows: int = 0, max_queue_work: int = 0, failed: dict[str, str] | None = None):
        self.translators = {pair: translator for pair, (_, translator) in translators.items()}
        self.models = {pair: model_info(name, pair, translator) for pair, (name, translator) in translators.items()}
        self.failed = dict(failed or {})
        self.batchers = {
            pair: MicroBatcher(translator.translate_batch, window_s, max_sentences,
                               on_batch=(lambda size, name=name: on_batch(name, size)) if on_batch else None,
                               name=name, max_rows=max_rows, max_queue_work=max_queue_work)
            for pair, (name, translator) in translators.items()
        }

    def translate(self, pair: Pair, texts: list[str], config: DecodeConfig, timeout: float | None = None,
                  client: str = "") -> list[TranslationResult]:
        batcher = self.batchers[pair]
        future = batcher.submit(texts, config, client)
        try:
            return future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            batcher.cancel(future)  # nobody waits for the rest: do not spend the model on it
            raise

    def reserve(self, pair: Pair, cost: int) -> AbstractContextManager[None]:
        return self.batchers[pair].reserve(cost)

    def translator(self, pair: Pair) -> Translator | None:
        return self.translators.get(pair)

    def close(self) -> None:
        for batcher in self.batchers.values():
            batcher.close()


def model_info(name: str, pair: Pair, translator: Translator) -> ModelInfo:
    return ModelInfo(name, pair[0], pair[1], translator.config)


def find_bundles(models: Path) -> list[Path]:
    """`models` itself if it is a bundle, else every bundle directly inside it, sorted."""
    models = Path(models)
    if (models / BUNDLE_FILE).is_file():
        return [models]
    if not models.is_dir():
        return []
    return sorted(d for d in models.iterdir() if (d / BUNDLE_FILE).is_file())


def load_engine(models: Path, threads: int = 0, window_s: float = 0.005, max_sentences: int = 128,
                on_batch: Callable[[str, int], None] | None = None, max_rows: int = 0,
                max_queue_work: int = 0, precision: str | None = None) -> TranslatorEngine:
    """Load every bundle under `models` on onnxruntime, with its graphs of `precision` (None: each
    bundle's default); the language pair comes from bundle.json.

    A bundle that cannot be loaded is logged in one line and skipped (`engine.failed` says
    why, and /health reports it); the others are served. Raises only if none loads.
    """
    from seq2seq.loading import load_translator  # onnxruntime: imported only when serving for real

    bundles = find_bundles(models)
    if not bundles:
        raise FileNotFoundError(f"no model bundles in {models}: a bundle is a directory with {BUNDLE_FILE} "
                                "(download the release into models/de-en or run `crossalign export`)")
    translators: dict[Pair, tuple[str, Translator]] = {}
    failed: dict[str, str] = {}
    for directory in bundles:
        try:
            languages = bundle_languages(directory)
            translator = load_translator(directory, backend="onnx", threads=threads, precision=precision)
            config = translator.config
            pair = (languages.get("source", config.source_lang), languages.get("target", config.target_lang))
            if pair in translators:
                raise ValueError(f"{directory}: a second model for {pair[0]}->{pair[1]} "
                                 f"(first: {translators[pair][0]})")
        except Exception as error:  # noqa: BLE001 - one bad bundle must not stop the others
            failed[directory.name] = one_line(error)
            log.error("not serving %s: %s", directory, failed[directory.name])
            continue
        translators[pair] = (directory.name, translator)
        log.info("serving %s (%s -> %s) from %s", directory.name, *pair, directory)
    if not translators:
        raise RuntimeError("no model bundle could be loaded: " + "; ".join(f"{n}: {e}" for n, e in failed.items()))
    return TranslatorEngine(translators, window_s, max_sentences, on_batch, max_rows, max_queue_work, failed)


def bundle_languages(directory: Path) -> dict[str, str]:
    """The `languages` of a bundle's bundle.json; ValueError naming the file if it is malformed."""
    path = directory / BUNDLE_FILE
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: unreadable manifest: {one_line(error)}") from None
    languages = manifest.get("languages", {}) if isinstance(manifest, dict) else None
    if not isinstance(languages, dict):
        raise ValueError(f"{path}: `languages` must be an object")
    return languages


def one_line(error: BaseException) -> str:
    """An error as one line of text (the first line of its message, with its type if it has none)."""
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
