"""An ensemble of models that share a vocabulary, behind the one `SearchBackend`.

Each step averages the members' next-piece probabilities (log-mean-exp of their log-probs),
the classic ensemble of NMT systems (Sutskever et al. 2014; Sennrich et al. 2016 shipped
theirs this way). The members' caches are stacked on the layer axis of the one
`DecoderCache` (member 0's layers first, then member 1's, ...), so the beam search moves
every member's rows with the same `reorder` and needs no change at all.

The alignment map is the `alignment` member's own head: its config is the ensemble's, its
cross-attention the search reads (coverage penalty) and the translator turns into the word
map, and a teacher-forced pass gives its maps beside the averaged log-probs.

Members must read the same source pieces and write into one vocabulary: their SentencePiece
models agree on every id the smaller ones have (a model taught hints appends the two hint
pieces, so stage 7's 8,000 pieces are the first 8,000 of stage 10's). The ensemble writes only
pieces every member knows (`vocab_size`, the smallest), and a source piece a member cannot
read (a hint piece, for a member trained without hints) is refused with a clear error.

An ensemble is served from a directory holding `ensemble.json` (`seq2seq.runtime.bundle.
read_ensemble`), which `seq2seq.loading.load_translator` loads like a bundle.

Torch-free; any `SearchBackend` can be a member (the onnxruntime one when serving).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from seq2seq.core.backend import DecoderCache, SearchBackend, StepOutput, TeacherForced
from seq2seq.core.config import ModelConfig


class EnsembleError(ValueError):
    """Members that cannot be searched together, or a source a member cannot read."""


def log_mean_exp(log_probs: Sequence[np.ndarray]) -> np.ndarray:
    """Members' log-probs, each (..., V), -> the log of their mean probability (..., V):
    log (1/M sum_m exp(lp_m)), computed stably. A piece that some member rules out (-inf)
    keeps the others' share."""
    stacked = np.stack(log_probs)  # (M, ..., V)
    peak = stacked.max(axis=0)
    safe_peak = np.where(np.isfinite(peak), peak, 0.0)
    with np.errstate(divide="ignore"):
        mean = np.log(np.exp(stacked - safe_peak).mean(axis=0))
    return (mean + safe_peak).astype(np.float32)


