"""Training: token-bucketed batches, label smoothing, AdamW with warmup + inverse-sqrt,
validation loss and BLEU, exact resume, checkpoint averaging, and torchrun data parallelism;
optionally guided alignment (one cross-attention head supervised with a word aligner's
links, Garg et al. 2019; `--guided-alignment FILE.pharaoh`).

Run it plainly (`crossalign train ...`) or under `torchrun --nproc_per_node N` (gloo on
CPU): each rank takes every N-th batch of the same deterministic order.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from data.prepare import Pair, read_pairs
from data.tokenizer import Tokenizer
from seq2seq.aer import read_pharaoh
from seq2seq.alignment import Token, projection, words
from seq2seq.config import (DecodeConfig, ModelConfig, TrainConfig, dataclass_arguments, from_arguments,
                            load_config, save_config, to_dict)
from seq2seq.model import Transformer, key_padding_mask, load_weights, save_model
from seq2seq.torch_backend import TorchBackend
from seq2seq.translator import Translator

log = logging.getLogger("crossalign.train")

Example = tuple[list[int], list[int]]  # (source ids + EOS, target ids), no BOS/EOS on target


# --------------------------------------------------------------------------- data


def load_examples(path: Path, tokenizer: Tokenizer, max_length: int, upsample_sentences: int = 1,
                  lines: list[int] | None = None, phrases: list[bool] | None = None) -> list[Example]:
    """Tokenize a split; sentence pairs are repeated `upsample_sentences` times.

    Empty and over-long pairs are dropped, so examples and lines of `path` do not
    correspond one to one: when `lines` is given, it receives the 0-based line of every
    example (what keeps guided alignment line-aligned with its Pharaoh file); `phrases`
    receives whether each example is a dictionary phrase pair.
    """
    pairs = read_pairs(path)
    sources = tokenizer.encode_batch([p.source for p in pairs])
    targets = tokenizer.encode_batch([p.target for p in pairs])
    examples = []
    for number, (pair, src, tgt) in enumerate(zip(pairs, sources, targets)):
        if not src or not tgt or len(src) + 1 > max_length or len(tgt) + 1 > max_length:
            continue
        repeat = upsample_sentences if pair.kind == "sentence" else 1
        examples.extend([(src + [tokenizer.sp.eos_id()], tgt)] * repeat)
        if lines is not None:
            lines.extend([number] * repeat)
        if phrases is not None:
            phrases.extend([pair.kind != "sentence"] * repeat)
    return examples


def epoch_examples(examples: list[Example], phrases: list[bool], share: float, seed: int, epoch: int) -> list[int]:
    """Indices of the examples one epoch trains on: every sentence, plus phrase pairs drawn
    from the whole pool until they make up `share` of the epoch's target tokens (all
    phrases when share is 0). Deterministic in (seed, epoch), so a resumed run sees the
    same epoch; each epoch draws a different sample, so a large pool is covered over time."""
    sentences = [i for i, phrase in enumerate(phrases) if not phrase]
    pool = [i for i, phrase in enumerate(phrases) if phrase]
    if share <= 0 or not pool:
        return list(range(len(examples)))
    budget = share / (1.0 - share) * sum(len(examples[i][1]) + 1 for i in sentences)
    random.Random(seed * 7_919 + epoch).shuffle(pool)
    chosen, tokens = [], 0
    for index in pool:
        if tokens >= budget:
            break
        chosen.append(index)
        tokens += len(examples[index][1]) + 1
    return sentences + chosen


def make_batches(examples: list[Example], max_tokens: int, seed: int, epoch: int,
                 indices: list[int] | None = None) -> list[list[int]]:
    """Length-bucketed batches of example indices, at most `max_tokens` padded tokens each.

    Sort by (target, source) length within a shuffled order so padding is small, cut into
    batches by padded size, then shuffle the batches. Deterministic in (seed, epoch).
    `indices` restricts the batches to those examples (default: all).
    """
    rng = random.Random(seed * 100_003 + epoch)
    order = list(range(len(examples))) if indices is None else list(indices)
    rng.shuffle(order)
    order.sort(key=lambda i: (len(examples[i][1]), len(examples[i][0])))
    batches, current, longest = [], [], 0
    for index in order:
        src, tgt = examples[index]
        length = max(len(src), len(tgt) + 1)
        if current and max(longest, length) * (len(current) + 1) * 2 > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(index)
        longest = max(longest, length)
    if current:
        batches.append(current)
    rng.shuffle(batches)
    return batches


def drop_words(ids: torch.Tensor, rate: float, config: ModelConfig) -> torch.Tensor:
    """Word dropout (Sennrich & Zhang 2019): each real token (not pad, BOS or EOS) becomes
    <unk> with probability `rate`. Uses torch's RNG, which checkpoints save, so resume is exact."""
    if rate <= 0:
        return ids
    special = (ids == config.pad_id) | (ids == config.bos_id) | (ids == config.eos_id)
    dropped = (torch.rand(ids.shape) < rate) & ~special
    return ids.masked_fill(dropped, config.unk_id)


