"""What a model offers the search (`SearchBackend`: encode once, then step token by token;
every attention map of a given translation) and the values that cross that interface: the
KV cache (`DecoderCache`, owned by the search and passed to every step), a step's output
and a teacher-forced pass. Torch-free; implemented by `seq2seq.training.torch_backend` and
`seq2seq.runtime.onnx_backend`, searched by `seq2seq.decoding.search`.

Shapes: L decoder layers, N active rows, H heads, S source length, P cached target
length, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from seq2seq.core.config import ModelConfig

# () -> (B,) bool: which sentences (or pairs) of a running batch someone still waits for, asked
# after every search step (seq2seq/decoding/search.py) and before every teacher-forced batch of
# the occlusion pass (seq2seq/analysis/occlusion.py). It is the caller's turn: a scheduler may
# let other requests' work run before it answers (service/compute/batching.py, "Turns").
Wanted = Callable[[], np.ndarray]


@dataclass(frozen=True)
class DecoderCache:
    """What a decoder step reads besides its new tokens, and hands on to the next step: a
    value passed in and returned, never kept by a backend (so one backend serves concurrent
    searches). Every array is stacked over the decoder layers, layer l at index l; the ONNX
    backend binds per-layer views of them, which copies nothing.

    Shapes: L decoder layers, N rows, H heads, S source length, P cached target positions.

    The keys' last two axes are the backend's business: the ONNX graphs exported since
    lever 22 (docs/performance.md) take and return them transposed, (L, N, H, Dh, S) and
    (L, N, H, Dh, P), so each score is a plain MatMul (`OnnxBackend.keys_transposed`). The
    search only moves rows (axis 1) and reads P from the values, whose layout is the same
    everywhere.

    The cross K/V have one row per search row, or, for a backend with `cross_per_sentence`
    (lever 23), one per sentence (B, its K beams being consecutive rows).
    """

    cross_k: np.ndarray  # (L, N, H, S, Dh) (or transposed, above) cross-attention keys, once per source
    cross_v: np.ndarray  # (L, N, H, S, Dh)
    self_k: np.ndarray  # (L, N, H, P, Dh) (or transposed) self-attention keys of the P positions so far
    self_v: np.ndarray  # (L, N, H, P, Dh)

    @classmethod
    def start(cls, cross_k: np.ndarray, cross_v: np.ndarray) -> DecoderCache:
        """The cache before the first step: cross K/V from `encode`, P = 0 (an empty
        (L, N, H, 0, Dh), which a backend with transposed keys reads as (L, N, H, Dh, 0))."""
        layers, rows, heads, _, head_dim = cross_v.shape
        empty = np.zeros((layers, rows, heads, 0, head_dim), dtype=np.float32)
        return cls(cross_k, cross_v, empty, empty)

    @property
    def past_length(self) -> int:
        """P, the target positions already cached."""
        return self.self_v.shape[3]

    def reorder(self, rows: np.ndarray, cross_rows: np.ndarray | None = None, owned: bool = False) -> DecoderCache:
        """rows (N',) int: row i of the result continues row `rows[i]` (beam search: the
        beams that go on, in their order; sentences that finished are left out).

        The self K/V always follow. The cross K/V follow `cross_rows` (N',), the row whose
        source row i reads; by default `rows`, and only when the number of rows changes: the
        search moves a row only within its own sentence, whose K rows read one source, so
        while no sentence leaves they are already right and are not copied (fairseq's
        `reorder_incremental_state` skips its encoder-decoder attention the same way).

        `owned`: the caller owns these arrays and will not read them again (the search, with
        a step's fresh output and its own cross K/V), so rows are moved within them
        (`move_rows`) rather than copied out; otherwise the cache is a value and is never
        changed.
        """
        select = move_rows if owned else select_rows
        cross_k, cross_v = self.cross_k, self.cross_v
        if cross_rows is None and len(rows) != cross_k.shape[1]:
            cross_rows = rows
        if cross_rows is not None:
            cross_k, cross_v = select(cross_k, cross_rows), select(cross_v, cross_rows)
        return DecoderCache(cross_k, cross_v, select(self.self_k, rows), select(self.self_v, rows))


@dataclass
class StepOutput:
    log_probs: np.ndarray  # (N, V) float32, log-softmax of the new position (the search edits it)
    cache: DecoderCache  # the cache after this step: self K/V (L, N, H, P+1, Dh)
    cross_weights: np.ndarray | None  # (L, N, H, S) cross-attention of the new position
    # (values (N, C) float32, largest first; ids (N, C) int64): each row's C best log-probs,
    # when the search asked for them (`top_k`) and the backend ranks them itself; else None
    # and the search ranks from log_probs.
    top: tuple[np.ndarray, np.ndarray] | None = None
    # (L, N, H, P+1) self-attention of the new position over the P+1 positions so far, when
    # the search asked for it (`need_self_attention`: a watched search) and the backend gives
    # it; else None.
    self_weights: np.ndarray | None = None


@dataclass
class TeacherForced:
    """Every attention map of given translations, the decoder fed BOS + target at once.

    Row t of the decoder maps is the step whose input is BOS + target[:t], i.e. the step that
    produced target piece t (the last row produced EOS), as in `TranslationResult.attention`.
    """

    log_probs: np.ndarray  # (B, T+1, V)
    cross: np.ndarray  # (L, B, H, T+1, S)
    # Self-attention, None from a backend that can only step (the scripted test backends).
    encoder_self: np.ndarray | None  # (E, B, H, S, S)
    decoder_self: np.ndarray | None  # (L, B, H, T+1, T+1), causal: zero above the diagonal


class SearchBackend(Protocol):
    """What a model must offer to be searched (encode once, then step token by token) and
    explained (its config, and every attention map of a given translation)."""

    bos_id: int
    eos_id: int
    pad_id: int
    config: ModelConfig
    # Whether a step reads one cross K/V per sentence for the K consecutive rows of its beams
    # (the cache then keeps them (L, B, H, S, Dh) for N = B·K rows) rather than one per row.
    cross_per_sentence: bool

    def encode(self, src_ids: np.ndarray, src_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """src_ids (B, S) int64, src_mask (B, S) bool -> cross K and V, each (L, B, H, S, Dh)
        (K in the backend's own layout: see `DecoderCache`)."""
        ...

    def step(
        self,
        tokens: np.ndarray,
        src_mask: np.ndarray,
        cache: DecoderCache,
        need_attention: bool,
        top_k: int = 0,
        need_self_attention: bool = False,
    ) -> StepOutput:
        """tokens (N, 1) int64 at position P = cache.past_length, src_mask (N, S) bool -> the
        new position's log-probs, the cache extended by it, its cross-attention (L, N, H, S)
        when `need_attention`, and, if the backend can and `top_k` > 0, each row's `top_k`
        best log-probs with their ids (`StepOutput.top`; a backend may leave it None); with
        `need_self_attention`, its self-attention (L, N, H, P+1) if the backend can
        (`StepOutput.self_weights`; else None)."""
        ...

    def teacher_force(self, src_ids: np.ndarray, src_mask: np.ndarray, tgt_ids: np.ndarray) -> TeacherForced:
        """src_ids (B, S) with the source EOS, src_mask (B, S) bool, tgt_ids (B, T) without BOS
        or EOS, right-padded with pad_id -> every map of the decoder reading BOS + target."""
        ...


def select_rows(states: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """states (L, N, ...) -> (L, len(rows), ...): the rows the search keeps, in their order.

    For the KV cache (L, N, H, P, Dh) and the cross K/V (L, N, H, S, Dh). The result is
    C-contiguous (`np.take`; `states[:, rows]` is not), so backends feed it as it is, and
    when nothing moves (greedy search while no sentence has finished) it is not copied.
    """
    if len(rows) == states.shape[1] and np.array_equal(rows, np.arange(len(rows))):
        return states
    return np.take(states, rows, axis=1)


def move_rows(states: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """`select_rows`, written over `states` itself, which the caller owns and gives up:
    (L, N, ...) -> (L, len(rows), ...), a view of `states`.

    Only the rows that change place are copied. When a sentence finishes, the search moves
    the last sentence into its place (`seq2seq.decoding.search`), so its K rows are all that move,
    where `np.take` copied every row of the batch (at beam 4, batch 32 that was 9% of the
    time: docs/performance.md, lever 13). When most rows move (beams reordered), one `np.take` is
    cheaper than a gather and a scatter, and is used. Each layer's slab of the result
    is contiguous, as backends need (the rows are a prefix of each layer's rows).
    """
    moved = (rows != np.arange(len(rows))).nonzero()[0]
    if 2 * len(moved) > len(rows):
        return states.take(rows, axis=1)
    if len(moved):
        # The right side is gathered into a new array before anything is written, so a
        # row that is both read and overwritten is read first.
        states[:, moved] = states[:, rows[moved]]
    return states[:, : len(rows)]


def length_groups(lengths: np.ndarray, run_cost: float) -> list[np.ndarray]:
    """Split sentences into groups, each to be run padded only to its own longest one.

    lengths (B,) int, each sentence's real positions -> the row indices of each group,
    shortest sentences first; together they hold every row once. A group costs `run_cost`
    (a graph run's fixed cost, in positions) plus its size times its longest length; the
    split is the cheapest one into runs of sentences adjacent in length order (dynamic
    programming over the sorted lengths: O(B^2) numpy work, a few ms at B = 256).

    Why: a batch padded to its longest sentence wastes most of the encoder's work when one
    sentence is long (the Ding test batches of 32: 35 positions padded, 15 real on average),
    and its MatMuls cost in proportion to the positions they are given. CTranslate2 removes
    the padding inside its dense layers for the same reason.
    """
    order = np.argsort(lengths, kind="stable")
    count = len(order)
    if count <= 1:  # one sentence (batch-1 latency): nothing to plan
        return [order]
    ordered = np.asarray(lengths, dtype=np.float64)[order]
    best = np.zeros(count + 1)  # best[j]: the cheapest split of the j shortest sentences
    cut = np.zeros(count + 1, dtype=np.int64)  # where the last group of that split starts
    for end in range(1, count + 1):
        starts = np.arange(end)
        costs = best[:end] + run_cost + (end - starts) * ordered[end - 1]
        cut[end] = int(np.argmin(costs))
        best[end] = costs[cut[end]]
    groups, end = [], count
    while end > 0:
        groups.append(order[cut[end] : end])
        end = int(cut[end])
    return groups[::-1]
