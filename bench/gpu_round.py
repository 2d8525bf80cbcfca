"""The GPU round measured on the CPU: what comes back from the device, and what a training
batch costs the host.

What comes back: the round's largest return, a d 512, 6 + 6-layer teacher as int8 and a
served-size student (d 256, 4 + 3 layers, 8,002 pieces, as models/de-en) as float16, both
random, written as the round writes them: each record's bytes, the files and their sizes,
and what the device's limits leave (`round_files.check_return`).

A batch: one of the round's recipe (25k tokens) made on the CPU, with guided-alignment
targets (as `crossalign train` made every batch, in the training process) and without (the
round's teacher), in the training process and from worker processes
(`TrainConfig.batch_workers`). A GPU step of the teacher is far shorter than a batch made in
the training process, so the host side sets the pace. On the real data (its links and hints
when it has them), all in one run:

    python bench/gpu_round.py --data-dir ~/.cache/crossalign/data/ding8k-po --batches 40 --workers 2

"main_thread_cpu_ms_per_batch" is what the training loop's thread still spends per batch
while the workers make them; "process_cpu_ms_per_batch" adds the process's other threads
(the next epoch's plan, about "epoch_plan_cpu_s" per "batches_per_epoch"). Worker throughput here is bounded by this
machine's cores; the device has 16.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import replace
from itertools import islice
from pathlib import Path

import torch

from data.tokenizer import Tokenizer
from seq2seq.core.config import ModelConfig, TrainConfig
from seq2seq.training.distill import LINKS_FILE
from seq2seq.training.gpu_round import LARGE, RECIPE
from seq2seq.training.hint_data import HINTS_FILE
from seq2seq.training.model import Transformer
from seq2seq.training.round_files import RoundFiles, check_return, model_record, packing_for
from seq2seq.training.train import load_training_data
from seq2seq.training.train_data import BatchPlan, BatchPreparer, prepared_batches

STATE = {"step": 0, "epoch": 0, "batch_in_epoch": 0}


def random_state(config: ModelConfig) -> dict[str, torch.Tensor]:
    with torch.device("meta"):
        shapes = {name: value.shape for name, value in Transformer(config).state_dict().items()}
    return {name: torch.randn(shape) * 0.05 for name, shape in shapes.items()}


def return_sizes() -> dict:
    """The teacher's and the student's records in one stream, as the round writes them."""
    report: dict = {}
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        files = RoundFiles(root / "OUT")
        for name, config in (
            ("teacher", ModelConfig(**dict(LARGE, vocab_size=8002))),
            ("student", ModelConfig(vocab_size=8002)),
        ):
            state = random_state(config)
            packing = "int8" if name == "teacher" else packing_for(state, files.stream_bytes_left)
            model_dir = root / name
            model_dir.mkdir()
            for file, text in (("config.json", "{}"), ("history.json", "[]"), ("train_config.json", "{}")):
                (model_dir / file).write_text(text)
            entry = files.append(name, model_record(state, model_dir, packing), packing=packing)
            report[name] = {"parameters": sum(v.numel() for v in state.values()), "packing": packing}
            report[name]["record_mib"] = round(entry["bytes"] / 2**20, 2)
        files.write()
        report["files"] = {path.name: round(path.stat().st_size / 2**20, 2) for path in sorted(files.out.iterdir())}
        report["stream_mib_left"] = round(files.stream_bytes_left / 2**20, 2)
        report["beyond_the_device_s_limits"] = check_return(files.out)
    return report


def timed_batches(preparer: BatchPreparer, plan: BatchPlan, count: int, workers: int) -> dict:
    """Wall ms per batch over `count` batches (after the first, which holds the workers'
    start), the training process's CPU ms per batch (its main thread alone, and all its
    threads: the next epoch's plan included), and the real target tokens per batch."""
    batches = prepared_batches(preparer, plan, workers)
    next(batches)
    wall, thread, process, tokens = time.perf_counter(), time.thread_time(), time.process_time(), 0
    for batch in islice(batches, count):
        tokens += batch.tokens
    return {
        "wall_ms_per_batch": round(1000 * (time.perf_counter() - wall) / count, 1),
        "main_thread_cpu_ms_per_batch": round(1000 * (time.thread_time() - thread) / count, 1),
        "process_cpu_ms_per_batch": round(1000 * (time.process_time() - process) / count, 1),
        "target_tokens_per_batch": round(tokens / count),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=None, help="without it: what comes back alone")
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(json.dumps({"what comes back": return_sizes()}, indent=1), flush=True)
    if args.data_dir is None:
        return
    data_dir = args.data_dir.expanduser()
    tokenizer = Tokenizer(data_dir / "spm.model")
    model_config = ModelConfig(**dict(LARGE, vocab_size=tokenizer.vocab_size))
    links = data_dir / LINKS_FILE
    recipe = dict(RECIPE, hint_rate=RECIPE["hint_rate"] if (data_dir / HINTS_FILE).is_file() else 0.0)
    teacher = TrainConfig(data_dir=str(data_dir), max_minutes=4.0, **recipe)
    variants = {"teacher (no guided alignment)": teacher}
    if links.is_file():
        variants["guided alignment, head 2"] = replace(teacher, guided_alignment=str(links), guided_head=2)
    report: dict = {"data": str(data_dir), "hint_rate": recipe["hint_rate"], "max_tokens": teacher.max_tokens}
    for name, config in variants.items():
        start, cpu = time.perf_counter(), time.process_time()
        data = load_training_data(config, model_config, data_dir, tokenizer)
        loading = {"load_s": round(time.perf_counter() - start, 1), "load_cpu_s": round(time.process_time() - cpu, 1)}
        plan = BatchPlan(data.examples, data.phrases, config, STATE, 0, 1)
        cpu = time.process_time()
        loading["batches_per_epoch"] = len(plan.batches(0))
        loading["epoch_plan_cpu_s"] = round(time.process_time() - cpu, 2)
        here = BatchPreparer(data.reader, model_config, config.word_dropout, data.guided)
        report[name] = {**loading, "in the training process": timed_batches(here, plan, args.batches, 0)}
        workers = BatchPreparer(data.reader, model_config, config.word_dropout, data.guided, reseed=config.seed)
        report[name][f"{args.workers} workers"] = timed_batches(workers, plan, args.batches, args.workers)
        print(json.dumps(report, indent=1), flush=True)


if __name__ == "__main__":
    main()
