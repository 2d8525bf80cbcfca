"""Calibrate a bundle's sentence confidence on held-out data (`seq2seq.analysis.calibration`).

The model translates each split as served (the bundle's decoding, the quality block of
`crossalign translate`/the API, one text per line); each sentence's raw `confidence` is
paired with its sentence chrF against the reference. The calibration is fitted on the
first split (valid) and checked on the others (gold, test): Spearman and Pearson of the raw
confidence with chrF, and, per band, the sentences in it, their mean chrF and the share
usable. `--save` writes it into the bundle as calibration.json (with this command's
settings and figures in `fitted_on`) and lists it in bundle.json; `--figure` draws the
reliability diagram of every split (predicted P(usable) against the share usable).

    python -m export.confidence_calibration models/de-en \\
        --split valid=~/.cache/crossalign/data/ding8k-po/valid.tsv \\
        --split gold=data/gold/de-en.gold.tsv --split test=~/.cache/crossalign/data/ding8k-po/test.tsv \\
        --save --figure docs/calibration-de-en.png

Translations are cached under --cache, keyed by the bundle's manifest, the split's lines and
the search settings, so a rerun only refits. `--swap NAME` reads a split's columns as
(target, source): the en-de bundle is calibrated on the same valid split, reversed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from data.files import BUNDLE_FILE, CALIBRATION_FILE
from export.planted import spearman
from seq2seq.analysis.calibration import BANDS, Calibration, fit_calibration, reliability
from seq2seq.core.config import AlignmentOptions
from seq2seq.decoding.texts import translate_texts

DEFAULT_CACHE = Path.home() / ".cache/crossalign/runs/calibration"
BATCH = 32


def read_pairs(path: Path, swap: bool) -> list[tuple[str, str]]:
    """(source, reference) per line of a TSV (first two columns), swapped with `swap`."""
    pairs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        columns = line.split("\t")
        if len(columns) >= 2 and columns[0].strip() and columns[1].strip():
            pairs.append((columns[1], columns[0]) if swap else (columns[0], columns[1]))
    return pairs


def model_key(model: Path) -> dict:
    """What a translation depends on in a bundle: its files' hashes (calibration.json, which
    this command writes, aside) and its decoding; not bundle.json's bytes, which --save changes."""
    manifest = json.loads((model / BUNDLE_FILE).read_text())
    files = {name: entry["sha256"] for name, entry in manifest["files"].items() if name != CALIBRATION_FILE}
    return {"files": files, "decoding": manifest.get("decoding"), "precision": manifest["precision"]}


def translate_split(translator, name: str, pairs: list[tuple[str, str]], cache: Path, model: Path) -> list[dict]:
    """Per pair: source, reference, hypothesis, raw confidence and sentence chrF; cached."""
    import sacrebleu

    config = translator.decode_defaults.override(alignment=AlignmentOptions(), occlusion=False)
    key = [model_key(model), pairs, config.search_settings, config.dictionary_hints]
    path = cache / f"{name}-{hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]}.json"
    if path.is_file():
        return json.loads(path.read_text())
    records = []
    for start in tqdm(range(0, len(pairs), BATCH), desc=f"translate {name}", unit="batch", file=sys.stderr):
        chunk = pairs[start : start + BATCH]
        texts = translate_texts([s for s, _ in chunk], lambda sentences: translator.translate_batch(sentences, config))
        for (source, reference), text in zip(chunk, texts):
            quality = text.quality()
            records.append(
                {
                    "source": source,
                    "reference": reference,
                    "hypothesis": text.text,
                    "confidence": None if quality is None else quality.confidence,
                    "chrf": sacrebleu.sentence_chrf(text.text, [reference]).score,
                }
            )
    cache.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records))
    return records


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.corrcoef(x, y)[0, 1])


def split_figures(calibration: Calibration, records: list[dict]) -> dict:
    """Correlations of the raw confidence with chrF, and what each band holds, on one split."""
    c = np.array([r["confidence"] for r in records], dtype=np.float64)
    y = np.array([r["chrf"] for r in records], dtype=np.float64)
    read = [calibration(float(v)) for v in c]
    usable = np.array([r.usable for r in read])
    bands = np.array([r.band for r in read])
    observed = (y >= calibration.usable_chrf).astype(np.float64)
    figures = {
        "sentences": len(records),
        "spearman": round(spearman(c, y), 3),
        "pearson": round(pearson(c, y), 3),
        "confidence_range": [round(float(c.min()), 3), round(float(c.max()), 3)],
        "mean_chrf": round(float(y.mean()), 2),
        "usable_share": round(float(observed.mean()), 3),
        "mean_predicted_usable": round(float(usable.mean()), 3),
        # Brier score of P(usable), beside that of always predicting the split's own share.
        "brier": round(float(((usable - observed) ** 2).mean()), 4),
        "brier_constant": round(float(observed.var()), 4),
        "bands": {},
    }
    for band in BANDS:
        kept = bands == band
        figures["bands"][band] = {
            "sentences": int(kept.sum()),
            "mean_chrf": round(float(y[kept].mean()), 2) if kept.any() else None,
            "usable_share": round(float(observed[kept].mean()), 3) if kept.any() else None,
        }
    figures["reliability"] = [[round(p, 3), round(o, 3), n] for p, o, n in reliability(usable, observed)]
    return figures


