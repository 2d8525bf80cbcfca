"""Where a training run starts and what it leaves behind: its checkpoints (save with the
optimizer moments and RNGs, restore for an exact resume, average for the final model) and
its architecture (fixed by its first start, else taken from `--init-from` or the command
line) and which of its parameters train (`--train-only`). Used by `seq2seq.training.train`.
"""

from __future__ import annotations

import logging
import random
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from data.files import CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE
from data.prepare import data_languages
from data.tokenizer import Tokenizer
from seq2seq.core.config import ModelConfig, TrainConfig, load_config
from seq2seq.training.model import Transformer

log = logging.getLogger("crossalign.train")

# --------------------------------------------------------------------------- checkpoints


def checkpoint_path(out_dir: Path, step: int) -> Path:
    return out_dir / "checkpoints" / f"step{step:07d}.pt"


def list_checkpoints(out_dir: Path) -> list[Path]:
    return sorted((out_dir / "checkpoints").glob("step*.pt"))


def save_checkpoint(
    out_dir: Path, model: Transformer, optimizer: torch.optim.Optimizer, state: dict, keep: int
) -> Path:
    path = checkpoint_path(out_dir, state["step"])
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "state": state,
        "rng": {
            "torch": torch.get_rng_state(),
            "python": random.getstate(),
            "numpy": np.random.get_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,
        },
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


def restore_checkpoint(path: Path, model: Transformer, optimizer: torch.optim.Optimizer) -> dict:
    """Load weights, optimizer moments and the RNGs saved in `path`; returns the run state."""
    payload = torch.load(path, map_location="cpu", weights_only=False)
    model.load_state_dict(payload["model"])
    optimizer.load_state_dict(payload["optimizer"])
    torch.set_rng_state(payload["rng"]["torch"])
    random.setstate(payload["rng"]["python"])
    np.random.set_state(payload["rng"]["numpy"])
    if payload["rng"].get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(payload["rng"]["cuda"])
    return payload["state"]


# --------------------------------------------------------------------------- the run's architecture


# Training-time settings of ModelConfig: a run started with --init-from takes these from its
# own command line, everything else (the architecture) from the model it starts from.
REGULARISATION_FIELDS = ("dropout", "attention_dropout")


def initial_config(model_dir: Path, data_dir: Path, requested: ModelConfig | None = None) -> ModelConfig:
    """The architecture of the model in `model_dir`, checked against the data's tokenizer;
    dropout from `requested` (this run's command line) when given."""
    for name in (CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE):
        if not (model_dir / name).is_file():
            raise FileNotFoundError(f"--init-from {model_dir}: no {name}; give a release bundle or a run's final/")
    data_tokenizer = Tokenizer(data_dir / TOKENIZER_FILE)
    if not data_tokenizer.same_pieces_as(Tokenizer(model_dir / TOKENIZER_FILE)):
        raise ValueError(
            f"--init-from {model_dir}: its spm.model differs from {data_dir / TOKENIZER_FILE}; the "
            f"token ids would not match (prepare the data with `crossalign data prepare --tokenizer "
            f"{model_dir / TOKENIZER_FILE}`, or start from scratch)"
        )
    # The data's vocabulary may extend the model's (the hint pieces, `crossalign data hints`):
    # the embeddings then grow by as many rows (`grow_embeddings`).
    config = replace(load_config(ModelConfig, model_dir / CONFIG_FILE), vocab_size=data_tokenizer.vocab_size)
    if requested is not None:
        config = replace(config, **{name: getattr(requested, name) for name in REGULARISATION_FIELDS})
    return config


def run_model_config(
    train_config: TrainConfig,
    model_config: ModelConfig,
    out_dir: Path,
    data_dir: Path,
    resumed: bool,
    initial: Path | None,
) -> ModelConfig:
    """The architecture of this run: fixed by its first start, else the initial model's or
    the command line's; guided alignment makes its head the model's alignment source."""
    if resumed:
        return load_config(ModelConfig, out_dir / CONFIG_FILE)
    if initial is not None:
        model_config = initial_config(initial, data_dir, model_config)
    languages = data_languages(data_dir)
    if languages is not None:  # the direction the data was prepared in (`data prepare --reverse`)
        model_config = replace(model_config, source_lang=languages[0], target_lang=languages[1])
    if train_config.guided_alignment and (initial is not None or not model_config.alignment_heads):
        # The supervised head becomes the model's alignment source (config.json travels with it).
        model_config = replace(
            model_config,
            alignment_heads=(train_config.guided_head,),
            alignment_step_shift=train_config.guided_step_shift,
        )
    return model_config


def grow_embeddings(state: dict[str, torch.Tensor], vocab_size: int, tokenizer: Tokenizer) -> dict[str, torch.Tensor]:
    """A state dict whose (tied) embedding has rows for `vocab_size` ids: a model continued on
    a vocabulary with pieces appended. A new piece starts from the embedding of the piece
    most like it, else from the mean row. Our corpus has no brackets (data prepare strips
    Ding's glosses), so the hint markers start from ":" ("Gießkanne: watering can") and "–"."""
    weights = state["embedding.weight"]
    old = weights.shape[0]
    if old >= vocab_size:
        return state
    like = {"⟨": ":", "⟩": "–"}
    rows = []
    for index in range(old, vocab_size):
        twin = tokenizer.sp.piece_to_id(like.get(tokenizer.sp.id_to_piece(index), ""))
        rows.append(weights[twin] if 0 < twin < old and twin != tokenizer.sp.unk_id() else weights.float().mean(0))
    grown = dict(state)
    grown["embedding.weight"] = torch.cat([weights, torch.stack(rows).to(weights.dtype)])
    return grown


def trained_parameters(model: Transformer, train_only: str) -> list[torch.nn.Parameter]:
    """The parameters a run trains: all, or those whose names fully match `train_only`;
    the others are frozen (requires_grad False, so no gradient is computed for them)."""
    if not train_only:
        return list(model.parameters())
    pattern = re.compile(train_only)
    chosen = []
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(bool(pattern.fullmatch(name)))
        if parameter.requires_grad:
            chosen.append(parameter)
    if not chosen:
        raise SystemExit(
            f"--train-only {train_only!r} matches no parameter; names look like "
            f"{next(name for name, _ in model.named_parameters())}"
        )
    log.info(
        "training %d of the parameter tensors (%s): %d weights, the rest frozen",
        len(chosen),
        train_only,
        sum(p.numel() for p in chosen),
    )
    return chosen
