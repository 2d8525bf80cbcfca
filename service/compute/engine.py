"""The served models: one record per language pair, each a library `Translator` behind a fair scheduler.

A `ServedModel` is all a route needs of a language pair: the bundle's name, its
`Translator` (the one the CLI uses: translations come back as `TranslationResult`s with
their alignments and quality blocks; its backend teacher-forces for the explorer) and the
`MicroBatcher` in front of it, through which every model call of a request goes, on the
client's fair turns, within the queue bound and the request's timeout: translations and
forced alignments (/v1/align) alike. `TranslatorEngine` holds the served pairs and the
bundles that failed to load. Torch-free: bundles run on onnxruntime through
`seq2seq.loading`; the tests also build a `TranslatorEngine` over a scripted backend.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data.files import BUNDLE_FILE
from seq2seq.analysis.quality import DEFAULT_QUALITY_MODE
from seq2seq.core.config import AlignmentError, AlignmentOptions, DecodeConfig, ModelConfig
from seq2seq.decoding.forced import ForcedAlignment, align_given
from seq2seq.decoding.search import Wanted
from seq2seq.decoding.translator import TranslationResult, TranslationStep, Translator, Watch
from seq2seq.runtime.models import find_bundles, model_direction
from service.compute.batching import (
    CancelToken,
    FairLock,
    MicroBatcher,
    Observe,
    RunBatch,
    Sentence,
    occlusion_units,
    work_units,
)

log = logging.getLogger("crossalign.service")
Pair = tuple[str, str]


@dataclass(frozen=True)
class ForcedJob:
    """The scheduler's job for given (source, translation) pairs: one teacher-forced pass,
    a beam of one, the map read with `options` (resolved); in the thorough quality mode one
    more teacher-forced row per source word (seq2seq/analysis/occlusion.py) for the flags."""

    options: AlignmentOptions
    beam_size: int = 1
    restore_case: bool = True  # read a shouted side with its case restored (seq2seq.decoding.forced)


@dataclass(eq=False)
class ServedModel:
    """One served language pair."""

    name: str  # the bundle directory's name, e.g. "de-en"
    source: str
    target: str
    translator: Translator
    batcher: MicroBatcher

    @property
    def config(self) -> ModelConfig:
        """The model's architecture and default alignment source (what options resolve against)."""
        return self.translator.config

    @property
    def decode_defaults(self) -> DecodeConfig:
        """The search settings of a request that sets none: the bundle's `decoding`, which its
        figures were measured with (DecodeConfig's for a bundle without the section)."""
        return self.translator.decode_defaults

    def submit(
        self,
        texts: list[str],
        config: DecodeConfig,
        client: str = "",
        token: CancelToken | None = None,
        observe: Observe | None = None,
    ) -> concurrent.futures.Future:
        """A future of `translate`'s results, not waited for: `observe(index, event)` hears
        of each text's `TranslationStep`s (greedy search) and its `TranslationResult` as they
        come. Raises service.compute.batching.QueueFull when the queue is full. Each text
        carries the config's glossary, the job none: requests with different glossaries (and
        the same other settings) share a batch."""
        sentences = [Sentence(text, config.glossary) for text in texts]
        cost = work_units(texts, config.beam_size) + self.occlusion_work(texts, config)
        return self.batcher.submit(sentences, config.without_glossary(), client, token, observe, cost)

    def occludes(self, config: DecodeConfig) -> bool:
        """Whether a translation with `config` runs the thorough quality pass's source
        occlusion (its maps' quality blocks, a detector that reads it, `config.occlusion`)."""
        asked = config.alignment is not None and config.quality and config.occlusion
        return asked and self.translator.quality.needs_occlusion

    def occlusion_work(self, sentences: list[str], config: DecodeConfig) -> int:
        """The work units of the occlusion pass of translating `sentences` with `config`
        (`occlusion_units`; 0 where it does not `occlude`): what a request costs beside its
        search (`work_units`), in the queue bound and the request's."""
        return occlusion_units(sentences, config.n_best) if self.occludes(config) else 0

    def translate(
        self,
        texts: list[str],
        config: DecodeConfig,
        timeout: float | None = None,
        client: str = "",
        token: CancelToken | None = None,
    ) -> list[TranslationResult]:
        """Blocking: translate sentences in order (micro-batched with concurrent callers, on
        `client`'s fair turns). Raises service.compute.batching.QueueFull when the queue is full,
        TimeoutError after `timeout` seconds, CancelledError once `token` is cancelled (either
        way the rest of the request is dropped: service.compute.batching, "Cancellation")."""
        return self._wait(self.submit(texts, config, client, token), timeout)

    def align(
        self,
        pairs: list[tuple[str, str]],
        options: AlignmentOptions,
        timeout: float | None = None,
        client: str = "",
        restore_case: bool = True,
        token: CancelToken | None = None,
    ) -> list[ForcedAlignment | AlignmentError]:
        """Blocking: align given (source, translation) pairs in order, through the same turns,
        queue bound, timeout and cancellation as `translate`; a pair that cannot be aligned gets
        its AlignmentError in its place (seq2seq.decoding.forced.align_given)."""
        job = ForcedJob(options, restore_case=restore_case)
        return self._wait(self.batcher.submit(pairs, job, client, token), timeout)

    @staticmethod
    def _wait(future: concurrent.futures.Future, timeout: float | None) -> list[Any]:
        try:
            return future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()  # nobody waits for the rest: do not spend the model on it
            raise


