"""The GPU round: a larger model trained by our recipe, and distilled into the served size,
in one command on a lent GPU.

A GPU is lent to a session only now and then, with a tight budget (one GPU, a few minutes
of device time, one command at most 10 minutes, files back at most 16 MiB each and 64 MiB in
all, the working tree that travels at most 64 MiB, no network; its Python has torch, numpy,
tqdm, sentencepiece and sacrebleu). So the round is three commands, two of them on this machine:

    # here: the prepared data and the served-size student in one archive, in an ignored
    # folder the call carries (work/ is ignored)
    python -m seq2seq.training.gpu_round pack --data-dir ~/.cache/crossalign/data/ding8k-hints \
        --student models/de-en --out work/gpu
    # on the device (carry: work/gpu): train, distil, weights back in parts < 16 MiB
    PYTHONUNBUFFERED=1 python3 -m seq2seq.training.gpu_round run --pack work/gpu --out "$OUT"

The working tree travels with the call and must stay within 64 MiB: with two release
bundles under models/ (~85 MB) it does not, and the round needs none of them (the student is
in the archive), so move them aside for the call (`mv models /tmp/models-aside`, back afterwards).

    # here: the parts joined into model directories (large/, distilled/) that
    # `crossalign eval/export` and `train --init-from` take
    python -m seq2seq.training.gpu_round unpack --parts FILES_AT --out ~/.cache/crossalign/runs/gpu-1

`run` trains the recipe the CPU runs converged with (`RECIPE`: phrases at 30% of the target
tokens, dropout 0.3, word dropout 0.1, label smoothing 0.2, guided alignment on head 2 of
decoder layer 1, target-term hints when the data has them, bf16 autocast) at the size a GPU
affords (`LARGE`: d 512, 8 heads, 6 + 6 layers) for `--minutes`, averages its last
checkpoints, then (`--distill-minutes`, with a packed student) translates the training
sentences with it and fine-tunes the student on them beside the references: sequence-level
knowledge distillation (Kim & Rush 2016; `seq2seq.training.distill`), the way a large
model's quality reaches the size we serve. The large model comes back as int8 weights (its
float16 ones, ~92 MiB, would not), the student as float16, each with its config, tokenizer
and history. `--tiny` runs the same path with tiny models on the CPU in seconds: the test
suite runs it, so the round cannot rot between the sessions that get a GPU. A larger model
ships only if it measures better and its int8 batch-1 p50 stays within 50 ms here
(bench/inference.py); the student ships if it beats the release it started from.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import shutil
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from seq2seq.core.config import TrainConfig

log = logging.getLogger("crossalign.gpu_round")

PART_BYTES = 15 * 1024 * 1024  # files come back from the device at most 16 MiB each
DATA_ARCHIVE = "data.tar.gz"
PART_NAME = "model.pt.part{:02d}"
INT8_PART_NAME = "model.int8.pt.part{:02d}"
PARTS_FILE = "parts.json"
INT8_SUFFIX, SCALE_SUFFIX = ".int8", ".scale"
# Files come back at most 64 MiB in all: the large model's int8 weights (~46 MiB at d 512,
# 6 + 6 layers) and the served-size student's float16 ones (~16 MiB) just fit.
RETURN_BYTES = 63 * 1024 * 1024
LARGE_DIR, DISTILLED_DIR = "large", "distilled"
STUDENT_DIR = "student"  # in the archive: the served-size model to distil into (`pack --student`)
STUDENT_FILES = ("config.json", "model.pt", "spm.model")
# The data files the run reads (hints and links only when the data has them).
DATA_FILES = ("train.tsv", "valid.tsv", "spm.model", "manifest.json", "hints.train.jsonl", "eflomal.train.pharaoh")

# The recipe of the CPU runs (docs/training.md), as TrainConfig fields.
RECIPE = dict(
    phrase_share=0.3,
    word_dropout=0.1,
    label_smoothing=0.2,
    guided_weight=0.5,
    guided_head=2,
    guided_step_shift=True,
    max_tokens=25_000,
    lr=7e-4,
    warmup_steps=800,
    save_every=200,
    keep_checkpoints=4,
    average_last=3,
    valid_every=400,
    valid_bleu_sentences=300,
    hint_rate=0.4,
)
# The student starts from trained weights: a fine-tune's rate (docs/training.md).
STUDENT_RECIPE = dict(lr=3e-4, warmup_steps=200)
LARGE = dict(d_model=512, n_heads=8, d_ff=2048, encoder_layers=6, decoder_layers=6, alignment_layer=1, dropout=0.3)
TINY = dict(d_model=16, n_heads=4, d_ff=32, encoder_layers=1, decoder_layers=2, alignment_layer=1, dropout=0.1)
TINY_RECIPE = dict(max_tokens=400, warmup_steps=5, save_every=5, valid_every=10, valid_bleu_sentences=4, average_last=2)


def pack(data_dir: Path, out: Path, student: Path | None = None) -> Path:
    """`out/data.tar.gz`: the DATA_FILES of `data_dir` that exist, compressed (the train split,
    its hint candidates and its alignment links are ~45 MB as text, ~10 MB packed), and with
    `student` (a model directory of the served size, e.g. a release bundle) its weights,
    config and tokenizer, for `run --distill-minutes`. The student's tokenizer must be the
    data's: it is fine-tuned on that data."""
    if student is not None and (student / "spm.model").read_bytes() != (data_dir / "spm.model").read_bytes():
        raise ValueError(f"{student}/spm.model is not the tokenizer {data_dir} was prepared with")
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out / DATA_ARCHIVE, "w:gz") as archive:
        for name in DATA_FILES:
            if (data_dir / name).is_file():
                archive.add(data_dir / name, arcname=name)
        for name in STUDENT_FILES if student is not None else ():
            archive.add(student / name, arcname=f"{STUDENT_DIR}/{name}")
    return out


