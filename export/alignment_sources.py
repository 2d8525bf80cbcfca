"""Choose the alignment source on the gold set: which decoder layer, which heads, step shift or not.

Every gold pair's target is teacher-forced through the model once (seq2seq/decoding/forced.py);
from that one (L, H, T+1, S+1) attention array per pair, every candidate source is read
with the project's one rule (seq2seq.core.alignment: subword -> word, argmax links) and scored
against the gold links (seq2seq/analysis/aer.py: AER, precision, recall):

* every layer, mean of all heads;
* every single head of every layer;
* each of them with and without the step shift (row i read where target token i is the
  decoder *input*, Chen et al. 2020, "Accurate Word Alignment Induction from Neural
  Machine Translation").

Prints the table sorted by AER and the best choice, as the ModelConfig fields
(`alignment_layer`, `alignment_heads`) and the flags of `crossalign eval` / `align`.
Choosing on the gold set and reporting on the same set is optimistic; with 162 pairs,
differences under about one AER point are noise.

    OMP_NUM_THREADS=1 python -m export.alignment_sources --model work/release/final --backend torch \\
        --gold data/gold/de-en.gold.tsv [--json sources.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from data.files import BUNDLE_FILE
from seq2seq.analysis.aer import Score, read_gold, score
from seq2seq.core.alignment import align
from seq2seq.core.config import AlignmentError, AlignmentOptions
from seq2seq.decoding.forced import forced_attention
from seq2seq.loading import BACKENDS, load_translator

REPO = Path(__file__).resolve().parents[1]


def candidates(layers: int, heads: int) -> list[tuple[int, tuple[int, ...], bool]]:
    """(layer, heads, step_shift): each layer's mean, then each single head; shift off and on."""
    sources = [(layer, (), shift) for layer in range(layers) for shift in (False, True)]
    sources += [(layer, (head,), shift) for layer in range(layers) for head in range(heads) for shift in (False, True)]
    return sources


def describe(layer: int, heads: tuple[int, ...], shift: bool) -> str:
    return f"layer {layer}  {'mean' if not heads else f'head {heads[0]}':<7} {'shift' if shift else '-':<5}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--model", type=Path, required=True, help="model directory (bundle or training output)")
    parser.add_argument("--gold", type=Path, default=REPO / "data" / "gold" / "de-en.gold.tsv")
    parser.add_argument(
        "--backend",
        choices=("auto",) + BACKENDS,
        default="auto",
        help="auto: onnx for a bundle (bundle.json), else torch",
    )
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write every row as JSON here")
    return parser.parse_args(argv)


def teacher_force(args: argparse.Namespace) -> tuple[Any, list, list]:
    """Load the model and teacher-force every gold pair: (model config, gold pairs, forced attention)."""
    backend = args.backend
    if backend == "auto":
        backend = "onnx" if (args.model / BUNDLE_FILE).is_file() else "torch"
    translator = load_translator(args.model, backend, args.threads)
    config = translator.backend.config
    gold = read_gold(args.gold)
    started = time.perf_counter()
    prepared = forced_attention(translator, [(pair.source, pair.target) for pair in gold])
    failed = [pair.line for pair, item in zip(gold, prepared) if isinstance(item, AlignmentError)]
    if failed:
        print(
            f"warning: {len(failed)} gold pairs could not be aligned (lines {failed[:10]}); they count as "
            "pairs without links",
            file=sys.stderr,
        )
    print(
        f"{args.model} ({backend}): {config.decoder_layers} decoder layers x {config.n_heads} heads; "
        f"{len(gold)} gold pairs teacher-forced in {time.perf_counter() - started:.1f} s",
        flush=True,
    )
    return config, gold, prepared


def score_source(config, gold: list, prepared: list, layer: int, heads: tuple[int, ...], shift: bool) -> Score:
    """AER, precision and recall of one alignment source on the gold set."""
    options = AlignmentOptions("word", layer, heads, shift).resolve(config)
    hypotheses = []
    for pair, item in zip(gold, prepared):
        if isinstance(item, AlignmentError):
            hypotheses.append(set())
            continue
        attention, source_pieces, target_pieces, *_ = item
        maps = align(attention, pair.source, source_pieces, pair.target, target_pieces, options)
        hypotheses.append(set(maps.word.links))
    return score(hypotheses, gold)


def print_rows(rows: list, current: Score, config) -> None:
    """The table, the best source, the model's current default and the best as flags and fields."""
    print(f"\n{'source':<26} {'AER':>6} {'prec':>6} {'recall':>6}")
    for result, layer, heads, shift in rows:
        print(
            f"{describe(layer, heads, shift):<26} {100 * result.aer:6.1f} {100 * result.precision:6.1f} "
            f"{100 * result.recall:6.1f}"
        )
    best, layer, heads, shift = rows[0]
    print(f"\nbest: {describe(layer, heads, shift).strip()}: {best}")
    print(
        f"the model's current default (layer {config.resolved_alignment_layer}, heads "
        f"{list(config.alignment_heads) or 'mean'}, {'step shift' if config.alignment_step_shift else 'no shift'}): "
        f"AER {100 * current.aer:.1f}"
    )
    heads_flag = " ".join(map(str, heads)) if heads else "(no value: the mean of all heads)"
    print(f"as flags: --layer {layer} --heads {heads_flag}{' --step-shift' if shift else ''}")
    print(f"as ModelConfig: alignment_layer={layer}, alignment_heads={tuple(heads)}, alignment_step_shift={shift}")


def write_json(path: Path, rows: list) -> None:
    path.write_text(
        json.dumps(
            [
                {
                    "layer": layer,
                    "heads": list(heads) or "mean",
                    "step_shift": shift,
                    "aer": round(100 * r.aer, 2),
                    "precision": round(100 * r.precision, 2),
                    "recall": round(100 * r.recall, 2),
                }
                for r, layer, heads, shift in rows
            ],
            indent=1,
        )
        + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config, gold, prepared = teacher_force(args)
    rows = [
        (score_source(config, gold, prepared, layer, heads, shift), layer, heads, shift)
        for layer, heads, shift in candidates(config.decoder_layers, config.n_heads)
    ]
    rows.sort(key=lambda row: (row[0].aer, -row[0].recall))
    current = score_source(
        config,
        gold,
        prepared,
        config.resolved_alignment_layer,
        tuple(config.alignment_heads),
        config.alignment_step_shift,
    )
    print_rows(rows, current, config)
    if args.json:
        write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
