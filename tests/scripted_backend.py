"""The scripted decoder of the beam search tests (test_search.py, test_coverage_penalty.py):
fixed probabilities per prefix (fairseq's approach), worked out by hand in the tests.

The scripted backend reads each row's prefix back from the KV cache it is handed, so a
search that reorders the cache wrongly gets the wrong probabilities, and its cross
weights encode (prefix, layer, head, source position), so a wrongly reordered alignment
buffer is caught too.
"""

from __future__ import annotations

import numpy as np

from seq2seq.core.backend import DecoderCache, StepOutput
from seq2seq.core.config import DecodeConfig, ModelConfig
from seq2seq.decoding.search import pad_batch

PAD, UNK, BOS, EOS, A, B = 0, 1, 2, 3, 4, 5
VOCAB = 6
LAYERS, HEADS = 2, 3


def plain(**settings) -> DecodeConfig:
    """A decode config without the coverage penalty or the repetition guard: ranking by
    (length-penalised) log-prob alone."""
    return DecodeConfig(**{"coverage_penalty": 0.0, "no_repeat_ngram_size": 0, **settings})


def lp(p: float) -> float:
    """The log-prob the backend reports for probability p (float32, as a real backend would)."""
    return float(np.float32(np.log(p)))


# Per sentence (its first source token): prefix -> {token: probability}. Unlisted prefixes
# get DEFAULT. UNK never has probability; PAD and BOS are banned by the search itself.
DEFAULT = {EOS: 0.1, A: 0.45, B: 0.45}
TABLES = {
    # Sentence 7, beam 2 (worked through in test_beam_search_exact_hypotheses_and_scores):
    7: {
        (): {A: 0.6, B: 0.3, EOS: 0.1},
        (A,): {EOS: 0.3, A: 0.36, B: 0.34},
        (B,): {EOS: 0.05, A: 0.9, B: 0.05},
        (A, A): {EOS: 0.5, A: 0.25, B: 0.25},
        (B, A): {EOS: 0.9, A: 0.05, B: 0.05},
    },
    # Sentence 8: a short and a long hypothesis whose ranking flips with the length penalty.
    8: {(): {A: 0.9, B: 0.07, EOS: 0.03}, (A,): {EOS: 0.34, A: 0.33, B: 0.33}, (A, A): {EOS: 0.99, A: 0.005, B: 0.005}},
    # Sentence 9: EOS almost never; only the length limit ends it.
    9: {(): {A: 0.7, B: 0.29, EOS: 0.01}},
    # Sentence 10, beam 2: at step 1 the EOS after B is ranked third (K = 2), behind a
    # beam that goes on to the best hypothesis (test_eos_ranked_below_k_does_not_finish).
    10: {
        (): {A: 0.6, B: 0.4},
        (A,): {EOS: 0.5, A: 0.15, B: 0.15},
        (B,): {EOS: 0.3, A: 0.05, B: 0.65},
        (B, B): {EOS: 0.99, A: 0.005, B: 0.005},
    },
}
NO_EOS = {EOS: 0.01, A: 0.6, B: 0.39}


def prefix_code(prefix: tuple[int, ...]) -> int:
    """A distinct small integer per prefix (base 6 with a leading 1): exact in float32."""
    code = 1
    for token in prefix:
        code = code * VOCAB + token
    return code


def expected_attention(prefix: tuple[int, ...], layer: int, head: int, position: int) -> float:
    return prefix_code(prefix) * 1000 + layer * 100 + head * 10 + position


class ScriptedBackend:
    """A fake model: log-probs from TABLES, prefix kept in the 'KV cache' it returns."""

    pad_id, bos_id, eos_id = PAD, BOS, EOS
    cross_per_sentence = False
    config = ModelConfig(
        vocab_size=VOCAB, d_model=6, n_heads=HEADS, decoder_layers=LAYERS, alignment_layer=1, alignment_heads=(2,)
    )

    def __init__(self) -> None:
        self.calls = 0

    def encode(self, src_ids: np.ndarray, src_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # Cross "keys" carry the source ids, so each row's step knows its sentence.
        b, s = src_ids.shape
        cross = np.broadcast_to(src_ids[None, :, None, :, None], (LAYERS, b, HEADS, s, 1)).astype(np.float32)
        return cross.copy(), cross.copy()

    def step(
        self, tokens, src_mask, cache: DecoderCache, need_attention, top_k=0, need_self_attention=False
    ) -> StepOutput:
        self.calls += 1
        n, s = tokens.shape[0], src_mask.shape[1]
        new = np.broadcast_to(tokens[None, :, None, :, None], (LAYERS, n, HEADS, 1, 1)).astype(np.float32)
        history = np.concatenate([cache.self_k, new], axis=3)  # (L, N, H, P+1, 1)
        log_probs = np.full((n, VOCAB), -np.inf, dtype=np.float32)
        weights = np.zeros((LAYERS, n, HEADS, s), dtype=np.float32)
        for row in range(n):
            generated = [int(t) for t in history[0, row, 0, :, 0]]
            assert generated[0] == BOS
            prefix = tuple(generated[1:])
            sentence = int(cache.cross_k[0, row, 0, 0, 0])
            table = TABLES[sentence].get(prefix, NO_EOS if sentence == 9 else DEFAULT)
            for token, p in table.items():
                log_probs[row, token] = lp(p)
            for layer in range(LAYERS):
                for head in range(HEADS):
                    weights[layer, row, head] = [expected_attention(prefix, layer, head, j) for j in range(s)]
            weights[:, row] *= src_mask[row]  # padding gets no attention, as in the real model
        # Self-attention spread evenly over BOS and the prefix: the causal triangle's row.
        positions = history.shape[3]
        self_weights = np.full((LAYERS, n, HEADS, positions), 1 / positions, dtype=np.float32)
        return StepOutput(
            log_probs,
            DecoderCache(cache.cross_k, cache.cross_v, history, history.copy()),
            weights if need_attention else None,
            self_weights=self_weights if need_self_attention else None,
        )


def sources(*sentences: list[int]) -> tuple[np.ndarray, np.ndarray]:
    return pad_batch([list(s) for s in sentences], PAD)


def penalty(length: int, alpha: float) -> float:
    return ((5 + length) / 6) ** alpha
