"""The GPU round: a larger model trained by our recipe, and distilled into the served size,
in one command on a lent GPU, made so that its one try counts.

A GPU is lent to a session only now and then: one GPU, 15 minutes of device time in all
(starting the machine included), one command at most 10 minutes, at most 8 files back, the
working tree that travels at most 64 MiB, no network; its Python has torch, sentencepiece,
sacrebleu, numpy and tqdm, and `run` needs nothing else (no onnxruntime, FastAPI or the
like: tests/test_gpu_round.py runs it with those blocked). So:

    # here (CPU): the data rebuilt if missing, packed with the served-size student into an
    # ignored folder, models/ moved aside, the travelling tree measured as the device tool
    # counts it, and the exact device call printed (command, carry, timeout_s)
    python -m seq2seq.training.gpu_round prepare
    # the device: the call `prepare` printed (carry work/gpu, timeout_s 600), whose command is
    PYTHONUNBUFFERED=1 TQDM_MININTERVAL=30 python3 -m seq2seq.training.gpu_round run --pack work/gpu --out "$OUT"
    # here: models/ back, then the stream joined into model directories
    python -m seq2seq.training.gpu_round restore
    python -m seq2seq.training.gpu_round unpack --parts FILES_AT --pack work/gpu --out ~/.cache/crossalign/runs/gpu-1

`run`, in phases, rewriting round.json after each (with the traceback if one fails) and
appending each model to the returned stream as soon as its phase ends (`round_files`):

1. **preflight**: versions, the GPU, the packed files lining up, and a 20-second CUDA smoke
   (the large model's training steps on a slice of the data at the real batch size, then a
   greedy translation), so a broken driver, kernel, memory budget or data fails in the first
   minute, with device time left for a second call.
2. **teacher**: the recipe of the CPU runs (`RECIPE`, without guided alignment, whose
   targets are host work the large model does not need) at the size a GPU affords
   (`LARGE`), its batches made by worker processes, no step waiting on the GPU, loss-only
   validation, and the warm-up and cooldown sized from the steps/s of its first 30 seconds
   (`TrainConfig.schedule_probe_s`). Its weights go back as int8.
3. **compare**: the teacher's and the packed student's greedy BLEU on valid, on the GPU.
   The teacher is distilled only if it beats the student (`--distill auto`); else the round
   ends with the teacher back.
4. **distil** and **student**: sequence-level knowledge distillation (Kim & Rush 2016;
   `seq2seq.training.distill`): the teacher translates the training sentences, and the
   student is fine-tuned on them beside the references for what is left of the internal
   deadline (`--deadline-minutes`, 8.5 of the 10-minute cap), then measured the same way.

`--tiny` runs every phase with tiny models on the CPU in seconds: the test suite runs it, so
the round cannot rot between the sessions that get a GPU. A larger model ships only if it
measures better and its int8 batch-1 p50 stays within 50 ms here (bench/inference.py); the
student ships if it passes the release gate against the release it started from.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import platform
import signal
import sys
import tarfile
import tempfile
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import FrameType

import numpy
import sentencepiece
import torch
import tqdm

from data.files import CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE
from data.prepare import read_pairs
from data.tokenizer import Tokenizer
from seq2seq.core.config import ModelConfig, TrainConfig
from seq2seq.training.distill import LINKS_FILE, greedy_ids, translate_sources, write_distilled_data
from seq2seq.training.hint_data import HINTS_FILE
from seq2seq.training.model import Transformer, load_model, load_weights
from seq2seq.training.round_files import (
    DATA_ARCHIVE,
    STUDENT_DIR,
    RoundFiles,
    check_return,
    model_record,
    pack,
    packed_tokenizer,
    packing_for,
    unpack,
)
from seq2seq.training.round_prepare import add_prepare_arguments, prepare_command, restore_command
from seq2seq.training.train import autocast, smoothed_loss, train
from seq2seq.training.train_data import collate, load_examples, make_batches

log = logging.getLogger("crossalign.gpu_round")

# The recipe of the CPU runs (docs/training.md), as TrainConfig fields, made GPU-bound: no
# guided alignment for the teacher, batches from worker processes, loss-only validation, one
# checkpoint at the end (a cooldown to zero leaves nothing for averaging to add, and a d 512
# checkpoint with its optimizer is ~0.6 GB to write).
RECIPE = dict(
    phrase_share=0.3,
    word_dropout=0.1,
    label_smoothing=0.2,
    max_tokens=25_000,
    lr=7e-4,
    valid_every=500,
    valid_bleu_sentences=0,
    save_every=10**9,
    keep_checkpoints=1,
    average_last=1,
    hint_rate=0.4,
    schedule_probe_s=30.0,
    warmup_share=0.1,
    cooldown_share=0.2,
)
# The student starts from trained weights: a fine-tune's rate and a short warm-up (docs/training.md).
STUDENT_RECIPE = dict(lr=3e-4, warmup_share=0.05, cooldown_share=0.3, schedule_probe_s=15.0)
LARGE = dict(d_model=512, n_heads=8, d_ff=2048, encoder_layers=6, decoder_layers=6, alignment_layer=1, dropout=0.3)
TINY = dict(d_model=16, n_heads=4, d_ff=32, encoder_layers=1, decoder_layers=2, alignment_layer=1, dropout=0.1)
TINY_RECIPE = dict(max_tokens=400, valid_every=10, schedule_probe_s=0.3)
TINY_STUDENT_RECIPE = dict(schedule_probe_s=0.3)


TRACEBACK_CHARS = 20_000  # of a failure's traceback in round.json: its end, where the error is


@dataclass(frozen=True)
class Timing:
    """The round's clock, in seconds. The defaults are the GPU's; `TINY_TIMING` the CPU test's."""

    smoke_s: float = 20.0  # the preflight's training steps
    finish_s: float = 30.0  # after the last training phase: its checkpoint, BLEU, the stream
    min_train_s: float = 20.0  # a student phase shortened below this is not started
    slice_lines: int = 20_000  # the preflight's slice of train.tsv


