"""Ranking one search step's candidates: each sentence's 2K best continuations of its K
beams, exactly as a stable sort of all K·V of them would, at a fraction of the cost.

`Candidates.rank` works from each row's own 2K best log-probs (`RowBest`: from the backend's
TopK when the decoder graph has one, export/topk.py, else from a partial sort here), with a
check that falls back to ranking all of a sentence's candidates (`rank_all`) wherever
something a row left out could still tie or beat the sentence's 2K-th best. Greedy search
(K = 1) takes an argmax. Used by `seq2seq.decoding.search.beam_search`; torch-free.

Shapes: B' sentences still decoding, K beam size, N = B'·K rows, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Up to this many candidates a row, one stable sort of them all is cheaper than the partial
# selection and its tie check (their numpy calls cost more than the sorting): at 32 rows, 32
# columns (beam 4's 2K² summed candidates) 12 against 65 us, equal at 128 columns, and
# 800 against 160 us at 512.
FULL_SORT_WIDTH = 64


def along_rows(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """values (R, M), index (R, C) -> (R, C): `values[r, index[r, c]]`, what
    `np.take_along_axis(values, index, axis=1)` gives without its per-call index building
    (several calls a decoder step: about 3% of a beam-4 translation at batch 1)."""
    return values[np.arange(len(values))[:, None], index]


def top_candidates(candidates: np.ndarray, count: int) -> np.ndarray:
    """Indices of the `count` largest entries of each row, best first: (R, M) -> (R, count).

    Exactly what a stable full sort (`argsort(-candidates, kind="stable")[:, :count]`)
    returns, ties included (the lower index first), at a fraction of its cost: a partial
    selection (argpartition) finds the `count` best of the M = K·V candidates and only
    those are sorted. Sorting all of them was about half of the decoding time. Rows of at
    most `FULL_SORT_WIDTH` candidates are sorted whole.
    """
    rows, width = candidates.shape
    if count >= width or width <= FULL_SORT_WIDTH:
        return np.argsort(-candidates, axis=1, kind="stable")[:, :count]
    best = np.argpartition(candidates, width - count, axis=1)[:, width - count :]
    values = along_rows(candidates, best)
    # argpartition picks arbitrarily among entries equal to the cut-off value; the stable
    # sort takes the lowest indices. Rows where some equal entry was left out (rare: real
    # log-probs rarely tie) are redone with the full sort. At -inf nothing is ever used.
    cutoff = values.min(axis=1, keepdims=True)
    tied = (np.count_nonzero(candidates == cutoff, axis=1) > np.count_nonzero(values == cutoff, axis=1)) & np.isfinite(
        cutoff[:, 0]
    )
    order = np.lexsort((best, -values), axis=1)  # by value descending, then by index
    best = along_rows(best, order)
    for row in tied.nonzero()[0]:
        best[row] = np.argsort(-candidates[row], kind="stable")[:count]
    return best


@dataclass
class Candidates:
    """The 2K best continuations of each sentence still decoding, best first: each (B', 2K)."""

    scores: np.ndarray  # float64 summed log-prob
    rows: np.ndarray  # the beam row each extends
    tokens: np.ndarray  # the token it appends
    possible: np.ndarray  # bool: its score is finite
    is_eos: np.ndarray  # bool: it appends EOS

    @classmethod
    def rank(
        cls, scores: np.ndarray, log_probs: np.ndarray, k: int, eos_id: int, row_best: RowBest | None = None
    ) -> Candidates:
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
            return cls._of(*rank_all(scores, log_probs, k, np.arange(sentences)), eos_id, k)
        kept, left_out = (row_best or RowBest.of_log_probs(log_probs, width)).in_token_order()
        sums = (scores[:, None] + along_rows(log_probs, kept)).reshape(sentences, k * width)
        order = top_candidates(sums, width)  # (B', 2K)
        top_scores = along_rows(sums, order)
        beam = order // width  # within the sentence
        tokens = kept[beam + (np.arange(sentences) * k)[:, None], order % width]
        redo = (~((scores + left_out).reshape(sentences, k).max(axis=1) < top_scores[:, -1])).nonzero()[0]
        if len(redo):
            top_scores[redo], beam[redo], tokens[redo] = rank_all(scores, log_probs, k, redo)
        return cls._of(top_scores, beam, tokens, eos_id, k)

    @classmethod
    def _greedy(cls, scores: np.ndarray, log_probs: np.ndarray, eos_id: int) -> Candidates:
        """K = 1: each sentence is one row, and only its best token matters (as EOS it ends
        the sentence, otherwise it goes on), so an argmax (the first of equal maxima, as the
        full ranking's tie order) replaces the partial sort. The second candidate is left
        impossible (-inf)."""
        rows = np.arange(len(scores))
        tokens = np.full((len(scores), 2), eos_id, dtype=np.intp)
        tokens[:, 0] = log_probs.argmax(axis=1)
        top_scores = np.full((len(scores), 2), -np.inf)
        top_scores[:, 0] = scores + log_probs[rows, tokens[:, 0]]
        return cls._of(top_scores, np.zeros_like(tokens), tokens, eos_id, 1)

    @classmethod
    def _of(cls, top_scores: np.ndarray, beam: np.ndarray, tokens: np.ndarray, eos_id: int, k: int) -> Candidates:
        """From (B', 2K) sums, beams within their sentence (0..K-1) and tokens."""
        return cls(
            scores=top_scores,
            rows=beam + (np.arange(len(beam)) * k)[:, None],  # row of the beam extended
            tokens=tokens,
            possible=top_scores > -np.inf,
            is_eos=tokens == eos_id,
        )


@dataclass
class RowBest:
    """Each row's W best tokens (any order among them) and the best log-prob it leaves out."""

    kept: np.ndarray  # (N, W) token ids
    left_out: np.ndarray  # (N,) the (W+1)-th largest log-prob of the row

    @classmethod
    def of_log_probs(cls, log_probs: np.ndarray, width: int) -> RowBest:
        """From the (N, V) log-probs, by a partial sort (when the backend ranked nothing)."""
        vocab = log_probs.shape[1]
        part = np.argpartition(log_probs, vocab - width - 1, axis=1)
        return cls(part[:, vocab - width :], along_rows(log_probs, part[:, vocab - width - 1 : vocab - width])[:, 0])

    @classmethod
    def of(cls, values: np.ndarray, ids: np.ndarray, width: int, banned: tuple[int, ...]) -> RowBest | None:
        """From a backend's TopK, values and ids (N, C) largest first, which saw every token:
        the `banned` ones are skipped. None if C leaves fewer than W + 1 others."""
        if values.shape[1] < width + 1 + len(banned):
            return None
        # A comparison per banned id, not np.isin (its set machinery costs 5x as much at 128 rows).
        is_banned = np.zeros(ids.shape, dtype=bool)
        for token in banned:
            is_banned |= ids == token
        if not is_banned[:, : width + 1].any():  # the common case: nothing to skip
            return cls(ids[:, :width], values[:, width])
        allowed_first = np.argsort(is_banned, axis=1, kind="stable")[:, : width + 1]
        ids, values = along_rows(ids, allowed_first), along_rows(values, allowed_first)
        return cls(ids[:, :width], values[:, width])

    def reranked(self, rows: np.ndarray, log_probs: np.ndarray) -> RowBest:
        """The same, with `rows` (indices) ranked afresh from log_probs (N, V): for rows where
        the search banned tokens the backend's TopK saw (the repetition guard), so a banned
        token is neither kept nor taken as the best left out. Few rows, so a partial sort of
        them costs little, and the result stays exact."""
        fresh = RowBest.of_log_probs(log_probs[rows], self.kept.shape[1])
        kept, left_out = self.kept.copy(), self.left_out.copy()
        kept[rows], left_out[rows] = fresh.kept, fresh.left_out
        return RowBest(kept, left_out)

    def in_token_order(self) -> tuple[np.ndarray, np.ndarray]:
        """kept sorted by token id (so ties keep the full ranking's order), and left_out."""
        return np.sort(self.kept, axis=1), self.left_out


def rank_all(
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
    return along_rows(candidates, top), top // vocab, top % vocab
