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
    return np.argsort(-key, kind="stable")


def channel_scores(
    backend: SearchBackend, tokenizer: Tokenizer, source: str, candidates: Sequence[str], max_pieces: int = 250
) -> np.ndarray:
    """log P(source | candidate) per source piece (EOS included) for each candidate (n,),
    read by teacher-forcing the reverse direction's model (`backend`, `tokenizer`: the
    en-de model for a de-en translation): one encoder and one decoder run for all n."""
    produced = [*tokenizer.encode(source)[: max_pieces - 1], backend.eos_id]  # each step's piece, EOS last
    readings = [tokenizer.encode(c)[: max_pieces - 1] + [backend.eos_id] for c in candidates]
    src_ids, src_mask = pad_batch(readings, backend.pad_id)
    targets = np.array([produced[:-1]] * len(candidates), dtype=np.int64)
    log_probs = backend.teacher_force(src_ids, src_mask, targets).log_probs  # (n, T+1, V)
    return log_probs[:, np.arange(len(produced)), produced].mean(axis=1).astype(np.float64)


def rerank_hypotheses(
    hypotheses: list[Hypothesis],
    source: str,
    options: RerankOptions,
    tokenizer: Tokenizer,
    channel: tuple[SearchBackend, Tokenizer] | None,
    keep: int,
) -> list[Hypothesis]:
    """One source's n-best `hypotheses` (the search's order) reordered by `options`, the first
    `keep`. `tokenizer` decodes the hypotheses; `channel`, the reverse direction's backend and
    tokenizer, scores them for the channel modes (ValueError without it)."""
    if options.mode == "none" or len(hypotheses) < 2:
        return hypotheses[:keep]
    texts = [tokenizer.decode(h.tokens) for h in hypotheses]
    scores = np.array([h.score for h in hypotheses])
    reverse = None
    if options.uses_channel:
        if channel is None:
            raise ValueError(f"rerank mode {options.mode!r} needs the reverse direction's model as a channel")
        reverse = channel_scores(channel[0], channel[1], source, texts)
    return [hypotheses[int(i)] for i in rerank_order(texts, scores, options, reverse)[:keep]]
