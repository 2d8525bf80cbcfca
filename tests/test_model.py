"""Properties of the Transformer that the alignment maps and the search rely on.

Each test checks a property that would break visibly if a mask or the cache were wrong:
causality, bidirectionality, padding invisibility, weights that are distributions, and
cached incremental decoding equal to full teacher-forced decoding.
"""

from __future__ import annotations

import pytest
import torch

from seq2seq.core.config import ModelConfig
from seq2seq.training.model import (
    Transformer,
    causal_mask,
    key_padding_mask,
    load_model,
    save_model,
    scaled_dot_product,
)

PAD, BOS, EOS = 0, 2, 3


def encode(model: Transformer, src: torch.Tensor, need_weights: bool = False):
    return model.encode(src, key_padding_mask(src, PAD), need_weights=need_weights)


def teacher_forced(model: Transformer, src: torch.Tensor, tgt_in: torch.Tensor, **kwargs):
    encoded = encode(model, src)
    return model.decode(tgt_in, encoded.cross_k, encoded.cross_v, key_padding_mask(src, PAD), **kwargs)


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


SRC = torch.tensor([[5, 9, 7, 11, 6, EOS]])
TGT_IN = torch.tensor([[BOS, 8, 12, 4, 17, 10]])


# --------------------------------------------------------------------------- masks


def test_causal_mask_allows_the_past_and_the_present_only():
    mask = causal_mask(3, 5)  # 3 new queries after 2 cached positions
    expected = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(mask, expected)


@torch.no_grad()
def test_future_target_token_cannot_change_earlier_decoder_outputs(tiny_model):
    changed_position = 3
    other = TGT_IN.clone()
    other[0, changed_position] = 19
    before = teacher_forced(tiny_model, SRC, TGT_IN).log_probs
    after = teacher_forced(tiny_model, SRC, other).log_probs
    assert max_diff(before[:, :changed_position], after[:, :changed_position]) < 1e-6
    # ...while it does change its own position and every later one.
    per_position = (before - after).abs().amax(dim=-1)[0]
    assert (per_position[changed_position:] > 1e-4).all(), per_position


@torch.no_grad()
def test_every_source_token_reaches_every_encoder_position(tiny_model):
    memory = encode(tiny_model, SRC).memory
    for position in range(SRC.size(1)):
        other = SRC.clone()
        other[0, position] = 20
        changed = (encode(tiny_model, other).memory - memory).abs().amax(dim=-1)[0]
        assert (changed > 1e-4).all(), f"changing source token {position} left positions unchanged: {changed}"


@torch.no_grad()
def test_cross_attention_rows_are_distributions_with_zero_weight_on_padding(tiny_model):
    src = torch.tensor([[5, 9, 7, 11, 6, EOS], [13, 8, EOS, PAD, PAD, PAD]])
    tgt_in = torch.tensor([[BOS, 8, 12, 4], [BOS, 15, PAD, PAD]])
    out = teacher_forced(tiny_model, src, tgt_in, tgt_key_mask=key_padding_mask(tgt_in, PAD), need_cross_weights=True)
    weights = out.cross_weights  # (L, B, H, T, S)
    assert weights.shape == (2, 2, 4, 4, 6)
    assert torch.allclose(weights.sum(dim=-1), torch.ones(weights.shape[:-1]), atol=1e-6)
    assert (weights[:, 1, :, :, 3:] == 0).all()
    assert (weights[:, 1, :, :, :3] > 0).all()
    assert (weights[:, 0] > 0).all()


@torch.no_grad()
def test_decoder_self_attention_is_zero_above_the_diagonal(tiny_model):
    out = teacher_forced(tiny_model, SRC, TGT_IN, need_self_weights=True)
    weights = out.self_weights  # (L, B, H, T, T)
    t = TGT_IN.size(1)
    above = torch.ones(t, t, dtype=torch.bool).triu(diagonal=1)
    assert (weights[..., above] == 0).all()
    assert (weights[..., ~above] > 0).all()
    assert torch.allclose(weights.sum(dim=-1), torch.ones(weights.shape[:-1]), atol=1e-6)


@torch.no_grad()
def test_encoder_self_attention_looks_at_later_positions(tiny_model):
    weights = encode(tiny_model, SRC, need_weights=True).self_weights
    s = SRC.size(1)
    above = torch.ones(s, s, dtype=torch.bool).triu(diagonal=1)
    assert len(weights) == tiny_model.config.encoder_layers
    for layer in weights:  # (B, H, S, S)
        assert (layer[..., above] > 0).all()


