"""Source occlusion (leave-one-out): how much a given translation relies on each source word.

For a (source, target) pair and each source word w, the target is teacher-forced again on
the source with w's pieces occluded, and the log-probability of every target piece is read
again: drop_t = log p(y_t | x) - log p(y_t | x without w). A word whose translation is in
the target makes its own target pieces much less likely when it is taken away; a word whose
translation was left out barely changes the target, or makes it *more* likely (the decoder
no longer expects the missing translation). Attention alone does not tell the two apart as
well: the target words beside a deleted span still attend to the word it translated. (The
erasure of Li et al. 2016, "Understanding neural networks through representation erasure";
for NMT omissions, cf. Vamvas & Sennrich 2022, contrastive conditioning.)

Two features per source word enter the `untranslated` detector (`seq2seq.analysis.quality`):
`occlusion_drop`, Σ_t drop_t over the target pieces and EOS (signed), and
`log_occlusion_drop_positive`, log(Σ_t max(drop_t, 0) + DROP_FLOOR): how much some pieces
relied on the word, whatever others gained.

Occluding = removing the word's pieces from the source (`OCCLUDE_MODES`: or replacing
them by <unk>, or masking them out of attention). Measured on planted omissions
(docs/quality.md, source occlusion; the shipped model, detector F1 valid-held / gold, seed 1):
remove 71.0 / 72.8, mask 68.6 / 70.1, unk 69.1 / 72.2, attention features alone 65.2 / 67.1
(seed 2: remove 68.4 / 75.0 against 63.1 / 71.0). Those int8 graphs were dynamically
quantized, so their log-probs depended a little on the rest of the batch (~0.02 per piece
between the plain and the occlusion batches); the calibrated int8 graphs shipped since
(export/calibrate.py) do not, and give 71.0 / 72.6 on the same weights, 70.4 / 70.8 on
release stage 5.

Cost: one more teacher-forced row per source word (the target again, on a source one word
shorter; punctuation, never flagged, is skipped), every variant of many pairs batched into
the backend's `teacher_force`: about (source words) x the plain teacher-forced pass. With the
shipped int8 model on 2 busy cores: `crossalign align` of 500 valid pairs 3.0 s -> 16.6 s
(~5.5x), translation with alignment (beam 4) of 150 sentences 2.2 s -> 6.0 s (~2.7x); the
benchmark's 3.8k planted pairs take 16 s plain, + ~65 s for the occlusion of the 2.5k intact
and omission ones. The translator and forced alignment run it only when the model's detector
reads these features (`QualityThresholds.needs_occlusion`) and the quality mode is "thorough"
(the default; "fast" flags with the attention-only detector instead). Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from seq2seq.core.alignment import Alignments, is_punctuation, projection
from seq2seq.core.backend import SearchBackend, Wanted

OCCLUDE_MODES = ("remove", "unk", "mask")
# Padded tokens per teacher-forced batch of occluded rows. Smaller batches are no slower: a
# batch's (B, T+1, V) log-probs cost more than the calls saved (the shipped model on 2 busy
# cores, three runs each: the 990-character sentence of issue 41 3.9-4.8 s at 512 tokens,
# 4.6-6.3 s at 1,024, 7.5-8.7 s at 4,096; 150 valid sentences 2.5-4.3 s at 512, 4.0-9.2 s at
# 4,096), and each batch is a short step (~0.15 s) between which a scheduler can let other
# work run (`wanted`).
OCCLUSION_BATCH_TOKENS = 512
OCCLUSION_FEATURES = ("occlusion_drop", "log_occlusion_drop_positive")
DROP_FLOOR = 0.1  # log(positive drop + floor): a word nothing relied on is not -inf

# One pair to occlude: source ids with the source EOS, target ids without BOS/EOS, and per
# source word the indices of its pieces into the source ids (`word_pieces`).
Occlusion = tuple[Sequence[int], Sequence[int], Sequence[Sequence[int]]]


def word_pieces(alignments: Alignments) -> list[list[int]]:
    """Per source word of `alignments` (any options), the indices of the source pieces
    overlapping it: the pieces occluded to take the word away. Punctuation gets none (it
    is never flagged, so it is not occluded: ~16% of the words of the valid split)."""
    to_words = projection(alignments.subword.source_tokens, alignments.word.source_tokens)  # (S, Sw)
    return [
        [] if is_punctuation(word.text) else np.flatnonzero(to_words[:, w] > 0).tolist()
        for w, word in enumerate(alignments.word.source_tokens)
    ]


def occluded_source(
    source_ids: Sequence[int], pieces: Sequence[int], mode: str, unk_id: int
) -> tuple[list[int], list[bool]]:
    """The source ids and key mask (True = may attend) with `pieces` occluded."""
    hidden = set(pieces)
    if mode == "remove":
        kept = [t for i, t in enumerate(source_ids) if i not in hidden]
        return kept, [True] * len(kept)
    if mode == "unk":
        return [unk_id if i in hidden else t for i, t in enumerate(source_ids)], [True] * len(source_ids)
    if mode == "mask":
        return list(source_ids), [i not in hidden for i in range(len(source_ids))]
    raise ValueError(f"occlusion mode {mode!r}: expected one of {', '.join(OCCLUDE_MODES)}")


def occluded_log_probs(
    backend: SearchBackend,
    pairs: Sequence[Occlusion],
    mode: str = "remove",
    max_batch_tokens: int = OCCLUSION_BATCH_TOKENS,
    wanted: Wanted | None = None,
) -> list[np.ndarray]:
    """Per pair, (Sw, T+1) float64: the log-prob of each target piece (EOS last) when the
    target is teacher-forced on the source with word w occluded (row w); NaN for a word
    without pieces to occlude (not run).

    Every occluded variant of every pair is one row of a teacher-forced batch; rows are
    sorted by length and batched at most `max_batch_tokens` padded tokens at a time.
    `wanted` () -> (pairs,) bool is asked before every batch, as the search asks it after
    every step (seq2seq.decoding.search): the rows of a pair nobody wants any more are not
    run (its rows stay NaN), and the caller may let other work run in between.
    """
    rows = []  # (pair, word, source ids, source mask, target ids)
    for index, (source_ids, target_ids, groups) in enumerate(pairs):
        for word, pieces in enumerate(groups):
            if not pieces:
                continue
            ids, mask = occluded_source(source_ids, pieces, mode, backend.config.unk_id)
            rows.append((index, word, ids, mask, list(target_ids)))
    out = [np.full((len(groups), len(target_ids) + 1), np.nan) for _, target_ids, groups in pairs]
    rows.sort(key=lambda row: (len(row[4]), len(row[2])))
    start = 0
    while start < len(rows):
        end = start + 1
        while end < len(rows) and (end - start + 1) * max(len(rows[end][2]), len(rows[end][4]) + 1) <= max_batch_tokens:
            end += 1
        batch = rows[start:end]
        if wanted is not None:
            still = wanted()
            batch = [row for row in batch if still[row[0]]]
        for (index, word, *_), log_probs in zip(batch, _force(backend, batch) if batch else []):
            out[index][word] = log_probs
        start = end
    return out


def _force(backend: SearchBackend, rows: list) -> list[np.ndarray]:
    """Teacher-force one batch of occluded rows -> per row (T+1,) log-probs of target + EOS."""
    width, length = max(len(row[2]) for row in rows), max(len(row[4]) for row in rows)
    src_ids = np.full((len(rows), width), backend.pad_id, dtype=np.int64)
    src_mask = np.zeros((len(rows), width), dtype=bool)  # padding: False
    tgt_ids = np.full((len(rows), max(length, 1)), backend.pad_id, dtype=np.int64)
    for n, (_, _, ids, mask, target) in enumerate(rows):
        src_ids[n, : len(ids)], src_mask[n, : len(mask)], tgt_ids[n, : len(target)] = ids, mask, target
    log_probs = backend.teacher_force(src_ids, src_mask, tgt_ids).log_probs  # (B, T+1, V)
    return [
        log_probs[n, np.arange(len(target) + 1), [*target, backend.eos_id]].astype(np.float64)
        for n, (*_, target) in enumerate(rows)
    ]


def occlusion_features(token_log_probs: np.ndarray, occluded: np.ndarray) -> dict[str, np.ndarray]:
    """token_log_probs (T+1,) of the translation as it is, occluded (Sw, T+1) from
    `occluded_log_probs` -> {name: (Sw,)} the `OCCLUSION_FEATURES` of each source word.
    A word that was not occluded (NaN row) dropped nothing."""
    drops = np.asarray(token_log_probs, dtype=np.float64)[None, :] - np.asarray(occluded, dtype=np.float64)
    drops = np.nan_to_num(drops, nan=0.0)
    return {
        "occlusion_drop": drops.sum(axis=1),
        "log_occlusion_drop_positive": np.log(np.maximum(drops, 0.0).sum(axis=1) + DROP_FLOOR),
    }