def print_figures(name: str, figures: dict) -> None:
    bands = "  ".join(
        f"{band} {v['sentences']} (chrF {v['mean_chrf']}, usable {v['usable_share']})"
        for band, v in figures["bands"].items()
    )
    print(
        f"{name:<6} {figures['sentences']:>5}  spearman {figures['spearman']:.3f}  pearson {figures['pearson']:.3f}  "
        f"mean chrF {figures['mean_chrf']:.1f}  usable {figures['usable_share']:.3f} "
        f"(predicted {figures['mean_predicted_usable']:.3f})  brier {figures['brier']:.4f} "
        f"(constant {figures['brier_constant']:.4f})\n       {bands}"
    )


def draw(figures: dict[str, dict], title: str, usable_chrf: float, path: Path) -> None:
    """The reliability diagram: per split, predicted P(usable) against the share usable."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 4.6), dpi=100)
    ax.plot([0, 1], [0, 1], color="0.6", linestyle="--", linewidth=1, label="perfectly calibrated")
    for (name, split), marker in zip(figures.items(), "osd^v"):
        points = np.array(split["reliability"], dtype=np.float64)
        ax.plot(points[:, 0], points[:, 1], marker=marker, label=f"{name} ({split['sentences']} sentences)")
    ax.set_xlabel("predicted P(usable)  (calibrated confidence)")
    ax.set_ylabel(f"share usable (sentence chrF >= {usable_chrf:g})")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_title(title, fontsize=10)
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})  # no version stamp: the same data draw the same bytes
    plt.close(fig)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m export.confidence_calibration",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("model", type=Path, help="release bundle directory")
    parser.add_argument(
        "--split",
        action="append",
        required=True,
        metavar="NAME=TSV",
        help="a held-out split (source<TAB>reference...); the first is fitted on, the others checked",
    )
    parser.add_argument("--swap", action="append", default=[], metavar="NAME", help="read this split's columns swapped")
    parser.add_argument("--bins", type=int, default=10, help="equal-count confidence bins of the fit")
    parser.add_argument(
        "--usable-chrf",
        type=float,
        default=Calibration.usable_chrf,
        help="a sentence is usable from this sentence chrF",
    )
    parser.add_argument("--low-below", type=float, default=Calibration.low_below, help="band low: P(usable) below")
    parser.add_argument("--high-from", type=float, default=Calibration.high_from, help="band high: P(usable) from")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where translations are cached")
    parser.add_argument("--threads", type=int, default=0, help="onnxruntime threads (0: its default)")
    parser.add_argument(
        "--save", action="store_true", help=f"write MODEL/{CALIBRATION_FILE} and list it in bundle.json"
    )
    parser.add_argument("--figure", type=Path, help="draw the reliability diagram here (PNG)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    splits = {}
    for spec in args.split:
        name, _, path = spec.partition("=")
        if not name or not path:
            parser.error(f"--split {spec!r}: write NAME=TSV, e.g. valid=~/.cache/crossalign/data/ding8k-po/valid.tsv")
        splits[name] = Path(os.path.expanduser(path))
        if not splits[name].is_file():
            parser.error(f"--split {name}: no such file {splits[name]}")
    if unknown := set(args.swap) - set(splits):
        parser.error(f"--swap {', '.join(sorted(unknown))}: not a --split name")
    args.splits = splits
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from seq2seq.loading import load_translator
    from seq2seq.runtime.bundle import set_calibration_file

    translator = load_translator(args.model, threads=args.threads, quality_mode="fast")
    records = {
        name: translate_split(translator, name, read_pairs(path, name in args.swap), args.cache, args.model)
        for name, path in args.splits.items()
    }
    fit_name = next(iter(records))
    c = np.array([r["confidence"] for r in records[fit_name]], dtype=np.float64)
    y = np.array([r["chrf"] for r in records[fit_name]], dtype=np.float64)
    settings = {"bins": args.bins, "usable_chrf": args.usable_chrf, "low_below": args.low_below}
    calibration = fit_calibration(c, y, **settings, high_from=args.high_from)
    figures = {name: split_figures(calibration, split) for name, split in records.items()}
    for name, split in figures.items():
        print_figures(name, split)
    provenance = {
        "model": hashlib.sha256(json.dumps(model_key(args.model)).encode()).hexdigest()[:16],
        "splits": {name: {"path": str(path), "swapped": name in args.swap} for name, path in args.splits.items()},
        "fitted_on": fit_name,
        "decoding": "the bundle's (as served), quality mode fast (the confidence does not depend on it)",
        "by": "python -m export.confidence_calibration",
        "settings": settings | {"high_from": args.high_from},
        "figures": {name: {k: v for k, v in f.items() if k != "reliability"} for name, f in figures.items()},
    }
    calibration = Calibration.from_dict(calibration.to_dict() | {"fitted_on": provenance})
    if args.save:
        calibration.save(args.model / CALIBRATION_FILE)
        set_calibration_file(args.model)
        print(f"wrote {args.model / CALIBRATION_FILE}")
    if args.figure:
        languages = json.loads((args.model / BUNDLE_FILE).read_text())["languages"]
        title = f"{languages['source']}->{languages['target']}: calibrated confidence, fitted on {fit_name}"
        draw(figures, title, args.usable_chrf, args.figure)
        print(f"wrote {args.figure}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
