"""The GPU round: a larger model trained by our recipe in one command on a lent GPU.

A GPU is lent to a session only now and then, with a tight budget (one GPU, a few minutes
of device time, one command at most 10 minutes, files back at most 16 MiB each, the working
tree that travels at most 64 MiB, no network; its Python has torch, numpy, tqdm,
sentencepiece and sacrebleu). So the round is three commands, two of them on this machine:

    # here: the prepared data in one archive, in an ignored folder the call carries (work/ is ignored)
    python -m seq2seq.training.gpu_round pack --data-dir ~/.cache/crossalign/data/ding8k-hints --out work/gpu
    # on the device (carry: work/gpu): train for --minutes, weights back in parts < 16 MiB
    PYTHONUNBUFFERED=1 python3 -m seq2seq.training.gpu_round run --pack work/gpu --out "$OUT" --minutes 7

The working tree travels with the call and must stay within 64 MiB: with two release
bundles under models/ (~85 MB) it does not, and the round needs none of them, so move them
aside for the call (`mv models /tmp/models-aside`, back afterwards).
    # here: the parts joined into a model directory that `crossalign eval/export` take
    python -m seq2seq.training.gpu_round unpack --parts FILES_AT --out ~/.cache/crossalign/runs/gpu-1/final

`run` trains the recipe the CPU runs converged with (`RECIPE`: phrases at 30% of the target
tokens, dropout 0.3, word dropout 0.1, label smoothing 0.2, guided alignment on head 2 of
decoder layer 1, target-term hints when the data has them, bf16 autocast) at the size a GPU
affords (`LARGE`: d 512, 8 heads, 6 + 6 layers), stops at its wall-clock budget, averages
the last checkpoints and writes them as float16 parts with the config, the tokenizer and
the history. `--tiny` runs the same path with a tiny model on the CPU in seconds: the test
suite runs it, so the round cannot rot between the sessions that get a GPU. A larger model
ships only if it measures better and its int8 batch-1 p50 stays within 50 ms here
(bench/inference.py).
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import shutil
import sys
import tarfile
import time
from dataclasses import replace
from pathlib import Path

log = logging.getLogger("crossalign.gpu_round")

PART_BYTES = 15 * 1024 * 1024  # files come back from the device at most 16 MiB each
DATA_ARCHIVE = "data.tar.gz"
PART_NAME = "model.pt.part{:02d}"
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
LARGE = dict(d_model=512, n_heads=8, d_ff=2048, encoder_layers=6, decoder_layers=6, alignment_layer=1, dropout=0.3)
TINY = dict(d_model=16, n_heads=4, d_ff=32, encoder_layers=1, decoder_layers=2, alignment_layer=1, dropout=0.1)
TINY_RECIPE = dict(max_tokens=400, warmup_steps=5, save_every=5, valid_every=10, valid_bleu_sentences=4, average_last=2)


def pack(data_dir: Path, out: Path) -> Path:
    """`out/data.tar.gz`: the DATA_FILES of `data_dir` that exist, compressed (the train split,
    its hint candidates and its alignment links are ~45 MB as text, ~10 MB packed)."""
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out / DATA_ARCHIVE, "w:gz") as archive:
        for name in DATA_FILES:
            if (data_dir / name).is_file():
                archive.add(data_dir / name, arcname=name)
    return out


def run(
    pack_dir: Path, out: Path, minutes: float, device: str, tiny: bool = False, init_from: Path | None = None
) -> dict:
    """Train on the packed data for `minutes` on `device`; write the averaged weights as
    float16 parts of at most PART_BYTES, config.json, spm.model, history.json and
    round.json into `out`. Returns round.json's content."""
    import torch

    from data.files import CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE
    from seq2seq.core.config import ModelConfig, TrainConfig
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
    links = data_dir / "eflomal.train.pharaoh"
    # The budget is for training; loading the data and averaging take the rest of the command.
    train_config = TrainConfig(
        data_dir=str(data_dir),
        out_dir=str(work / "run"),
        max_steps=10**7,
        max_minutes=minutes,
        device=device,
        precision="bf16",
        guided_alignment=str(links) if links.is_file() else "",
        init_from=str(init_from) if init_from else "",
        threads=0,
        **recipe,
    )
    if tiny:
        train_config = replace(train_config, max_steps=20, max_minutes=0)
    final = train(train_config, ModelConfig(**(TINY if tiny else LARGE)), resume=False)
    state = torch.load(final / WEIGHTS_FILE, map_location="cpu", weights_only=True)
    buffer = io.BytesIO()
    torch.save({k: v.half() if v.is_floating_point() else v for k, v in state.items()}, buffer)
    parts = split_bytes(buffer.getvalue(), out)
    for name in (CONFIG_FILE, TOKENIZER_FILE, "history.json", "train_config.json"):
        shutil.copyfile(final / name, out / name)
    history = json.loads((final / "history.json").read_text())
    summary = {
        "device": device if not device.startswith("cuda") else torch.cuda.get_device_name(),
        "minutes": round((time.time() - started) / 60, 2),
        "steps": history[-1]["step"] if history else 0,
        "last_validation": history[-1] if history else None,
        "parts": parts,
        "model": TINY if tiny else LARGE,
    }
    (out / "round.json").write_text(json.dumps(summary, indent=2) + "\n")
    shutil.rmtree(work)  # only what comes back stays under $OUT
    return summary


def split_bytes(blob: bytes, out: Path) -> list[str]:
    names = []
    for index, start in enumerate(range(0, len(blob), PART_BYTES)):
        names.append(PART_NAME.format(index))
        (out / names[-1]).write_bytes(blob[start : start + PART_BYTES])
    return names


def unpack(parts_dir: Path, out: Path) -> Path:
    """Join the parts into `out/model.pt` beside config.json and spm.model: a model
    directory that `crossalign eval --backend torch`, `train --init-from` and `export` take."""
    from data.files import CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE

    out.mkdir(parents=True, exist_ok=True)
    names = json.loads((parts_dir / "round.json").read_text())["parts"]
    (out / WEIGHTS_FILE).write_bytes(b"".join((parts_dir / name).read_bytes() for name in names))
    for name in (CONFIG_FILE, TOKENIZER_FILE, "history.json", "train_config.json", "round.json"):
        shutil.copyfile(parts_dir / name, out / name)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m seq2seq.training.gpu_round", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    packing = commands.add_parser("pack", help="here: the data archive the call carries")
    packing.add_argument("--data-dir", type=Path, required=True, help="a directory `crossalign data prepare` wrote")
    packing.add_argument("--out", type=Path, required=True)
    running = commands.add_parser("run", help="on the device: train, weights back in parts")
    running.add_argument("--pack", type=Path, required=True, help="the folder `pack` wrote")
    running.add_argument("--out", type=Path, required=True, help="where the parts go ($OUT on the device)")
    running.add_argument("--minutes", type=float, default=7.0, help="training wall time (default 7)")
    running.add_argument("--device", default="cuda")
    running.add_argument("--init-from", type=Path, default=None, help="continue a model directory of this size")
    running.add_argument("--tiny", action="store_true", help="a tiny model for a few steps (the CPU test)")
    unpacking = commands.add_parser("unpack", help="here: the parts joined into a model directory")
    unpacking.add_argument("--parts", type=Path, required=True, help="the folder the device's files came back to")
    unpacking.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "pack":
        print(pack(args.data_dir, args.out))
    elif args.command == "run":
        print(json.dumps(run(args.pack, args.out, args.minutes, args.device, args.tiny, args.init_from), indent=2))
    else:
        print(unpack(args.parts, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
