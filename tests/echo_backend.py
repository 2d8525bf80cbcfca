"""The scripted backend of the HTTP tests (test_service.py, test_service_limits.py,
test_attention_endpoint.py) and a TestClient over an engine, with service settings.
"""

from __future__ import annotations

import numpy as np
from fastapi.testclient import TestClient

from seq2seq.core.backend import DecoderCache, StepOutput, TeacherForced
from seq2seq.core.config import ModelConfig
from seq2seq.decoding.forced import teacher_force_by_steps
from service.app import create_app
from service.compute.engine import TranslatorEngine
from service.settings import Settings


class EchoBackend:
    """Copies the source token by token (p = 0.9), attending exactly to the copied position;
    EOS comes only after the last source token.

    The source ids are smuggled through cross_k, which the search expands and reorders
    like real encoder states.
    """

    def __init__(self, vocab_size: int):
        self.config = ModelConfig(
            vocab_size=vocab_size, d_model=8, n_heads=2, d_ff=16, encoder_layers=1, decoder_layers=2, max_positions=64
        )
        self.bos_id, self.eos_id, self.pad_id = 2, 3, 0
        self.cross_per_sentence = False  # the search repeats the cross K/V per beam row
        self.vocab_size = vocab_size

    def encode(self, src_ids: np.ndarray, src_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ids = src_ids.astype(np.float32)[None, :, None, :, None]  # (1, B, 1, S, 1)
        cross = np.broadcast_to(ids, (2, src_ids.shape[0], 2, src_ids.shape[1], 1)).copy()
        return cross, cross

    def step(
        self, tokens, src_mask, cache: DecoderCache, need_attention, top_k=0, need_self_attention=False
    ) -> StepOutput:
        rows, length = tokens.shape[0], cache.cross_k.shape[3]
        position = cache.past_length
        source = cache.cross_k[0, :, 0, :, 0].astype(np.int64)  # (N, S)
        lengths = src_mask.sum(axis=1)
        probs = np.full((rows, self.vocab_size), 0.1 / (self.vocab_size - 1))
        attend = np.minimum(position, lengths - 1)
        wanted = np.where(position < lengths - 1, source[np.arange(rows), attend], self.eos_id)
        probs[:, self.eos_id] = 1e-9  # ends only after the last source token: no short hypotheses
        probs[np.arange(rows), wanted] = 0.9
        weights = np.zeros((2, rows, 2, length), dtype=np.float32)
        weights[:, np.arange(rows), :, attend] = 1.0
        past = np.zeros((2, rows, 2, position + 1, 1), dtype=np.float32)
        return StepOutput(
            np.log(probs).astype(np.float32),
            DecoderCache(cache.cross_k, cache.cross_v, past, past),
            weights if need_attention else None,
        )

    def teacher_force(self, src_ids, src_mask, tgt_ids) -> TeacherForced:
        return teacher_force_by_steps(self, src_ids, src_mask, tgt_ids)


def make_client(engine: TranslatorEngine, **settings: object) -> TestClient:
    return TestClient(create_app(Settings(**settings), engine=engine), raise_server_exceptions=False)
