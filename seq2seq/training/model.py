"""An encoder-decoder transformer whose cross-attention is the product.

Reads top to bottom: masks, attention, layers, the model. Pre-LN (Xiong et al. 2020) so it
trains without a long warmup; tied embeddings (Press & Wolf 2017) because source and
target share one SentencePiece vocabulary.

Shapes: B batch, S source length, T target length, P past (cached) target length,
D d_model, H heads, Dh head size, L decoder layers, V vocabulary.
Masks are boolean and True means *may attend*.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from data.files import CONFIG_FILE, WEIGHTS_FILE
from seq2seq.core.config import ModelConfig, load_config, save_config

# --------------------------------------------------------------------------- masks


def key_padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """(B, S) ids -> (B, S) bool, True at real tokens."""
    return ids != pad_id


def causal_mask(query_length: int, key_length: int, device: torch.device | None = None) -> Tensor:
    """(T, P+T) bool: query i (at absolute position P+i) may attend keys 0..P+i.

    Built with arange comparisons rather than torch.tril so it exports to ONNX with
    dynamic lengths.
    """
    past = key_length - query_length
    query_positions = torch.arange(query_length, device=device).unsqueeze(1) + past
    key_positions = torch.arange(key_length, device=device).unsqueeze(0)
    return key_positions <= query_positions


# --------------------------------------------------------------------------- attention


def scaled_dot_product(
    q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, need_weights: bool, dropout_p: float = 0.0
) -> tuple[Tensor, Tensor | None]:
    """softmax(QKᵀ/√d_k) V with disallowed scores set to −∞ before the softmax.

    q (B, H, T, Dh), k and v (B, H, S, Dh), allowed broadcastable to (B, H, T, S).
    Returns the context (B, H, T, Dh) and the weights (B, H, T, S) if asked for.
    Without weights the fused kernel runs (same maths, less memory).

    k and v may also hold one source for every G consecutive query rows: q (B·G, H, T, Dh)
    against k and v (B, H, S, Dh), allowed then broadcastable to (B, 1, 1, S). That is a
    sentence's G beams reading its one copy of the cross K/V (`_grouped_by_source`).
    """
    if k.size(0) != q.size(0):
        return _grouped_by_source(q, k, v, allowed, need_weights, dropout_p)
    if not need_weights:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=dropout_p)
        return out, None
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, H, T, S)
    scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(dim=-1)
    out = F.dropout(weights, dropout_p, training=dropout_p > 0) @ v  # (B, H, T, Dh)
    return out, weights


def _grouped_by_source(
    q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, need_weights: bool, dropout_p: float
) -> tuple[Tensor, Tensor | None]:
    """`scaled_dot_product` for q (B·G, H, T, Dh) against k, v (B, H, S, Dh) and allowed
    (B, 1, 1, S): each source's G query rows become G·T query positions of one row, so its K
    and V are read once for all of them (one (G·T, Dh) x (Dh, S) product per source and
    head where there were G (T, Dh) x (Dh, S) ones), and are stored once (docs/performance.md,
    lever 23).
    Outputs as `scaled_dot_product`'s, row for row: (B·G, H, T, Dh) and (B·G, H, T, S).

    Every regrouping is a transpose and a reshape whose only dynamic sizes are B, from
    `allowed` (one tensor for all layers), and B·G, from q's own shape: the exported graph
    then builds each reshape's target once for all layers (export/shapes.py), not from a
    chain of shape kernels per layer and step."""
    heads, head_dim = q.size(1), q.size(3)
    by_row = q.transpose(1, 2)  # (B·G, T, H, Dh), the same memory order as (B, G·T, H, Dh)
    by_source = by_row.reshape(allowed.size(0), -1, heads, head_dim).transpose(1, 2)  # (B, H, G·T, Dh)
    out, weights = scaled_dot_product(by_source, k, v, allowed, need_weights, dropout_p)
    out = out.transpose(1, 2).reshape_as(by_row).transpose(1, 2)
    if weights is not None:  # (B, H, G·T, S) -> (B·G, H, T, S)
        weights = weights.transpose(1, 2).reshape(by_row.size(0), -1, heads, weights.size(3)).transpose(1, 2)
    return out, weights


class MultiHeadAttention(nn.Module):
    """Heads project with W_Q, W_K, W_V, attend, and are joined by W_O. Stores nothing."""

    def __init__(self, d_model: int, n_heads: int, attention_dropout: float):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.attention_dropout = attention_dropout

    def _split_heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, Dh)

    def project_query(self, x: Tensor) -> Tensor:
        """(B, T, D) -> (B, H, T, Dh)."""
        return self._split_heads(self.w_q(x))

    def project_key_value(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(B, S, D) -> keys and values, each (B, H, S, Dh)."""
        return self._split_heads(self.w_k(x)), self._split_heads(self.w_v(x))

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        """Projected q/k/v -> output (B, T, D) after W_O, weights (B, H, T, S) | None."""
        dropout_p = self.attention_dropout if self.training else 0.0
        context, weights = scaled_dot_product(q, k, v, allowed, need_weights, dropout_p)
        b, h, t, dh = context.shape
        return self.w_o(context.transpose(1, 2).reshape(b, t, h * dh)), weights

    def forward(
        self, x: Tensor, context: Tensor, allowed: Tensor, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """Queries from x (B, T, D), keys/values from context (B, S, D)."""
        k, v = self.project_key_value(context)
        return self.attend(self.project_query(x), k, v, allowed, need_weights)


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float):
        super().__init__()
        self.up, self.down, self.dropout = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model), nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.dropout(F.relu(self.up(x))))