class EnsembleBackend:
    """`SearchBackend` over `members` whose next-piece probabilities are averaged.

    `alignment`: the index of the member whose config (alignment layer and heads, special
    ids, languages) and attention maps the ensemble reports. Raises EnsembleError when the
    members disagree on what the search relies on: special ids, heads, head size, the cross
    K/V layout (`cross_per_sentence`), the languages.
    """

    def __init__(self, members: Sequence[SearchBackend], alignment: int = 0):
        if len(members) < 2:
            raise EnsembleError(f"an ensemble needs at least two members, not {len(members)}")
        if not 0 <= alignment < len(members):
            raise EnsembleError(f"alignment member {alignment} is not one of the {len(members)} members")
        self.members = list(members)
        self.alignment = alignment
        lead = self.members[alignment]
        self.config: ModelConfig = lead.config
        self.bos_id, self.eos_id, self.pad_id = lead.bos_id, lead.eos_id, lead.pad_id
        self.cross_per_sentence = lead.cross_per_sentence
        problems = [
            f"member {index}: {what}"
            for index, member in enumerate(self.members)
            for what in _disagreements(lead, member)
        ]
        if problems:
            raise EnsembleError("members cannot be searched together: " + "; ".join(problems))
        # Where each member's layers sit in the stacked cache: member m owns [start, stop).
        bounds = np.cumsum([0] + [m.config.decoder_layers for m in self.members])
        self.layers = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
        # The pieces every member can write: the smallest vocabulary.
        self.vocab_size = min(m.config.vocab_size for m in self.members)

    def _member_cache(self, cache: DecoderCache, index: int) -> DecoderCache:
        """Member `index`'s part of the stacked cache: views of its layers, no copy."""
        layers = self.layers[index]
        return DecoderCache(cache.cross_k[layers], cache.cross_v[layers], cache.self_k[layers], cache.self_v[layers])

    def _fit(self, log_probs: np.ndarray) -> np.ndarray:
        """A member's (..., V_m) log-probs as (..., V) of the lead's vocabulary, every piece past
        the smallest vocabulary ruled out."""
        width = self.config.vocab_size
        out = np.full((*log_probs.shape[:-1], width), -np.inf, dtype=np.float32)
        out[..., : self.vocab_size] = log_probs[..., : self.vocab_size]
        return out

    def _check_source(self, src_ids: np.ndarray) -> None:
        for index, member in enumerate(self.members):
            if src_ids.size and int(src_ids.max()) >= member.config.vocab_size:
                raise EnsembleError(
                    f"ensemble member {index} has no piece {int(src_ids.max())} (a hint piece: it was trained "
                    "without hints); translate without a glossary and dictionary hints"
                )

    def encode(self, src_ids: np.ndarray, src_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """src_ids (B, S), src_mask (B, S) bool -> every member's cross K and V stacked on the
        layer axis, each (sum of L_m, B, H, S, Dh) (K in the members' common layout)."""
        self._check_source(src_ids)
        encoded = [member.encode(src_ids, src_mask) for member in self.members]
        try:
            return np.concatenate([k for k, _ in encoded]), np.concatenate([v for _, v in encoded])
        except ValueError as error:  # a member whose keys are laid out otherwise (an older export)
            raise EnsembleError(f"the members' cross K/V differ in layout ({error}); re-export them") from error

    def step(
        self,
        tokens: np.ndarray,
        src_mask: np.ndarray,
        cache: DecoderCache,
        need_attention: bool,
        top_k: int = 0,
        need_self_attention: bool = False,
    ) -> StepOutput:
        """tokens (N, 1) -> the members' averaged log-probs (N, V), the stacked cache extended
        by every member, and the alignment member's cross-attention (L_a, N, H, S) and
        self-attention when asked. `top` is left None: the search ranks the averaged row."""
        outputs = []
        for index, member in enumerate(self.members):
            lead = index == self.alignment
            outputs.append(
                member.step(
                    tokens,
                    src_mask,
                    self._member_cache(cache, index),
                    need_attention and lead,
                    need_self_attention=need_self_attention and lead,
                )
            )
        lead = outputs[self.alignment]
        extended = DecoderCache(
            cache.cross_k,
            cache.cross_v,
            np.concatenate([o.cache.self_k for o in outputs]),
            np.concatenate([o.cache.self_v for o in outputs]),
        )
        log_probs = log_mean_exp([self._fit(o.log_probs) for o in outputs])
        return StepOutput(log_probs, extended, lead.cross_weights, None, lead.self_weights)

    def teacher_force(self, src_ids: np.ndarray, src_mask: np.ndarray, tgt_ids: np.ndarray) -> TeacherForced:
        """The averaged log-probs (B, T+1, V) of the given targets, with the alignment member's
        attention maps."""
        self._check_source(src_ids)
        forced = [member.teacher_force(src_ids, src_mask, tgt_ids) for member in self.members]
        lead = forced[self.alignment]
        log_probs = log_mean_exp([self._fit(f.log_probs) for f in forced])
        return TeacherForced(log_probs, lead.cross, lead.encoder_self, lead.decoder_self)


def _disagreements(lead: SearchBackend, member: SearchBackend) -> list[str]:
    """What in `member` keeps it from being searched beside `lead`."""
    a, b = lead.config, member.config
    checks = [
        ("special ids", (lead.bos_id, lead.eos_id, lead.pad_id), (member.bos_id, member.eos_id, member.pad_id)),
        ("unknown piece id", a.unk_id, b.unk_id),
        ("heads", a.n_heads, b.n_heads),
        ("head size", a.d_model // a.n_heads, b.d_model // b.n_heads),
        ("cross K/V per sentence", lead.cross_per_sentence, member.cross_per_sentence),
        ("languages", (a.source_lang, a.target_lang), (b.source_lang, b.target_lang)),
    ]
    return [f"{name} {theirs} against {ours}" for name, ours, theirs in checks if ours != theirs]