TINY_TIMING = Timing(smoke_s=0.3, finish_s=1.0, min_train_s=0.0, slice_lines=200)


@dataclass
class RoundSettings:
    """One `run`: what the command line asked."""

    pack_dir: Path
    out: Path  # what comes back ($OUT on the device)
    work: Path  # checkpoints and data, outside `out`: only what comes back is written there
    minutes: float = 4.0  # the teacher's training
    distill_minutes: float = 2.0  # the student's, at most (the deadline may shorten it)
    deadline_minutes: float = 8.5  # the whole round ends by then (the device's cap is 10)
    distill: str = "auto"  # auto: when the teacher beats the student on valid; always; never
    device: str = "cuda"
    tiny: bool = False  # tiny models and a tiny clock: the CPU test
    init_from: Path | None = None  # continue a teacher from this model directory
    batch_workers: int = max(1, (os.cpu_count() or 2) - 2)  # the device has 16 cores: 14 workers

    @property
    def timing(self) -> Timing:
        return TINY_TIMING if self.tiny else Timing()

    @property
    def recipe(self) -> dict:
        return dict(RECIPE, **(TINY_RECIPE if self.tiny else {}))

    @property
    def teacher_model(self) -> dict:
        return TINY if self.tiny else LARGE


# --------------------------------------------------------------------------- the preflight


def versions() -> dict[str, str]:
    """What the device's Python has, of what the round imports."""
    import sacrebleu

    found = {"python": platform.python_version(), "torch": torch.__version__, "cuda": str(torch.version.cuda)}
    found["cudnn"] = str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else "none"
    for module in (numpy, sacrebleu, sentencepiece, tqdm):
        found[module.__name__] = getattr(module, "__version__", "?")
    return found


def device_facts(device: str) -> dict:
    if not device.startswith("cuda"):
        return {"name": "cpu", "threads": torch.get_num_threads(), "cores": os.cpu_count()}
    index = torch.device(device).index or 0
    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        found = torch.cuda.device_count()
        raise RuntimeError(f"{device}: torch {torch.__version__} (CUDA {torch.version.cuda}) sees {found} CUDA devices")
    props = torch.cuda.get_device_properties(device)
    return {
        "name": props.name,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "capability": f"{props.major}.{props.minor}",
        "bf16": torch.cuda.is_bf16_supported(),
        "cores": os.cpu_count(),
    }