def run(
    pack_dir: Path,
    out: Path,
    minutes: float,
    device: str,
    tiny: bool = False,
    init_from: Path | None = None,
    distill_minutes: float = 0.0,
) -> dict:
    """Train the large model on the packed data for `minutes` on `device`; with
    `distill_minutes` and a packed student, then distil it into the student (`distill.py`)
    and fine-tune the student that long. Writes into `out` what comes back: `large/` (the
    large model's weights as int8 parts, when they fit `RETURN_BYTES` beside the student),
    `distilled/` (the student's as float16 parts), each with config.json, spm.model,
    history.json and train_config.json, and round.json. Returns round.json's content."""
    import torch

    from data.files import WEIGHTS_FILE
    from seq2seq.core.config import ModelConfig, TrainConfig
    from seq2seq.training.distill import LINKS_FILE
    from seq2seq.training.hint_data import HINTS_FILE
    from seq2seq.training.train import train

    started = time.time()
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    data_dir = work / "data"
    with tarfile.open(pack_dir / DATA_ARCHIVE) as archive:
        archive.extractall(data_dir, filter="data")
    recipe = dict(RECIPE, **(TINY_RECIPE if tiny else {}))
    if not (data_dir / HINTS_FILE).is_file():
        recipe["hint_rate"] = 0.0

    def config(run: str, data: Path, budget: float, **changes) -> TrainConfig:
        links = data / LINKS_FILE
        train_config = TrainConfig(
            data_dir=str(data),
            out_dir=str(work / run),
            max_steps=10**7,
            max_minutes=budget,  # the budget is for training; loading and averaging take the rest
            device=device,
            precision="bf16",
            guided_alignment=str(links) if links.is_file() else "",
            threads=0,
            **dict(recipe, **changes),
        )
        return replace(train_config, max_steps=20, max_minutes=0) if tiny else train_config

    large_final = train(
        config("large", data_dir, minutes, init_from=str(init_from) if init_from else ""),
        ModelConfig(**(TINY if tiny else LARGE)),
        resume=False,
    )
    summary: dict = {
        "device": device if not device.startswith("cuda") else torch.cuda.get_device_name(),
        "large": {"model": TINY if tiny else LARGE, **last_validation(large_final)},
    }
    student_bytes = 0
    if distill_minutes > 0 and (data_dir / STUDENT_DIR / WEIGHTS_FILE).is_file():
        student_bytes = distil(large_final, data_dir, work, out, device, config, distill_minutes, summary)
    state = torch.load(large_final / WEIGHTS_FILE, map_location="cpu", weights_only=True)
    quantized = quantize_int8(state)
    if student_bytes + state_bytes(quantized) <= RETURN_BYTES:
        write_parts(quantized, large_final, out / LARGE_DIR, INT8_PART_NAME)
    else:
        summary["large"]["kept_on_device"] = "int8 weights and the student exceed the return budget"
    summary["minutes"] = round((time.time() - started) / 60, 2)
    (out / "round.json").write_text(json.dumps(summary, indent=2) + "\n")
    shutil.rmtree(work)  # only what comes back stays under $OUT
    return summary