def model_call(translator: Translator) -> RunBatch:
    """What the scheduler runs for one batch: a translation (whose sentences no longer
    `wanted` leave its search at the next step), or a forced alignment of pairs (one
    teacher-forced pass: it runs whole). A watched translation reports each sentence's
    `TranslationStep`s (greedy search) and its `TranslationResult` as soon as it is whole.
    Each sentence is read with its own glossary (`Sentence`: the job holds none)."""

    def run(items: Sequence[Any], job: DecodeConfig | ForcedJob, wanted: Wanted, observe: Observe | None) -> list[Any]:
        if isinstance(job, ForcedJob):
            return align_given(translator, list(items), job.options, restore_case=job.restore_case, wanted=wanted)
        watched = None if observe is None else watch(observe, job)
        texts = [item.text if isinstance(item, Sentence) else item for item in items]
        glossaries = [item.glossary if isinstance(item, Sentence) else job.glossary for item in items]
        if not any(glossaries):  # none in the batch: the job's (empty) applies to every text
            return translator.translate_wanted(texts, job, wanted, watched)
        return translator.translate_wanted(texts, job, wanted, watched, glossaries=glossaries)

    return run


def watch(observe: Observe, config: DecodeConfig) -> Watch:
    """The translator's watch that tells `observe` (item index, event) of each step (a greedy
    search) and each result."""

    def on_step(step: TranslationStep) -> None:
        observe(step.text, step)

    return Watch(on_step=on_step if config.beam_size == 1 else None, on_result=observe)


class TranslatorEngine:
    """The served language pairs (`models`) and the bundles that could not be served (`failed`)."""

    def __init__(
        self,
        translators: dict[Pair, tuple[str, Translator]],
        window_s: float = 0.005,
        max_sentences: int = 128,
        on_batch: Callable[[str, int], None] | None = None,
        max_rows: int = 0,
        max_queue_work: int = 0,
        failed: dict[str, str] | None = None,
    ):
        self.failed = dict(failed or {})  # bundle name -> why it is not served (one line)
        self.models: dict[Pair, ServedModel] = {}
        # The models of one server take turns on the cores: each one's onnxruntime threads
        # already take every core, and two calls at once would only contend (docs/performance.md,
        # both directions); a batch is dealt once its model's turn has come (service/compute/batching.py).
        gate = FairLock() if len(translators) > 1 else None
        for pair, (name, translator) in translators.items():
            batcher = MicroBatcher(
                model_call(translator),
                window_s,
                max_sentences,
                on_batch=(lambda size, name=name: on_batch(name, size)) if on_batch else None,
                name=name,
                max_rows=max_rows,
                max_queue_work=max_queue_work,
                gate=gate,
            )
            self.models[pair] = ServedModel(name, pair[0], pair[1], translator, batcher)
        # Each direction reads the other as its channel when both are served: a request's
        # `rerank: "channel"` (seq2seq/decoding/rerank.py). The channel's pass runs inside its
        # model's call, under the gate, so the two directions' graphs still take turns.
        for (source, target), (_, translator) in translators.items():
            if (target, source) in translators:
                translator.channel = translators[target, source][1]

    def close(self) -> None:
        for model in self.models.values():
            model.batcher.close()


def load_engine(
    models: Path,
    threads: int = 0,
    window_s: float = 0.005,
    max_sentences: int = 128,
    on_batch: Callable[[str, int], None] | None = None,
    max_rows: int = 0,
    max_queue_work: int = 0,
    precision: str | None = None,
    quality_mode: str = DEFAULT_QUALITY_MODE,
    streams: int = 0,
) -> TranslatorEngine:
    """Load every bundle under `models` on onnxruntime, with its graphs of `precision` (None: each
    bundle's default), flagging untranslated words in `quality_mode` (`seq2seq.analysis.quality.QUALITY_MODES`);
    the language pair comes from bundle.json.

    A bundle that cannot be loaded is logged in one line and skipped (`engine.failed` says
    why, and /health reports it); the others are served. Raises only if none loads.
    """
    from seq2seq.loading import load_translator  # onnxruntime: imported only when serving for real

    bundles = find_bundles(models)
    if not bundles:
        raise FileNotFoundError(
            f"no model bundles in {models}: a bundle is a directory with {BUNDLE_FILE} "
            "(download the release into models/de-en or run `crossalign export`)"
        )
    translators: dict[Pair, tuple[str, Translator]] = {}
    failed: dict[str, str] = {}
    for directory in bundles:
        try:
            pair = model_direction(directory)
            translator = load_translator(
                directory,
                backend="onnx",
                threads=threads,
                precision=precision,
                quality_mode=quality_mode,
                streams=streams,
            )
            if pair in translators:
                raise ValueError(
                    f"{directory}: a second model for {pair[0]}->{pair[1]} (first: {translators[pair][0]})"
                )
        except Exception as error:  # noqa: BLE001 - one bad bundle must not stop the others
            failed[directory.name] = one_line(error)
            log.error("not serving %s: %s", directory, failed[directory.name])
            continue
        translators[pair] = (directory.name, translator)
        log.info(
            "serving %s (%s -> %s) from %s; decoding defaults %s",
            directory.name,
            *pair,
            directory,
            translator.decode_defaults.settings_text(),
        )
    if not translators:
        raise RuntimeError("no model bundle could be loaded: " + "; ".join(f"{n}: {e}" for n, e in failed.items()))
    return TranslatorEngine(translators, window_s, max_sentences, on_batch, max_rows, max_queue_work, failed)


def one_line(error: BaseException) -> str:
    """An error as one line of text (the first line of its message, with its type if it has none)."""
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
