"""The attention maps of a translation, every layer and head (/v1/attention, the model view, /v1/heatmap).

The maps belong to the translation the model actually produced: each sentence's `<s>` +
translation is teacher-forced through the encoder and decoder graphs
(`SearchBackend.teacher_force`, onnxruntime's or torch's), which returns the weights of
every layer and head. Which tokens label the axes: service/routes/attention.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from seq2seq.core.alignment import Alignment, Token, concat
from seq2seq.core.backend import SearchBackend
from seq2seq.core.config import AlignmentOptions
from seq2seq.decoding.texts import TranslatedText
from seq2seq.decoding.translator import TranslationResult
from service.compute.engine import ServedModel
from service.http.errors import APIError

BOS, EOS = "<s>", "</s>"
Kind = Literal["cross", "encoder", "decoder"]


@dataclass
class SentenceMaps:
    """All attention weights of one translated sentence (batch axis removed)."""

    source_pieces: list[str]  # S pieces, without </s>
    target_pieces: list[str]  # T pieces, without </s>
    encoder: np.ndarray  # (E, H, S+1, S+1)
    decoder: np.ndarray  # (L, H, T+1, T+1)
    cross: np.ndarray  # (L, H, T+1, S+1)

    @property
    def encoder_tokens(self) -> list[str]:
        return [*self.source_pieces, EOS]

    @property
    def decoder_inputs(self) -> list[str]:
        return [BOS, *self.target_pieces]

    @property
    def decoder_outputs(self) -> list[str]:
        return [*self.target_pieces, EOS]


def sentence_maps(backend: SearchBackend, result: TranslationResult) -> SentenceMaps:
    """Teacher-force `<s>` + the translation of `result` and keep every layer's weights."""
    src_ids = np.array([[*result.source_ids, backend.eos_id]], dtype=np.int64)  # (1, S+1)
    target_ids = np.array([result.target_ids], dtype=np.int64).reshape(1, -1)  # (1, T)
    maps = backend.teacher_force(src_ids, np.ones_like(src_ids, dtype=np.bool_), target_ids)
    if maps.encoder_self is None or maps.decoder_self is None:
        raise APIError(501, "this model's backend does not expose its attention maps")
    return SentenceMaps(
        result.source_tokens, result.target_tokens, maps.encoder_self[:, 0], maps.decoder_self[:, 0], maps.cross[:, 0]
    )


def check_layer(kind: str, layer: int, layers: int) -> int:
    """`layer` (negative counts from the end) as 0-based, or a 400 naming the range."""
    if not -layers <= layer < layers:
        raise APIError(
            400,
            f"layer {layer} is out of range: the model has {layers} {kind} layers "
            f"(0..{layers - 1}, or negative from the end)",
        )
    return layer % layers


def self_attention_alignment(
    model: ServedModel, translated: TranslatedText, kind: Kind, layer: int | None, heads: tuple[int, ...]
) -> Alignment:
    """An encoder or decoder self-attention map of a whole text, shaped as an `Alignment`
    for seq2seq.analysis.heatmap: columns = keys, rows = queries, sentences block-diagonal, no links.

    `layer` None = the last layer; `heads` () = the mean of all heads.
    """
    backend = model.translator.backend
    parts = []
    for result in translated.results:
        maps = sentence_maps(backend, result)
        weights, tokens = (
            (maps.encoder, maps.encoder_tokens) if kind == "encoder" else (maps.decoder, maps.decoder_inputs)
        )
        index = check_layer(kind, -1 if layer is None else layer, weights.shape[0])
        chosen = weights[index][list(heads)] if heads else weights[index]  # (h, Q, K)
        labels = [Token(t, 0, 0) for t in tokens]
        parts.append(
            (
                Alignment("subword", labels, labels, chosen.mean(axis=0).astype(np.float64), [], index, heads, False),
                0,
                0,
            )
        )
    return concat(parts, AlignmentOptions("subword", parts[0][0].layer if parts else 0, heads, False))
