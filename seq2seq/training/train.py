"""Training: token-bucketed batches, label smoothing, AdamW with warmup + inverse-sqrt,
validation loss and BLEU, exact resume, checkpoint averaging, and torchrun data parallelism;
optionally guided alignment (one cross-attention head supervised with a word aligner's
links, Garg et al. 2019; `--guided-alignment FILE.pharaoh`, see `seq2seq.training.guided`). The
examples and batches are `seq2seq.training.train_data`; the checkpoints and the run's architecture
`seq2seq.training.checkpoints`.

Run it plainly (`crossalign train ...`) or under `torchrun --nproc_per_node N` (gloo on
CPU): each rank takes every N-th batch of the same deterministic order.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import math
import os
import random
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from data.files import CONFIG_FILE, DICTIONARY_FILE, TOKENIZER_FILE, WEIGHTS_FILE
from data.prepare import Pair, read_pairs
from data.tokenizer import Tokenizer
from seq2seq.core.config import (
    DecodeConfig,
    ModelConfig,
    TrainConfig,
    dataclass_arguments,
    from_arguments,
    save_config,
    to_dict,
)
from seq2seq.decoding.translator import Translator
from seq2seq.training.checkpoints import (
    average_checkpoints,
    grow_embeddings,
    list_checkpoints,
    restore_checkpoint,
    run_model_config,
    save_checkpoint,
    trained_parameters,
)
from seq2seq.training.guided import GuidedAlignment, GuidedForward, guided_loss
from seq2seq.training.hint_data import HINTS_FILE, HintSampler, read_hint_candidates
from seq2seq.training.model import Transformer, load_weights, save_model
from seq2seq.training.torch_backend import TorchBackend
from seq2seq.training.train_data import (
    BatchPlan,
    BatchPreparer,
    BatchReader,
    Example,
    PreparedBatch,
    collate,
    load_examples,
    make_batches,
    prepared_batches,
)

log = logging.getLogger("crossalign.train")

# The loss and gradient norm stay on the GPU, and are read back (which waits for it) only
# every this many steps, to show progress, and at validation.
SYNC_EVERY = 20

# --------------------------------------------------------------------------- optimisation


def learning_rate(step: int, config: TrainConfig) -> float:
    """Linear warmup to `lr`, then inverse-square-root decay (Vaswani et al. 2017); with
    `cooldown_steps`, scaled down linearly to zero over the last of them up to `max_steps`."""
    step = max(step, 1)
    rate = config.lr * min(step / config.warmup_steps, math.sqrt(config.warmup_steps / step))
    if config.cooldown_steps:
        # The last step (max_steps) still learns, at 1/cooldown_steps of the rate.
        rate *= min(1.0, max(0.0, (config.max_steps + 1 - step) / config.cooldown_steps))
    return rate


def smoothed_loss(
    log_probs: torch.Tensor, target: torch.Tensor, smoothing: float, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Label-smoothed NLL summed over non-pad tokens, and their count; log_probs (B, T, V),
    target (B, T). Both are 0-dim tensors on log_probs' device: a boolean index or an int()
    here would make every step wait for the GPU."""
    mask = target != pad_id
    nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    uniform = -log_probs.mean(dim=-1)
    loss = torch.where(mask, (1.0 - smoothing) * nll + smoothing * uniform, 0.0).sum()
    return loss, mask.sum()


# --------------------------------------------------------------------------- evaluation


def autocast(config: TrainConfig) -> torch.autocast:
    """bf16 autocast for the forward pass when `config` asks for it (a no-op context otherwise)."""
    device_type = torch.device(config.device).type
    return torch.autocast(device_type, dtype=torch.bfloat16, enabled=config.autocast_bf16)


@torch.no_grad()
def validation_loss(model: Transformer, examples: list[Example], config: TrainConfig) -> float:
    model.eval()
    total, count = torch.zeros(()), torch.zeros((), dtype=torch.long)
    device = torch.device(config.device)
    for indices in make_batches(examples, config.max_tokens, seed=0, epoch=0):
        src, tgt_in, tgt_out = (t.to(device) for t in collate(examples, indices, model.config))
        with autocast(config):
            log_probs = model(src, tgt_in)
        loss, n = smoothed_loss(log_probs.float(), tgt_out, 0.0, model.config.pad_id)
        total, count = total.to(device) + loss, count.to(device) + n
    model.train()
    return float(total) / max(int(count), 1)


