"""Training examples: a split tokenized, the epoch's sample, length-bucketed batches,
word dropout and the padded tensors of one batch.

Everything here is deterministic in (seed, epoch) or draws from torch's RNG, which
checkpoints save: that is what makes resume exact.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch

from data.prepare import read_pairs
from data.tokenizer import Tokenizer
from seq2seq.core.config import ModelConfig

Example = tuple[list[int], list[int]]  # (source ids + EOS, target ids), no BOS/EOS on target


def load_examples(
    path: Path,
    tokenizer: Tokenizer,
    max_length: int,
    upsample_sentences: int = 1,
    lines: list[int] | None = None,
    phrases: list[bool] | None = None,
) -> list[Example]:
    """Tokenize a split; sentence pairs are repeated `upsample_sentences` times.

    Empty and over-long pairs are dropped, so examples and lines of `path` do not
    correspond one to one: when `lines` is given, it receives the 0-based line of every
    example (what keeps guided alignment line-aligned with its Pharaoh file); `phrases`
    receives whether each example is a dictionary phrase pair.
    """
    pairs = read_pairs(path)
    sources = tokenizer.encode_batch([p.source for p in pairs])
    targets = tokenizer.encode_batch([p.target for p in pairs])
    examples = []
    for number, (pair, src, tgt) in enumerate(zip(pairs, sources, targets)):
        if not src or not tgt or len(src) + 1 > max_length or len(tgt) + 1 > max_length:
            continue
        repeat = upsample_sentences if pair.kind == "sentence" else 1
        examples.extend([(src + [tokenizer.sp.eos_id()], tgt)] * repeat)
        if lines is not None:
            lines.extend([number] * repeat)
        if phrases is not None:
            phrases.extend([pair.kind != "sentence"] * repeat)
    return examples


def epoch_examples(examples: list[Example], phrases: list[bool], share: float, seed: int, epoch: int) -> list[int]:
    """Indices of the examples one epoch trains on: every sentence, plus phrase pairs drawn
    from the whole pool until they make up `share` of the epoch's target tokens (all
    phrases when share is 0). Deterministic in (seed, epoch), so a resumed run sees the
    same epoch; each epoch draws a different sample, so a large pool is covered over time."""
    sentences = [i for i, phrase in enumerate(phrases) if not phrase]
    pool = [i for i, phrase in enumerate(phrases) if phrase]
    if share <= 0 or not pool:
        return list(range(len(examples)))
    budget = share / (1.0 - share) * sum(len(examples[i][1]) + 1 for i in sentences)
    random.Random(seed * 7_919 + epoch).shuffle(pool)
    chosen, tokens = [], 0
    for index in pool:
        if tokens >= budget:
            break
        chosen.append(index)
        tokens += len(examples[index][1]) + 1
    return sentences + chosen


def make_batches(
    examples: list[Example], max_tokens: int, seed: int, epoch: int, indices: list[int] | None = None
) -> list[list[int]]:
    """Length-bucketed batches of example indices, at most `max_tokens` padded tokens each.

    Sort by (target, source) length within a shuffled order so padding is small, cut into
    batches by padded size, then shuffle the batches. Deterministic in (seed, epoch).
    `indices` restricts the batches to those examples (default: all).
    """
    rng = random.Random(seed * 100_003 + epoch)
    order = list(range(len(examples))) if indices is None else list(indices)
    rng.shuffle(order)
    order.sort(key=lambda i: (len(examples[i][1]), len(examples[i][0])))
    batches, current, longest = [], [], 0
    for index in order:
        src, tgt = examples[index]
        length = max(len(src), len(tgt) + 1)
        if current and max(longest, length) * (len(current) + 1) * 2 > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(index)
        longest = max(longest, length)
    if current:
        batches.append(current)
    rng.shuffle(batches)
    return batches


def drop_words(ids: torch.Tensor, rate: float, config: ModelConfig) -> torch.Tensor:
    """Word dropout (Sennrich & Zhang 2019): each real token (not pad, BOS or EOS) becomes
    <unk> with probability `rate`. Uses torch's RNG, which checkpoints save, so resume is exact."""
    if rate <= 0:
        return ids
    special = (ids == config.pad_id) | (ids == config.bos_id) | (ids == config.eos_id)
    dropped = (torch.rand(ids.shape) < rate) & ~special
    return ids.masked_fill(dropped, config.unk_id)


def collate(examples: list[Example], indices: list[int], config: ModelConfig) -> tuple[torch.Tensor, ...]:
    """-> src (B, S), decoder input BOS+y (B, T), decoder target y+EOS (B, T)."""
    batch = [examples[i] for i in indices]
    s = max(len(src) for src, _ in batch)
    t = max(len(tgt) for _, tgt in batch) + 1
    src = torch.full((len(batch), s), config.pad_id, dtype=torch.long)
    tgt_in = torch.full((len(batch), t), config.pad_id, dtype=torch.long)
    tgt_out = torch.full((len(batch), t), config.pad_id, dtype=torch.long)
    for row, (source, target) in enumerate(batch):
        src[row, : len(source)] = torch.tensor(source)
        tgt_in[row, : len(target) + 1] = torch.tensor([config.bos_id] + target)
        tgt_out[row, : len(target) + 1] = torch.tensor(target + [config.eos_id])
    return src, tgt_in, tgt_out