# --------------------------------------------------------------------------- layers


class EncoderLayer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.self_attention_norm = nn.LayerNorm(config.d_model)
        self.self_attention = MultiHeadAttention(config.d_model, config.n_heads, config.attention_dropout)
        self.feed_forward_norm = nn.LayerNorm(config.d_model)
        self.feed_forward = FeedForward(config.d_model, config.d_ff, config.dropout)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor, allowed: Tensor, need_weights: bool) -> tuple[Tensor, Tensor | None]:
        """x (B, S, D); allowed (B, 1, 1, S): bidirectional, only padding masked."""
        h = self.self_attention_norm(x)
        attended, weights = self.self_attention(h, h, allowed, need_weights)
        x = x + self.dropout(attended)
        x = x + self.dropout(self.feed_forward(self.feed_forward_norm(x)))
        return x, weights


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.self_attention_norm = nn.LayerNorm(config.d_model)
        self.self_attention = MultiHeadAttention(config.d_model, config.n_heads, config.attention_dropout)
        self.cross_attention_norm = nn.LayerNorm(config.d_model)
        self.cross_attention = MultiHeadAttention(config.d_model, config.n_heads, config.attention_dropout)
        self.feed_forward_norm = nn.LayerNorm(config.d_model)
        self.feed_forward = FeedForward(config.d_model, config.d_ff, config.dropout)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        x: Tensor,
        past_k: Tensor | None,
        past_v: Tensor | None,
        self_allowed: Tensor,
        cross_k: Tensor,
        cross_v: Tensor,
        cross_allowed: Tensor,
        need_self_weights: bool,
        need_cross_weights: bool,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor | None]:
        """One decoder layer over T new positions.

        x (B, T, D); past_k/v (B, H, P, Dh) or None; self_allowed (B|1, 1, T, P+T) causal
        (+ padding); cross_k/v (B, H, S, Dh) computed once per source; cross_allowed
        (B, 1, 1, S). Returns x, the self-attention keys/values (B, H, P+T, Dh) for the
        cache, and the self/cross weights (B, H, T, P+T) / (B, H, T, S) when asked for.
        """
        h = self.self_attention_norm(x)
        k_new, v_new = self.self_attention.project_key_value(h)
        k = k_new if past_k is None else torch.cat([past_k, k_new], dim=2)
        v = v_new if past_v is None else torch.cat([past_v, v_new], dim=2)
        attended, self_weights = self.self_attention.attend(
            self.self_attention.project_query(h), k, v, self_allowed, need_self_weights
        )
        x = x + self.dropout(attended)
        q = self.cross_attention.project_query(self.cross_attention_norm(x))
        attended, cross_weights = self.cross_attention.attend(q, cross_k, cross_v, cross_allowed, need_cross_weights)
        x = x + self.dropout(attended)
        x = x + self.dropout(self.feed_forward(self.feed_forward_norm(x)))
        return x, k, v, self_weights, cross_weights


