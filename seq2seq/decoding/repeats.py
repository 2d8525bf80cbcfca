"""The repetition guard of the beam search: no hypothesis produces an n-gram of target
pieces that it already contains (`DecodeConfig.no_repeat_ngram_size`, as fairseq's and
CTranslate2's `no_repeat_ngram_size`).

A small under-trained model sometimes stutters ("office office office office"): once a
piece has followed a context, the same context makes it likely again. The guard gives the
piece that would complete an n-gram already in the hypothesis a log-prob of -inf before
the candidates are ranked, so the search picks the best continuation that does not repeat.
EOS is never banned (a hypothesis holds no EOS), so every hypothesis can still end.
Torch-free; used by `seq2seq.decoding.search.beam_search`.

Shapes: N active rows, T pieces generated so far, V vocabulary.
"""

from __future__ import annotations

import numpy as np


def repeated_ngram_bans(history: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The next pieces that would repeat an n-gram: history (N, T) int, each row's pieces so
    far -> (rows, tokens), each (M,) int, one entry per earlier n-gram whose first n - 1
    pieces equal the row's last n - 1, in row order (a token may appear more than once).

    n = 1 bans every piece already produced. Vectorised over rows and positions: n - 1
    comparisons of (N, T - n + 1) shifted views with the row's context, tiny beside a
    decoder step (about 50 µs at 128 rows of 20 pieces; building all windows at once was
    3x slower).
    """
    rows, length = history.shape
    if n < 1 or length < n:
        # Fewer than n pieces: no earlier n-gram to repeat yet.
        return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=history.dtype)
    starts = length - n + 1  # the n-grams so far begin at 0 .. starts - 1
    # (N, starts): piece `offset` of each n-gram against piece `offset` of the context (the
    # row's last n - 1 pieces), for every offset; n = 1 has no context, so every piece.
    matches = np.ones((rows, starts), dtype=bool) if n == 1 else history[:, :starts] == history[:, starts, None]
    for offset in range(1, n - 1):
        matches &= history[:, offset : offset + starts] == history[:, starts + offset, None]
    row, start = np.nonzero(matches)
    return row, history[row, start + n - 1]


class RepeatGuard:
    """Per beam row, the pieces it has produced, reordered with the beams (like the KV
    cache), and the bans they imply.

    The search keeps back-pointers (`seq2seq.decoding.search._Trace`) rather than histories, and a
    row's pieces could be walked back from them; but that is a Python loop per row per
    step, while keeping an (N, T) int array and gathering it by the rows that go on is one
    numpy copy of a few kilobytes per step, nothing beside the cache reorder it follows.
    """

    def __init__(self, n: int, rows: int) -> None:
        self.n = n
        self.history = np.zeros((rows, 0), dtype=np.int64)  # (N, T)

    def ban(self, log_probs: np.ndarray) -> np.ndarray:
        """log_probs (N, V), edited in place: every piece that would repeat an n-gram of its
        row gets -inf. Returns the rows that got a ban (sorted, unique), whose best tokens a
        backend's TopK no longer knows."""
        rows, tokens = repeated_ngram_bans(self.history, self.n)
        if not len(rows):  # most steps
            return rows
        log_probs[rows, tokens] = -np.inf
        return np.unique(rows)

    def select(self, rows: np.ndarray, tokens: np.ndarray) -> None:
        """Next row i extends row `rows[i]` with `tokens[i]` (rows of sentences that finish
        are left out, as in `DecoderCache.reorder`)."""
        self.history = np.concatenate([self.history[rows], tokens[:, None].astype(np.int64)], axis=1)
