"""Training examples: a split tokenized, the epoch's sample, length-bucketed batches, each
batch as it is read (subword sampling, target-term hints), word dropout, the padded
tensors of one batch, and the plan of every step's batch, prepared in the training process
or in worker processes.

Everything here is deterministic in (seed, epoch) or draws from torch's RNG, which
checkpoints save: that is what makes resume exact. A batch prepared in a worker process
draws from that worker's RNG, seeded afresh for each step, so it is deterministic in
(seed, step) instead.
"""

from __future__ import annotations

import multiprocessing
import random
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import sentencepiece as spm
import torch

from data.prepare import Pair, read_pairs
from data.tokenizer import Tokenizer
from seq2seq.core.config import ModelConfig, TrainConfig
from seq2seq.core.hints import HintedSource
from seq2seq.training.hint_data import HintSampler

Example = tuple[list[int], list[int]]  # (source ids + EOS, target ids), no BOS/EOS on target
Pieces = tuple[list[str], list[tuple[int, int]]]  # piece names and character offsets
BatchPieces = tuple[Pieces, Pieces]  # (source, target), EOS excluded


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


@dataclass
class BatchExample:
    """One example as a batch reads it."""

    line: int  # its line of train.tsv (guided alignment's links, hint candidates)
    source: list[int]  # the model's input ids + EOS (hints inserted, when any were drawn)
    target: list[int]  # no BOS/EOS
    pieces: BatchPieces | None = None  # the sampled pieces, with offsets (None: the stored tokenization)
    hinted: HintedSource | None = None  # the source with its hints (None: none drawn)


class BatchReader:
    """Reads a batch's examples: as stored, or with the subword segmentation sampled afresh
    (Kudo 2018, SentencePiece's `enable_sampling` with `alpha`, both sides) and with a draw
    of target-term hints (`HintSampler`). Deterministic in (seed, step) and torch's RNG, so a
    resumed run reads its batches the same way."""

    def __init__(
        self,
        examples: list[Example],
        lines: list[int],
        pairs: list[Pair],
        tokenizer: Tokenizer,
        max_length: int,
        subword_alpha: float = 0.0,
        hints: HintSampler | None = None,
        seed: int = 1,
    ):
        self.examples, self.lines, self.pairs, self.tokenizer = examples, lines, pairs, tokenizer
        self.max_length, self.subword_alpha, self.hints, self.seed = max_length, subword_alpha, hints, seed

    @property
    def plain(self) -> bool:
        return self.subword_alpha <= 0 and self.hints is None

    def read(self, indices: list[int], step: int) -> list[BatchExample]:
        if self.subword_alpha > 0:
            spm.set_random_generator_seed(self.seed * 1_000_003 + step)
        return [self._one(index) for index in indices]

    def _one(self, index: int) -> BatchExample:
        line = self.lines[index]
        source, target = self.examples[index]
        pieces = None
        if self.subword_alpha > 0:
            pair = self.pairs[line]
            sampled = [self._sampled(text) for text in (pair.source, pair.target)]
            if all(0 < len(ids) < self.max_length for ids, _, _ in sampled):
                (source_ids, *source_pieces), (target_ids, *target_pieces) = sampled
                source, target = source_ids + [source[-1]], target_ids
                pieces = (tuple(source_pieces), tuple(target_pieces))
        drawn = self.hints.draw(line) if self.hints is not None else []
        if not drawn:
            return BatchExample(line, source, target, pieces)
        _, offsets = pieces[0] if pieces is not None else self._offsets(line)
        if len(offsets) != len(source) - 1:  # a truncated source: read it plain
            return BatchExample(line, source, target, pieces)
        hinted = self.hints.insert(source[:-1], offsets, drawn)
        if len(hinted.ids) + 1 > self.max_length:
            return BatchExample(line, source, target, pieces)
        return BatchExample(line, hinted.ids + [source[-1]], target, pieces, hinted)

    def _sampled(self, text: str) -> tuple[list[int], list[str], list[tuple[int, int]]]:
        mapping = self.tokenizer.sp.encode(
            text, out_type="offset_mapping", enable_sampling=True, alpha=self.subword_alpha, nbest_size=-1
        )
        return list(mapping["ids"]), list(mapping["pieces"]), [(s, e) for s, e in mapping["offsets"]]

    def _offsets(self, line: int) -> tuple[list[str], list[tuple[int, int]]]:
        _, names, offsets = self.tokenizer.encode_with_offsets(self.pairs[line].source)
        return names, offsets


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


# --------------------------------------------------------------------------- every step's batch


Planned = tuple[int, int, int, list[int]]  # step, epoch, batches of the epoch read once it is, example indices