# --------------------------------------------------------------------------- the model


def sinusoidal_table(max_positions: int, d_model: int) -> Tensor:
    """(max_positions, D) sin/cos position table of Vaswani et al. 2017."""
    position = torch.arange(max_positions, dtype=torch.float32).unsqueeze(1)
    frequency = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(max_positions, d_model)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency)
    return table


@dataclass
class EncoderOutput:
    memory: Tensor  # (B, S, D) final encoder states
    cross_k: Tensor  # (L, B, H, S, Dh) cross-attention keys, every decoder layer
    cross_v: Tensor  # (L, B, H, S, Dh)
    self_weights: list[Tensor] | None  # per encoder layer (B, H, S, S), when asked for


@dataclass
class DecoderOutput:
    log_probs: Tensor  # (B, T, V) log-softmax over the vocabulary
    layer_k: list[Tensor]  # per decoder layer (B, H, P+T, Dh): the KV cache for the next step
    layer_v: list[Tensor]
    cross_weights: Tensor | None  # (L, B, H, T, S): the alignment maps, when asked for
    self_weights: Tensor | None  # (L, B, H, T, P+T), when asked for

    # The cache per layer is what the decoder-step graph passes in and out (stacking it
    # would copy all of it every step); stacked is what the torch callers want.
    @property
    def self_k(self) -> Tensor:
        """(L, B, H, P+T, Dh)."""
        return torch.stack(self.layer_k)

    @property
    def self_v(self) -> Tensor:
        """(L, B, H, P+T, Dh)."""
        return torch.stack(self.layer_v)


