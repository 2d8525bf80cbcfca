"""The one `Translator`: text in, `TranslationResult`s out, for any search backend.

The CLI, the evaluation and the HTTP service all call `translate_batch`; only the backend
differs (torch eager for research, onnxruntime for serving). Shouted (all-caps) input is
read with its case restored and answered in capitals (seq2seq/core/casing.py,
`DecodeConfig.restore_case`). Torch-free.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from data.dictionary import TermIndex
from data.tokenizer import UNK_ID, Tokenizer
from seq2seq.analysis.occlusion import occluded_log_probs, word_pieces
from seq2seq.analysis.quality import (
    DEFAULT_QUALITY_MODE,
    Evidence,
    QualityThresholds,
    SentenceQuality,
    assess_alignment,
)
from seq2seq.core.alignment import Alignment, Alignments, Token, align, pieces_with_offsets
from seq2seq.core.backend import SearchBackend
from seq2seq.core.casing import Truecaser, cased_pieces, keep_shouted_words, shout
from seq2seq.core.config import AlignmentError, AlignmentOptions, DecodeConfig, GlossaryTerms, ModelConfig
from seq2seq.core.hints import (
    Glossary,
    Hint,
    HintedSource,
    TermOutcome,
    collapse_columns,
    dictionary_hints,
    fit_hints,
    plain_source,
    term_outcomes,
)
from seq2seq.decoding.rerank import rerank_batch
from seq2seq.decoding.runs import plan_runs
from seq2seq.decoding.search import Hypothesis, Observe, SearchStep, Wanted, beam_search, pad_batch
from seq2seq.decoding.terms import SentenceTerms


@dataclass
class TranslationResult:
    text: str  # detokenized translation
    score: float  # length-normalised log-probability
    source_tokens: list[str]  # SentencePiece pieces of the source, EOS excluded, in the input's case
    target_tokens: list[str]  # pieces of the translation, EOS excluded (upper case, as `text`, when shouted)
    source_ids: list[int] = field(default_factory=list)
    target_ids: list[int] = field(default_factory=list)
    log_prob: float = 0.0  # summed token log-probs, EOS included (unpenalised)
    token_log_probs: list[float] = field(default_factory=list)  # (T+1,) per produced piece, EOS last
    # (L, H, T+1, S+1): cross-attention of every layer/head; rows = target steps (last =
    # the step that emitted EOS), columns = source pieces plus the source EOS.
    attention: np.ndarray | None = None
    alternatives: list[TranslationResult] = field(default_factory=list)  # n-best beyond the first
    # Its alignment maps, built in the same pass when `DecodeConfig.alignment` asks for them.
    alignment: Alignments | None = None
    # Its quality signals (seq2seq.analysis.quality), from the word map of `alignment`, filled with it.
    quality: SentenceQuality | None = None
    # The source as the model read it when the input was shouted and its case was restored
    # (seq2seq.core.casing): a case change of the input, character for character, so offsets into
    # it are offsets into the input. None: read as given. The translation is then in capitals.
    cased_source: str | None = None
    # The target-term hints the model was shown (seq2seq/core/hints.py), with whether this
    # translation used each; `source_ids`, `source_tokens` and `attention` are over the
    # user's own pieces all the same (a hint's attention counts for the word it explains).
    terms: list[TermOutcome] = field(default_factory=list)
    # What the model read when hints were shown (ids with the hints, and each position's
    # owner among the user's pieces); None: the user's pieces alone, `source_ids`.
    hinted: HintedSource | None = None
    source_text: str = ""  # the text translated, as given

    @property
    def case_restored(self) -> bool:
        return self.cased_source is not None

    @property
    def mean_log_prob(self) -> float:
        """Log-probability per produced token, EOS included."""
        return self.log_prob / (len(self.target_ids) + 1)


@dataclass(frozen=True)
class ReadSource:
    """What the model reads of one text: the text with its case restored where that differs
    from the text (None: the text as given), and its pieces with any hints inserted."""

    cased: str | None
    model: HintedSource


@dataclass(frozen=True)
class TranslationStep:
    """One step of a watched greedy translation (`Watch.on_step`): the piece one text's
    search chose, what it weighed, and where the model looked while choosing it.

    Shapes: L decoder layers, H heads, S the user's source pieces (hints folded into the
    piece they explain, as in `TranslationResult.attention`), C candidates.
    """

    text: int  # which of the texts translated
    step: int  # 0: the step whose input is BOS; the step's piece is target piece `step`
    token: int  # the piece's id; EOS: the translation ends here
    piece: str  # as the model wrote it (a shouted text's result is then put in capitals)
    log_prob: float
    candidates: list[tuple[str, float]]  # (piece, log-prob), the C likeliest first; -inf: banned
    cross: np.ndarray  # (L, H, S+1): the step's cross-attention over the source pieces and EOS
    decoder: np.ndarray | None  # (L, H, step+1): its self-attention over BOS and the pieces before it


@dataclass(frozen=True)
class Watch:
    """Someone watching a translation as it is made (a stream of events): `on_step` after
    every step of a greedy search (a beam's prefix is not final, so a beam search has none),
    `on_result(index, result)` as soon as a text's result is whole (its maps and quality
    included), which for a batch searched in several runs is before the last run. Called in
    the translating threads (with `Translator.streams` > 1, several at once)."""

    on_step: Callable[[TranslationStep], None] | None = None
    on_result: Callable[[int, TranslationResult], None] | None = None


class Translator:
    """Batches, searches and detokenizes; long inputs are sorted by length for padding.

    `quality` holds the model's detectors and thresholds (its `quality.json`) for the quality
    block each aligned translation carries, as `quality_mode` uses them ("thorough": with
    source occlusion where the detector reads it; "fast": never, see
    `QualityThresholds.for_mode`); forced alignment (`seq2seq.decoding.forced`) flags with the same.
    `decode_defaults` are the search settings of a call that sets none (the bundle's
    `decoding`, which its figures were measured with; `seq2seq.loading` reads them).
    `streams` > 1: a batch of several sentences is split into that many sub-batches, searched
    at once on as many threads over `stream_backend` (default: `backend`; it must be
    thread-safe), so one sub-batch's graphs run while another's search works in Python; the
    results are the same (each sentence's rows are searched alone).
    Raises ValueError if they do not fit the model, or for an unknown mode."""

    def __init__(
        self,
        backend: SearchBackend,
        tokenizer: Tokenizer,
        max_source_tokens: int = 250,
        max_batch_tokens: int = 4096,
        quality: QualityThresholds = QualityThresholds(),
        quality_mode: str = DEFAULT_QUALITY_MODE,
        decode_defaults: DecodeConfig = DecodeConfig(),
        streams: int = 1,
        stream_backend: SearchBackend | None = None,
        term_index: TermIndex | None = None,
    ):
        self.backend, self.tokenizer = backend, tokenizer
        if streams < 1:
            raise ValueError(f"streams must be at least 1, not {streams}")
        self.streams, self.stream_backend = streams, stream_backend or backend
        self._stream_pool: ThreadPoolExecutor | None = None
        self._stream_pool_lock = threading.Lock()
        self.decode_defaults = decode_defaults
        # The reverse direction's translator, the channel a reranked search reads
        # (`DecodeConfig.rerank`): set by whoever loads both directions; None: none.
        self.channel: Translator | None = None
        # The dictionary behind automatic hints (the bundle's dictionary.tsv.gz), for a model
        # whose vocabulary has the hint pieces; None: none.
        self.term_index = term_index if tokenizer.hint_ids is not None else None
        self.config: ModelConfig = backend.config
        quality.check(self.config.decoder_layers)
        self.quality_mode = quality_mode
        self.quality = quality.for_mode(quality_mode)  # what the flags read: needs_occlusion says if it runs
        self.fast_quality = quality.for_mode("fast")  # a call's with `DecodeConfig.occlusion` off
        self.own_source = AlignmentOptions().resolve(self.config)  # the map the quality detectors read
        self.max_positions = self.config.max_positions
        self.max_source_tokens = min(max_source_tokens, self.max_positions)
        self.max_batch_tokens = max_batch_tokens
        self.truecaser = Truecaser(tokenizer.segmentation_score, self.config.source_lang)
        # For given translations (forced alignment, seq2seq.decoding.forced): the shared vocabulary scores them too.
        self.target_truecaser = Truecaser(tokenizer.segmentation_score, self.config.target_lang)

    def encode_source(self, text: str) -> list[int]:
        ids = self.tokenizer.encode(text)[: self.max_source_tokens - 1]
        return ids + [self.backend.eos_id]

    def hints_for(self, text: str, config: DecodeConfig, glossary: GlossaryTerms | None = None) -> list[Hint]:
        """The hints `config` asks for on `text`: its glossary's terms (`glossary`, when given,
        instead of the config's), then the dictionary's for rare words the glossary left alone.
        Raises HintError for a glossary the model cannot read."""
        glossary = config.glossary if glossary is None else glossary
        if glossary and self.tokenizer.hint_ids is None:
            raise HintError("this model was not trained with target-term hints, so it cannot take a glossary")
        hints = Glossary(glossary).hints(text, self.config.source_lang) if glossary else []
        if config.dictionary_hints and self.term_index is not None:
            hints = sorted(
                hints + dictionary_hints(text, self.term_index, config.hint_max_count, hints), key=lambda h: h.start
            )
        return hints

    def model_source(self, text: str, hints: list[Hint]) -> HintedSource:
        """What the model reads for `text` (EOS excluded), with `hints` inserted, within the
        model's source length: the user's pieces first, then the hints that fit whole
        (`fit_hints`). The hint pieces and corpus tags typed by a user are read as <unk>: only
        a hint the translator placed is one."""
        ids, _, offsets = self.tokenizer.encode_with_offsets(text)
        if self.tokenizer.reserved_ids:
            ids = [UNK_ID if i in self.tokenizer.reserved_ids else i for i in ids]
        if not hints:
            return plain_source(ids[: self.max_source_tokens - 1])
        return fit_hints(ids, offsets, hints, self._term_ids, self.tokenizer.hint_ids, self.max_source_tokens - 1)

    def _term_ids(self, term: str) -> list[int]:
        return self.tokenizer.encode(term)

    def source_pieces(self, text: str, limit: int | None = None) -> list[Token]:
        """The first `limit` source pieces with character offsets into `text` (as given)."""
        _, pieces, offsets = self.tokenizer.encode_with_offsets(text)
        return [Token(p, s, e) for p, (s, e) in list(zip(pieces, offsets))[:limit]]

    def pieces_read(self, source_text: str, result: TranslationResult) -> list[Token]:
        """The source pieces the model read for `result`, the translation of `source_text`:
        those of its restored case when it was shouted, as many as the translator kept (it
        truncates a very long source), with offsets into `source_text` (the same length)."""
        read = source_text if result.cased_source is None else result.cased_source
        return self.source_pieces(read, len(result.source_ids))

    def translate_batch(self, texts: list[str], config: DecodeConfig | None = None) -> list[TranslationResult]:
        """Translate `texts` with `config` (None: `decode_defaults`); results in input order, each
        with `config.n_best - 1` alternatives and, when `config.alignment` is set, each with its
        `alignment` and `quality`."""
        return [r for r in self.translate_wanted(texts, config) if r is not None]

    def translate_wanted(
        self,
        texts: list[str],
        config: DecodeConfig | None = None,
        wanted: Wanted | None = None,
        watch: Watch | None = None,
        glossaries: list[GlossaryTerms] | None = None,
    ) -> list[TranslationResult | None]:
        """`translate_batch` for a caller whose texts may stop being wanted while they are
        translated (a server whose client hung up): `wanted()` -> (len(texts),) bool is read
        after every search step; a text no longer wanted leaves its batch there, and its place
        in the results holds None (None `wanted`: every text is wanted to the end). A `watch`
        sees the steps (greedy search) and each result as soon as it is whole. `glossaries`:
        each text's own glossary instead of the config's (texts of several requests in one batch)."""
        config = self.decode_defaults if config is None else config
        reranked = config.rerank is not None and config.rerank.mode != "none"
        if watch is not None and watch.on_step is not None and (config.beam_size != 1 or reranked):
            raise ValueError(f"only a greedy search can be watched step by step, not a beam of {config.beam_size}")
        options = config.alignment.resolve(self.config) if config.alignment is not None else None
        shouted, sources = self._read(texts, config, glossaries)
        searched = config  # a reranked search keeps its candidates, at least as wide a beam
        if reranked:
            wide = max(config.beam_size, config.rerank.candidates)
            searched = dataclasses.replace(config, beam_size=wide, n_best=config.rerank.candidates)
        cased = [source.cased for source in sources]
        encoded = [source.model.ids + [self.backend.eos_id] for source in sources]
        order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
        results: list[TranslationResult | None] = [None] * len(texts)
        for run in plan_runs([len(encoded[i]) for i in order], searched.beam_size, self.max_batch_tokens):
            chunk = order[run.start : run.stop]
            chunk_wanted = None if wanted is None else (lambda chunk=chunk: wanted()[chunk])
            if chunk_wanted is not None and not chunk_wanted().any():
                continue
            observe = None
            if watch is not None and watch.on_step is not None:
                observe = self._observer(watch.on_step, chunk, [sources[i].model for i in chunk])
            biased = config.term_bonus or config.glossary_strict
            terms = [self.target_terms(sources[i].model, config) for i in chunk] if biased else None
            found = self._search([encoded[i] for i in chunk], searched, chunk_wanted, observe, terms)
            if reranked:
                found = self._rerank([texts[i] for i in chunk], found, config)
            still = np.ones(len(chunk), dtype=bool) if chunk_wanted is None else chunk_wanted()
            for index, hypotheses, keep in zip(chunk, found, still, strict=True):
                if keep and hypotheses:
                    results[index] = self._result(
                        sources[index].model, hypotheses, texts[index], cased[index], shouted[index] is not None
                    )
            done = [i for i in chunk if results[i] is not None]
            if options is not None:
                done_wanted = None if wanted is None else (lambda done=done: wanted()[done])
                self._fill_alignments([(texts[i], results[i]) for i in done], options, config, done_wanted)
            else:
                for result in (results[i] for i in done):
                    assert result is not None
                    for hypothesis in [result, *result.alternatives]:
                        hypothesis.terms = self._term_outcomes(hypothesis, None)
            if watch is not None and watch.on_result is not None:
                for index in done:
                    result = results[index]
                    assert result is not None
                    watch.on_result(index, result)
        return results

    def _observer(
        self, on_step: Callable[[TranslationStep], None], texts: list[int], sources: list[HintedSource]
    ) -> Observe:
        """The search's observer for a run of `texts` (their indices; `sources`, what the model
        reads of each): each row of a `SearchStep` handed on as a `TranslationStep`."""

        def observe(found: SearchStep) -> None:
            tokens, log_probs = found.tokens.tolist(), found.log_probs.tolist()
            pieces = self.tokenizer.pieces(tokens)
            width = found.candidates.shape[1]
            candidate_pieces = self.tokenizer.pieces(found.candidates.ravel().tolist())
            candidate_log_probs = found.candidate_log_probs.tolist()
            for row, sentence in enumerate(found.sentences.tolist()):
                on_step(
                    TranslationStep(
                        text=texts[sentence],
                        step=found.step,
                        token=tokens[row],
                        piece=pieces[row],
                        log_prob=log_probs[row],
                        candidates=list(
                            zip(candidate_pieces[row * width : (row + 1) * width], candidate_log_probs[row])
                        ),
                        cross=self._user_columns(found.cross_weights[:, row], sources[sentence]),
                        decoder=None if found.self_weights is None else found.self_weights[:, row],
                    )
                )

        return observe

    def _user_columns(self, attention: np.ndarray, source: HintedSource) -> np.ndarray:
        """attention (..., S') over the padded positions the model read -> (..., S+1) over the
        user's pieces and EOS: padding dropped, each hint's weight counted for the word it
        explains (`TranslationResult.attention`'s columns)."""
        attention = attention[..., : len(source.ids) + 1]
        return collapse_columns(attention, source, kept=len(source.ids))

    def source_lengths(self, texts: list[str], config: DecodeConfig | None = None) -> list[int]:
        """How many of each text's own pieces the model reads (hints and EOS excluded: what a
        map's source axis shows) when `translate_batch` translates it with `config`: a length
        known before translating."""
        _, sources = self._read(texts, self.decode_defaults if config is None else config)
        return [source.model.user_pieces for source in sources]

    def pieces_to_read(self, texts: list[str], config: DecodeConfig | None = None) -> list[list[Token]]:
        """The source pieces the model will read of each text when `translate_batch`
        translates it with `config` (the columns of its attention, known before translating:
        `pieces_read` gives them after), with offsets into the text as given."""
        _, sources = self._read(texts, self.decode_defaults if config is None else config)
        return [
            self.source_pieces(text if source.cased is None else source.cased, source.model.user_pieces)
            for text, source in zip(texts, sources)
        ]

    def _read(
        self, texts: list[str], config: DecodeConfig, glossaries: list[GlossaryTerms] | None = None
    ) -> tuple[list[str | None], list[ReadSource]]:
        """(shouted, read) per text: the text with its case restored when it was shouted whole
        (else None), and what the model reads of it (its case, its hints: of its own glossary
        in `glossaries` when given, else the config's)."""
        shouted = [self.truecaser.restore_shouted(t) if config.restore_case else None for t in texts]
        # A normal text's shouted words are read in their case too, but its translation is not shouted back.
        cased = [
            s if s is not None or not config.restore_case else self.truecaser.restore_emphasised(t)
            for t, s in zip(texts, shouted)
        ]
        read = [t if c is None else c for t, c in zip(texts, cased)]
        own = glossaries if glossaries is not None else [None] * len(texts)
        hints = [self.hints_for(r, config, glossary) for r, glossary in zip(read, own)]
        return shouted, [ReadSource(c, self.model_source(r, h)) for r, c, h in zip(read, cased, hints)]

    def _term_outcomes(self, result: TranslationResult, word_alignment: Alignment | None) -> list[TermOutcome]:
        """Whether `result` used each hint it was shown (by its word map, when it has one)."""
        if result.hinted is None or not result.hinted.hints:
            return []
        return term_outcomes(
            result.hinted.hints, result.source_text, word_alignment, result.text, self.config.target_lang
        )

    def target_terms(self, source: HintedSource, config: DecodeConfig) -> SentenceTerms:
        """The glossary terms shown to the model in `source`, as the target pieces the term
        bonus looks for: each as written and, where it differs, capitalised (it may open the
        sentence). Dictionary hints get no bonus: their sense is a guess."""
        terms: SentenceTerms = []
        for hint in source.hints:
            if hint.origin != "glossary":
                continue
            forms = dict.fromkeys([hint.term, hint.term[:1].upper() + hint.term[1:]])
            terms.append(tuple(self.tokenizer.encode(form) for form in forms))
        return terms

    def _search(
        self,
        sources: list[list[int]],
        config: DecodeConfig,
        wanted: Wanted | None = None,
        observe: Observe | None = None,
        terms: list[SentenceTerms] | None = None,
    ) -> list[list[Hypothesis]]:
        """Each source's hypotheses, in order (none for a source no longer `wanted`). Sources
        are sorted by length; with `streams` > 1 they are dealt out in turn to the streams'
        sub-batches, so each spans the same lengths and they finish together. One sub-batch is
        searched on this thread, the others on the stream pool's (`observe` then sees each
        sub-batch's steps on its own thread, its sentences numbered among all `sources`)."""
        parts = min(self.streams, len(sources))
        if parts == 1:
            return self._search_one(self.backend, sources, config, wanted, observe, terms)
        shares = [sources[i::parts] for i in range(parts)]
        share_terms = [None if terms is None else terms[i::parts] for i in range(parts)]
        share_wanted = [None if wanted is None else (lambda i=i: wanted()[i::parts]) for i in range(parts)]
        share_observe = [None if observe is None else _renumbered(observe, i, parts) for i in range(parts)]
        backend, pool = self.stream_backend, self._pool()
        shared = list(zip(shares, share_wanted, share_observe, share_terms))
        others = [pool.submit(self._search_one, backend, s, config, w, o, t) for s, w, o, t in shared[1:]]
        s, w, o, t = shared[0]  # this thread's share
        found = [self._search_one(backend, s, config, w, o, t), *(f.result() for f in others)]
        merged: list[list[Hypothesis]] = [[] for _ in sources]
        for part, hypotheses in enumerate(found):
            merged[part::parts] = hypotheses
        return merged

    def _search_one(
        self,
        backend: SearchBackend,
        sources: list[list[int]],
        config: DecodeConfig,
        wanted: Wanted | None = None,
        observe: Observe | None = None,
        terms: list[SentenceTerms] | None = None,
    ) -> list[list[Hypothesis]]:
        src_ids, src_mask = pad_batch(sources, backend.pad_id)
        return beam_search(backend, src_ids, src_mask, config, self.max_positions, wanted, observe, terms)

    def _rerank(
        self, sources: list[str], found: list[list[Hypothesis]], config: DecodeConfig
    ) -> list[list[Hypothesis]]:
        """Each source's hypotheses reranked by `config.rerank`, the first `config.n_best` (rerank.py)."""
        assert config.rerank is not None
        channel = None if self.channel is None else (self.channel.backend, self.channel.tokenizer)
        return rerank_batch(found, sources, config.rerank, self.tokenizer, channel, config.n_best)

    def _pool(self) -> ThreadPoolExecutor:
        """The threads of the streams beyond the caller's, started at the first split batch."""
        with self._stream_pool_lock:
            if self._stream_pool is None:
                # Twice the streams beyond the caller's: a call that lets another run at one of
                # its steps (a scheduler's turn, `wanted`) needs the other's sub-batches run too.
                self._stream_pool = ThreadPoolExecutor(2 * (self.streams - 1), thread_name_prefix="search-stream")
            return self._stream_pool

    def translate(self, text: str, config: DecodeConfig | None = None) -> TranslationResult:
        return self.translate_batch([text], config)[0]

    def align(
        self,
        source_text: str,
        result: TranslationResult,
        level: str = "word",
        layer: int | None = None,
        heads: tuple[int, ...] | None = None,
        step_shift: bool | None = None,
    ) -> Alignment:
        """The alignment map of `result`, the translation of `source_text`, read with other
        options than it was translated with (see seq2seq.core.alignment).

        layer, heads and step_shift each default (None) to the model's alignment source;
        raises AlignmentError (a ValueError) for options the model cannot satisfy."""
        options = AlignmentOptions(level, layer, None if heads is None else tuple(heads), step_shift)
        return self.alignments(source_text, result, options.resolve(self.config)).requested

    def alignments(
        self,
        source_text: str,
        result: TranslationResult,
        options: AlignmentOptions,
        source_pieces: list[Token] | None = None,
    ) -> Alignments:
        """Both maps of `result` with resolved `options`; `source_pieces` (with offsets into
        `source_text`) saves tokenizing the source again."""
        if result.attention is None:
            raise AlignmentError("the translation was made without attention (DecodeConfig.return_attention=False)")
        if source_pieces is None:
            source_pieces = self.pieces_read(source_text, result)
        target_text, target_pieces = pieces_with_offsets(result.target_tokens)
        return align(result.attention, source_text, source_pieces, target_text, target_pieces, options)

    def _fill_alignments(
        self,
        items: list[tuple[str, TranslationResult | None]],
        options: AlignmentOptions,
        config: DecodeConfig,
        wanted: Wanted | None = None,
    ) -> None:
        """The maps and (with `config.quality`) the quality of every hypothesis of (source
        text, result) `items`; the occlusion runs, when the detector reads them (and
        `config.occlusion`), batched over them all, for the items still `wanted`."""
        hypotheses, owners = [], []
        for item, (source_text, result) in enumerate(items):
            assert result is not None
            pieces = self.pieces_read(source_text, result)
            for hypothesis in [result, *result.alternatives]:
                hypothesis.alignment = self.alignments(source_text, hypothesis, options, pieces)
                hypothesis.terms = self._term_outcomes(hypothesis, hypothesis.alignment.word)
                hypotheses.append(hypothesis)
                owners.append(item)
        if not config.quality:
            return
        thresholds = self.quality if config.occlusion else self.fast_quality
        occluded: list[np.ndarray | None] = [None] * len(hypotheses)
        if thresholds.needs_occlusion:
            occluded = list(self.occluded(hypotheses, None if wanted is None else lambda: wanted()[owners]))
        for hypothesis, occluded_row in zip(hypotheses, occluded):
            assert hypothesis.attention is not None and hypothesis.alignment is not None  # alignments() raised
            evidence = Evidence(
                hypothesis.attention, np.asarray(hypothesis.token_log_probs), self.own_source, occluded_row
            )
            hypothesis.quality = assess_alignment(hypothesis.alignment, hypothesis.mean_log_prob, thresholds, evidence)
            hypothesis.quality.terms = hypothesis.terms

    def occluded(self, hypotheses: list[TranslationResult], wanted: Wanted | None = None) -> list[np.ndarray]:
        """Per aligned hypothesis, (Sw, T+1) log-probs of its pieces with each source word
        occluded (`seq2seq.analysis.occlusion`, asking `wanted` per hypothesis before each
        batch): the `Evidence.occluded_log_probs` of its quality."""
        pairs = []
        for hypothesis in hypotheses:
            assert hypothesis.alignment is not None
            groups = word_pieces(hypothesis.alignment)
            if hypothesis.hinted is None:
                source_ids = [*hypothesis.source_ids, self.backend.eos_id]
            else:  # a word is occluded with its hint: the model must not read it there either
                source_ids = [*hypothesis.hinted.ids, self.backend.eos_id]
                owner = hypothesis.hinted.owner
                groups = [[p for p, piece in enumerate(owner) if piece in set(group)] for group in groups]
            pairs.append((source_ids, hypothesis.target_ids, groups))
        return occluded_log_probs(self.backend, pairs, wanted=wanted)

    def _result(
        self, source: HintedSource, hypotheses: list[Hypothesis], text: str, cased: str | None, shouted: bool = False
    ) -> TranslationResult:
        """The best of `hypotheses` with the others as its alternatives; `source` is what the
        model read, `cased` is `text` with its case restored (None: nothing restored); when the
        whole text was `shouted`, every hypothesis is shouted back."""
        user_ids = [source.ids[p] for p in source.user_positions][: source.user_pieces]
        source_tokens = self.tokenizer.pieces(user_ids)
        if cased is not None:
            pieces = [(t.text, t.start, t.end) for t in self.source_pieces(cased, len(user_ids))]
            source_tokens = cased_pieces(pieces, cased, text)
        made = [self._one(source, user_ids, source_tokens, h, text, cased, shouted) for h in hypotheses]
        best = made[0]
        best.alternatives = made[1:]
        return best

    def _one(
        self,
        source: HintedSource,
        source_ids: list[int],
        source_tokens: list[str],
        hypothesis: Hypothesis,
        source_text: str,
        cased: str | None,
        shouted: bool,
    ) -> TranslationResult:
        attention = None if hypothesis.attention is None else self._user_columns(hypothesis.attention, source)
        text, target_tokens = self.tokenizer.decode(hypothesis.tokens), self.tokenizer.pieces(hypothesis.tokens)
        if shouted:  # answer a shouter in capitals, character for character (offsets hold)
            text = shout(text)
            target_tokens = [
                piece if i == self.config.unk_id else shout(piece) for i, piece in zip(hypothesis.tokens, target_tokens)
            ]
        elif cased is not None:  # a shouted word the model copied ("nato") back as the user wrote it
            text, target_tokens = keep_shouted_words(source_text, text, target_tokens)
        return TranslationResult(
            text=text,
            score=hypothesis.score,
            source_tokens=source_tokens,
            target_tokens=target_tokens,
            source_ids=source_ids,
            target_ids=list(hypothesis.tokens),
            log_prob=hypothesis.log_prob,
            token_log_probs=list(hypothesis.token_log_probs),
            attention=attention,
            cased_source=cased,
            hinted=source if source.hinted else None,
            source_text=source_text,
        )


def _renumbered(observe: Observe, share: int, parts: int) -> Observe:
    """The observer of sub-batch `share` of `parts` (sentences share, share + parts, ...):
    its sentences numbered as in the whole batch."""
    return lambda found: observe(dataclasses.replace(found, sentences=share + found.sentences * parts))


class HintError(ValueError):
    """Hints the model cannot take (a glossary for a model trained without hints); the
    service answers it with 400."""