def collate(examples: list[Example], indices: list[int], config: ModelConfig) -> tuple[torch.Tensor, ...]:
    """-> src (B, S), decoder input BOS+y (B, T), decoder target y+EOS (B, T)."""
    batch = [examples[i] for i in indices]
    s = max(len(src) for src, _ in batch)
    t = max(len(tgt) for _, tgt in batch) + 1
    src = torch.full((len(batch), s), config.pad_id, dtype=torch.long)
    tgt_in = torch.full((len(batch), t), config.pad_id, dtype=torch.long)
    tgt_out = torch.full((len(batch), t), config.pad_id, dtype=torch.long)
    for row, (source, target) in enumerate(batch):
        src[row, : len(source)] = torch.tensor(source)
        tgt_in[row, : len(target) + 1] = torch.tensor([config.bos_id] + target)
        tgt_out[row, : len(target) + 1] = torch.tensor(target + [config.eos_id])
    return src, tgt_in, tgt_out


# --------------------------------------------------------------------------- guided alignment
#
# Garg et al. 2019 ("Jointly Learning to Align and Translate with Transformer Models"): one
# cross-attention head is trained, together with translation, to put its attention where
# a word aligner (eflomal, bench/eflomal_baseline.py) links the words.
#
# The rule from word links to a subword target, per training pair:
#   * words are `seq2seq.alignment.words()` of the pair's texts (eflomal's tokens); a
#     piece belongs to every word its characters overlap (`seq2seq.alignment.projection`);
#   * the row of target piece t gets a uniform distribution over every source piece of
#     every source word linked to a word of piece t; the source EOS column gets nothing.
#     With `guided_step_shift` (the default) that row is the decoder step whose *input* is
#     piece t (position t + 1, after BOS); without, the step that *produces* piece t;
#   * rows with no linked source word (unaligned target words, a bare "▁" piece) are not
#     supervised, nor is the BOS-input step (shifted) or the EOS-producing step (unshifted);
#   * links outside the sentence's word counts are dropped, and a pair whose pieces
#     differ from the training example's (never, with one tokenizer) is not supervised.
# The loss is Garg et al.'s cross-entropy between that distribution g and the head's
# attention a, -Σ_s g(t, s) log a(t, s), averaged over the supervised rows of the batch,
# added to the per-token translation loss with weight `TrainConfig.guided_weight`.


