"""Training throughput: target tokens/s and model FLOPs utilisation (MFU).

MFU = 6 · N · tokens/s / peak, with N the parameters a token passes through and peak the
machine's measured fp32 matmul rate (measured here, in the same run, so the ratio holds on
a noisy shared machine). Synthetic batches of the training shape; no data needed.

    python bench/train_throughput.py --steps 10 --max-tokens 5000
"""

from __future__ import annotations

import argparse
import time

import torch

from seq2seq.core.config import ModelConfig
from seq2seq.training.model import Transformer
from seq2seq.training.train import smoothed_loss


def matmul_peak(size: int = 2048, repeats: int = 10) -> float:
    """Measured fp32 matmul FLOP/s on this machine with torch's current threads."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * size**3 * repeats / (time.perf_counter() - start)


def flops_per_token(config: ModelConfig, src_len: int, tgt_len: int) -> tuple[float, float]:
    """Matmul parameters touched per source and per target token (attention scores excluded)."""
    d, ff = config.d_model, config.d_ff
    per_source = config.encoder_layers * (4 * d * d + 2 * d * ff) + config.decoder_layers * 2 * d * d
    per_target = config.decoder_layers * (4 * d * d + 2 * d * d + 2 * d * ff) + d * config.vocab_size
    return per_source, per_target


def run(config: ModelConfig, max_tokens: int, length: int, steps: int) -> dict:
    torch.manual_seed(0)
    model = Transformer(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch = max(1, max_tokens // (2 * length))
    src = torch.randint(4, config.vocab_size, (batch, length))
    tgt = torch.randint(4, config.vocab_size, (batch, length + 1))
    for step in range(steps + 2):  # two warm-up steps are not timed
        if step == 2:
            start = time.perf_counter()
        loss, n = smoothed_loss(model(src, tgt[:, :-1]), tgt[:, 1:], 0.1, config.pad_id)
        optimizer.zero_grad()
        (loss / n).backward()
        optimizer.step()
    elapsed = time.perf_counter() - start
    per_source, per_target = flops_per_token(config, length, length)
    tokens = batch * length * steps
    flops = 6 * (per_source + per_target) * tokens
    return {"batch": batch, "target_tokens_per_s": tokens / elapsed, "flops_per_s": flops / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=5000)
    parser.add_argument("--length", type=int, default=16, help="source and target length of the synthetic batch")
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    peak = matmul_peak()
    print(f"threads {torch.get_num_threads()}, measured fp32 matmul peak {peak / 1e9:.1f} GFLOP/s")
    print(f"{'config':<34}{'batch':>6}{'tgt tok/s':>11}{'GFLOP/s':>9}{'MFU':>7}")
    variants = {
        "release d256 4+3 ff1024 V8000": ModelConfig(),
        "d256 4+3 V4000": ModelConfig(vocab_size=4000),
        "d256 3+2 V8000": ModelConfig(encoder_layers=3, decoder_layers=2),
        "d384 4+3 ff1536 V8000": ModelConfig(d_model=384, n_heads=6, d_ff=1536),
    }
    for name, config in variants.items():
        result = run(config, args.max_tokens, args.length, args.steps)
        print(
            f"{name:<34}{result['batch']:>6}{result['target_tokens_per_s']:>11,.0f}"
            f"{result['flops_per_s'] / 1e9:>9.1f}{result['flops_per_s'] / peak:>7.1%}"
        )


if __name__ == "__main__":
    main()
