"""The torch eager backend of the search: a Transformer behind `SearchBackend`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from seq2seq.model import Transformer, load_model
from seq2seq.search import StepOutput


class TorchBackend:
    """Runs `Transformer.encode` / `decode` under inference mode, numpy in and out."""

    def __init__(self, model: Transformer):
        self.model = model.eval()
        config = model.config
        self.bos_id, self.eos_id, self.pad_id = config.bos_id, config.eos_id, config.pad_id
        self.config = config

    @classmethod
    def from_directory(cls, directory: Path) -> "TorchBackend":
        return cls(load_model(directory))

    @torch.inference_mode()
    def encode(self, src_ids: np.ndarray, src_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        encoded = self.model.encode(torch.from_numpy(src_ids), torch.from_numpy(src_mask))
        return encoded.cross_k.numpy(), encoded.cross_v.numpy()

    @torch.inference_mode()
    def step(self, tokens: np.ndarray, cross_k: np.ndarray, cross_v: np.ndarray, src_mask: np.ndarray,
             past_k: np.ndarray | None, past_v: np.ndarray | None, need_attention: bool) -> StepOutput:
        out = self.model.decode(
            torch.from_numpy(np.ascontiguousarray(tokens)), torch.from_numpy(cross_k), torch.from_numpy(cross_v),
            torch.from_numpy(src_mask),
            None if past_k is None else torch.from_numpy(np.ascontiguousarray(past_k)),
            None if past_v is None else torch.from_numpy(np.ascontiguousarray(past_v)),
            need_cross_weights=need_attention)
        return StepOutput(out.log_probs[:, -1].numpy(), out.self_k.numpy(), out.self_v.numpy(),
                          None if out.cross_weights is None else out.cross_weights[:, :, :, -1].numpy())
