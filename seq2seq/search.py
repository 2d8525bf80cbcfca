"""Beam search and greedy search over a small backend interface, in numpy.

One implementation serves every backend (torch eager, onnxruntime): a backend only
encodes a batch and runs one decoder step. Search owns the KV cache reordering and the
per-hypothesis alignment buffers, so each hypothesis ends with the cross-attention of
every layer and head for the exact token sequence it produced. Torch-free.

Shapes: B sentences, K beam size, N = B·K active rows, L decoder layers, H heads,
S source length, P cached target length, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from seq2seq.config import DecodeConfig


@dataclass
class StepOutput:
    log_probs: np.ndarray              # (N, V) float32, log-softmax of the new position
    past_k: np.ndarray                 # (L, N, H, P+1, Dh) self-attention cache after this step
    past_v: np.ndarray
    cross_weights: np.ndarray | None   # (L, N, H, S) cross-attention of the new position


class SearchBackend(Protocol):
    """What a model must offer to be searched: encode once, then step token by token."""

    bos_id: int
    eos_id: int
    pad_id: int

    def encode(self, src_ids: np.ndarray, src_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """src_ids (B, S) int64, src_mask (B, S) bool -> cross K and V, each (L, B, H, S, Dh)."""
        ...

    def step(self, tokens: np.ndarray, cross_k: np.ndarray, cross_v: np.ndarray, src_mask: np.ndarray,
             past_k: np.ndarray | None, past_v: np.ndarray | None, need_attention: bool) -> StepOutput:
        """tokens (N, 1) int64 at position P; past_k/v (L, N, H, P, Dh) or None when P = 0."""
        ...


@dataclass
class Hypothesis:
    tokens: list[int]                  # generated ids, without BOS and EOS
    score: float                       # length-normalised log-probability (ranks the n-best)
    log_prob: float                    # raw sum of token log-probs, EOS included
    # (L, H, len(tokens) + 1, S): row i is the decoder step that produced token i; the last
    # row is the step that produced EOS. Columns are source positions, source EOS included.
    attention: np.ndarray | None = None
    token_log_probs: list[float] = field(default_factory=list)


def length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty (Wu et al. 2016): ((5 + |Y|) / 6) ** alpha."""
    return ((5.0 + length) / 6.0) ** alpha


def hypothesis_score(log_prob: float, length: int, config: DecodeConfig) -> float:
    """The score that ranks finished hypotheses: the summed log-prob over the length
    penalty. The one place a finished score is computed (add penalties here)."""
    return log_prob / length_penalty(length, config.length_penalty)


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
    best = np.argpartition(candidates, width - count, axis=1)[:, width - count:]
    values = np.take_along_axis(candidates, best, axis=1)
    # argpartition picks arbitrarily among entries equal to the cut-off value; the stable
    # sort takes the lowest indices. Rows where some equal entry was left out (rare: real
    # log-probs rarely tie) are redone with the full sort. At -inf nothing is ever used.
    cutoff = values.min(axis=1, keepdims=True)
    tied = (np.count_nonzero(candidates == cutoff, axis=1) > np.count_nonzero(values == cutoff, axis=1)) \
        & np.isfinite(cutoff[:, 0])
    order = np.lexsort((best, -values), axis=1)            # by value descending, then by index
    best = np.take_along_axis(best, order, axis=1)
    for row in np.flatnonzero(tied):
        best[row] = np.argsort(-candidates[row], kind="stable")[:count]
    return best


