"""Reranking a beam's n-best list: the candidates hold far more than the search picks.

Two rules, each usable alone or together (`RerankOptions.mode`):

- **Minimum Bayes risk with chrF** (Kumar & Byrne 2004; Freitag et al. 2022, "High Quality
  Rather than High Model Probability"): the candidate that agrees most, by sentence chrF,
  with the others, each other weighted by the model's belief in it (a softmax of the
  candidates' scores at `temperature`). A consensus translation, not the single likeliest.
- **The reverse model as a channel** (Yee et al. 2019, "Simple and Effective Noisy Channel
  Modeling for NMT"): each candidate's score plus λ times log P(source | candidate) per source
  piece, read by teacher-forcing the other direction's model (the shipped en-de for de-en),
  which penalises a fluent candidate that dropped or invented content.

Together: the channel-adjusted scores are the MBR weights. `RerankOptions` (in
seq2seq/core/config.py, as `DecodeConfig.rerank`) says which. Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from data.tokenizer import Tokenizer
from seq2seq.analysis.chrf import CharNgrams, chrf
from seq2seq.core.backend import SearchBackend
from seq2seq.core.config import RerankOptions
from seq2seq.decoding.search import Hypothesis, pad_batch

# A run of the channel's teacher forcing holds at most this many padded positions (rows x the
# longer of its source and target). Every position writes a whole vocabulary of log-probs, so
# smaller runs stay in cache: with 512 rather than 8192 the batch CLI's default reranking ran at
# 0.58-0.61x the rate of the search alone instead of 0.50-0.55x (docs/performance.md, reranking
# in the batch CLI), the scores the same.
CHANNEL_BATCH_POSITIONS = 512


def mbr_utilities(candidates: Sequence[str], weights: np.ndarray) -> np.ndarray:
    """candidates (n,), weights (n,) summing to 1 -> (n,): each candidate's expected chrF
    against the others, sum over j != i of weights[j] · chrF(candidate i, candidate j),
    renormalised over j != i (a candidate is not its own evidence)."""
    grams = [CharNgrams.of(c) for c in candidates]
    count = len(candidates)
    agreement = np.zeros((count, count))
    for i in range(count):
        for j in range(count):
            if i != j:
                agreement[i, j] = chrf(grams[i], grams[j])
    others = weights[None, :] * (1 - np.eye(count))  # (n, n): row i weighs every j but i
    total = others.sum(axis=1)
    return (agreement * others).sum(axis=1) / np.where(total > 0, total, 1.0)


def softmax(scores: np.ndarray, temperature: float) -> np.ndarray:
    """scores (n,) -> (n,) probabilities of exp(score / temperature)."""
    scaled = np.asarray(scores, dtype=np.float64) / temperature
    scaled -= scaled.max()
    weights = np.exp(scaled)
    return weights / weights.sum()


def rerank_order(
    candidates: Sequence[str], scores: np.ndarray, options: RerankOptions, channel: np.ndarray | None = None
) -> np.ndarray:
    """candidates (n,) with the search's scores (n,) and, for a mode with the channel, each one's
    log P(source | candidate) per piece (n,) -> the candidates' indices, best first.

    Ties keep the search's order (a stable sort), so a list of one, or identical candidates,
    comes back as it was."""
    scores = np.asarray(scores, dtype=np.float64)
    if options.mode == "none" or len(candidates) < 2:
        return np.arange(len(candidates))
    if options.uses_channel:
        if channel is None:
            raise ValueError(f"rerank mode {options.mode!r} needs the channel model's scores")
        scores = scores + options.channel_weight * np.asarray(channel, dtype=np.float64)
    key = mbr_utilities(candidates, softmax(scores, options.temperature)) if options.uses_mbr else scores
    # Rounded: the expected utilities of equal candidates differ in their last bits (the sums run
    # in different orders), and the stable sort must see them as the ties they are.
    return np.argsort(-np.round(key, 9), kind="stable")


def channel_scores(
    backend: SearchBackend, tokenizer: Tokenizer, source: str, candidates: Sequence[str], max_pieces: int = 250
) -> np.ndarray:
    """log P(source | candidate) per source piece (EOS included) for each candidate (n,),
    read by teacher-forcing the reverse direction's model (`backend`, `tokenizer`: the
    en-de model for a de-en translation)."""
    return channel_scores_batch(backend, tokenizer, [source], [candidates], max_pieces)[0]


def channel_scores_batch(
    backend: SearchBackend,
    tokenizer: Tokenizer,
    sources: Sequence[str],
    candidates: Sequence[Sequence[str]],
    max_pieces: int = 250,
    budget: int = CHANNEL_BATCH_POSITIONS,
) -> list[np.ndarray]:
    """`channel_scores` of many sources at once: (n_i,) per source. Every (candidate, source)
    pair is one teacher-forced row; rows sorted by length run together, each run within
    `budget` padded positions, so a batch's candidates cost a few graph runs, not one per
    sentence."""
    rows = []  # (source index, the reverse model's source ids, the pieces it must produce)
    for index, (source, texts) in enumerate(zip(sources, candidates)):
        produced = [*tokenizer.encode(source)[: max_pieces - 1], backend.eos_id]  # EOS last
        rows += [(index, tokenizer.encode(text)[: max_pieces - 1] + [backend.eos_id], produced) for text in texts]
    scores = [np.zeros(len(texts)) for texts in candidates]
    filled = [0] * len(sources)
    slots = []  # each row's place: (source index, candidate index)
    for index, _, _ in rows:
        slots.append((index, filled[index]))
        filled[index] += 1
    width = [max(len(reading), len(produced)) for _, reading, produced in rows]
    order = sorted(range(len(rows)), key=lambda r: width[r])
    start = 0
    while start < len(order):
        end = start + 1
        while end < len(order) and (end - start + 1) * width[order[end]] <= budget:
            end += 1
        run = [rows[r] for r in order[start:end]]
        src_ids, src_mask = pad_batch([reading for _, reading, _ in run], backend.pad_id)
        targets, _ = pad_batch([produced[:-1] for _, _, produced in run], backend.pad_id)
        log_probs = backend.teacher_force(src_ids, src_mask, targets).log_probs  # (R, T+1, V)
        for row, (_, _, produced) in enumerate(run):
            index, slot = slots[order[start + row]]
            scores[index][slot] = float(log_probs[row, np.arange(len(produced)), produced].mean())
        start = end
    return scores


def rerank_batch(
    found: list[list[Hypothesis]],
    sources: list[str],
    options: RerankOptions,
    tokenizer: Tokenizer,
    channel: tuple[SearchBackend, Tokenizer] | None,
    keep: int,
) -> list[list[Hypothesis]]:
    """Each source's n-best hypotheses (the search's order) reordered by `options`, the first
    `keep` of each. `tokenizer` decodes them; `channel`, the reverse direction's backend and
    tokenizer, scores them all in one batch for the channel modes (ValueError without it)."""
    if options.mode == "none":
        return [hypotheses[:keep] for hypotheses in found]
    texts = [[tokenizer.decode(h.tokens) for h in hypotheses] for hypotheses in found]
    reverse: list[np.ndarray | None] = [None] * len(found)
    if options.uses_channel:
        if channel is None:
            raise ValueError(f"rerank mode {options.mode!r} needs the reverse direction's model as a channel")
        reverse = list(channel_scores_batch(channel[0], channel[1], sources, texts))
    out = []
    for hypotheses, candidates, channel_row in zip(found, texts, reverse):
        scores = np.array([h.score for h in hypotheses])
        order = rerank_order(candidates, scores, options, channel_row) if len(hypotheses) > 1 else [0]
        out.append([hypotheses[int(i)] for i in order[:keep]])
    return out