@torch.no_grad()
def test_extra_source_padding_changes_nothing(tiny_model):
    padded = torch.cat([SRC, torch.full((1, 4), PAD)], dim=1)
    plain = teacher_forced(tiny_model, SRC, TGT_IN, need_cross_weights=True)
    extra = teacher_forced(tiny_model, padded, TGT_IN, need_cross_weights=True)
    assert max_diff(plain.log_probs, extra.log_probs) < 1e-5
    s = SRC.size(1)
    assert max_diff(plain.cross_weights, extra.cross_weights[..., :s]) < 1e-6
    assert (extra.cross_weights[..., s:] == 0).all()
    # The real positions' memory does not see the padding either.
    assert max_diff(encode(tiny_model, SRC).memory, encode(tiny_model, padded).memory[:, :s]) < 1e-5


# --------------------------------------------------------------------------- KV cache


@torch.no_grad()
def test_incremental_decoding_with_cache_equals_full_decoding(tiny_model):
    """Teacher-forced: one call over the whole target vs one call per token with the cache."""
    full = teacher_forced(tiny_model, SRC, TGT_IN, need_cross_weights=True)
    encoded = encode(tiny_model, SRC)
    src_mask = key_padding_mask(SRC, PAD)
    past_k = past_v = None
    steps, cross = [], []
    for position in range(TGT_IN.size(1)):
        out = tiny_model.decode(
            TGT_IN[:, position : position + 1],
            encoded.cross_k,
            encoded.cross_v,
            src_mask,
            past_k,
            past_v,
            need_cross_weights=True,
        )
        past_k, past_v = out.self_k, out.self_v
        assert past_k.shape[3] == position + 1
        steps.append(out.log_probs)
        cross.append(out.cross_weights)
    assert max_diff(full.log_probs, torch.cat(steps, dim=1)) < 1e-5
    assert max_diff(full.cross_weights, torch.cat(cross, dim=3)) < 1e-5
    assert max_diff(full.self_k, past_k) < 1e-5


@torch.no_grad()
def test_greedy_decoding_with_and_without_cache_agree(tiny_model):
    """Generated tokens identical; each step's log-probs within 1e-5."""
    encoded = encode(tiny_model, SRC)
    src_mask = key_padding_mask(SRC, PAD)
    no_cache, with_cache = [BOS], [BOS]
    past_k = past_v = None
    for _ in range(8):
        full = tiny_model.decode(torch.tensor([no_cache]), encoded.cross_k, encoded.cross_v, src_mask).log_probs[:, -1]
        out = tiny_model.decode(
            torch.tensor([[with_cache[-1]]]), encoded.cross_k, encoded.cross_v, src_mask, past_k, past_v
        )
        past_k, past_v = out.self_k, out.self_v
        step = out.log_probs[:, -1]
        assert max_diff(full, step) < 1e-5
        no_cache.append(int(full.argmax()))
        with_cache.append(int(step.argmax()))
    assert no_cache == with_cache


def test_explicit_and_fused_attention_agree():
    torch.manual_seed(1)
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 8)
    allowed = torch.rand(2, 1, 5, 7) > 0.4
    allowed[..., 0] = True  # every query may attend somewhere
    fused, none = scaled_dot_product(q, k, v, allowed, need_weights=False)
    explicit, weights = scaled_dot_product(q, k, v, allowed, need_weights=True)
    assert none is None
    assert max_diff(fused, explicit) < 1e-5
    assert (weights[~allowed.expand_as(weights)] == 0).all()
    assert torch.allclose(weights.sum(-1), torch.ones(2, 3, 5), atol=1e-6)


# --------------------------------------------------------------------------- config and files


def test_model_config_lists_every_problem_at_once():
    with pytest.raises(ValueError) as error:
        ModelConfig(d_model=30, n_heads=4, bos_id=0, decoder_layers=2, alignment_layer=2, alignment_heads=(5,))
    message = str(error.value)
    for problem in ("not divisible by n_heads", "ids must differ", "alignment_layer 2", "alignment_heads (5,)"):
        assert problem in message, message
    ModelConfig(d_model=32, n_heads=4, decoder_layers=2, alignment_layer=-2, alignment_heads=[0, 3])  # valid


def test_save_and_load_round_trip(tiny_model, tmp_path):
    save_model(tiny_model, tmp_path / "model")
    loaded = load_model(tmp_path / "model")
    assert loaded.config == tiny_model.config
    assert not loaded.training
    original, restored = tiny_model.state_dict(), loaded.state_dict()
    assert original.keys() == restored.keys()
    assert all(torch.equal(original[name], restored[name]) for name in original)
    with torch.no_grad():
        assert torch.equal(
            teacher_forced(tiny_model, SRC, TGT_IN).log_probs, teacher_forced(loaded, SRC, TGT_IN).log_probs
        )
    (tmp_path / "model" / "model.pt").unlink()
    with pytest.raises(FileNotFoundError, match="model.pt"):
        load_model(tmp_path / "model")