def check_data(data_dir: Path) -> dict[str, int]:
    """The packed files line up (one line of links and of hint candidates per line of
    train.tsv, the hint pieces in the vocabulary, the student's tokenizer the data's), which
    training would find out only minutes later; returns the line counts."""
    counts = {}
    for name in ("train.tsv", "valid.tsv", HINTS_FILE, LINKS_FILE):
        if (data_dir / name).is_file():
            with open(data_dir / name, "rb") as handle:
                counts[name] = sum(1 for _ in handle)
    for name in (HINTS_FILE, LINKS_FILE):
        if counts.get(name, counts["train.tsv"]) != counts["train.tsv"]:
            raise ValueError(f"{name}: {counts[name]} lines for the {counts['train.tsv']} lines of train.tsv")
    if HINTS_FILE in counts and Tokenizer(data_dir / TOKENIZER_FILE).hint_ids is None:
        raise ValueError(f"{HINTS_FILE} without the hint pieces in spm.model: run `crossalign data hints` again")
    student = data_dir / STUDENT_DIR / TOKENIZER_FILE
    if student.is_file() and student.read_bytes() != (data_dir / TOKENIZER_FILE).read_bytes():
        raise ValueError("the packed student's spm.model is not the data's")
    return counts


def smoke(settings: RoundSettings, data_dir: Path) -> dict:
    """`smoke_s` seconds of the teacher's training steps (bf16 autocast on a GPU, as the round
    trains) on the first `slice_lines` lines of train.tsv at the recipe's batch size, then a
    greedy translation of a few of them: every kernel, and the memory, the round will need."""
    device, timing = settings.device, settings.timing
    tokenizer = Tokenizer(data_dir / TOKENIZER_FILE)
    config = ModelConfig(**dict(settings.teacher_model, vocab_size=tokenizer.vocab_size))
    slice_path = settings.work / "slice.tsv"
    with open(data_dir / "train.tsv", encoding="utf-8") as source, open(slice_path, "w", encoding="utf-8") as sliced:
        sliced.writelines(line for _, line in zip(range(timing.slice_lines), source))
    examples = load_examples(slice_path, tokenizer, config.max_positions)
    batches = make_batches(examples, settings.recipe["max_tokens"], seed=1, epoch=0)
    torch.manual_seed(0)
    net = Transformer(config).to(device)
    cuda = device.startswith("cuda")
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4, fused=cuda)
    precision = TrainConfig(device=device)  # "auto": bf16 on a GPU
    losses, steps, tokens, start = [], 0, 0, time.time()
    while time.time() - start < timing.smoke_s or steps < 2:
        host = collate(examples, batches[steps % len(batches)], config)
        tokens += int((host[2] != config.pad_id).sum())
        src, tgt_in, tgt_out = (t.to(device) for t in host)
        with autocast(precision):
            log_probs = net(src, tgt_in)
        loss, count = smoothed_loss(log_probs.float(), tgt_out, 0.1, config.pad_id)
        optimizer.zero_grad(set_to_none=True)
        (loss / count).backward()
        optimizer.step()
        losses.append((loss / count).detach())
        steps += 1
    first, last = float(losses[0]), float(losses[-1])  # the one wait for the GPU
    seconds = time.time() - start
    if not (math.isfinite(first) and math.isfinite(last)):
        raise RuntimeError(f"the smoke's loss is not finite: {first} then {last}")
    translated = greedy_ids(net, [source for source, _ in examples[:8]], bf16=cuda)
    facts = {
        "steps": steps,
        "steps_per_s": round(steps / seconds, 2),
        "target_tokens_per_s": round(tokens / seconds),
        "loss_first_last": [round(first, 3), round(last, 3)],
        "greedy_lengths": [len(ids) for ids in translated],
    }
    if cuda:
        facts["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        del net, optimizer
        torch.cuda.empty_cache()
    return facts


# --------------------------------------------------------------------------- the round


def phase_minutes(asked: float, now: float, deadline: float, after_s: float) -> float:
    """The minutes a training phase gets: `asked`, shortened so that the round, with `after_s`
    seconds of work besides the training (loading its data, writing, measuring), still ends by
    `deadline` (times in seconds)."""
    return max(0.0, min(asked, (deadline - now - after_s) / 60))


def teacher_wins(teacher_bleu: float, student_bleu: float, distill: str) -> bool:
    """Whether to distil: always, never, or (auto) when the teacher's greedy valid BLEU beats
    the student's: a teacher that does not would teach the student worse targets than it has."""
    return distill == "always" or (distill == "auto" and teacher_bleu > student_bleu)


@contextlib.contextmanager
def phase(files: RoundFiles, name: str) -> Iterator[dict]:
    """A phase of the round: timed, round.json rewritten as it starts and when it ends, a
    failure recorded in it with its traceback (and raised on)."""
    info: dict = {}
    files.summary["phase"] = name
    files.summary.setdefault("phases", {})[name] = info
    files.write()
    start = time.time()
    try:
        yield info
    except BaseException:
        info["error"] = traceback.format_exc()[-TRACEBACK_CHARS:]
        raise
    finally:
        info["seconds"] = round(time.time() - start, 1)
        files.write()
        log.info("phase %s: %s", name, json.dumps({k: v for k, v in info.items() if k != "error"}))


def terminated(files: RoundFiles, round_pid: int, number: int, frame: FrameType | None) -> None:
    """SIGTERM (a time limit): round.json says so, naming the phase and where in it, and the
    round ends at once. Written here rather than raised: an exception from a signal handler
    is lost when the signal lands in a fork handler or a finaliser. A forked batch worker
    inherits this handler and just ends, as SIGTERM would end it."""
    if os.getpid() == round_pid:
        summary = files.summary
        summary["status"], phase = "failed", summary.get("phase")
        where = "".join(traceback.format_stack(frame))[-TRACEBACK_CHARS:]
        summary["error"] = f"terminated (SIGTERM: the device's time limit?) in phase {phase}\n{where}"
        if phase is not None:
            summary["phases"][phase]["error"] = summary["error"]
        summary["return_check"] = check_return(files.out)
        files.write()
        print(f"gpu_round run terminated in phase {phase}: round.json says where", file=sys.stderr, flush=True)
    os._exit(128 + number)


def run(settings: RoundSettings) -> dict:
    """The round (module docstring); returns round.json's content. Raises on a failure, after
    writing it into round.json with the traceback."""
    started = time.time()
    files = RoundFiles(settings.out)
    summary = files.summary
    summary["asked"] = {
        key: getattr(settings, key) for key in ("minutes", "distill_minutes", "deadline_minutes", "distill", "device")
    }
    previous = signal.signal(signal.SIGTERM, partial(terminated, files, os.getpid()))
    try:
        with phase(files, "preflight") as info:
            data_dir = settings.work / "data"
            with tarfile.open(settings.pack_dir / DATA_ARCHIVE) as archive:
                archive.extractall(data_dir, filter="data")
            info["versions"] = versions()
            info["lines"] = check_data(data_dir)
            info["device"] = device_facts(settings.device)
            info["smoke"] = smoke(settings, data_dir)
        phases = Phases(settings, files, data_dir, started + settings.deadline_minutes * 60)
        phases.teacher()
        if phases.compare():
            phases.distil_and_train_student()
        summary["status"] = "done"
    except BaseException:
        summary["status"] = "failed"
        summary["error"] = traceback.format_exc()[-TRACEBACK_CHARS:]
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
        summary["minutes"] = round((time.time() - started) / 60, 2)
        files.write()
        summary["return_check"] = check_return(settings.out)
        files.write()
    return summary


class Phases:
    """The round's training phases, each recorded in round.json and each model appended to the
    returned stream as soon as it is trained."""

    def __init__(self, settings: RoundSettings, files: RoundFiles, data_dir: Path, deadline: float):
        self.settings, self.files, self.data_dir, self.deadline = settings, files, data_dir, deadline
        self.student = data_dir / STUDENT_DIR
        self.teacher_dir = settings.work / "teacher" / "final"
        self.setup_s = 0.0  # the teacher's phase beside its training: loading the data, the checkpoint

    def config(self, run: str, data: Path, minutes: float, **changes: object) -> TrainConfig:
        recipe = dict(self.settings.recipe, **changes)
        if not (data / HINTS_FILE).is_file():
            recipe["hint_rate"] = 0.0
        return TrainConfig(
            data_dir=str(data),
            out_dir=str(self.settings.work / run),
            max_steps=10**7,
            max_minutes=minutes,
            device=self.settings.device,
            precision="bf16",
            batch_workers=self.settings.batch_workers,
            **recipe,
        )

    def teacher(self) -> None:
        settings = self.settings
        with phase(self.files, "teacher") as info:
            start = time.time()
            # The teacher leaves room for its own record and the comparison at least.
            minutes = phase_minutes(settings.minutes, start, self.deadline, 2 * settings.timing.finish_s)
            init = {"init_from": str(settings.init_from)} if settings.init_from else {}
            config = self.config("teacher", self.data_dir, minutes, **init)
            final = train(config, ModelConfig(**settings.teacher_model), resume=False)
            info.update(trained(final, minutes, settings.minutes))
            blob = model_record(load_weights(final / WEIGHTS_FILE), final, "int8")
            info["record"] = self.files.append("teacher", blob, packing="int8")
            self.teacher_dir, self.setup_s = final, time.time() - start - 60 * info["minutes_trained"]

    def compare(self) -> bool:
        """The teacher's and the packed student's greedy valid BLEU; whether to distil."""
        with phase(self.files, "compare") as info:
            info["teacher_bleu"] = self.bleu(self.teacher_dir)
            if not (self.student / WEIGHTS_FILE).is_file():
                info["decision"] = "no student packed: the teacher alone comes back"
                return False
            info["student_bleu"] = self.bleu(self.student)
            distil = teacher_wins(info["teacher_bleu"], info["student_bleu"], self.settings.distill)
            info["decision"] = f"{'distil' if distil else 'no distillation'} ({self.settings.distill})"
            timing = self.settings.timing
            if distil and self.deadline - time.time() < self.setup_s + timing.finish_s + timing.min_train_s:
                info["decision"] += ", but the deadline leaves no time for the student"
                return False
            return distil

    def distil_and_train_student(self) -> None:
        settings = self.settings
        with phase(self.files, "distil") as info:
            teacher = load_model(self.teacher_dir).to(settings.device)
            distilled = settings.work / "distilled-data"
            info.update(write_distilled_data(self.data_dir, distilled, teacher, bf16=settings.device != "cpu"))
            del teacher
        with phase(self.files, "student") as info:
            after_s = self.setup_s + settings.timing.finish_s
            minutes = phase_minutes(settings.distill_minutes, time.time(), self.deadline, after_s)
            info["minutes_given"] = round(minutes, 3)
            if minutes <= 0 or minutes * 60 < settings.timing.min_train_s:
                info["skipped"] = "the deadline leaves too little time: the teacher alone comes back"
                return
            changes = dict(STUDENT_RECIPE, **(TINY_STUDENT_RECIPE if settings.tiny else {}))
            # The student keeps its supervised alignment head, when the data has the links for it.
            links = distilled / LINKS_FILE
            heads = json.loads((self.student / CONFIG_FILE).read_text()).get("alignment_heads") or [0]
            if links.is_file():
                changes.update(guided_alignment=str(links), guided_head=heads[0], guided_weight=0.5)
            config = self.config("student", distilled, minutes, init_from=str(self.student), **changes)
            final = train(config, ModelConfig(dropout=LARGE["dropout"]), resume=False)
            info.update(trained(final, minutes, settings.distill_minutes))
            state = load_weights(final / WEIGHTS_FILE)
            packing = packing_for(state, self.files.stream_bytes_left)
            info["record"] = self.files.append("student", model_record(state, final, packing), packing=packing)
            info["student_bleu"] = self.bleu(final)

    def bleu(self, model_dir: Path) -> float:
        """Greedy BLEU of a model directory on the valid split, decoded on the round's device."""
        import sacrebleu

        pairs = read_pairs(self.data_dir / "valid.tsv")
        model = load_model(model_dir).to(self.settings.device)
        tokenizer = Tokenizer(self.data_dir / TOKENIZER_FILE)
        hypotheses = translate_sources(model, tokenizer, [p.source for p in pairs], bf16=self.settings.device != "cpu")
        return round(sacrebleu.corpus_bleu(hypotheses, [[p.target for p in pairs]]).score, 2)


def trained(final: Path, minutes: float, asked: float) -> dict:
    """A training phase's record: its minutes, steps, schedule and last validation."""
    history = json.loads((final / "history.json").read_text())
    train_config = json.loads((final / "train_config.json").read_text())
    last = history[-1] if history else {}
    return {
        "minutes_asked": asked,
        "minutes_given": round(minutes, 3),
        "minutes_trained": last.get("minutes", 0.0),
        "steps": last.get("step", 0),
        "schedule": {key: train_config[key] for key in ("max_steps", "warmup_steps", "cooldown_steps")},
        "last_validation": last,
    }


# --------------------------------------------------------------------------- the command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m seq2seq.training.gpu_round", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    add_prepare_arguments(commands)
    packing = commands.add_parser("pack", help="here: the data archive the call carries (prepare runs it)")
    packing.add_argument("--data-dir", type=Path, required=True, help="a directory `crossalign data prepare` wrote")
    packing.add_argument("--out", type=Path, required=True)
    packing.add_argument("--student", type=Path, default=None, help="a served-size model directory to distil into")
    running = commands.add_parser("run", help="on the device: preflight, teacher, distillation; the stream back")
    running.add_argument("--pack", type=Path, required=True, help="the folder `pack` wrote")
    running.add_argument("--out", type=Path, required=True, help="where what comes back goes ($OUT on the device)")
    running.add_argument("--work", type=Path, default=None, help="checkpoints and data (default: a temporary folder)")
    defaults = RoundSettings(Path(), Path(), Path())
    running.add_argument("--minutes", type=float, default=defaults.minutes, help="the teacher's training time")
    running.add_argument("--distill-minutes", type=float, default=defaults.distill_minutes, help="the student's (most)")
    running.add_argument(
        "--deadline-minutes",
        type=float,
        default=defaults.deadline_minutes,
        help="the round ends by then; the student's phase is shortened to fit",
    )
    running.add_argument("--distill", choices=("auto", "always", "never"), default=defaults.distill)
    running.add_argument("--device", default=defaults.device)
    running.add_argument("--batch-workers", type=int, default=defaults.batch_workers)
    running.add_argument("--init-from", type=Path, default=None, help="continue a teacher model directory")
    running.add_argument("--tiny", action="store_true", help="tiny models and a tiny clock (the CPU test)")
    unpacking = commands.add_parser("unpack", help="here: the stream joined into model directories")
    unpacking.add_argument("--parts", type=Path, required=True, help="the folder the device's files came back to")
    unpacking.add_argument("--pack", type=Path, required=True, help="the folder `pack` wrote (its tokenizer)")
    unpacking.add_argument("--out", type=Path, required=True, help="gets teacher/ and student/")
    commands.add_parser("restore", help="here: models/ back from where prepare moved it")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "prepare":
        return prepare_command(args)
    if args.command == "restore":
        return restore_command()
    if args.command == "pack":
        print(pack(args.data_dir, args.out, args.student))
    elif args.command == "run":
        return run_command(args)
    else:
        args.out.mkdir(parents=True, exist_ok=True)
        tokenizer = packed_tokenizer(args.pack, args.out / TOKENIZER_FILE)
        print("\n".join(str(path) for path in unpack(args.parts, args.out, tokenizer)))
    return 0


def run_command(args: argparse.Namespace) -> int:
    names = ("minutes", "distill_minutes", "deadline_minutes", "distill", "device", "tiny", "init_from")
    names += ("batch_workers",)
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu_round-"))
    settings = RoundSettings(args.pack, args.out, work, **{name: getattr(args, name) for name in names})
    try:
        summary = run(settings)
    except Exception:  # round.json holds the phase and the traceback too
        traceback.print_exc()
        print(f"gpu_round run failed: {args.out}/round.json names the phase", file=sys.stderr)
        return 1
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