def validation_bleu(model: Transformer, tokenizer: Tokenizer, sources: list[str], references: list[str]) -> float:
    import sacrebleu

    if next(model.parameters()).device.type != "cpu":  # the numpy search runs on the CPU
        model = copy.deepcopy(model).cpu()
    model.eval()
    translator = Translator(TorchBackend(model), tokenizer)
    greedy = DecodeConfig(beam_size=1, return_attention=False)
    hypotheses = [r.text for r in translator.translate_batch(sources, greedy)]
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
    (best / TOKENIZER_FILE).write_bytes((data_dir / TOKENIZER_FILE).read_bytes())
    if (data_dir / DICTIONARY_FILE).is_file():  # the term index of automatic hints goes with the model
        (best / DICTIONARY_FILE).write_bytes((data_dir / DICTIONARY_FILE).read_bytes())
    (best / "validation.json").write_text(json.dumps(entry, indent=1) + "\n")


def is_main_process() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


@dataclass
class TrainingData:
    """What a run trains and validates on."""

    tokenizer: Tokenizer
    examples: list[Example]
    phrases: list[bool]  # per example: a dictionary phrase pair
    valid_examples: list[Example]
    bleu_pairs: list[Pair]  # validation pairs translated for BLEU
    reader: BatchReader  # how a batch's examples are read (subword sampling, hints)
    guided: GuidedAlignment | None = None


@dataclass
class Window:
    """Running sums since the last validation: what the progress bar and history report."""

    tokens: int = 0  # target tokens on all ranks
    start: float = field(default_factory=time.time)
    # The sums are tensors on the training device once a step adds to them: reading them waits for it.
    loss: torch.Tensor | float = 0.0  # this rank's summed translation loss ...
    loss_tokens: int = 0  # ... over this many tokens
    guided: torch.Tensor | float = 0.0  # summed guided-alignment loss ...
    guided_rows: torch.Tensor | int = 0  # ... over this many supervised rows

    def train_loss(self) -> float:
        return float(self.loss) / max(self.loss_tokens, 1)

    def guided_loss(self) -> float:
        return float(self.guided) / max(int(self.guided_rows), 1)

    def tokens_per_s(self) -> float:
        return self.tokens / max(time.time() - self.start, 1e-9)


@dataclass
class Run:
    """The moving parts of one training run, shared by the steps of the loop."""

    config: TrainConfig
    model: Transformer
    forward: torch.nn.Module  # the model or GuidedForward, wrapped in DDP when distributed
    optimizer: torch.optim.Optimizer
    state: dict  # step, epoch, batch_in_epoch, history, elapsed, best_bleu
    data: TrainingData
    out_dir: Path
    data_dir: Path
    rank: int = 0
    world: int = 1


def init_distributed() -> tuple[bool, int, int]:
    """(distributed, rank, world size); joins the gloo process group under torchrun."""
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed and not dist.is_initialized():
        dist.init_process_group("gloo")
    return (True, dist.get_rank(), dist.get_world_size()) if distributed else (False, 0, 1)


def check_guided_head(train_config: TrainConfig, model_config: ModelConfig) -> None:
    if not 0 <= train_config.guided_head < model_config.n_heads:
        raise ValueError(f"guided_head {train_config.guided_head} outside 0..{model_config.n_heads - 1}")
    if train_config.guided_head not in model_config.alignment_heads:
        log.warning(
            "guided head %d is not among the model's alignment heads %s",
            train_config.guided_head,
            list(model_config.alignment_heads),
        )


