"""Guided alignment: one cross-attention head trained into a word aligner.

Garg et al. 2019 ("Jointly Learning to Align and Translate with Transformer Models"): one
cross-attention head is trained, together with translation, to put its attention where
a word aligner (eflomal, export/eflomal_baseline.py) links the words.

The rule from word links to a subword target, per training pair:
  * words are `seq2seq.core.alignment.words()` of the pair's texts (eflomal's tokens); a
    piece belongs to every word its characters overlap (`seq2seq.core.alignment.projection`);
  * the row of target piece t gets a uniform distribution over every source piece of
    every source word linked to a word of piece t; the source EOS column gets nothing.
    With `guided_step_shift` (the default) that row is the decoder step whose *input* is
    piece t (position t + 1, after BOS); without, the step that *produces* piece t;
  * rows with no linked source word (unaligned target words, a bare "▁" piece) are not
    supervised, nor is the BOS-input step (shifted) or the EOS-producing step (unshifted);
  * links outside the sentence's word counts are dropped, and a pair whose pieces
    differ from the training example's (never, with one tokenizer) is not supervised.
The loss is Garg et al.'s cross-entropy between that distribution g and the head's
attention a, -Σ_s g(t, s) log a(t, s), averaged over the supervised rows of the batch,
added to the per-token translation loss with weight `TrainConfig.guided_weight`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from data.prepare import Pair
from data.tokenizer import Tokenizer
from seq2seq.analysis.aer import read_pharaoh
from seq2seq.core.alignment import Token, projection, words
from seq2seq.training.model import Transformer, key_padding_mask
from seq2seq.training.train_data import BatchExample, BatchPieces


class GuidedAlignment:
    """Word links of the training lines, and the attention rows they ask of the head."""

    def __init__(self, path: Path, pairs: list[Pair], lines: list[int], tokenizer: Tokenizer, step_shift: bool = True):
        self.links = read_pharaoh(path)
        self.step_shift = step_shift
        if len(self.links) != len(pairs):
            raise ValueError(
                f"{path}: {len(self.links)} alignment lines for {len(pairs)} training lines; the "
                "Pharaoh file must have one line per line of train.tsv"
            )
        self.pairs, self.lines, self.tokenizer = pairs, lines, tokenizer

    def distribution(
        self, line: int, n_source: int, n_target: int, pieces: BatchPieces | None = None
    ) -> np.ndarray | None:
        """(n_target, n_source + 1) gold attention of one training line (+ its EOS column),
        zero rows where a piece is not supervised; None when the pieces do not match.

        `pieces`: the (source, target) pieces with character offsets the example was read as
        (subword sampling, `TrainConfig.subword_alpha`); None: the pair's own tokenization."""
        pair = self.pairs[line]
        if pieces is None:
            pieces = tuple(self.tokenizer.encode_with_offsets(text)[1:] for text in (pair.source, pair.target))
        projected = []
        for text, (names, offsets), expected in zip((pair.source, pair.target), pieces, (n_source, n_target)):
            if len(names) != expected:
                return None
            projected.append(projection([Token(n, s, e) for n, (s, e) in zip(names, offsets)], words(text)) > 0)
        source_of, target_of = projected  # (S, Sw), (T, Tw) bool
        linked = np.zeros((target_of.shape[1], source_of.shape[1]), dtype=bool)  # (Tw, Sw)
        for i, j in self.links[line]:
            if i < linked.shape[1] and j < linked.shape[0]:
                linked[j, i] = True
        # piece t -> its words -> their linked source words -> those words' pieces
        rows = (target_of.astype(np.int64) @ linked.astype(np.int64)) > 0  # (T, Sw)
        mass = (rows.astype(np.int64) @ source_of.T.astype(np.int64)) > 0  # (T, S)
        gold = np.zeros((n_target, n_source + 1), dtype=np.float32)
        counts = mass.sum(axis=1, keepdims=True)
        gold[:, :n_source] = np.divide(mass, counts, out=np.zeros(mass.shape), where=counts > 0)
        return gold

    def targets(self, batch: list[BatchExample]) -> torch.Tensor:
        """(B, T, S) gold rows for a batch laid out as `collate` lays it out (T = longest
        target + 1 for the EOS step, S = longest source with its EOS). A hinted source's
        hint positions get no gold mass: the head aligns the user's words."""
        s = max(len(example.source) for example in batch)
        t = max(len(example.target) for example in batch) + 1
        gold = np.zeros((len(batch), t, s), dtype=np.float32)
        for row, example in enumerate(batch):
            hinted = example.hinted
            n_user = len(example.source) - 1 if hinted is None else hinted.user_pieces
            found = self.distribution(example.line, n_user, len(example.target), example.pieces)
            if found is None:
                continue
            if hinted is not None and hinted.hinted:
                columns = np.zeros((len(example.target), len(example.source)), dtype=np.float32)
                columns[:, hinted.user_positions] = found[:, :n_user]
                columns[:, -1] = found[:, -1]
                found = columns
            first = 1 if self.step_shift else 0  # decoder position 0 reads BOS
            gold[row, first : first + len(example.target), : len(example.source)] = found
        return torch.from_numpy(gold)


class GuidedForward(torch.nn.Module):
    """The training pass that also returns the guided head's cross-attention.

    A module (not a function) so that DistributedDataParallel can wrap it; it holds the
    model, whose state dict and checkpoints are unchanged. Only the guided layer takes
    the explicit-softmax attention path (`cross_weight_layers`), the others stay fused.
    """

    def __init__(self, model: Transformer, layer: int, head: int):
        super().__init__()
        self.model, self.layer, self.head = model, layer, head

    def forward(self, src_ids: torch.Tensor, tgt_in_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, S), (B, T) -> log-probs (B, T, V), the head's weights (B, T, S)."""
        pad_id = self.model.config.pad_id
        src_key_mask = key_padding_mask(src_ids, pad_id)
        encoded = self.model.encode(src_ids, src_key_mask)
        out = self.model.decode(
            tgt_in_ids,
            encoded.cross_k,
            encoded.cross_v,
            src_key_mask,
            tgt_key_mask=key_padding_mask(tgt_in_ids, pad_id),
            need_cross_weights=True,
            cross_weight_layers=(self.layer,),
        )
        return out.log_probs, out.cross_weights[0][:, self.head]  # (L=1, B, H, T, S) -> (B, T, S)


def guided_loss(weights: torch.Tensor, gold: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy -Σ g log a summed over supervised rows (those with gold mass); their count.

    weights and gold (B, T, S); both results are 0-dim tensors on their device, so a training
    step need not wait for the GPU to read them. Masked columns have a = 0 and g = 0: the
    clamp keeps 0 · log 0 at 0 instead of NaN.
    """
    supervised = gold.sum(dim=-1) > 0  # (B, T)
    entropy = -(gold * weights.clamp_min(1e-9).log()).sum(dim=-1)  # (B, T)
    return torch.where(supervised, entropy, 0.0).sum(), supervised.sum()