class BatchPlan(torch.utils.data.Sampler[Planned]):
    """Every step's batch from a run's state on, epoch after epoch (the loader's keys; it never
    ends). Under torchrun each rank takes every world-th batch of the same order, and an epoch
    keeps a batch count that divides evenly. The next epoch's batches are planned in a thread
    while this one's are read: on the real data an epoch's plan is ~1.3 s of CPU (sampling
    the phrases, sorting by length), which in one piece would stall the GPU once an epoch."""

    def __init__(
        self, examples: list[Example], phrases: list[bool], config: TrainConfig, state: dict, rank: int, world: int
    ):
        super().__init__()
        self.examples, self.phrases, self.config, self.rank, self.world = examples, phrases, config, rank, world
        self.step, self.epoch, self.batch_in_epoch = state["step"], state["epoch"], state["batch_in_epoch"]

    def batches(self, epoch: int) -> list[list[int]]:
        config, world = self.config, self.world
        chosen = epoch_examples(self.examples, self.phrases, config.phrase_share, config.seed, epoch)
        batches = make_batches(self.examples, config.max_tokens, config.seed, epoch, chosen)
        batches = batches[len(batches) % world :] if world > 1 else batches  # equal count per rank
        if len(batches) < world:
            raise ValueError(f"an epoch makes {len(batches)} batches for {world} processes: too little data")
        return batches

    def __iter__(self) -> Iterator[Planned]:
        step, epoch, start = self.step, self.epoch, self.batch_in_epoch
        ahead = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batch-plan")
        try:
            upcoming = ahead.submit(self.batches, epoch)
            while True:
                batches, upcoming = upcoming.result(), ahead.submit(self.batches, epoch + 1)
                for number in range(start, len(batches) // self.world):
                    step += 1
                    yield step, epoch, number + 1, batches[number * self.world + self.rank]
                epoch, start = epoch + 1, 0
        finally:
            ahead.shutdown(wait=False, cancel_futures=True)


class GoldRows(Protocol):
    """What makes a batch's guided-alignment rows: `seq2seq.training.guided.GuidedAlignment`
    (which reads `BatchExample` from here)."""

    def targets(self, batch: list[BatchExample]) -> torch.Tensor: ...


@dataclass
class PreparedBatch:
    """One step's batch as the model reads it, made on the host."""

    step: int
    epoch: int
    batch_in_epoch: int  # batches of this epoch read once this one is (what a checkpoint resumes from)
    src: torch.Tensor  # (B, S) source ids + EOS, word dropout applied
    tgt_in: torch.Tensor  # (B, T) BOS + target, word dropout applied
    tgt_out: torch.Tensor  # (B, T) target + EOS
    tokens: int  # real tokens of tgt_out: counted here, so the training loop need not ask the GPU
    gold: torch.Tensor | None = None  # (B, T, S) guided-alignment rows (`GuidedAlignment.targets`)

    def pin_memory(self) -> PreparedBatch:
        """Page-locked copies, which the DataLoader's pinning thread asks for: the copy to the
        GPU then runs asynchronously (`non_blocking=True`)."""
        pinned = {name: getattr(self, name).pin_memory() for name in ("src", "tgt_in", "tgt_out")}
        return replace(self, gold=self.gold.pin_memory() if self.gold is not None else None, **pinned)


class BatchPreparer(torch.utils.data.Dataset):
    """Makes a planned batch (`BatchPlan`'s items) into a `PreparedBatch`: read (subword
    sampling, hints), padded, word dropout, guided-alignment rows. A map-style dataset keyed by
    the plan's items, so a DataLoader's workers can make them. `reseed`: reseed torch's RNG
    from (reseed, step) before each batch, as a worker process must (its RNG is not the
    training process's, which checkpoints save); None: draw from the RNG as it stands."""

    def __init__(
        self,
        reader: BatchReader,
        config: ModelConfig,
        word_dropout: float,
        guided: GoldRows | None = None,
        reseed: int | None = None,
    ):
        self.reader, self.config, self.word_dropout, self.guided, self.reseed = (
            reader,
            config,
            word_dropout,
            guided,
            reseed,
        )

    def __getitem__(self, planned: Planned) -> PreparedBatch:
        step, epoch, batch_in_epoch, indices = planned
        if self.reseed is not None:
            torch.manual_seed(self.reseed * 1_000_003 + step)
        batch = self.reader.read(indices, step)
        src, tgt_in, tgt_out = collate([(b.source, b.target) for b in batch], range(len(batch)), self.config)
        tokens = int((tgt_out != self.config.pad_id).sum())
        src = drop_words(src, self.word_dropout, self.config)
        tgt_in = drop_words(tgt_in, self.word_dropout, self.config)
        gold = self.guided.targets(batch) if self.guided is not None else None
        return PreparedBatch(step, epoch, batch_in_epoch, src, tgt_in, tgt_out, tokens, gold)


def prepared_batches(
    preparer: BatchPreparer, plan: BatchPlan, workers: int, pin_memory: bool = False
) -> Iterator[PreparedBatch]:
    """The plan's batches in order, made here (`workers` 0) or by that many worker processes,
    several batches ahead of the training step (a GPU step is shorter than a batch's host
    work: reading, hints and guided rows take ~0.1-0.2 s at 25k tokens). Workers are forked,
    so they share the examples instead of pickling them."""
    if workers <= 0:
        return (preparer[planned] for planned in plan)
    methods = multiprocessing.get_all_start_methods()
    loader = torch.utils.data.DataLoader(
        preparer,
        sampler=plan,
        batch_size=None,
        num_workers=workers,
        pin_memory=pin_memory,
        prefetch_factor=4,
        multiprocessing_context="fork" if "fork" in methods else None,
    )
    return iter(loader)