def load_training_data(
    train_config: TrainConfig, model_config: ModelConfig, data_dir: Path, tokenizer: Tokenizer
) -> TrainingData:
    max_length = model_config.max_positions
    lines: list[int] = []
    phrases: list[bool] = []
    examples = load_examples(
        data_dir / "train.tsv", tokenizer, max_length, train_config.sentence_upsample, lines, phrases
    )
    pairs = read_pairs(data_dir / "train.tsv")
    guided = None
    if train_config.guided_alignment:
        guided = GuidedAlignment(
            Path(train_config.guided_alignment), pairs, lines, tokenizer, train_config.guided_step_shift
        )
        log.info(
            "guided alignment: head %d of layer %d, weight %g, step shift %s, links from %s",
            train_config.guided_head,
            model_config.resolved_alignment_layer,
            train_config.guided_weight,
            train_config.guided_step_shift,
            train_config.guided_alignment,
        )
    hints = None
    if train_config.hint_rate > 0:
        candidates = read_hint_candidates(data_dir / HINTS_FILE)
        if len(candidates) != len(pairs):
            raise ValueError(f"{data_dir / HINTS_FILE}: {len(candidates)} lines for {len(pairs)} lines of train.tsv")
        hints = HintSampler(candidates, tokenizer, train_config.hint_rate)
        log.info(
            "hints: %d of %d training lines have candidates, each shown with probability %g",
            len(hints.by_line),
            len(pairs),
            train_config.hint_rate,
        )
    reader = BatchReader(
        examples, lines, pairs, tokenizer, max_length, train_config.subword_alpha, hints, train_config.seed
    )
    valid_pairs = read_pairs(data_dir / "valid.tsv")
    valid_examples = load_examples(data_dir / "valid.tsv", tokenizer, max_length)
    bleu_count = train_config.valid_bleu_sentences
    bleu_pairs = valid_pairs if bleu_count < 0 else valid_pairs[:bleu_count]
    return TrainingData(tokenizer, examples, phrases, valid_examples, bleu_pairs, reader, guided)


