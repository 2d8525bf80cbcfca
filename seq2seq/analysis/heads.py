"""What each attention head does, in three numbers a learner can read (the explorer's model
view and `/v1/heatmap?view=heads`).

Of one stack's maps, every layer and head, over the raw tokens (the start and end marks
included, as the model reads them):

- **entropy**: how spread a row's weight is, its entropy over the log of the keys the row
  may read (all of them; in the causal decoder the row's own position and those before it),
  averaged over the rows that may read more than one key. 0: each row reads one token;
  1: evenly everywhere it may.
- **diagonal**: the weight a row puts within one position of the diagonal, averaged over
  rows. On a square map the diagonal is the row's own position (a head that reads the
  word itself, or its neighbour); on the cross map it is the proportional one, row r of R
  at column r·(C−1)/(R−1) (a head that follows the source in order, as an aligning head of
  a language pair with similar word order does).
- **mark share**: the weight on the sentence mark a head can rest on when it has nothing to
  read: `</s>` for the encoder and the cross-attention, `<s>` for the decoder (Clark et al.
  2019 found BERT's heads parking weight on [SEP] in the same way). Averaged over rows.

Torch-free; shapes: L layers, H heads, R rows (queries), C columns (keys).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MARKS = {"encoder": "</s>", "cross": "</s>", "decoder": "<s>"}


@dataclass(frozen=True)
class HeadStatistics:
    """Per layer and head, (L, H) each; see the module's docstring."""

    entropy: np.ndarray
    diagonal: np.ndarray
    mark_share: np.ndarray
    mark: str  # the mark `mark_share` reads

    def rounded(self, decimals: int = 4) -> dict[str, object]:
        return {
            "mark": self.mark,
            "entropy": np.round(self.entropy, decimals).tolist(),
            "diagonal": np.round(self.diagonal, decimals).tolist(),
            "mark_share": np.round(self.mark_share, decimals).tolist(),
        }


def head_statistics(maps: Sequence[np.ndarray], kind: str) -> HeadStatistics:
    """The statistics of `kind`'s ("encoder", "decoder" or "cross") maps of one or more
    sentences, each (L, H, R, C) over the raw tokens: every row of every sentence counts once."""
    if kind not in MARKS:
        raise ValueError(f"kind must be one of {', '.join(MARKS)}, not {kind!r}")
    entropy, readable, diagonal, mark, rows = 0.0, 0.0, 0.0, 0.0, 0
    for weights in maps:
        weights = np.asarray(weights, dtype=np.float64)
        count, columns = weights.shape[2:]
        keys = np.arange(1, count + 1) if kind == "decoder" else np.full(count, columns)  # (R,) keys a row may read
        spread = keys > 1
        row_entropy = -(weights * np.log(np.where(weights > 0, weights, 1.0))).sum(axis=-1)  # (L, H, R)
        entropy = entropy + (row_entropy[..., spread] / np.log(keys[spread])).sum(axis=-1)
        readable += int(spread.sum())
        centre = np.arange(count) * ((columns - 1) / (count - 1) if count > 1 else 0.0)  # (R,)
        near = np.abs(np.arange(columns)[None, :] - centre[:, None]) <= 1.0  # (R, C)
        diagonal = diagonal + (weights * near).sum(axis=(-1, -2))
        mark = mark + weights[..., 0 if kind == "decoder" else -1].sum(axis=-1)
        rows += count
    layers_heads = np.shape(maps[0])[:2] if len(maps) else (0, 0)
    zeros = np.zeros(layers_heads)
    return HeadStatistics(
        entropy=entropy / readable if readable else zeros,
        diagonal=diagonal / rows if rows else zeros,
        mark_share=mark / rows if rows else zeros,
        mark=MARKS[kind],
    )


def block_diagonal(maps: Sequence[np.ndarray]) -> np.ndarray:
    """Sentences' maps, each (L, H, R, C), as one (L, H, ΣR, ΣC) map of the whole text: a
    sentence reads nothing of another."""
    layers, heads = np.shape(maps[0])[:2]
    rows, columns = sum(m.shape[2] for m in maps), sum(m.shape[3] for m in maps)
    whole = np.zeros((layers, heads, rows, columns), dtype=np.float64)
    row = column = 0
    for weights in maps:
        height, width = weights.shape[2:]
        whole[:, :, row : row + height, column : column + width] = weights
        row, column = row + height, column + width
    return whole