def distil(
    teacher_dir: Path,
    data_dir: Path,
    work: Path,
    out: Path,
    device: str,
    config: Callable[..., TrainConfig],
    minutes: float,
    summary: dict,
) -> int:
    """Distil the large model in `teacher_dir` into the student packed in `data_dir` (its
    translations of the training split: `distill.py`), fine-tune the student on them for
    `minutes` (`config(run, data, minutes, **changes)` is the round's training config), and
    write its weights as float16 parts into `out`/distilled/. Adds `distillation` and
    `distilled` to `summary`; returns the parts' bytes."""
    import torch

    from data.files import CONFIG_FILE, WEIGHTS_FILE
    from seq2seq.core.config import ModelConfig
    from seq2seq.training.distill import write_distilled_data
    from seq2seq.training.model import load_model
    from seq2seq.training.train import train

    teacher = load_model(teacher_dir).to(device)
    distilled_data = work / "distilled-data"
    summary["distillation"] = write_distilled_data(data_dir, distilled_data, teacher, bf16=device != "cpu")
    del teacher  # its memory goes to the student's training
    student_final = train(
        config("student", distilled_data, minutes, init_from=str(data_dir / STUDENT_DIR), **STUDENT_RECIPE),
        ModelConfig(dropout=LARGE["dropout"]),
        resume=False,
    )
    state = torch.load(student_final / WEIGHTS_FILE, map_location="cpu", weights_only=True)
    student_bytes = write_parts(half(state), student_final, out / DISTILLED_DIR, PART_NAME)
    student_config = json.loads((student_final / CONFIG_FILE).read_text())
    summary["distilled"] = {"model": student_config, **last_validation(student_final)}
    return student_bytes


def last_validation(model_dir: Path) -> dict:
    history = json.loads((model_dir / "history.json").read_text())
    return {"steps": history[-1]["step"] if history else 0, "last_validation": history[-1] if history else None}


def half(state: dict) -> dict:
    return {k: v.half() if v.is_floating_point() else v for k, v in state.items()}


def quantize_int8(state: dict) -> dict:
    """Weight-only int8 for the trip back: every float matrix as int8 rows with one float16
    scale per row (symmetric, max-abs), vectors as float16; `dequantize_int8` inverts it.
    Half the bytes of float16, which is what lets a 48M-parameter model come back at all."""
    import torch

    matrices = {name: value for name, value in state.items() if value.is_floating_point() and value.dim() == 2}
    packed = half({name: value for name, value in state.items() if name not in matrices})
    for name, value in matrices.items():
        scale = value.float().abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127
        packed[name + INT8_SUFFIX] = torch.round(value.float() / scale).to(torch.int8)
        packed[name + SCALE_SUFFIX] = scale.half()
    return packed


def dequantize_int8(packed: dict) -> dict:
    state = {}
    for name, value in packed.items():
        if name.endswith(INT8_SUFFIX):
            base = name[: -len(INT8_SUFFIX)]
            state[base] = (value.float() * packed[base + SCALE_SUFFIX].float()).half()
        elif not name.endswith(SCALE_SUFFIX):
            state[name] = value
    return state