def train(train_config: TrainConfig, model_config: ModelConfig, resume: bool = True) -> Path:
    """Train until `max_steps` or `max_minutes`; returns the directory of the final model."""
    distributed, rank, world = init_distributed()
    if train_config.threads:
        torch.set_num_threads(train_config.threads)
    out_dir, data_dir = train_config.run_dir, Path(train_config.data_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    tokenizer = Tokenizer(data_dir / TOKENIZER_FILE)
    checkpoints = list_checkpoints(out_dir) if resume else []
    initial = None if checkpoints or not train_config.init_from else Path(train_config.init_from)
    model_config = run_model_config(
        train_config,
        replace(model_config, vocab_size=tokenizer.vocab_size),
        out_dir,
        data_dir,
        bool(checkpoints),
        initial,
    )
    if train_config.guided_alignment:
        check_guided_head(train_config, model_config)
    random.seed(train_config.seed)
    np.random.seed(train_config.seed)
    torch.manual_seed(train_config.seed)
    model = Transformer(model_config)
    if initial is not None:
        model.load_state_dict(grow_embeddings(load_weights(initial / WEIGHTS_FILE), model_config.vocab_size, tokenizer))
        log.info("initialised from %s (%s)", initial, model_config)
    model.to(train_config.device)
    optimizer = torch.optim.AdamW(
        trained_parameters(model, train_config.train_only),
        lr=train_config.lr,
        betas=train_config.betas,
        weight_decay=train_config.weight_decay,
        fused=torch.device(train_config.device).type == "cuda",  # one kernel for all parameters
    )
    state = {"step": 0, "epoch": 0, "batch_in_epoch": 0, "history": [], "elapsed": 0.0}
    if checkpoints:
        state = restore_checkpoint(checkpoints[-1], model, optimizer)
        log.info(
            "resumed %s: step %d, epoch %d at batch %d, %.1f minutes trained, learning rate %.2e; "
            "optimizer moments, data order and the torch/python/numpy RNGs restored",
            checkpoints[-1],
            state["step"],
            state["epoch"],
            state["batch_in_epoch"],
            state["elapsed"] / 60,
            learning_rate(state["step"] + 1, train_config),
        )
    if is_main_process():
        save_config(model_config, out_dir / CONFIG_FILE)
        save_config(train_config, out_dir / "train_config.json")
    forward: torch.nn.Module = model
    if train_config.guided_alignment:
        forward = GuidedForward(model, model_config.resolved_alignment_layer, train_config.guided_head)
    if distributed:
        forward = torch.nn.parallel.DistributedDataParallel(forward)

    data = load_training_data(train_config, model_config, data_dir, tokenizer)
    log.info(
        "model: %.2fM parameters; %d training examples; %d valid",
        model.num_parameters() / 1e6,
        len(data.examples),
        len(data.valid_examples),
    )
    run = Run(train_config, model, forward, optimizer, state, data, out_dir, data_dir, rank, world)
    train_loop(run, distributed)
    final_dir = out_dir / "final"
    if is_main_process():
        write_final(run, final_dir)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
    return final_dir


def train_loop(run: Run, distributed: bool) -> None:
    """Every step's batch until `max_steps` or the deadline; validates and checkpoints on the
    way. Nothing waits for the GPU but progress (every SYNC_EVERY steps), validation and saving."""
    state, world = run.state, run.world
    if "schedule" in state:  # resumed after the clock fixed the schedule
        run.config = replace(run.config, **{k: state["schedule"][k] for k in ClockSchedule.FIELDS})
    config = run.config
    run.model.train()
    start_time = time.time() - state["elapsed"]
    deadline = start_time + config.max_minutes * 60 if config.max_minutes else math.inf
    clock = ClockSchedule(config, start_time) if config.schedule_probe_s and "schedule" not in state else None
    progress = tqdm(
        total=config.max_steps,
        initial=state["step"],
        disable=not is_main_process(),
        desc="train",
        unit="step",
        dynamic_ncols=True,
        file=sys.stderr,
    )
    window = Window()
    if state["step"] >= config.max_steps:  # resuming a finished run trains no further
        progress.close()
        return
    reseed = config.seed if config.batch_workers else None  # a worker's RNG is not the one checkpoints save
    preparer = BatchPreparer(run.data.reader, run.model.config, config.word_dropout, run.data.guided, reseed)
    plan = BatchPlan(run.data.examples, run.data.phrases, config, state, run.rank, world)
    pinned = torch.device(config.device).type == "cuda"
    for batch in prepared_batches(preparer, plan, config.batch_workers, pinned):
        step = batch.step
        state["epoch"], state["batch_in_epoch"] = batch.epoch, batch.batch_in_epoch
        probing = clock is not None and clock.sized is None
        rate = clock.rate(time.time()) if probing else learning_rate(step, run.config)
        grad_norm = train_step(run, batch, rate, window)
        state["step"] = step
        progress.update(1)
        if step % SYNC_EVERY == 0:
            show_progress(progress, run, window, grad_norm)
        if clock is not None and (sized := clock.observe(step, time.time())) is not None:
            state["schedule"] = sized
            run.config = replace(run.config, **{k: sized[k] for k in ClockSchedule.FIELDS})
            progress.total = run.config.max_steps
            (log.info if probing else log.debug)("schedule sized on the clock: %s", sized)
        stop = step >= run.config.max_steps or time.time() >= deadline
        if distributed and math.isfinite(deadline):
            # Clocks differ across ranks: all must stop at the same step, or the ones that
            # go on wait forever in DDP's next gradient all-reduce.
            flag = torch.tensor(float(stop))
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            stop = bool(flag.item())
        if step % config.valid_every == 0 or stop:
            if is_main_process():
                validate(run, window, step, start_time, progress)
            window = Window()
        if step % config.save_every == 0 or stop:
            state["elapsed"] = time.time() - start_time
            if is_main_process():
                save_checkpoint(run.out_dir, run.model, run.optimizer, state, config.keep_checkpoints)
        if stop:
            break
    progress.close()


class ClockSchedule:
    """The schedule of a run whose steps/s only the device knows (`schedule_probe_s`, the GPU
    round). For the first `schedule_probe_s` seconds the warm-up runs on the clock: the rate
    `learning_rate` gives with seconds for steps and a warm-up of `warmup_share` of
    `max_minutes`. Then the steps/s measured over the probe's last two thirds (the first
    third holds the start-up; at least 3 steps) fix `max_steps` (what fits the time left,
    less 3%), `cooldown_steps` (`cooldown_share` of them) and `warmup_steps` (the step at
    which the clock's warm-up ends, so the rate goes on without a jump). Until the cooldown begins,
    `max_steps` is measured again every SYNC_EVERY steps over all the steps since (validation
    included), so the cooldown ends at the deadline rather than before or after it."""

    FIELDS = ("max_steps", "warmup_steps", "cooldown_steps")

    def __init__(self, config: TrainConfig, start: float):
        self.config, self.start = config, start
        self.warmup_s = config.warmup_share * config.max_minutes * 60
        self.mark: tuple[int, float] | None = None  # (step, time): a third into the probe, then its end
        self.sized: dict | None = None

    def rate(self, now: float) -> float:
        """The learning rate while probing."""
        seconds = max(now - self.start, 1e-3)
        return self.config.lr * min(seconds / self.warmup_s, math.sqrt(self.warmup_s / seconds))

    def observe(self, step: int, now: float) -> dict | None:
        """After step `step` at time `now`: the schedule when it is sized or measured again, else None."""
        config, elapsed, sized = self.config, now - self.start, self.sized
        if sized is None:
            if self.mark is None or elapsed < config.schedule_probe_s / 3:
                self.mark = (step, now)  # the last step of the start-up, or the first step
            if elapsed < config.schedule_probe_s or step < self.mark[0] + 3:
                return None
            warmup = max(1, round(step * self.warmup_s / elapsed))
        elif step % SYNC_EVERY or step >= sized["max_steps"] - sized["cooldown_steps"]:
            return None  # between measurements, or in the cooldown, whose length is fixed
        else:
            warmup = sized["warmup_steps"]
        mark_step, mark_time = self.mark or (step, now)
        steps_per_s = (step - mark_step) / (now - mark_time) if step > mark_step else step / elapsed
        max_steps = step + max(1, int(steps_per_s * (config.max_minutes * 60 - elapsed) * 0.97))
        self.mark = self.mark if sized is not None else (step, now)
        self.sized = {
            "at_step": step,
            "steps_per_s": round(steps_per_s, 3),
            "max_steps": max_steps,
            "warmup_steps": warmup,
            "cooldown_steps": min(max_steps - step, max(1, round(config.cooldown_share * max_steps))),
        }
        return self.sized


def train_step(run: Run, batch: PreparedBatch, rate: float, window: Window) -> torch.Tensor:
    """One optimizer step on `batch` at learning rate `rate`; adds its losses to `window`, returns
    the gradient norm (on the device: nothing here waits for the GPU)."""
    config, model_config = run.config, run.model.config
    for group in run.optimizer.param_groups:
        group["lr"] = rate
    device = torch.device(config.device)
    src, tgt_in, tgt_out = (t.to(device, non_blocking=True) for t in (batch.src, batch.tgt_in, batch.tgt_out))
    passes = 2 if config.rdrop_alpha > 0 else 1  # R-Drop: the batch twice, in one forward
    if passes == 2:
        src, tgt_in, tgt_out = src.repeat(2, 1), tgt_in.repeat(2, 1), tgt_out.repeat(2, 1)
    head_weights = None
    with autocast(config):
        if batch.gold is None:
            log_probs = run.forward(src, tgt_in)
        else:
            log_probs, head_weights = run.forward(src, tgt_in)
    log_probs = log_probs.float()
    loss_sum, _ = smoothed_loss(log_probs, tgt_out, config.label_smoothing, model_config.pad_id)
    # Normalise by this rank's tokens of one pass (counted on the host); DDP averages gradients across ranks.
    n_tokens = batch.tokens
    loss = loss_sum / passes / max(n_tokens, 1)
    if passes == 2:
        loss = loss + config.rdrop_alpha * rdrop_divergence(log_probs, tgt_out, model_config.pad_id) / max(n_tokens, 1)
    if head_weights is not None and batch.gold is not None:
        gold = batch.gold.to(device, non_blocking=True)
        guided_sum, n_rows = guided_loss(head_weights.float(), gold.repeat(passes, 1, 1))
        loss = loss + config.guided_weight * guided_sum / n_rows.clamp(min=1)
        window.guided = window.guided + guided_sum.detach() / passes
        window.guided_rows = window.guided_rows + n_rows // passes
    run.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(run.model.parameters(), config.clip_norm)
    run.optimizer.step()
    window.tokens += n_tokens * run.world
    window.loss = window.loss + loss_sum.detach() / passes
    window.loss_tokens += n_tokens
    return grad_norm


def rdrop_divergence(log_probs: torch.Tensor, tgt_out: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Summed symmetric KL between the two halves of a doubled batch (R-Drop, Liang et al.
    2021): log_probs (2B, T, V), tgt_out (2B, T); padding positions are left out. Each half is
    pulled toward the other's distribution, as the paper's loss does (no stop-gradient)."""
    first, second = log_probs.chunk(2)
    real = (tgt_out.chunk(2)[0] != pad_id).unsqueeze(-1)
    forward = (first.exp() * (first - second)).masked_fill(~real, 0.0).sum()
    backward = (second.exp() * (second - first)).masked_fill(~real, 0.0).sum()
    return (forward + backward) / 2


def show_progress(progress: tqdm, run: Run, window: Window, grad_norm: torch.Tensor) -> None:
    guided = {"align": f"{window.guided_loss():.3f}"} if run.data.guided is not None else {}
    progress.set_postfix(
        loss=f"{window.train_loss():.3f}",
        tok_s=f"{window.tokens_per_s():,.0f}",
        lr=f"{run.optimizer.param_groups[0]['lr']:.2e}",
        gnorm=f"{float(grad_norm):.2f}",
        **guided,
    )


def validate(run: Run, window: Window, step: int, start_time: float, progress: tqdm) -> None:
    """Validation loss and BLEU into the history; a new best BLEU is kept as `best/`."""
    state, data = run.state, run.data
    entry = {
        "step": step,
        "epoch": state["epoch"],
        "minutes": round((time.time() - start_time) / 60, 2),
        "train_loss": round(window.train_loss(), 4),
        "tokens_per_s": round(window.tokens_per_s()),
        "valid_loss": round(validation_loss(run.model, data.valid_examples, run.config), 4),
    }
    if data.guided is not None:
        entry["guided_loss"] = round(window.guided_loss(), 4)
    if data.bleu_pairs:
        entry["valid_bleu"] = round(
            validation_bleu(
                run.model, data.tokenizer, [p.source for p in data.bleu_pairs], [p.target for p in data.bleu_pairs]
            ),
            2,
        )
    state["history"].append(entry)
    progress.write(json.dumps(entry))
    record_history(run.out_dir, entry)
    if entry.get("valid_bleu", -1.0) > state.get("best_bleu", -1.0):
        state["best_bleu"] = entry["valid_bleu"]
        save_best(run.model, run.out_dir, run.data_dir, entry)


def write_final(run: Run, final_dir: Path) -> None:
    """The average of the last checkpoints as a model directory, with its tokenizer and history."""
    paths = list_checkpoints(run.out_dir)[-run.config.average_last :]
    final = Transformer(run.model.config)
    final.load_state_dict(
        average_checkpoints(paths)
        if len(paths) > 1
        else torch.load(paths[-1], map_location="cpu", weights_only=False)["model"]
    )
    save_model(final, final_dir)
    (final_dir / TOKENIZER_FILE).write_bytes((run.data_dir / TOKENIZER_FILE).read_bytes())
    if (run.data_dir / DICTIONARY_FILE).is_file():  # the term index of automatic hints goes with the model
        (final_dir / DICTIONARY_FILE).write_bytes((run.data_dir / DICTIONARY_FILE).read_bytes())
    (final_dir / "history.json").write_text(json.dumps(run.state["history"], indent=1) + "\n")
    (final_dir / "train_config.json").write_text(json.dumps(to_dict(run.config), indent=2) + "\n")
    log.info("averaged %d checkpoints into %s", len(paths), final_dir)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    dataclass_arguments(parser.add_argument_group("training (TrainConfig)"), TrainConfig)
    dataclass_arguments(
        parser.add_argument_group("model (ModelConfig)"),
        ModelConfig,
        skip=("vocab_size", "pad_id", "unk_id", "bos_id", "eos_id", "alignment_heads"),
    )
    parser.add_argument("--no-resume", action="store_true", help="ignore checkpoints in --out-dir")


def main(args: argparse.Namespace) -> None:
    train(from_arguments(TrainConfig, args), from_arguments(ModelConfig, args), resume=not args.no_resume)