class Transformer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_id)
        nn.init.normal_(self.embedding.weight, std=config.d_model**-0.5)
        if config.learned_positions:
            self.positions = nn.Parameter(torch.randn(config.max_positions, config.d_model) * 0.02)
        else:
            self.register_buffer("positions", sinusoidal_table(config.max_positions, config.d_model), persistent=False)
        self.embedding_dropout = nn.Dropout(config.dropout)
        self.encoder_layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.encoder_layers))
        self.encoder_norm = nn.LayerNorm(config.d_model)
        self.decoder_layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.decoder_layers))
        self.decoder_norm = nn.LayerNorm(config.d_model)
        # The output projection is the embedding matrix (tied): logits = h · Eᵀ.

    def embed(self, ids: Tensor, start: int | Tensor = 0) -> Tensor:
        """(B, T) ids at absolute positions start..start+T-1 -> (B, T, D)."""
        positions = self.positions[start : start + ids.size(1)]
        return self.embedding_dropout(self.embedding(ids) * math.sqrt(self.config.d_model) + positions)

    def encode(self, src_ids: Tensor, src_key_mask: Tensor, need_weights: bool = False) -> EncoderOutput:
        """src_ids (B, S), src_key_mask (B, S) True at real tokens -> EncoderOutput.

        Also projects the memory into every decoder layer's cross-attention keys and
        values, once per source, so decoding steps never recompute them.
        """
        allowed = src_key_mask[:, None, None, :]  # (B, 1, 1, S)
        x, self_weights = self.embed(src_ids), []
        for layer in self.encoder_layers:
            x, weights = layer(x, allowed, need_weights)
            self_weights.append(weights)
        memory = self.encoder_norm(x)
        keys, values = zip(*(layer.cross_attention.project_key_value(memory) for layer in self.decoder_layers))
        return EncoderOutput(memory, torch.stack(keys), torch.stack(values), self_weights if need_weights else None)

    def decode(
        self,
        tgt_ids: Tensor,
        cross_k: Tensor | Sequence[Tensor],
        cross_v: Tensor | Sequence[Tensor],
        src_key_mask: Tensor,
        past_k: Tensor | Sequence[Tensor] | None = None,
        past_v: Tensor | Sequence[Tensor] | None = None,
        tgt_key_mask: Tensor | None = None,
        need_cross_weights: bool = False,
        need_self_weights: bool = False,
        cross_weight_layers: tuple[int, ...] | None = None,
    ) -> DecoderOutput:
        """Run the decoder over T new target positions after P cached ones.

        tgt_ids (B, T); cross_k/v (L, B, H, S, Dh); src_key_mask (B, S); past_k/v
        (L, B, H, P, Dh) or None for P = 0; cross_k/v and past_k/v may also be sequences of
        L per-layer (B, H, ·, Dh) tensors; tgt_key_mask (B, P+T) True at real tokens
        (only needed when a batch has padded targets, i.e. in training).
        Teacher forcing is one call with the whole target; incremental decoding is one
        call per token with the returned self_k/self_v as the next call's past.
        `cross_weight_layers` restricts which layers materialise cross weights (training
        a guided head needs only one); the returned tensor then has one entry per listed layer.
        """
        past_length = 0 if past_k is None else past_k[0].size(2)
        t = tgt_ids.size(1)
        self_allowed = causal_mask(t, past_length + t, tgt_ids.device)[None, None]  # (1, 1, T, P+T)
        if tgt_key_mask is not None:
            self_allowed = self_allowed & tgt_key_mask[:, None, None, :]
        cross_allowed = src_key_mask[:, None, None, :]  # (B, 1, 1, S)
        x = self.embed(tgt_ids, past_length)
        keys, values, cross_weights, self_weights = [], [], [], []
        for index, layer in enumerate(self.decoder_layers):
            want_cross = need_cross_weights and (cross_weight_layers is None or index in cross_weight_layers)
            x, k, v, s_w, c_w = layer(
                x,
                None if past_k is None else past_k[index],
                None if past_v is None else past_v[index],
                self_allowed,
                cross_k[index],
                cross_v[index],
                cross_allowed,
                need_self_weights,
                want_cross,
            )
            keys.append(k)
            values.append(v)
            if want_cross:
                cross_weights.append(c_w)
            if need_self_weights:
                self_weights.append(s_w)
        logits = self.decoder_norm(x) @ self.embedding.weight.t()  # (B, T, V)
        return DecoderOutput(
            logits.log_softmax(dim=-1),
            keys,
            values,
            torch.stack(cross_weights) if cross_weights else None,
            torch.stack(self_weights) if self_weights else None,
        )

    def forward(self, src_ids: Tensor, tgt_in_ids: Tensor) -> Tensor:
        """Teacher-forced training pass: (B, S), (B, T) -> log-probs (B, T, V)."""
        src_key_mask = key_padding_mask(src_ids, self.config.pad_id)
        encoded = self.encode(src_ids, src_key_mask)
        return self.decode(
            tgt_in_ids,
            encoded.cross_k,
            encoded.cross_v,
            src_key_mask,
            tgt_key_mask=key_padding_mask(tgt_in_ids, self.config.pad_id),
        ).log_probs

    def num_parameters(self, non_embedding: bool = False) -> int:
        total = sum(p.numel() for p in self.parameters())
        return total - self.embedding.weight.numel() if non_embedding else total


# --------------------------------------------------------------------------- persistence


def save_model(model: Transformer, directory: Path) -> None:
    """Write `config.json` and `model.pt` (a plain state dict) into `directory`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    save_config(model.config, directory / CONFIG_FILE)
    torch.save(model.state_dict(), directory / WEIGHTS_FILE)


def load_model(directory: Path, map_location: str = "cpu") -> Transformer:
    """Build the model from `directory/config.json` and load `directory/model.pt`."""
    directory = Path(directory)
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        if not (directory / name).is_file():
            raise FileNotFoundError(
                f"{directory / name}: missing; a model directory holds {CONFIG_FILE} and {WEIGHTS_FILE}"
            )
    model = Transformer(load_config(ModelConfig, directory / CONFIG_FILE))
    model.load_state_dict(load_weights(directory / WEIGHTS_FILE, map_location))
    return model.eval()


def load_weights(path: Path, map_location: str = "cpu") -> dict[str, torch.Tensor]:
    """The state dict in a `model.pt`. A training checkpoint nests the weights under "model";
    bundles may store them as float16, which load_state_dict casts into float32 parameters."""
    state = torch.load(path, map_location=map_location, weights_only=True)
    return state.get("model", state)