def state_bytes(state: dict) -> int:
    return sum(v.numel() * v.element_size() for v in state.values())


def write_parts(state: dict, model_dir: Path, out: Path, part_name: str) -> int:
    """The state dict serialised in parts of at most PART_BYTES under `out`, with the model
    directory's config, tokenizer and history; returns the bytes written."""
    import torch

    from data.files import CONFIG_FILE, TOKENIZER_FILE

    out.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    blob = buffer.getvalue()
    names = []
    for index, start in enumerate(range(0, len(blob), PART_BYTES)):
        names.append(part_name.format(index))
        (out / names[-1]).write_bytes(blob[start : start + PART_BYTES])
    for name in (CONFIG_FILE, TOKENIZER_FILE, "history.json", "train_config.json"):
        shutil.copyfile(model_dir / name, out / name)
    (out / PARTS_FILE).write_text(json.dumps(names) + "\n")
    return sum((out / name).stat().st_size for name in os.listdir(out))


def unpack(parts_dir: Path, out: Path) -> list[Path]:
    """Join what came back into model directories under `out`: `large/` and, after a
    distillation, `distilled/`, each with model.pt (float16), config.json and spm.model,
    which `crossalign eval --backend torch`, `train --init-from` and `export` take."""
    import torch

    from data.files import CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE

    made = []
    for name in (LARGE_DIR, DISTILLED_DIR):
        parts = parts_dir / name
        if not (parts / PARTS_FILE).is_file():
            continue
        target = out / name
        target.mkdir(parents=True, exist_ok=True)
        blob = b"".join((parts / part).read_bytes() for part in json.loads((parts / PARTS_FILE).read_text()))
        state = torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
        if any(key.endswith(INT8_SUFFIX) for key in state):
            state = dequantize_int8(state)
        torch.save(state, target / WEIGHTS_FILE)
        for file in (CONFIG_FILE, TOKENIZER_FILE, "history.json", "train_config.json"):
            shutil.copyfile(parts / file, target / file)
        shutil.copyfile(parts_dir / "round.json", target / "round.json")
        made.append(target)
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m seq2seq.training.gpu_round", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    packing = commands.add_parser("pack", help="here: the data archive the call carries")
    packing.add_argument("--data-dir", type=Path, required=True, help="a directory `crossalign data prepare` wrote")
    packing.add_argument("--out", type=Path, required=True)
    packing.add_argument(
        "--student", type=Path, default=None, help="a served-size model directory to distil into (e.g. models/de-en)"
    )
    running = commands.add_parser("run", help="on the device: train, weights back in parts")
    running.add_argument("--pack", type=Path, required=True, help="the folder `pack` wrote")
    running.add_argument("--out", type=Path, required=True, help="where the parts go ($OUT on the device)")
    running.add_argument("--minutes", type=float, default=4.0, help="the large model's training time (default 4)")
    running.add_argument(
        "--distill-minutes",
        type=float,
        default=1.5,
        help="then the packed student's training on the distilled data (0: no distillation; default 1.5)",
    )
    running.add_argument("--device", default="cuda")
    running.add_argument("--init-from", type=Path, default=None, help="continue a large model directory")
    running.add_argument("--tiny", action="store_true", help="a tiny model for a few steps (the CPU test)")
    unpacking = commands.add_parser("unpack", help="here: the parts joined into model directories")
    unpacking.add_argument("--parts", type=Path, required=True, help="the folder the device's files came back to")
    unpacking.add_argument("--out", type=Path, required=True, help="gets large/ and distilled/")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "pack":
        print(pack(args.data_dir, args.out, args.student))
    elif args.command == "run":
        summary = run(args.pack, args.out, args.minutes, args.device, args.tiny, args.init_from, args.distill_minutes)
        print(json.dumps(summary, indent=2))
    else:
        print("\n".join(str(path) for path in unpack(args.parts, args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