class GuidedAlignment:
    """Word links of the training lines, and the attention rows they ask of the head."""

    def __init__(self, path: Path, pairs: list[Pair], lines: list[int], tokenizer: Tokenizer,
                 step_shift: bool = True):
        self.links = read_pharaoh(path)
        self.step_shift = step_shift
        if len(self.links) != len(pairs):
            raise ValueError(f"{path}: {len(self.links)} alignment lines for {len(pairs)} training lines; the "
                             "Pharaoh file must have one line per line of train.tsv")
        self.pairs, self.lines, self.tokenizer = pairs, lines, tokenizer

    def distribution(self, line: int, n_source: int, n_target: int) -> np.ndarray | None:
        """(n_target, n_source + 1) gold attention of one training line (+ its EOS column),
        zero rows where a piece is not supervised; None when the pieces do not match."""
        pair = self.pairs[line]
        pieces = []
        for text, expected in ((pair.source, n_source), (pair.target, n_target)):
            _, names, offsets = self.tokenizer.encode_with_offsets(text)
            if len(names) != expected:
                return None
            pieces.append(projection([Token(n, s, e) for n, (s, e) in zip(names, offsets)], words(text)) > 0)
        source_of, target_of = pieces                                   # (S, Sw), (T, Tw) bool
        linked = np.zeros((target_of.shape[1], source_of.shape[1]), dtype=bool)   # (Tw, Sw)
        for i, j in self.links[line]:
            if i < linked.shape[1] and j < linked.shape[0]:
                linked[j, i] = True
        # piece t -> its words -> their linked source words -> those words' pieces
        rows = (target_of.astype(np.int64) @ linked.astype(np.int64)) > 0         # (T, Sw)
        mass = (rows.astype(np.int64) @ source_of.T.astype(np.int64)) > 0         # (T, S)
        gold = np.zeros((n_target, n_source + 1), dtype=np.float32)
        counts = mass.sum(axis=1, keepdims=True)
        gold[:, :n_source] = np.divide(mass, counts, out=np.zeros(mass.shape), where=counts > 0)
        return gold

    def targets(self, examples: list[Example], indices: list[int]) -> torch.Tensor:
        """(B, T, S) gold rows for a batch laid out as `collate` lays it out (T = longest
        target + 1 for the EOS step, S = longest source with its EOS)."""
        s = max(len(examples[i][0]) for i in indices)
        t = max(len(examples[i][1]) for i in indices) + 1
        gold = np.zeros((len(indices), t, s), dtype=np.float32)
        for row, index in enumerate(indices):
            source, target = examples[index]
            found = self.distribution(self.lines[index], len(source) - 1, len(target))
            if found is not None:
                first = 1 if self.step_shift else 0     # decoder position 0 reads BOS
                gold[row, first: first + len(target), : len(source)] = found
        return torch.from_numpy(gold)


class GuidedForward(torch.nn.Module):
    """The training pass that also returns the guided head's cross-attention.

    A module (not a function) so that DistributedDataParallel can wrap it; it holds the
    model, whose state dict and checkpoints are unchanged. Only the guided layer takes
    the explicit-softmax attention path (`cross_weight_layers`), the others stay fused.
    """

    def __init__(self, model: Transformer, layer: int, head: int):
        super().__init__()
        self.model, self.layer, self.head = model, layer, head

    def forward(self, src_ids: torch.Tensor, tgt_in_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, S), (B, T) -> log-probs (B, T, V), the head's weights (B, T, S)."""
        pad_id = self.model.config.pad_id
        src_key_mask = key_padding_mask(src_ids, pad_id)
        encoded = self.model.encode(src_ids, src_key_mask)
        out = self.model.decode(tgt_in_ids, encoded.cross_k, encoded.cross_v, src_key_mask,
                                tgt_key_mask=key_padding_mask(tgt_in_ids, pad_id), need_cross_weights=True,
                                cross_weight_layers=(self.layer,))
        return out.log_probs, out.cross_weights[0][:, self.head]        # (L=1, B, H, T, S) -> (B, T, S)


