"""Beam search and greedy search over a small backend interface, in numpy.

One implementation serves every backend (torch eager, onnxruntime): a backend only
encodes a batch and runs one decoder step (that interface and the values it passes are
`seq2seq.backend`). Search owns the KV cache (a `DecoderCache` value, passed to every step
and returned by it) and its reordering, and the per-hypothesis alignment buffers, so each
hypothesis ends with the cross-attention of every layer and head for the exact token
sequence it produced. Torch-free.

Shapes: B sentences, K beam size, N = B·K active rows, L decoder layers, H heads,
S source length, P cached target length, V vocabulary.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from seq2seq.alignment import AlignmentOptions
from seq2seq.backend import DecoderCache, SearchBackend, StepOutput, select_rows
from seq2seq.config import DecodeConfig, ModelConfig


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


def top_candidates(candidates: np.ndarray, count: int) -> np.ndarray:
    """Indices of the `count` largest entries of each row, best first: (R, M) -> (R, count).

    Exactly what a stable full sort (`argsort(-candidates, kind="stable")[:, :count]`)
    returns, ties included (the lower index first), at a fraction of its cost: a partial
    selection (argpartition) finds the `count` best of the M = K·V candidates and only
    those are sorted. Sorting all of them was about half of the decoding time.
    """
    rows, width = candidates.shape
    if count >= width:
        return np.argsort(-candidates, axis=1, kind="stable")
    best = np.argpartition(candidates, width - count, axis=1)[:, width - count :]
    values = np.take_along_axis(candidates, best, axis=1)
    # argpartition picks arbitrarily among entries equal to the cut-off value; the stable
    # sort takes the lowest indices. Rows where some equal entry was left out (rare: real
    # log-probs rarely tie) are redone with the full sort. At -inf nothing is ever used.
    cutoff = values.min(axis=1, keepdims=True)
    tied = (np.count_nonzero(candidates == cutoff, axis=1) > np.count_nonzero(values == cutoff, axis=1)) & np.isfinite(
        cutoff[:, 0]
    )
    order = np.lexsort((best, -values), axis=1)  # by value descending, then by index
    best = np.take_along_axis(best, order, axis=1)
    for row in np.flatnonzero(tied):
        best[row] = np.argsort(-candidates[row], kind="stable")[:count]
    return best


def beam_search(
    backend: SearchBackend,
    src_ids: np.ndarray,
    src_mask: np.ndarray,
    config: DecodeConfig = DecodeConfig(),
    max_positions: int | None = None,
) -> list[list[Hypothesis]]:
    """Translate a padded batch; returns `config.n_best` hypotheses per sentence, best first.

    src_ids (B, S) int64 with EOS at the end of each sentence, src_mask (B, S) bool.
    `max_positions` (the model's position table) caps the target length.
    Beam size 1 is greedy search. Each step ranks the K·V continuations of a sentence's
    beams by summed log-prob and takes the 2K best: an EOS among the first K finishes a
    hypothesis, and the K best that are not EOS go on (2K guarantee K of them). A sentence
    stops when K hypotheses have finished or its length limit is reached; finished
    sentences leave the batch so the rest decode faster. Finished hypotheses are ranked by
    `hypothesis_score` (the length penalty and, with `config.coverage_penalty`, the coverage
    penalty over what the model's alignment head read: `_Coverage`).
    """
    k = config.beam_size
    limits = _length_limits(src_mask, config, max_positions)
    beams = _Beams.start(backend, src_ids, src_mask, config)
    trace = _Trace()
    need_attention = config.return_attention or beams.coverage is not None
    # Each row's 2K + 1 best tokens (`_Candidates.rank`), asked of the backend with room for
    # the banned ones; greedy needs only the argmax.
    banned = (backend.pad_id, backend.bos_id)
    top_k = 2 * k + 1 + len(banned) if k > 1 else 0
    finished: list[list[Hypothesis]] = [[] for _ in range(len(src_ids))]

    for step in range(int(limits.max()) + 1):
        if step == 0:
            out = beams.first_step(backend, need_attention, top_k)
        else:
            out = backend.step(beams.tokens, beams.mask, beams.cache, need_attention, top_k)
        at_limit = np.repeat(limits[beams.active] <= step, k)
        log_probs = _allowed(out.log_probs, backend, at_limit)
        trace.attention.append(out.cross_weights if config.return_attention else None)
        if beams.coverage is not None:
            beams.coverage.read(step, out.cross_weights)
        # The backend's own TopK saw every token: it only serves steps where `_allowed` banned
        # no more than PAD and BOS.
        row_best = None if out.top is None or at_limit.any() else _RowBest.of(*out.top, 2 * k, banned)
        top = _Candidates.rank(beams.scores, log_probs, k, backend.eos_id, row_best)
        _finish(top, log_probs, beams, trace, step, config, backend.eos_id, finished)
        going_on = top.possible & ~top.is_eos
        going_on &= np.cumsum(going_on, axis=1) <= k  # the K best that go on
        keep = (going_on.sum(axis=1) == k) & np.array([len(finished[s]) < k for s in beams.active])
        if not keep.any():
            break
        chosen = going_on & keep[:, None]  # row-major: by sentence, then rank
        rows, next_tokens = top.rows[chosen], top.tokens[chosen]
        trace.select(rows, next_tokens, log_probs[rows, next_tokens])
        beams.advance(rows, next_tokens, top.scores[chosen], out)
        if not keep.all():
            beams.leave(keep)

    results = []
    for hypotheses in finished:
        hypotheses.sort(key=lambda h: -h.score)
        results.append(hypotheses[: config.n_best])
    return results


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
    active: np.ndarray  # (B',) original index of each sentence in the batch
    tokens: np.ndarray  # (N, 1) int64, the input of the next step
    scores: np.ndarray  # (N,) float64 summed log-prob of each row
    # cross K/V (L, N, H, S, Dh), self K/V (L, N, H, P, Dh); one row per sentence (B) before
    # `first_step`
    cache: DecoderCache
    mask: np.ndarray  # (N, S) bool
    coverage: _Coverage | None

    @classmethod
    def start(cls, backend: SearchBackend, src_ids: np.ndarray, src_mask: np.ndarray, config: DecodeConfig) -> _Beams:
        """Encode the batch and open K beams per sentence, each at BOS. The cache holds one
        row per sentence until `first_step` expands it."""
        batch, k = src_ids.shape[0], config.beam_size
        cross_k, cross_v = backend.encode(src_ids, src_mask)
        mask = src_mask[np.repeat(np.arange(batch), k)]
        return cls(
            k=k,
            active=np.arange(batch),
            tokens=np.full((batch * k, 1), backend.bos_id, dtype=np.int64),
            # Only beam 0 is alive at the start, so the first step does not pick K copies of one token.
            scores=np.tile(np.array([0.0] + [-np.inf] * (k - 1)), batch),
            cache=DecoderCache.start(cross_k, cross_v),
            mask=mask,
            coverage=_Coverage(backend.config, mask) if config.coverage_penalty else None,
        )

    def first_step(self, backend: SearchBackend, need_attention: bool, top_k: int = 0) -> StepOutput:
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
        out = backend.step(self.tokens[:batch], sources, self.cache, need_attention, top_k)
        if self.k == 1:
            return out
        expand = np.repeat(np.arange(batch), self.k)
        # The cross K/V are repeated here once per batch (contiguous, so no later step copies
        # them again); `advance` then keeps them while no sentence leaves.
        cache = out.cache
        expanded = (select_rows(a, expand) for a in (cache.cross_k, cache.cross_v, cache.self_k, cache.self_v))
        return StepOutput(
            np.repeat(out.log_probs, self.k, axis=0),
            DecoderCache(*expanded),
            None if out.cross_weights is None else out.cross_weights[:, expand],
            None if out.top is None else (np.repeat(out.top[0], self.k, axis=0), np.repeat(out.top[1], self.k, axis=0)),
        )

    def advance(self, rows: np.ndarray, tokens: np.ndarray, scores: np.ndarray, out: StepOutput) -> None:
        """Next row i extends row `rows[i]` with `tokens[i]`, its summed log-prob now `scores[i]`."""
        self.tokens = tokens[:, None].astype(np.int64)
        self.scores = scores
        self.cache = out.cache.reorder(rows)  # drops the rows of sentences that finish
        if self.coverage is not None:
            self.coverage.select(rows)

    def leave(self, keep: np.ndarray) -> None:
        """Sentences that finished leave the batch: keep (B',) bool; drop their rows (their
        cache rows are already gone: `advance` took only the rows that go on)."""
        kept_rows = (np.flatnonzero(keep)[:, None] * self.k + np.arange(self.k)).reshape(-1)
        self.mask = self.mask[kept_rows]
        if self.coverage is not None:
            self.coverage.counted = self.coverage.counted[kept_rows]
        self.active = self.active[keep]


@dataclass
class _Candidates:
    """The 2K best continuations of each sentence still decoding, best first: each (B', 2K)."""

    scores: np.ndarray  # float64 summed log-prob
    rows: np.ndarray  # the beam row each extends
    tokens: np.ndarray  # the token it appends
    possible: np.ndarray  # bool: its score is finite
    is_eos: np.ndarray  # bool: it appends EOS

    @classmethod
    def rank(
        cls, scores: np.ndarray, log_probs: np.ndarray, k: int, eos_id: int, row_best: _RowBest | None = None
    ) -> _Candidates:
        """scores (N,) float64 of the beams, log_probs (N, V) of their next token; `row_best`,
        each row's 2K best tokens when the backend ranked them (else found here).

        The 2K best of each sentence's K·V candidates `scores[row] + log_probs[row, token]`,
        in `top_candidates`' order (sum descending, ties to the lower row, then the lower
        token). Found from each row's own 2K best log-probs (float32, no (N, V) float64
        sums): within a row the sum orders as the log-prob. Exact by a check, not by
        assumption: where something a row left out could still reach the sentence's 2K-th
        best sum (a tie, or fewer than 2K finite candidates), that sentence is ranked over
        all its K·V candidates instead.
        """
        sentences, vocab, width = len(scores) // k, log_probs.shape[1], 2 * k
        if k == 1:
            return cls._greedy(scores, log_probs, eos_id)
        if vocab <= width:
            return cls._of(*_rank_all(scores, log_probs, k, np.arange(sentences)), eos_id, k)
        kept, left_out = (row_best or _RowBest.of_log_probs(log_probs, width)).in_token_order()
        sums = (scores[:, None] + np.take_along_axis(log_probs, kept, axis=1)).reshape(sentences, k * width)
        order = top_candidates(sums, width)  # (B', 2K)
        top_scores = np.take_along_axis(sums, order, axis=1)
        beam = order // width  # within the sentence
        tokens = kept[beam + (np.arange(sentences) * k)[:, None], order % width]
        redo = np.flatnonzero(~((scores + left_out).reshape(sentences, k).max(axis=1) < top_scores[:, -1]))
        if len(redo):
            top_scores[redo], beam[redo], tokens[redo] = _rank_all(scores, log_probs, k, redo)
        return cls._of(top_scores, beam, tokens, eos_id, k)

    @classmethod
    def _greedy(cls, scores: np.ndarray, log_probs: np.ndarray, eos_id: int) -> _Candidates:
        """K = 1: each sentence is one row, and only its best token matters (as EOS it ends
        the sentence, otherwise it goes on), so an argmax (the first of equal maxima, as the
        full ranking's tie order) replaces the partial sort. The second candidate is left
        impossible (-inf)."""
        rows = np.arange(len(scores))
        tokens = np.stack([log_probs.argmax(axis=1), np.full(len(scores), eos_id)], axis=1)
        top_scores = np.stack([scores + log_probs[rows, tokens[:, 0]], np.full(len(scores), -np.inf)], axis=1)
        return cls._of(top_scores, np.zeros_like(tokens), tokens, eos_id, 1)

    @classmethod
    def _of(cls, top_scores: np.ndarray, beam: np.ndarray, tokens: np.ndarray, eos_id: int, k: int) -> _Candidates:
        """From (B', 2K) sums, beams within their sentence (0..K-1) and tokens."""
        return cls(
            scores=top_scores,
            rows=beam + (np.arange(len(beam)) * k)[:, None],  # row of the beam extended
            tokens=tokens,
            possible=top_scores > -np.inf,
            is_eos=tokens == eos_id,
        )


@dataclass
class _RowBest:
    """Each row's W best tokens (any order among them) and the best log-prob it leaves out."""

    kept: np.ndarray  # (N, W) token ids
    left_out: np.ndarray  # (N,) the (W+1)-th largest log-prob of the row

    @classmethod
    def of_log_probs(cls, log_probs: np.ndarray, width: int) -> _RowBest:
        """From the (N, V) log-probs, by a partial sort (when the backend ranked nothing)."""
        vocab = log_probs.shape[1]
        part = np.argpartition(log_probs, vocab - width - 1, axis=1)
        return cls(
            part[:, vocab - width :], np.take_along_axis(log_probs, part[:, vocab - width - 1 : vocab - width], 1)[:, 0]
        )

    @classmethod
    def of(cls, values: np.ndarray, ids: np.ndarray, width: int, banned: tuple[int, ...]) -> _RowBest | None:
        """From a backend's TopK, values and ids (N, C) largest first, which saw every token:
        the `banned` ones are skipped. None if C leaves fewer than W + 1 others."""
        if values.shape[1] < width + 1 + len(banned):
            return None
        allowed_first = np.argsort(np.isin(ids, banned), axis=1, kind="stable")[:, : width + 1]
        ids, values = np.take_along_axis(ids, allowed_first, 1), np.take_along_axis(values, allowed_first, 1)
        return cls(ids[:, :width], values[:, width])

    def in_token_order(self) -> tuple[np.ndarray, np.ndarray]:
        """kept sorted by token id (so ties keep the full ranking's order), and left_out."""
        return np.sort(self.kept, axis=1), self.left_out


def _rank_all(
    scores: np.ndarray, log_probs: np.ndarray, k: int, sentences: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The 2K best of all K·V candidates of `sentences` (indices): sums, beams, tokens, each
    (len(sentences), 2K)."""
    vocab = log_probs.shape[1]
    # float64 running scores: the float32 log-probs are promoted exactly.
    candidates = (scores.reshape(-1, k)[sentences][:, :, None] + log_probs.reshape(-1, k, vocab)[sentences]).reshape(
        len(sentences), k * vocab
    )
    top = top_candidates(candidates, 2 * k)
    return np.take_along_axis(candidates, top, axis=1), top // vocab, top % vocab


def _finish(
    top: _Candidates,
    log_probs: np.ndarray,
    beams: _Beams,
    trace: _Trace,
    step: int,
    config: DecodeConfig,
    eos_id: int,
    finished: list[list[Hypothesis]],
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
                )
            )


class _Trace:
    """The search's back-pointers, one entry per step: a finished hypothesis reads its
    tokens, token log-probs and attention rows by walking back from its last row, so no
    growing per-hypothesis history is copied when the beams reorder (that is O(T²))."""

    def __init__(self) -> None:
        self.attention: list[np.ndarray | None] = []  # step t: (L, N_t, H, S) cross weights of its rows
        self.parents: list[np.ndarray] = []  # step t: (N_t+1,) the row each next row extends
        self.tokens: list[np.ndarray] = []  # step t: (N_t+1,) the token it appended
        self.log_probs: list[np.ndarray] = []  # step t: (N_t+1,) that token's log-prob

    def select(self, parents: np.ndarray, tokens: np.ndarray, log_probs: np.ndarray) -> None:
        self.parents.append(parents)
        self.tokens.append(tokens)
        self.log_probs.append(log_probs)

    def backtrack(self, step: int, row: int) -> tuple[list[int], list[float], np.ndarray | None]:
        """Tokens and their log-probs before `row` at `step`, and its attention rows
        (L, H, step + 1, S): row i is the step that produced token i, the last `step` itself."""
        tokens, log_probs, attention = [], [], []
        for t in range(step, -1, -1):
            if self.attention[t] is not None:
                attention.append(self.attention[t][:, row])
            if t > 0:
                tokens.append(int(self.tokens[t - 1][row]))
                log_probs.append(float(self.log_probs[t - 1][row]))
                row = int(self.parents[t - 1][row])
        stacked = np.stack(attention[::-1], axis=2).astype(np.float32, copy=False) if attention else None
        return tokens[::-1], log_probs[::-1], stacked


class _Coverage:
    """Per beam row, the attention mass each source piece has received from the model's
    alignment head (its layer, mean of its heads), over the steps its map reads: the steps
    that produced the tokens or, for a step-shifted head, the steps where they were the
    input (as `seq2seq.alignment.subword_map`). Reordered with the beams."""

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
) -> Hypothesis:
    """The hypothesis that `row` ends with EOS at `step`, with summed log-prob `total` and,
    when the score needs it, `coverage` (S',)."""
    generated, token_log_probs, attention = trace.backtrack(step, row)
    length = len(generated) + 1  # EOS counts as a produced token
    return Hypothesis(
        tokens=generated,
        score=hypothesis_score(total, length, config, coverage),
        log_prob=total,
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
