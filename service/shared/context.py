"""The one request context every handler takes (overridable in tests).

Every handler takes one dependency, `ContextDep` (`get_context`): the `RequestContext` holds
the settings, the served models, the metrics, the heatmap renderer and the client whose turn
the request takes, and does what every route does with them (check the texts, pick the
language pair, resolve the alignment options and the search settings, run the model through
the fair scheduler, render). Its problems are `APIError`s (service/http/errors.py).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Annotated, Any

from fastapi import Depends, Request

from seq2seq.core.config import AlignmentError, AlignmentOptions, DecodeConfig, RerankOptions, TermOptions
from seq2seq.core.hints import MAX_TERM_PIECES
from seq2seq.core.inputs import text_problem
from seq2seq.core.languages import (
    NAMES,
    Detection,
    LanguageDetector,
    UnservedLanguage,
    detect_source,
    get_detector,
    language_name,
)
from seq2seq.decoding.forced import ForcedAlignment
from seq2seq.decoding.texts import TranslatedText, sentences_of, translate_texts
from seq2seq.decoding.translator import TranslationResult
from service.compute.batching import CancelToken, Item, Observe, QueueFull, work_units
from service.compute.engine import ServedModel, TranslatorEngine
from service.compute.rendering import Renderer, RendererBusy
from service.http.access import client_address
from service.http.errors import CLIENT_GONE, APIError, clipped, internal_error_message
from service.http.metrics import Metrics
from service.settings import Settings, get_settings


@dataclass(frozen=True)
class Search:
    """The search settings a request sets; None: the served model's own (its bundle's `decoding`)."""

    beam_size: int | None = None
    n_best: int = 1  # hypotheses per sentence (the beam is widened to hold them)
    no_repeat_ngram_size: int | None = None
    early_exit: bool = False
    attention: bool = False  # keep the attention though no map is asked for
    rerank: RerankOptions | None = None  # choose among the n-best (the beam widened to its candidates)


def work_beam(config: DecodeConfig) -> int:
    """The beam rows each character of a request costs (`max_request_work`): the search's beam
    (a reranked search's is widened to its candidates by `decode_config`), and for a channel
    rerank the reverse model's teacher-forced pass over every candidate, one row each: on the
    shipped pair that pass takes about as long as the 8-candidate search itself (bench/rerank.py:
    0.055 against 0.047 s a sentence)."""
    rerank = config.rerank
    return config.beam_size + (rerank.candidates if rerank is not None and rerank.uses_channel else 0)


def language(code: str) -> str:
    """How a message names a language: "German (de)", or a code it does not know as sent, once
    and cut (`clipped`)."""
    return f"{language_name(code)} ({code})" if code in NAMES else clipped(code)


def check_terms(model: ServedModel, terms: TermOptions) -> None:
    """400 for a glossary the model cannot take: none at all (a model trained without hints),
    or a term's translation over MAX_TERM_PIECES pieces (it would not fit beside a sentence)."""
    if terms.glossary and model.translator.tokenizer.hint_ids is None:
        raise APIError(
            400, f"glossary: the {model.name} model was not trained with target-term hints, so it cannot take one"
        )
    for source, target in terms.glossary:
        pieces = len(model.translator.tokenizer.encode(target))
        if pieces > MAX_TERM_PIECES:
            raise APIError(
                400,
                f"glossary: the translation of {clipped(source)} is {pieces} pieces long; "
                f"a term may have at most {MAX_TERM_PIECES}",
            )


def get_engine(request: Request) -> TranslatorEngine:
    engine = getattr(request.app.state, "engine", None)
    if engine is None:
        raise APIError(503, "the models are not loaded yet")
    return engine


@dataclass
class RequestContext:
    """What a handler works with: the settings, the served models, the metrics, the heatmap
    renderer, and the request (whose client takes the fair turns, and whose cancel token
    drops its work when the client hangs up)."""

    settings: Settings
    engine: TranslatorEngine
    metrics: Metrics
    request: Request
    renderer: Renderer

    @property
    def client(self) -> str:
        """Whose turn the request's model calls take in the scheduler (set by `Access.check`)."""
        return getattr(self.request.state, "client", None) or f"address:{client_address(self.request)}"

    @property
    def token(self) -> CancelToken:
        """Cancelled when the client disconnects (service.http.connections.ClientWatch)."""
        return self.request.state.cancel_token

    def detached(self) -> RequestContext:
        """This context for work that outlives the request (a file job): the same client's
        fair turns, and a cancel token of its own instead of the request's (which its
        connection's closing cancels)."""
        return DetachedContext(
            self.settings, self.engine, self.metrics, self.request, self.renderer, self.client, CancelToken()
        )

    def detector(self) -> LanguageDetector:
        """The language identifier for the served languages (its model loads on first use)."""
        return get_detector(frozenset(lang for pair in self.engine.models for lang in pair))

    # ---------------------------------------------------------------- checks

    def check_texts(
        self, texts: list[str], field: str = "q", labels: list[str] | None = None, items: int | None = None
    ) -> None:
        """400 unless every text passes the input rules (seq2seq.core.inputs) and the request's limits.

        Messages name the text as `field` (one text), `field[i]`, or `labels[i]` when given.
        `items` is what the batch limit counts (default: the texts; /v1/align counts pairs)."""
        settings = self.settings
        if not texts:
            raise APIError(400, f"Invalid request: {field} is empty")
        for index, text in enumerate(texts):
            problem = text_problem(text, settings.char_limit)  # one text over the limit: 400, as the schema says
            if problem:
                where = labels[index] if labels else f"{field}[{index}]" if len(texts) > 1 else field
                raise APIError(400, f"Invalid request: {where}: {problem}")
        items = len(texts) if items is None else items
        if items > settings.batch_limit:
            unit = "texts" if labels is None else "items"
            raise APIError(
                400, f"Invalid request: request ({items} {unit}) exceeds the batch limit ({settings.batch_limit})"
            )
        characters = sum(len(t) for t in texts)
        if characters > settings.char_limit:
            # 400, as one text over the limit is (and as LibreTranslate answers both): one limit, one answer.
            limit = settings.char_limit
            raise APIError(400, f"Invalid request: request ({characters} characters) exceeds the text limit ({limit})")

    def served_pairs_text(self) -> str:
        return ", ".join(f"{s}->{t}" for s, t in sorted(self.engine.models))

    def resolve_pair(
        self, source: str | None, target: str | None, texts: list[str]
    ) -> tuple[ServedModel, Detection | None]:
        """The served model a request asks for; `source="auto"` detects the language of the texts
        (the detector's model is loaded only when a request actually says "auto")."""
        models = self.engine.models
        # Codes are taken as sent (the schema lists the served ones); only absence has a default.
        source = "auto" if source is None else source
        if target == "":
            raise APIError(400, "Invalid request: target is empty (leave it out for the default)")
        detection = None
        if source == "auto":
            sources = {s for s, t in models if target is None or t == target}
            if not sources:
                raise APIError(
                    400,
                    f"{language(target or '')} is not a served target language (served: {self.served_pairs_text()})",
                )
            try:
                detection = detect_source(self.detector(), texts, sources)
            except UnservedLanguage as error:  # 422: a well-formed request, in a language not translated here
                raise APIError(
                    422, f"{error}, which this server does not translate (served: {self.served_pairs_text()})"
                ) from None
            source = detection.language
        if source not in {s for s, _ in models}:
            raise APIError(
                400,
                f"{language(source)} is not served as a source language (served: {self.served_pairs_text()})",
            )
        if target is None:
            targets = sorted(t for s, t in models if s == source)
            if len(targets) != 1:
                raise APIError(
                    400, f"Invalid request: missing target parameter ({source} is translated into {', '.join(targets)})"
                )
            target = targets[0]
        if (source, target) not in models:
            raise APIError(
                400,
                f"{language(source)} -> {language(target)} is not served (served: {self.served_pairs_text()})",
            )
        return models[source, target], detection

    @staticmethod
    def resolve_alignment(model: ServedModel, options: AlignmentOptions) -> AlignmentOptions:
        """The request's alignment options with the model's defaults applied; 400 if it cannot satisfy them."""
        try:
            return options.resolve(model.config)
        except AlignmentError as error:
            raise APIError(400, str(error)) from None

    def decode_config(
        self,
        model: ServedModel,
        search: Search,
        terms: TermOptions = TermOptions(),
        alignment: AlignmentOptions | None = None,
    ) -> DecodeConfig:
        """The search settings of a request: those it sets (`search`, `terms`), the model's
        own (`decode_defaults`, its bundle's) for those it leaves unset (None); `alignment`
        (resolved) is built with the translation. The fields come validated by their request
        models (service.shared.requests); 400 for a beam over this server's limit, a
        glossary the model cannot take, or a rerank this server cannot do. A reranked search
        runs with a beam of at least its candidates (what the translator widens it to)."""
        largest = self.settings.max_beam_size
        defaults, beam_size, n_best = model.decode_defaults, search.beam_size, search.n_best
        if beam_size is not None and not 1 <= beam_size <= largest:
            raise APIError(400, f"beam_size must be between 1 and {largest}, not {beam_size}")
        if beam_size is None and defaults.beam_size > largest:
            raise APIError(
                400,
                f"the model's default beam_size ({defaults.beam_size}) is over this server's limit "
                f"({largest}): ask for a beam_size between 1 and {largest}",
            )
        if not 1 <= n_best <= largest:
            raise APIError(400, f"n_best (or alternatives + 1) must be between 1 and {largest}, not {n_best}")
        check_terms(model, terms)
        rerank = self.check_rerank(model, search.rerank, n_best)
        asked = terms.apply(defaults.override(beam_size=beam_size, no_repeat_ngram_size=search.no_repeat_ngram_size))
        # n best hypotheses need a beam at least n wide: a smaller beam_size is raised to n_best
        # (and a reranked search's to its candidates, as the translator widens it).
        return replace(
            asked,
            beam_size=max(asked.beam_size, n_best, rerank.candidates if rerank else 0),
            n_best=n_best,
            rerank=rerank,
            return_attention=search.attention or alignment is not None,
            alignment=alignment,
            restore_case=self.settings.restore_case,
            early_exit=search.early_exit,
        )

    def check_rerank(self, model: ServedModel, rerank: RerankOptions | None, n_best: int) -> RerankOptions | None:
        """The rerank a request asks (`RerankFields.rerank_options`, its candidates within this
        server's beam limit), its candidates raised to `n_best` (the alternatives are the
        reranked candidates after the first); 400 for a channel mode without the reverse
        direction served."""
        if rerank is None:
            return None
        if rerank.uses_channel and model.translator.channel is None:
            raise APIError(
                400,
                f"Invalid request: rerank {rerank.mode!r} reads the source back with the reverse direction's model "
                f"({model.target}->{model.source}) as a channel, which this server does not serve "
                f"(served: {self.served_pairs_text()}); ask for rerank 'mbr', or serve both directions",
            )
        return replace(rerank, candidates=max(rerank.candidates, n_best))

    def check_work(self, items: list[Item], beam_size: int) -> None:
        """413 if the request asks more of the model than one request may (texts x beam rows x
        length; `work_beam` counts a reranked search's rows)."""
        work, limit = work_units(items, beam_size), self.settings.max_request_work
        if work > limit:
            characters = work_units(items, 1)
            raise APIError(
                413,
                f"the request's work ({work} units: {beam_size} beam rows x {characters} characters; a reranked "
                f"search counts its candidates, and the channel's pass once more) exceeds the limit ({limit}); "
                "send less text or use a smaller beam",
            )

    # ---------------------------------------------------------------- model calls

    def within_work(self, model: ServedModel, texts: list[str], config: DecodeConfig) -> DecodeConfig:
        """`config` for translating `texts` within the work cap (`max_request_work`): 413 if its
        search alone is over it (`check_work`); if the thorough quality pass's source occlusion,
        counted too (`ServedModel.occlusion_work`), would take it over, the same with the fast quality
        signals (`untranslated_by: attention`), so that no request holds the model longer than
        the cap allows (issue 41, 2)."""
        beam = work_beam(config)
        self.check_work(texts, beam)
        sentences = [sentence for text in texts for sentence in sentences_of(text)]
        occlusion = model.occlusion_work(sentences, config)
        if occlusion and work_units(texts, beam) + occlusion > self.settings.max_request_work:
            return replace(config, occlusion=False)
        return config

    def translate(
        self,
        model: ServedModel,
        texts: list[str],
        config: DecodeConfig,
        wait_until: float | None = None,
        call_chars: int = 0,
    ) -> list[TranslatedText]:
        """Translate whole texts (one batch, on the client's turns), count tokens. With
        `wait_until` (a `time.monotonic()` deadline), a full queue is waited out until then
        instead of answered with 503 (a file's calls: the file is uploaded already). With
        `call_chars` (a file's), the sentences go to the model in calls of at most that many
        characters, each within the work cap, so a paragraph longer than one call is
        translated all the same (`translate_texts`)."""
        timeout, bounded = self.settings.request_timeout, None
        if not call_chars:
            bounded = self.within_work(model, texts, config)

        def call(sentences: list[str]) -> list[TranslationResult]:
            checked = bounded or self.within_work(model, sentences, config)
            return self._scheduled(
                lambda: model.translate(sentences, checked, timeout, self.client, self.token), wait_until
            )

        translated = translate_texts(texts, call, call_chars=call_chars)
        self.metrics.count_tokens(
            model.name,
            sum(len(t.results) for t in translated),
            sum(t.source_tokens for t in translated),
            sum(t.target_tokens for t in translated),
        )
        return translated

    def submit(
        self, model: ServedModel, texts: list[str], sentences: list[str], config: DecodeConfig, observe: Observe
    ) -> concurrent.futures.Future:
        """Queue the translation of `sentences` (those of `texts`) on the client's turns,
        without waiting: `observe` hears of its steps and results as they come (a stream),
        the future is cancelled with the request's token. The work cap (413, `within_work`)
        and the queue bound (503) as for `translate`."""
        config = self.within_work(model, texts, config)
        try:
            return model.submit(sentences, config, self.client, self.token, observe)
        except QueueFull as full:
            raise self.scheduling_error(full) from None

    def align(
        self, model: ServedModel, pairs: list[tuple[str, str]], options: AlignmentOptions
    ) -> list[ForcedAlignment | AlignmentError]:
        """Align given pairs (one teacher-forced pass: a beam of one over both texts, plus the
        occlusion rows in the thorough quality mode), through the same work cap, queue bound,
        fair turns and timeout as a translation."""
        self.check_work(pairs, 1)
        return self._scheduled(
            lambda: model.align(
                pairs,
                options,
                self.settings.request_timeout,
                self.client,
                restore_case=self.settings.restore_case,
                token=self.token,
            )
        )

    @contextlib.contextmanager
    def render_place(self, pixels: int) -> Iterator[None]:
        """`pixels` of the renderer's capacity for the body of the `with` (taken before
        translating, so a heatmap that cannot be drawn now costs nothing); 503 with Retry-After
        if they do not fit."""
        try:
            with self.renderer.admit(pixels):
                yield
        except RendererBusy as busy:
            raise APIError(503, f"the server is busy: {busy}", headers={"Retry-After": str(busy.retry_after)}) from None

    def render(self, job: Callable[[], bytes], pixels: int) -> bytes:
        """`job()` (a heatmap of `pixels`) on the render thread, within the request's timeout
        and cancellation."""
        return self._scheduled(lambda: self.renderer.render(job, pixels, self.token, self.settings.request_timeout))

    def _scheduled(self, call: Callable[[], Any], wait_until: float | None = None) -> Any:
        """Run a model call or a render; its scheduling failures answered as `scheduling_error`
        says. A full queue is tried again after its `retry_after` while `wait_until` allows
        (and the request is wanted)."""
        while True:
            try:
                return call()
            except QueueFull as full:
                left = (wait_until or 0.0) - time.monotonic()
                if left <= 0:
                    raise self.scheduling_error(full) from None
                if self.token.wait(min(full.retry_after, left)):
                    raise self.scheduling_error(concurrent.futures.CancelledError()) from None
            except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError) as error:
                raise self.scheduling_error(error) from None

    def scheduling_error(self, error: BaseException) -> APIError:
        """The answer to a model call or render that did not complete: a full queue or a
        timeout is a 503 (with Retry-After), work cancelled because the client hung up a 499
        (nobody reads it), because the server is stopping a 503; anything else a 500."""
        if isinstance(error, QueueFull):
            return APIError(503, f"the server is busy: {error}", headers={"Retry-After": str(error.retry_after)})
        if isinstance(error, concurrent.futures.TimeoutError):
            return APIError(
                503,
                f"the request took longer than {self.settings.request_timeout:g} s; try again with less text",
                headers={"Retry-After": "5"},
            )
        if isinstance(error, concurrent.futures.CancelledError):
            if self.token.cancelled:
                return APIError(CLIENT_GONE, "the client closed the connection; its work was dropped")
            return APIError(503, "the server is shutting down", headers={"Retry-After": "5"})
        return APIError(500, internal_error_message(error))


@dataclass
class DetachedContext(RequestContext):
    """`RequestContext.detached()`: the client frozen when the request was made, its own token."""

    own_client: str = ""
    own_token: CancelToken = field(default_factory=CancelToken)

    @property
    def client(self) -> str:
        return self.own_client

    @property
    def token(self) -> CancelToken:
        return self.own_token


def get_context(
    request: Request, settings: Settings = Depends(get_settings), engine: TranslatorEngine = Depends(get_engine)
) -> RequestContext:
    """The one dependency of every handler."""
    return RequestContext(settings, engine, request.app.state.metrics, request, request.app.state.renderer)


# The one dependency of every handler: `ctx: ContextDep`.
ContextDep = Annotated[RequestContext, Depends(get_context)]