def beam_search(backend: SearchBackend, src_ids: np.ndarray, src_mask: np.ndarray,
                config: DecodeConfig = DecodeConfig(), max_positions: int | None = None) -> list[list[Hypothesis]]:
    """Translate a padded batch; returns `config.n_best` hypotheses per sentence, best first.

    src_ids (B, S) int64 with EOS at the end of each sentence, src_mask (B, S) bool.
    `max_positions` (the model's position table) caps the target length.
    Beam size 1 is greedy search. A sentence stops when `beam_size` hypotheses have
    ended with EOS or its length limit is reached; finished sentences leave the batch so
    the rest decode faster.
    """
    batch, k = src_ids.shape[0], config.beam_size
    src_lengths = src_mask.sum(axis=1)
    limits = np.array([max_target_length(int(n), config) for n in src_lengths])
    if max_positions is not None:
        # The decoder has no position past max_positions - 1: BOS sits at 0, so at most
        # max_positions - 1 generated tokens, EOS included.
        limits = np.minimum(limits, max_positions - 2)
    cross_k, cross_v = backend.encode(src_ids, src_mask)
    # Every sentence's encoder state is repeated for its K beams: row n = sentence n // K.
    expand = np.repeat(np.arange(batch), k)
    cross_k, cross_v = cross_k[:, expand], cross_v[:, expand]
    mask = src_mask[expand]
    tokens = np.full((batch * k, 1), backend.bos_id, dtype=np.int64)
    # Only beam 0 is alive at the start, so the first step does not pick K copies of one token.
    scores = np.tile(np.array([0.0] + [-np.inf] * (k - 1)), batch)
    token_scores = np.zeros((batch * k, 0))
    attention: np.ndarray | None = None           # (N, T, L, H, S) per hypothesis
    past_k = past_v = None
    active = np.arange(batch)                     # original index of each sentence in the batch
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]

    for step in range(int(limits.max()) + 1):
        out = backend.step(tokens[:, -1:], cross_k, cross_v, mask, past_k, past_v, config.return_attention)
        log_probs = out.log_probs.astype(np.float64)
        log_probs[:, backend.pad_id] = -np.inf
        log_probs[:, backend.bos_id] = -np.inf
        at_limit = np.repeat(limits[active] <= step, k)
        if at_limit.any():  # out of length budget: EOS is the only continuation
            eos_scores = log_probs[at_limit, backend.eos_id]
            log_probs[at_limit] = -np.inf
            log_probs[at_limit, backend.eos_id] = eos_scores
        if out.cross_weights is not None:
            new_rows = out.cross_weights.transpose(1, 0, 2, 3)[:, None]     # (N, 1, L, H, S)
            attention = new_rows if attention is None else np.concatenate([attention, new_rows], axis=1)
        vocab = log_probs.shape[1]
        candidates = (scores[:, None] + log_probs).reshape(len(active), k * vocab)
        # 2K candidates per sentence guarantee K that do not end here.
        top = top_candidates(candidates, 2 * k)

        next_rows, next_tokens, next_scores, keep_sentences = [], [], [], []
        for i, sentence in enumerate(active):
            chosen = 0
            for rank, flat in enumerate(top[i]):
                score = candidates[i, flat]
                if score == -np.inf:
                    break
                beam, token = divmod(int(flat), vocab)
                row = i * k + beam
                if token == backend.eos_id:
                    # An EOS ranked K or lower was beaten by K continuations that are still
                    # open, any of which may end better: it does not finish a hypothesis (as
                    # in fairseq), else such EOS could close the sentence too early.
                    if rank < k and len(finished[sentence]) < k:
                        finished[sentence].append(_hypothesis(tokens[row, 1:], score, log_probs[row, token],
                                                              token_scores, attention, row, config))
                    continue
                next_rows.append(row)
                next_tokens.append(token)
                next_scores.append(score)
                chosen += 1
                if chosen == k:
                    break
            sentence_done = len(finished[sentence]) >= k or chosen < k
            if sentence_done:
                del next_rows[len(next_rows) - chosen:], next_tokens[len(next_tokens) - chosen:], \
                    next_scores[len(next_scores) - chosen:]
            else:
                keep_sentences.append(i)
        if not keep_sentences:
            break
        rows = np.array(next_rows)
        token_scores = np.concatenate(
            [token_scores[rows], log_probs[rows, next_tokens][:, None]], axis=1)
        tokens = np.concatenate([tokens[rows], np.array(next_tokens, dtype=np.int64)[:, None]], axis=1)
        scores = np.array(next_scores)
        past_k, past_v = out.past_k[:, rows], out.past_v[:, rows]
        if attention is not None:
            attention = attention[rows]
        if len(keep_sentences) < len(active):
            # Sentences that finished leave the batch: drop their encoder rows.
            kept_rows = (np.array(keep_sentences)[:, None] * k + np.arange(k)).reshape(-1)
            cross_k, cross_v, mask = cross_k[:, kept_rows], cross_v[:, kept_rows], mask[kept_rows]
            active = active[keep_sentences]

    results = []
    for hypotheses in finished:
        hypotheses.sort(key=lambda h: -h.score)
        results.append(hypotheses[: config.n_best])
    return results


def _hypothesis(prefix: np.ndarray, total: float, eos_log_prob: float, token_scores: np.ndarray,
                attention: np.ndarray | None, row: int, config: DecodeConfig) -> Hypothesis:
    generated = [int(t) for t in prefix]
    length = len(generated) + 1                       # EOS counts as a produced token
    return Hypothesis(
        tokens=generated,
        score=float(hypothesis_score(total, length, config)),
        log_prob=float(total),
        attention=None if attention is None else attention[row].transpose(1, 2, 0, 3).astype(np.float32),
        token_log_probs=[float(s) for s in token_scores[row]] + [float(eos_log_prob)],
    )


def greedy_search(backend: SearchBackend, src_ids: np.ndarray, src_mask: np.ndarray,
                  config: DecodeConfig = DecodeConfig()) -> list[Hypothesis]:
    """Greedy decoding: beam search with one beam, one hypothesis per sentence."""
    greedy = DecodeConfig(beam_size=1, n_best=1, length_penalty=config.length_penalty,
                          max_length_ratio=config.max_length_ratio, max_length_extra=config.max_length_extra,
                          return_attention=config.return_attention)
    return [hyps[0] for hyps in beam_search(backend, src_ids, src_mask, greedy)]


def pad_batch(sequences: list[list[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad id lists -> ids (B, S) int64 and mask (B, S) bool (True at real tokens)."""
    width = max(1, max((len(s) for s in sequences), default=1))
    ids = np.full((len(sequences), width), pad_id, dtype=np.int64)
    for row, sequence in enumerate(sequences):
        ids[row, : len(sequence)] = sequence
    return ids, ids != pad_id