def guided_loss(weights: torch.Tensor, gold: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Cross-entropy -Σ g log a summed over supervised rows (those with gold mass); the count.

    weights and gold (B, T, S). Masked columns have a = 0 and g = 0: the clamp keeps
    0 · log 0 at 0 instead of NaN.
    """
    supervised = gold.sum(dim=-1) > 0                                   # (B, T)
    entropy = -(gold * weights.clamp_min(1e-9).log()).sum(dim=-1)       # (B, T)
    return entropy[supervised].sum(), int(supervised.sum())


# --------------------------------------------------------------------------- optimisation


def learning_rate(step: int, config: TrainConfig) -> float:
    """Linear warmup to `lr`, then inverse-square-root decay (Vaswani et al. 2017)."""
    step = max(step, 1)
    return config.lr * min(step / config.warmup_steps, math.sqrt(config.warmup_steps / step))


def smoothed_loss(log_probs: torch.Tensor, target: torch.Tensor, smoothing: float, pad_id: int) -> tuple[torch.Tensor, int]:
    """Label-smoothed NLL summed over non-pad tokens; log_probs (B, T, V), target (B, T)."""
    mask = target != pad_id
    nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    uniform = -log_probs.mean(dim=-1)
    loss = ((1.0 - smoothing) * nll + smoothing * uniform)[mask].sum()
    return loss, int(mask.sum())


# --------------------------------------------------------------------------- checkpoints


def checkpoint_path(out_dir: Path, step: int) -> Path:
    return out_dir / "checkpoints" / f"step{step:07d}.pt"


def list_checkpoints(out_dir: Path) -> list[Path]:
    return sorted((out_dir / "checkpoints").glob("step*.pt"))


def save_checkpoint(out_dir: Path, model: Transformer, optimizer: torch.optim.Optimizer, state: dict,
                    keep: int) -> Path:
    path = checkpoint_path(out_dir, state["step"])
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "model": model.state_dict(), "optimizer": optimizer.state_dict(), "state": state,
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()},
    }
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    tmp.replace(path)  # atomic: a crash never leaves a half-written checkpoint
    for old in list_checkpoints(out_dir)[:-keep]:
        old.unlink()
    return path


def average_checkpoints(paths: list[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the models in `paths` (Vaswani et al. average the last 5)."""
    total: dict[str, torch.Tensor] = {}
    for path in paths:
        state = torch.load(path, map_location="cpu", weights_only=False)["model"]
        for name, tensor in state.items():
            total[name] = total.get(name, 0) + tensor.double()
    return {name: (tensor / len(paths)).float() for name, tensor in total.items()}


# Training-time settings of ModelConfig: a run started with --init-from takes these from its
# own command line, everything else (the architecture) from the model it starts from.
REGULARISATION_FIELDS = ("dropout", "attention_dropout")


def initial_config(model_dir: Path, data_dir: Path, requested: ModelConfig | None = None) -> ModelConfig:
    """The architecture of the model in `model_dir`, checked against the data's tokenizer;
    dropout from `requested` (this run's command line) when given."""
    for name in ("config.json", "model.pt", "spm.model"):
        if not (model_dir / name).is_file():
            raise FileNotFoundError(f"--init-from {model_dir}: no {name}; give a release bundle or a run's final/")
    if (model_dir / "spm.model").read_bytes() != (data_dir / "spm.model").read_bytes():
        raise ValueError(f"--init-from {model_dir}: its spm.model differs from {data_dir / 'spm.model'}; the "
                         f"token ids would not match (prepare the data with `crossalign data prepare --tokenizer "
                         f"{model_dir / 'spm.model'}`, or start from scratch)")
    config = load_config(ModelConfig, model_dir / "config.json")
    if requested is not None:
        config = replace(config, **{name: getattr(requested, name) for name in REGULARISATION_FIELDS})
    return config


# --------------------------------------------------------------------------- evaluation


@torch.no_grad()
def validation_loss(model: Transformer, examples: list[Example], max_tokens: int) -> float:
    model.eval()
    total, count = 0.0, 0
    for indices in make_batches(examples, max_tokens, seed=0, epoch=0):
        src, tgt_in, tgt_out = collate(examples, indices, model.config)
        loss, n = smoothed_loss(model(src, tgt_in), tgt_out, 0.0, model.config.pad_id)
        total, count = total + float(loss), count + n
    model.train()
    return total / max(count, 1)


def validation_bleu(model: Transformer, tokenizer: Tokenizer, sources: list[str], references: list[str]) -> float:
    import sacrebleu

    model.eval()
    translator = Translator(TorchBackend(model), tokenizer)
    hypotheses = [r.text for r in translator.translate_batch(sources, DecodeConfig(beam_size=1, return_attention=False))]
    model.train()
    return sacrebleu.corpus_bleu(hypotheses, [references]).score


# --------------------------------------------------------------------------- the loop


HISTORY_COLUMNS = ("step", "epoch", "minutes", "train_loss", "valid_loss", "valid_bleu", "guided_loss", "tokens_per_s")


def record_history(out_dir: Path, entry: dict) -> None:
    """Append one validation entry to the run's history.jsonl and history.csv."""
    with open(out_dir / "history.jsonl", "a") as handle:
        handle.write(json.dumps(entry) + "\n")
    csv_path = out_dir / "history.csv"
    new = not csv_path.exists()
    with open(csv_path, "a") as handle:
        if new:
            handle.write(",".join(HISTORY_COLUMNS) + "\n")
        handle.write(",".join(str(entry.get(column, "")) for column in HISTORY_COLUMNS) + "\n")


def save_best(model: Transformer, out_dir: Path, data_dir: Path, entry: dict) -> None:
    """Keep the weights with the best valid BLEU so far as a model directory, `best/`."""
    best = out_dir / "best"
    save_model(model, best)
    (best / "spm.model").write_bytes((data_dir / "spm.model").read_bytes())
    (best / "validation.json").write_text(json.dumps(entry, indent=1) + "\n")


def is_main_process() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def train(train_config: TrainConfig, model_config: ModelConfig, resume: bool = True) -> Path:
    """Train until `max_steps` or `max_minutes`; returns the directory of the final model."""
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed and not dist.is_initialized():
        dist.init_process_group("gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    if train_config.threads:
        torch.set_num_threads(train_config.threads)
    out_dir, data_dir = train_config.run_dir, Path(train_config.data_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    tokenizer = Tokenizer(data_dir / "spm.model")
    model_config = replace(model_config, vocab_size=tokenizer.vocab_size)
    checkpoints = list_checkpoints(out_dir) if resume else []
    initial = None if checkpoints or not train_config.init_from else Path(train_config.init_from)
    if checkpoints:  # the architecture of a run is fixed by its first start
        model_config = load_config(ModelConfig, out_dir / "config.json")
    else:
        if initial is not None:
            model_config = initial_config(initial, data_dir, model_config)
        if train_config.guided_alignment and (initial is not None or not model_config.alignment_heads):
            # The supervised head becomes the model's alignment source (config.json travels with it).
            model_config = replace(model_config, alignment_heads=(train_config.guided_head,),
                                   alignment_step_shift=train_config.guided_step_shift)
    guided_layer = model_config.resolved_alignment_layer
    if train_config.guided_alignment:
        if not 0 <= train_config.guided_head < model_config.n_heads:
            raise ValueError(f"guided_head {train_config.guided_head} outside 0..{model_config.n_heads - 1}")
        if train_config.guided_head not in model_config.alignment_heads:
            log.warning("guided head %d is not among the model's alignment heads %s", train_config.guided_head,
                        list(model_config.alignment_heads))
    random.seed(train_config.seed)
    np.random.seed(train_config.seed)
    torch.manual_seed(train_config.seed)
    model = Transformer(model_config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=train_config.lr, betas=train_config.betas,
                                  weight_decay=train_config.weight_decay)
    state = {"step": 0, "epoch": 0, "batch_in_epoch": 0, "history": [], "elapsed": 0.0}
    if initial is not None:
        model.load_state_dict(load_weights(initial / "model.pt"))
        log.info("initialised from %s (%s)", initial, model_config)
    if checkpoints:
        payload = torch.load(checkpoints[-1], map_location="cpu", weights_only=False)
        model.load_state_dict(payload["model"])
        optimizer.load_state_dict(payload["optimizer"])
        state = payload["state"]
        torch.set_rng_state(payload["rng"]["torch"])
        random.setstate(payload["rng"]["python"])
        np.random.set_state(payload["rng"]["numpy"])
        log.info("resumed %s: step %d, epoch %d at batch %d, %.1f minutes trained, learning rate %.2e; "
                 "optimizer moments, data order and the torch/python/numpy RNGs restored", checkpoints[-1],
                 state["step"], state["epoch"], state["batch_in_epoch"], state["elapsed"] / 60,
                 learning_rate(state["step"] + 1, train_config))
    if is_main_process():
        save_config(model_config, out_dir / "config.json")
        save_config(train_config, out_dir / "train_config.json")
    forward: torch.nn.Module = model
    if train_config.guided_alignment:
        forward = GuidedForward(model, guided_layer, train_config.guided_head)
    ddp_model = torch.nn.parallel.DistributedDataParallel(forward) if distributed else forward

    max_length = model_config.max_positions
    lines: list[int] = []
    phrases: list[bool] = []
    examples = load_examples(data_dir / "train.tsv", tokenizer, max_length, train_config.sentence_upsample, lines,
                             phrases)
    guided = None
    if train_config.guided_alignment:
        guided = GuidedAlignment(Path(train_config.guided_alignment), read_pairs(data_dir / "train.tsv"), lines,
                                 tokenizer, train_config.guided_step_shift)
        log.info("guided alignment: head %d of layer %d, weight %g, step shift %s, links from %s",
                 train_config.guided_head, guided_layer, train_config.guided_weight, train_config.guided_step_shift,
                 train_config.guided_alignment)
    valid_pairs = read_pairs(data_dir / "valid.tsv")
    valid_examples = load_examples(data_dir / "valid.tsv", tokenizer, max_length)
    bleu_pairs = valid_pairs if train_config.valid_bleu_sentences < 0 else valid_pairs[: train_config.valid_bleu_sentences]
    log.info("model: %.2fM parameters; %d training examples; %d valid", model.num_parameters() / 1e6,
             len(examples), len(valid_examples))

    model.train()
    start_time = time.time() - state["elapsed"]
    deadline = start_time + train_config.max_minutes * 60 if train_config.max_minutes else math.inf
    progress = tqdm(total=train_config.max_steps, initial=state["step"], disable=not is_main_process(),
                    desc="train", unit="step", dynamic_ncols=True, file=sys.stderr)
    window_tokens, window_start, window_loss = 0, time.time(), (0.0, 0)
    window_guided = (0.0, 0)
    stop = state["step"] >= train_config.max_steps  # resuming a finished run trains no further
    while not stop:
        epoch_indices = epoch_examples(examples, phrases, train_config.phrase_share, train_config.seed, state["epoch"])
        batches = make_batches(examples, train_config.max_tokens, train_config.seed, state["epoch"], epoch_indices)
        batches = batches[len(batches) % world:] if world > 1 else batches  # equal count per rank
        while state["batch_in_epoch"] < len(batches) // world:
            indices = batches[state["batch_in_epoch"] * world + rank]
            state["batch_in_epoch"] += 1
            step = state["step"] + 1
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, train_config)
            src, tgt_in, tgt_out = collate(examples, indices, model_config)
            src = drop_words(src, train_config.word_dropout, model_config)
            tgt_in = drop_words(tgt_in, train_config.word_dropout, model_config)
            if guided is None:
                loss_sum, n_tokens = smoothed_loss(ddp_model(src, tgt_in), tgt_out, train_config.label_smoothing,
                                                   model_config.pad_id)
                # Normalise by this rank's tokens; DDP averages gradients across ranks.
                loss = loss_sum / max(n_tokens, 1)
            else:
                log_probs, head_weights = ddp_model(src, tgt_in)
                loss_sum, n_tokens = smoothed_loss(log_probs, tgt_out, train_config.label_smoothing,
                                                   model_config.pad_id)
                guided_sum, n_rows = guided_loss(head_weights, guided.targets(examples, indices))
                loss = loss_sum / max(n_tokens, 1) + train_config.guided_weight * guided_sum / max(n_rows, 1)
                window_guided = (window_guided[0] + float(guided_sum.detach()), window_guided[1] + n_rows)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), train_config.clip_norm)
            optimizer.step()
            state["step"] = step
            window_tokens += n_tokens * world
            window_loss = (window_loss[0] + float(loss_sum.detach()), window_loss[1] + n_tokens)
            progress.update(1)
            if step % 20 == 0:
                rate = window_tokens / max(time.time() - window_start, 1e-9)
                progress.set_postfix(loss=f"{window_loss[0] / max(window_loss[1], 1):.3f}",
                                     tok_s=f"{rate:,.0f}", lr=f"{learning_rate(step, train_config):.2e}",
                                     gnorm=f"{float(grad_norm):.2f}",
                                     **({"align": f"{window_guided[0] / max(window_guided[1], 1):.3f}"}
                                        if guided is not None else {}))
            stop = step >= train_config.max_steps or time.time() >= deadline
            if distributed and math.isfinite(deadline):
                # Clocks differ across ranks: all must stop at the same step, or the ones that
                # go on wait forever in DDP's next gradient all-reduce.
                flag = torch.tensor(float(stop))
                dist.all_reduce(flag, op=dist.ReduceOp.MAX)
                stop = bool(flag.item())
            if step % train_config.valid_every == 0 or stop:
                if is_main_process():
                    entry = {"step": step, "epoch": state["epoch"], "minutes": round((time.time() - start_time) / 60, 2),
                             "train_loss": round(window_loss[0] / max(window_loss[1], 1), 4),
                             "tokens_per_s": round(window_tokens / max(time.time() - window_start, 1e-9)),
                             "valid_loss": round(validation_loss(model, valid_examples, train_config.max_tokens), 4)}
                    if guided is not None:
                        entry["guided_loss"] = round(window_guided[0] / max(window_guided[1], 1), 4)
                    if bleu_pairs:
                        entry["valid_bleu"] = round(validation_bleu(model, tokenizer, [p.source for p in bleu_pairs],
                                                                    [p.target for p in bleu_pairs]), 2)
                    state["history"].append(entry)
                    progress.write(json.dumps(entry))
                    record_history(out_dir, entry)
                    if entry.get("valid_bleu", -1.0) > state.get("best_bleu", -1.0):
                        state["best_bleu"] = entry["valid_bleu"]
                        save_best(model, out_dir, data_dir, entry)
                window_tokens, window_start, window_loss = 0, time.time(), (0.0, 0)
                window_guided = (0.0, 0)
            if step % train_config.save_every == 0 or stop:
                state["elapsed"] = time.time() - start_time
                if is_main_process():
                    save_checkpoint(out_dir, model, optimizer, state, train_config.keep_checkpoints)
            if stop:
                break
        if not stop:
            state["epoch"] += 1
            state["batch_in_epoch"] = 0
    progress.close()
    final_dir = out_dir / "final"
    if is_main_process():
        paths = list_checkpoints(out_dir)[-train_config.average_last:]
        final = Transformer(model_config)
        final.load_state_dict(average_checkpoints(paths) if len(paths) > 1 else
                              torch.load(paths[-1], map_location="cpu", weights_only=False)["model"])
        save_model(final, final_dir)
        tokenizer_copy = final_dir / "spm.model"
        tokenizer_copy.write_bytes((data_dir / "spm.model").read_bytes())
        (final_dir / "history.json").write_text(json.dumps(state["history"], indent=1) + "\n")
        (final_dir / "train_config.json").write_text(json.dumps(to_dict(train_config), indent=2) + "\n")
        log.info("averaged %d checkpoints into %s", len(paths), final_dir)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
    return final_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    dataclass_arguments(parser.add_argument_group("training (TrainConfig)"), TrainConfig)
    dataclass_arguments(parser.add_argument_group("model (ModelConfig)"), ModelConfig,
                        skip=("vocab_size", "pad_id", "unk_id", "bos_id", "eos_id", "alignment_heads"))
    parser.add_argument("--no-resume", action="store_true", help="ignore checkpoints in --out-dir")


def main(args: argparse.Namespace) -> None:
    train(from_arguments(TrainConfig, args), from_arguments(ModelConfig, args), resume=not args.no_resume)
