"""Beam search and greedy search over a small backend interface, in numpy.

One implementation serves every backend (torch eager, onnxruntime): a backend only
encodes a batch and runs one decoder step (that interface and the values it passes are
`seq2seq.core.backend`). Search owns the KV cache (a `DecoderCache` value, passed to every step
and returned by it) and its reordering, and the per-hypothesis alignment buffers, so each
hypothesis ends with the cross-attention of every layer and head for the exact token
sequence it produced. Torch-free.

Shapes: B sentences, K beam size, N = B·K active rows, L decoder layers, H heads,
S source length, P cached target length, V vocabulary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from seq2seq.core.backend import DecoderCache, SearchBackend, StepOutput, Wanted, select_rows
from seq2seq.core.config import AlignmentOptions, DecodeConfig, ModelConfig
from seq2seq.decoding.candidates import Candidates, RowBest, along_rows, top_candidates
from seq2seq.decoding.repeats import RepeatGuard
from seq2seq.decoding.terms import SentenceTerms, TermBias

# The candidates a watched step reports per sentence: enough to see what the model weighed.
WATCHED_CANDIDATES = 5


@dataclass(frozen=True)
class SearchStep:
    """What one step of a watched greedy search chose (`beam_search`'s `observe`): one row
    per sentence still decoding, in the batch's current order.

    Shapes: B' sentences still decoding, L decoder layers, H heads, S padded source length
    (source EOS included), C = `WATCHED_CANDIDATES`.
    """

    step: int  # 0: the step whose input is BOS
    sentences: np.ndarray  # (B',) int: each row's sentence, its index in the batch
    tokens: np.ndarray  # (B',) int: the piece chosen (EOS: the sentence ends here)
    log_probs: np.ndarray  # (B',) float32: its log-prob
    # (B', C) int and float32: the C likeliest pieces as the search ranked them, best first
    # (so the chosen one first); PAD, BOS and banned repeats have -inf, as at the length
    # limit everything but EOS.
    candidates: np.ndarray
    candidate_log_probs: np.ndarray
    cross_weights: np.ndarray  # (L, B', H, S): the step's cross-attention
    # (L, B', H, step + 1): its self-attention over BOS and the pieces so far (the causal
    # triangle's new row); None from a backend that does not give it.
    self_weights: np.ndarray | None


# Called after every step of a watched search (in the searching thread).
Observe = Callable[[SearchStep], None]


@dataclass
class Hypothesis:
    tokens: list[int]  # generated ids, without BOS and EOS
    score: float  # length-normalised log-probability (ranks the n-best)
    log_prob: float  # raw sum of token log-probs, EOS included
    # (L, H, len(tokens) + 1, S): row i is the decoder step that produced token i; the last
    # row is the step that produced EOS. Columns are source positions, source EOS included.
    attention: np.ndarray | None = None
    token_log_probs: list[float] = field(default_factory=list)


def length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty (Wu et al. 2016): ((5 + |Y|) / 6) ** alpha."""
    return ((5.0 + length) / 6.0) ** alpha


COVERAGE_FLOOR = 1e-3


def coverage_penalty(coverage: np.ndarray, beta: float, floor: float = COVERAGE_FLOOR) -> np.ndarray:
    """GNMT coverage penalty β · Σᵢ log(min(cᵢ, 1)) over the last axis; ≤ 0.

    coverage (..., S): attention mass each source position received. GNMT's formula is
    -inf for a position never attended; the log is taken of max(cᵢ, floor) so that one
    unread word costs β · log(floor) (about -6.9 β) instead of ruling the hypothesis out.
    Returns (...,).
    """
    clipped = np.clip(np.asarray(coverage, dtype=np.float64), floor, 1.0)
    return beta * np.log(clipped).sum(axis=-1)


def hypothesis_score(log_prob: float, length: int, config: DecodeConfig, coverage: np.ndarray | None = None) -> float:
    """The score that ranks finished hypotheses, GNMT's s(Y, X) = log P(Y|X) / lp(Y) + cp(X; Y)
    (Wu et al. 2016, eq. 14). The one place a finished score is computed.

    log_prob: summed token log-probs, EOS included; length: |Y| with EOS; coverage (S,): the
    mass each source piece (EOS excluded) received from the alignment head, needed when
    `config.coverage_penalty` > 0.
    """
    score = log_prob / length_penalty(length, config.length_penalty)
    if config.coverage_penalty:
        if coverage is None:
            raise ValueError("a coverage penalty needs the hypothesis's coverage")
        score += float(coverage_penalty(coverage, config.coverage_penalty))
    return float(score)


def max_target_length(source_length: int, config: DecodeConfig) -> int:
    return int(config.max_length_ratio * source_length + config.max_length_extra)


def beam_search(
    backend: SearchBackend,
    src_ids: np.ndarray,
    src_mask: np.ndarray,
    config: DecodeConfig = DecodeConfig(),
    max_positions: int | None = None,
    wanted: Wanted | None = None,
    observe: Observe | None = None,
    terms: list[SentenceTerms] | None = None,
) -> list[list[Hypothesis]]:
    """Translate a padded batch; returns `config.n_best` hypotheses per sentence, best first.

    src_ids (B, S) int64 with EOS at the end of each sentence, src_mask (B, S) bool.
    `max_positions` (the model's position table) caps the target length.
    Beam size 1 is greedy search. Each step ranks the K·V continuations of a sentence's
    beams by summed log-prob and takes the 2K best: an EOS among the first K finishes a
    hypothesis, and the K best that are not EOS go on (2K guarantee K of them). A sentence
    stops when K hypotheses have finished (with `config.early_exit`: when its best
    continuation is EOS and n_best have finished) or its length limit is reached; finished
    sentences leave the batch so the rest decode faster (the last sentence takes each one's
    place: `_batch_order`). Finished hypotheses are ranked by
    `hypothesis_score` (the length penalty and, with `config.coverage_penalty`, the coverage
    penalty over what the model's alignment head read: `_Coverage`). With
    `config.no_repeat_ngram_size` n > 0, a piece that would repeat an n-gram already in its
    hypothesis is banned before the ranking (`seq2seq.decoding.repeats`). `wanted` () -> (B,)
    bool is asked after every step: a sentence nobody wants any more (its client hung up)
    leaves the batch there, with the hypotheses it finished so far (maybe none).

    `terms` (B,), each sentence's target terms (a glossary's, as piece ids), earn
    `config.term_bonus` per piece written (`seq2seq.decoding.terms`): the candidates are
    ranked and the hypotheses scored with it, their `log_prob` and token log-probs without;
    with `config.glossary_strict` a hypothesis that ends before writing them pays for each.

    `observe` (greedy search only: a beam's prefix is not final until its sentence ends)
    is handed a `SearchStep` after every step, before the sentences that ended leave the
    batch: what each chose, with its candidates and attention rows. Watching changes no
    result; it costs each step a partial sort of the log-probs and the attention outputs.
    """
    k = config.beam_size
    if observe is not None and k != 1:
        raise ValueError(f"only a greedy search can be watched step by step, not a beam of {k}")
    limits = _length_limits(src_mask, config, max_positions)
    beams = _Beams.start(backend, src_ids, src_mask, config)
    trace = _Trace()
    watched = observe is not None
    need_attention = config.return_attention or beams.coverage is not None or watched
    top_k = _asked_top_k(backend, k, watched)
    finished: list[list[Hypothesis]] = [[] for _ in range(len(src_ids))]
    biased = terms and any(terms) and (config.term_bonus or config.glossary_strict)
    bias = TermBias(terms, config.term_bonus, k, backend.eos_id, config.glossary_strict) if biased else None

    for step in range(int(limits.max()) + 1):
        if step == 0:
            out = beams.first_step(backend, need_attention, top_k, watched)
        else:
            out = backend.step(beams.tokens, beams.mask, beams.cache, need_attention, top_k, watched)
        log_probs, top = _ranked_step(backend, out, beams, (limits[beams.active] <= step).repeat(k), bias)
        trace.attention.append(out.cross_weights if config.return_attention else None)
        if beams.coverage is not None:
            beams.coverage.read(step, out.cross_weights)
        if observe is not None:
            observe(_watched_step(step, beams.active, top.tokens[:, 0], log_probs, out))
        _finish(top, log_probs, beams, trace, step, config, backend.eos_id, finished, bias)
        going_on, keep = _going_on(top, beams.active, finished, config)
        if wanted is not None:
            keep &= wanted()[beams.active]
        if not keep.any():
            break
        order = np.arange(len(keep)) if keep.all() else _batch_order(keep)
        rows, next_tokens, next_scores = _next_rows(top, going_on & keep[:, None], keep, order, k)
        trace.select(rows, next_tokens, log_probs[rows, next_tokens])
        if bias is not None:
            bias.select(rows, next_tokens, beams.active)
        beams.advance(rows, next_tokens, next_scores, out, order)

    results = []
    for hypotheses in finished:
        hypotheses.sort(key=lambda h: -h.score)
        results.append(hypotheses[: config.n_best])
    return results


def _asked_top_k(backend: SearchBackend, k: int, watched: bool) -> int:
    """How many best tokens per row to ask the backend's TopK for: each row's 2K + 1
    (`Candidates.rank`) with room for the banned PAD and BOS; greedy needs only the argmax
    (0), and a watcher its candidates."""
    banned = len((backend.pad_id, backend.bos_id))
    return 2 * k + 1 + banned if k > 1 else WATCHED_CANDIDATES + banned if watched else 0


def _ranked_step(
    backend: SearchBackend, out: StepOutput, beams: _Beams, at_limit: np.ndarray, bias: TermBias | None
) -> tuple[np.ndarray, Candidates]:
    """The step's log-probs (N, V) with the bans applied in place (PAD, BOS, EOS only for the
    rows `at_limit` (N,) bool, the repetition guard's), and each sentence's 2K best
    continuations, ranked with the terms' bias."""
    k = beams.k
    log_probs = _allowed(out.log_probs, backend, at_limit)
    repeating = beams.repeats.ban(log_probs) if beams.repeats is not None else np.zeros(0, dtype=np.intp)
    ranked = log_probs
    if bias is not None:  # rows with a term open are ranked afresh, as rows with a ban
        ranked, biased_rows = bias.apply(log_probs, beams.active)
        repeating = np.union1d(repeating, biased_rows)
    # The backend's own TopK saw every token: it only serves steps where `_allowed` banned
    # no more than PAD and BOS, and rows where the repetition guard banned more are
    # ranked afresh from their log-probs.
    banned = (backend.pad_id, backend.bos_id)
    row_best = None if k == 1 or out.top is None or at_limit.any() else RowBest.of(*out.top, 2 * k, banned)
    if row_best is not None and len(repeating):
        row_best = row_best.reranked(repeating, ranked)
    return log_probs, Candidates.rank(beams.scores, ranked, k, backend.eos_id, row_best)


def _going_on(
    top: Candidates, active: np.ndarray, finished: list[list[Hypothesis]], config: DecodeConfig
) -> tuple[np.ndarray, np.ndarray]:
    """(B', 2K) bool the K best continuations of each sentence that are not EOS, and (B',)
    bool the sentences that go on: they have K such continuations and fewer than K finished
    hypotheses (with `config.early_exit`: and their best continuation did not end them with
    n_best finished). `active` (B',): each sentence's index in the batch."""
    k = config.beam_size
    going_on = top.possible & ~top.is_eos
    going_on &= going_on.cumsum(axis=1) <= k  # the K best that go on
    keep = (going_on.sum(axis=1) == k) & np.array([len(finished[s]) < k for s in active])
    if config.early_exit:  # the best continuation ended the sentence (`_finish` kept it)
        best_ended = top.possible[:, 0] & top.is_eos[:, 0]
        keep &= ~(best_ended & np.array([len(finished[s]) >= config.n_best for s in active]))
    return going_on, keep


def _watched_step(
    step: int, sentences: np.ndarray, chosen: np.ndarray, log_probs: np.ndarray, out: StepOutput
) -> SearchStep:
    """The `SearchStep` of a greedy step (one row per sentence): `chosen` (B',) the tokens it
    takes, from `log_probs` (B', V) as the search ranked them."""
    assert out.cross_weights is not None  # a watched search asks for them
    rows = np.arange(len(chosen))
    candidates = _watched_candidates(log_probs, None if out.top is None else out.top[1])
    return SearchStep(
        step=step,
        sentences=sentences.copy(),
        tokens=chosen.copy(),
        log_probs=log_probs[rows, chosen],
        candidates=candidates,
        candidate_log_probs=log_probs[rows[:, None], candidates],
        cross_weights=out.cross_weights,
        self_weights=out.self_weights,
    )


def _watched_candidates(log_probs: np.ndarray, ranked: np.ndarray | None) -> np.ndarray:
    """(B', C) each row's C likeliest tokens by `log_probs` (B', V), as the search left them
    (bans applied), best first, ties to the lower id (as `top_candidates` orders them).

    From the backend's TopK ids `ranked` (B', C') when it gave them (C' = C + the banned
    ids: a partial sort of V log-probs costs about ten times a step's TopK in the graph),
    for every row where that is exact: none of its C' ids was banned since (the C' hold
    its C best), and its C-th best is not tied with its C'-th (no equal one left out). Other
    rows, and every row without `ranked`, by a partial sort here."""
    if ranked is None:
        return top_candidates(log_probs, WATCHED_CANDIDATES)
    values = along_rows(log_probs, ranked)  # (B', C'), the bans applied
    order = np.lexsort((ranked, -values), axis=1)  # by value descending, then by id
    ranked, values = along_rows(ranked, order), along_rows(values, order)
    redo = ~np.isfinite(values).all(axis=1) | (values[:, WATCHED_CANDIDATES - 1] == values[:, -1])
    best = ranked[:, :WATCHED_CANDIDATES].copy()
    if redo.any():
        best[redo] = top_candidates(log_probs[redo], WATCHED_CANDIDATES)
    return best


def _batch_order(keep: np.ndarray) -> np.ndarray:
    """keep (B',) bool -> (B'',) the sentences that go on, in their new batch order.

    Each finished sentence's place is taken by one that goes on from the end of the batch;
    the others keep theirs. So only the moved sentences' rows are copied in the cache
    (`seq2seq.core.backend.move_rows`), not every row behind the first gap. Rows do not interact
    (batch-invariant graphs), so the order of sentences in the batch changes no result.
    """
    kept = keep.nonzero()[0]
    order = np.arange(len(kept))
    order[~keep[: len(kept)]] = kept[kept >= len(kept)]  # as many gaps in front as keepers behind
    return order


def _next_rows(
    top: Candidates, chosen: np.ndarray, keep: np.ndarray, order: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows of the next step, K per sentence in the batch `order` (B'',): the row each
    extends, the token it appends and its summed log-prob, each (B''·K,).

    chosen (B', 2K) bool marks the K candidates that go on of each sentence in `keep`
    (B',); they are taken in rank order.
    """
    position = keep.cumsum() - 1  # each kept sentence's place among the kept ones
    picked = position[order]
    rows, tokens, scores = (
        values[chosen].reshape(-1, k)[picked].reshape(-1) for values in (top.rows, top.tokens, top.scores)
    )
    return rows, tokens, scores


def _length_limits(src_mask: np.ndarray, config: DecodeConfig, max_positions: int | None) -> np.ndarray:
    """(B,) the last step at which each sentence may still produce a token other than EOS."""
    limits = np.array([max_target_length(int(n), config) for n in src_mask.sum(axis=1)])
    if max_positions is not None:
        # The decoder has no position past max_positions - 1: BOS sits at 0, so at most
        # max_positions - 1 generated tokens, EOS included.
        limits = np.minimum(limits, max_positions - 2)
    return limits


def _allowed(log_probs: np.ndarray, backend: SearchBackend, at_limit: np.ndarray) -> np.ndarray:
    """log_probs (N, V) float32, edited in place: PAD and BOS are never produced, and rows
    `at_limit` (N,) bool, out of length budget, can only produce EOS."""
    log_probs[:, backend.pad_id] = -np.inf
    log_probs[:, backend.bos_id] = -np.inf
    if at_limit.any():
        eos_scores = log_probs[at_limit, backend.eos_id]
        log_probs[at_limit] = -np.inf
        log_probs[at_limit, backend.eos_id] = eos_scores
    return log_probs


@dataclass
class _Beams:
    """The rows still decoding, K per sentence still in the batch (row n = sentence n // K,
    N = B'·K), and everything reordered with them."""

    k: int
    # The cross K/V hold one row per sentence (`SearchBackend.cross_per_sentence`), not K.
    cross_per_sentence: bool
    active: np.ndarray  # (B',) original index of each sentence in the batch
    tokens: np.ndarray  # (N, 1) int64, the input of the next step
    scores: np.ndarray  # (N,) float64 summed log-prob of each row
    # cross K/V (L, N, H, S, Dh), or (L, B', H, S, Dh) with `cross_per_sentence`; self K/V
    # (L, N, H, P, Dh); one row per sentence (B) before `first_step`
    cache: DecoderCache
    mask: np.ndarray  # (N, S) bool
    coverage: _Coverage | None
    repeats: RepeatGuard | None  # each row's pieces so far, with `config.no_repeat_ngram_size`

    @classmethod
    def start(cls, backend: SearchBackend, src_ids: np.ndarray, src_mask: np.ndarray, config: DecodeConfig) -> _Beams:
        """Encode the batch and open K beams per sentence, each at BOS. The cache holds one
        row per sentence until `first_step` expands it."""
        batch, k = src_ids.shape[0], config.beam_size
        cross_k, cross_v = backend.encode(src_ids, src_mask)
        mask = src_mask[np.repeat(np.arange(batch), k)]
        return cls(
            k=k,
            cross_per_sentence=backend.cross_per_sentence,
            active=np.arange(batch),
            tokens=np.full((batch * k, 1), backend.bos_id, dtype=np.int64),
            # Only beam 0 is alive at the start, so the first step does not pick K copies of one token.
            scores=np.tile(np.array([0.0] + [-np.inf] * (k - 1)), batch),
            cache=DecoderCache.start(cross_k, cross_v),
            mask=mask,
            coverage=_Coverage(backend.config, mask) if config.coverage_penalty else None,
            repeats=RepeatGuard(config.no_repeat_ngram_size, batch * k) if config.no_repeat_ngram_size else None,
        )

    def first_step(
        self, backend: SearchBackend, need_attention: bool, top_k: int = 0, need_self_attention: bool = False
    ) -> StepOutput:
        """The first decoder step, run on one row per sentence (all K beams of a sentence are
        BOS over the same source, so their rows would be K equal copies), then expanded to
        the K rows of each sentence: row n = sentence n // K. CTranslate2 does the same
        ("expand after first step"); it saves (K-1)/K of the first step's work.

        The outputs are the ones the K rows would have given: the rows do not interact (an
        int8 graph's per-tensor activation scale reads the same minimum and maximum, since
        expanded rows are copies), so search results do not change (tested).
        """
        batch = len(self.active)
        sources = self.mask[:: self.k]  # (B, S): the first of each sentence's K equal rows
        out = backend.step(self.tokens[:batch], sources, self.cache, need_attention, top_k, need_self_attention)
        if self.k == 1:
            return out
        expand = np.repeat(np.arange(batch), self.k)
        # The cross K/V are repeated here once per batch (contiguous, so no later step copies
        # them again), unless the backend reads one per sentence; `advance` then keeps them
        # while no sentence leaves.
        cache = out.cache
        cross = (cache.cross_k, cache.cross_v)
        if not self.cross_per_sentence:
            cross = (select_rows(cross[0], expand), select_rows(cross[1], expand))
        expanded = (*cross, select_rows(cache.self_k, expand), select_rows(cache.self_v, expand))
        return StepOutput(
            np.repeat(out.log_probs, self.k, axis=0),
            DecoderCache(*expanded),
            None if out.cross_weights is None else out.cross_weights[:, expand],
            None if out.top is None else (np.repeat(out.top[0], self.k, axis=0), np.repeat(out.top[1], self.k, axis=0)),
            None if out.self_weights is None else out.self_weights[:, expand],
        )

    def advance(
        self, rows: np.ndarray, tokens: np.ndarray, scores: np.ndarray, out: StepOutput, order: np.ndarray
    ) -> None:
        """Next row i extends row `rows[i]` with `tokens[i]`, its summed log-prob now
        `scores[i]`; `order` (B'',): the sentences that go on, in their new batch order
        (`_batch_order`). Sentences that finished leave the batch here."""
        left = len(order) != len(self.active)
        sentence_rows = (order[:, None] * self.k + np.arange(self.k)).reshape(-1) if left else None
        self.tokens = tokens[:, None].astype(np.int64)
        self.scores = scores
        # The step's cache is a fresh output and the cross K/V are the search's own: rows are
        # moved within them (drops the rows of sentences that finish).
        # One cross K/V per sentence follows the sentences (and stays while none leaves).
        per_sentence = order if left else np.arange(len(self.active))
        cross_rows = per_sentence if self.cross_per_sentence else sentence_rows
        self.cache = out.cache.reorder(rows, cross_rows, owned=True)
        if self.coverage is not None:
            self.coverage.select(rows)
        if self.repeats is not None:
            self.repeats.select(rows, tokens)
        if left:
            self.mask = self.mask[sentence_rows]
            if self.coverage is not None:
                self.coverage.counted = self.coverage.counted[sentence_rows]
            self.active = self.active[order]


def _finish(
    top: Candidates,
    log_probs: np.ndarray,
    beams: _Beams,
    trace: _Trace,
    step: int,
    config: DecodeConfig,
    eos_id: int,
    finished: list[list[Hypothesis]],
    bias: TermBias | None = None,
) -> None:
    """Add to `finished` the hypotheses that end with EOS at `step`, up to K per sentence."""
    k = beams.k
    # An EOS ranked K or lower was beaten by K continuations that are still open, any of
    # which may end better: it does not finish a hypothesis (as in fairseq), else K such
    # EOS could close the sentence before a better hypothesis is found.
    ending = top.possible & top.is_eos
    ending[:, k:] = False
    for i, rank in zip(*np.nonzero(ending)):
        sentence = beams.active[i]
        if len(finished[sentence]) < k:
            row = int(top.rows[i, rank])
            finished[sentence].append(
                _hypothesis(
                    trace,
                    step,
                    row,
                    float(top.scores[i, rank]),
                    float(log_probs[row, eos_id]),
                    config,
                    None if beams.coverage is None else beams.coverage.finished(row),
                    0.0 if bias is None else bias.kept_bonus(row),
                )
            )


class _Trace:
    """The search's back-pointers, one entry per step: a finished hypothesis reads its
    tokens, token log-probs and attention rows by walking back from its last row, so no
    growing per-hypothesis history is copied when the beams reorder (that is O(T²)).

    The back-pointers are kept as Python lists: the walk reads one entry a step, and a list
    item costs a fraction of a numpy scalar and its `int()`/`float()` (docs/performance.md,
    lever 15)."""

    def __init__(self) -> None:
        self.attention: list[np.ndarray | None] = []  # step t: (L, N_t, H, S) cross weights of its rows
        self.parents: list[list[int]] = []  # step t: (N_t+1,) the row each next row extends
        self.tokens: list[list[int]] = []  # step t: (N_t+1,) the token it appended
        self.log_probs: list[list[float]] = []  # step t: (N_t+1,) that token's log-prob

    def select(self, parents: np.ndarray, tokens: np.ndarray, log_probs: np.ndarray) -> None:
        self.parents.append(parents.tolist())
        self.tokens.append(tokens.tolist())
        self.log_probs.append(log_probs.tolist())  # float32 -> float, as float() of each

    def backtrack(self, step: int, row: int) -> tuple[list[int], list[float], np.ndarray | None]:
        """Tokens and their log-probs before `row` at `step`, and its attention rows
        (L, H, step + 1, S): row i is the step that produced token i, the last `step` itself."""
        rows = [row]  # rows[i]: the row at step `step - i`
        for t in range(step, 0, -1):
            rows.append(self.parents[t - 1][rows[-1]])
        rows.reverse()  # rows[t]: the row at step t
        tokens = [self.tokens[t][rows[t + 1]] for t in range(step)]
        log_probs = [self.log_probs[t][rows[t + 1]] for t in range(step)]
        if self.attention[0] is None:
            return tokens, log_probs, None
        layers, _, heads, source = self.attention[0].shape
        stacked = np.empty((layers, heads, step + 1, source), dtype=np.float32)
        for t in range(step + 1):
            stacked[:, :, t] = self.attention[t][:, rows[t]]
        return tokens, log_probs, stacked


class _Coverage:
    """Per beam row, the attention mass each source piece has received from the model's
    alignment head (its layer, mean of its heads), over the steps its map reads: the steps
    that produced the tokens or, for a step-shifted head, the steps where they were the
    input (as `seq2seq.core.alignment.subword_map`). Reordered with the beams."""

    def __init__(self, model: ModelConfig, mask: np.ndarray) -> None:
        source = AlignmentOptions().resolve(model)
        self.layer, self.shift = source.layer, source.step_shift
        self.heads = list(source.heads or range(model.n_heads))
        # Real source pieces without the EOS (the last real one): (N, S) bool.
        self.counted = mask.copy()
        self.counted[np.arange(len(mask)), mask.sum(axis=1) - 1] = False
        self.received = np.zeros(mask.shape)  # (N, S) before the current step
        self.after = self.received  # (N, S) with it, where it counts

    def read(self, step: int, cross_weights: np.ndarray) -> None:
        """cross_weights (L, N, H, S) of this step."""
        current = cross_weights[self.layer][:, self.heads].mean(axis=1, dtype=np.float64)  # (N, S)
        # A shifted map has no row for the BOS step; an unshifted one none for the EOS step.
        self.after = self.received + current if step > 0 or not self.shift else self.received

    def finished(self, row: int) -> np.ndarray:
        """(S',) the coverage of `row` ending with EOS at this step, real source pieces only."""
        counted = self.after if self.shift else self.received
        return counted[row][self.counted[row]]

    def select(self, rows: np.ndarray) -> None:
        self.received = self.after[rows]


def _hypothesis(
    trace: _Trace,
    step: int,
    row: int,
    total: float,
    eos_log_prob: float,
    config: DecodeConfig,
    coverage: np.ndarray | None,
    term_bonus: float = 0.0,
) -> Hypothesis:
    """The hypothesis that `row` ends with EOS at `step`, with summed log-prob `total` (the
    `term_bonus` its terms earned included) and, when the score needs it, `coverage` (S',)."""
    generated, token_log_probs, attention = trace.backtrack(step, row)
    length = len(generated) + 1  # EOS counts as a produced token
    return Hypothesis(
        tokens=generated,
        score=hypothesis_score(total, length, config, coverage),
        log_prob=total - term_bonus,
        attention=attention,
        token_log_probs=token_log_probs + [eos_log_prob],
    )


def greedy_search(
    backend: SearchBackend, src_ids: np.ndarray, src_mask: np.ndarray, config: DecodeConfig = DecodeConfig()
) -> list[Hypothesis]:
    """Greedy decoding: beam search with one beam, one hypothesis per sentence."""
    greedy = dataclasses.replace(config, beam_size=1, n_best=1)
    return [hyps[0] for hyps in beam_search(backend, src_ids, src_mask, greedy)]


def pad_batch(sequences: list[list[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad id lists -> ids (B, S) int64 and mask (B, S) bool (True at real tokens)."""
    width = max(1, max((len(s) for s in sequences), default=1))
    ids = np.full((len(sequences), width), pad_id, dtype=np.int64)
    for row, sequence in enumerate(sequences):
        ids[row, : len(sequence)] = sequence
    return ids, ids != pad_id
