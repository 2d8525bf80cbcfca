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

Together: the channel-adjusted scores are the MBR weights. Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from data.tokenizer import Tokenizer
from seq2seq.analysis.chrf import CharNgrams, chrf
from seq2seq.core.backend import SearchBackend
from seq2seq.decoding.forced import teacher_forced_attention

RERANK_MODES = ("none", "mbr", "channel", "mbr+channel")


@dataclass(frozen=True)
class RerankOptions:
    """How a beam's n-best list is reranked; `mode` "none" keeps the search's order."""

    mode: str = "none"
    # The candidates reranked: the search runs with a beam of at least this many and keeps them all.
    candidates: int = 8
    # λ of the channel: score + λ · log P(source | candidate) / (source pieces + 1).
    channel_weight: float = 0.5
    # The MBR weights: softmax(score / temperature) over the candidates; larger is flatter.
    temperature: float = 1.0

    def __post_init__(self) -> None:
        if self.mode not in RERANK_MODES:
            raise ValueError(f"unknown rerank mode {self.mode!r}: choose one of {', '.join(RERANK_MODES)}")
        if not 2 <= self.candidates <= 32:
            raise ValueError(f"rerank candidates must be 2 to 32, not {self.candidates}")
        if self.channel_weight < 0 or self.temperature <= 0:
            raise ValueError("the channel weight must be >= 0 and the temperature > 0")

    @property
    def uses_channel(self) -> bool:
        return self.mode in ("channel", "mbr+channel")

    @property
    def uses_mbr(self) -> bool:
        return self.mode in ("mbr", "mbr+channel")


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
    source_ids = tokenizer.encode(source)[: max_pieces - 1]
    readings = [tokenizer.encode(c)[: max_pieces - 1] + [backend.eos_id] for c in candidates]
    forced = teacher_forced_attention(backend, readings, [source_ids] * len(candidates))
    return np.array([float(log_probs.sum()) / len(log_probs) for _, log_probs in forced])
