"""The torch eager backend of the search: a Transformer behind `SearchBackend`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from seq2seq.core.backend import DecoderCache, StepOutput, TeacherForced
from seq2seq.training.model import Transformer, load_model


class TorchBackend:
    """Runs `Transformer.encode` / `decode` under inference mode, numpy in and out."""

    def __init__(self, model: Transformer):
        self.model = model.eval()
        config = model.config
        self.bos_id, self.eos_id, self.pad_id = config.bos_id, config.eos_id, config.pad_id
        self.config = config
        self.cross_per_sentence = False  # the cross K/V are repeated for every beam row

    @classmethod
    def from_directory(cls, directory: Path) -> TorchBackend:
        return cls(load_model(directory))

    @torch.inference_mode()
    def encode(self, src_ids: np.ndarray, src_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        encoded = self.model.encode(torch.from_numpy(src_ids), torch.from_numpy(src_mask))
        return encoded.cross_k.numpy(), encoded.cross_v.numpy()

    @torch.inference_mode()
    def step(
        self,
        tokens: np.ndarray,
        src_mask: np.ndarray,
        cache: DecoderCache,
        need_attention: bool,
        top_k: int = 0,
        need_self_attention: bool = False,
    ) -> StepOutput:
        """tokens (N, 1) at position P = cache.past_length (see `SearchBackend.step`)."""
        first = cache.past_length == 0  # decode's P = 0 is no past at all
        out = self.model.decode(
            torch.from_numpy(np.ascontiguousarray(tokens)),
            torch.from_numpy(cache.cross_k),
            torch.from_numpy(cache.cross_v),
            torch.from_numpy(src_mask),
            None if first else torch.from_numpy(np.ascontiguousarray(cache.self_k)),
            None if first else torch.from_numpy(np.ascontiguousarray(cache.self_v)),
            need_cross_weights=need_attention,
            need_self_weights=need_self_attention,
        )
        log_probs = out.log_probs[:, -1]
        top = log_probs.topk(min(top_k, log_probs.shape[1])) if top_k else None
        return StepOutput(
            log_probs.numpy(),
            DecoderCache(cache.cross_k, cache.cross_v, out.self_k.numpy(), out.self_v.numpy()),
            None if out.cross_weights is None else out.cross_weights[:, :, :, -1].numpy(),
            None if top is None else (top.values.numpy(), top.indices.numpy()),
            None if out.self_weights is None else out.self_weights[:, :, :, -1].float().numpy(),
        )

    @torch.inference_mode()
    def teacher_force(self, src_ids: np.ndarray, src_mask: np.ndarray, tgt_ids: np.ndarray) -> TeacherForced:
        """One `encode` and one `decode` over the whole batch, every attention map kept (see
        `SearchBackend.teacher_force`)."""
        mask = torch.from_numpy(src_mask)
        encoded = self.model.encode(torch.from_numpy(src_ids), mask, need_weights=True)
        bos = np.full((tgt_ids.shape[0], 1), self.bos_id, dtype=np.int64)
        tokens = torch.from_numpy(np.concatenate([bos, tgt_ids.astype(np.int64)], axis=1))  # (B, T+1)
        out = self.model.decode(
            tokens,
            encoded.cross_k,
            encoded.cross_v,
            mask,
            tgt_key_mask=tokens != self.pad_id,
            need_cross_weights=True,
            need_self_weights=True,
        )
        assert encoded.self_weights is not None and out.cross_weights is not None and out.self_weights is not None
        return TeacherForced(
            log_probs=out.log_probs.float().numpy(),
            cross=out.cross_weights.float().numpy(),
            encoder_self=torch.stack(encoded.self_weights).float().numpy(),
            decoder_self=out.self_weights.float().numpy(),
        )
