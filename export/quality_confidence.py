"""Confidence vs quality, part 2 of `export/quality_signals.py`: the model translates each
split (beam as served), the confidence weights are fitted on valid against sentence chrF,
and every split's confidence (and each feature alone) is ranked against chrF (Spearman's ρ).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from data.files import BUNDLE_FILE, WEIGHTS_FILE
from export.planted import Links, spearman
from seq2seq.analysis.confidence import confidence_features
from seq2seq.analysis.quality import is_punctuation, source_coverage
from seq2seq.core.alignment import words
from seq2seq.core.config import DecodeConfig

Splits = dict[str, tuple[list[tuple[str, str]], list[Links]]]


def model_key(model: Path) -> str:
    manifest = model / BUNDLE_FILE
    text = manifest.read_bytes() if manifest.is_file() else (model / WEIGHTS_FILE).read_bytes()
    return hashlib.sha256(text).hexdigest()[:12]


def translate_split(
    translator, split: str, pairs: list[tuple[str, str]], config: DecodeConfig, cache: Path | None, key: str
) -> list[dict]:
    """Per pair: the translation, its mean token log-prob and its word map from the default source."""
    path = None
    if cache is not None:
        # Every search setting: a translation made with other ones (say, before the guard) is not reused.
        digest = hashlib.sha256(json.dumps([key, split, pairs, config.search_settings]).encode())
        path = cache / f"translations-{split}-{digest.hexdigest()[:16]}.json"
        if path.is_file():
            return json.loads(path.read_text())
    records = []
    batch = 32
    for start in tqdm(range(0, len(pairs), batch), desc=f"translate {split}", unit="batch", file=sys.stderr):
        chunk = pairs[start : start + batch]
        for (source, _), result in zip(chunk, translator.translate_batch([s for s, _ in chunk], config)):
            alignment = translator.align(source, result)
            records.append(
                {
                    "hypothesis": result.text,
                    "mean_log_prob": result.mean_log_prob,
                    "source_words": [t.text for t in alignment.source_tokens],
                    "target_words": [t.text for t in alignment.target_tokens],
                    "matrix": np.round(alignment.matrix, 5).tolist(),
                }
            )
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(records))
    return records


def report_confidence(
    translator, args: argparse.Namespace, splits: Splits, names: list[str], report: dict
) -> tuple[np.ndarray, float]:
    """Fit the confidence weights on valid against sentence chrF and score every split;
    returns the weights and the expected length ratio (reference / source words on valid)."""
    decode = translator.decode_defaults.override(beam_size=args.beam_size)  # as served: the bundle's decoding
    import sacrebleu

    translated = {
        name: translate_split(translator, name, pairs, decode, args.cache, model_key(args.model))
        for name, (pairs, _) in splits.items()
    }
    valid_pairs = splits["valid"][0]
    reference_words = sum(sum(not is_punctuation(t.text) for t in words(r)) for _, r in valid_pairs)
    source_words = sum(sum(not is_punctuation(t.text) for t in words(s)) for s, _ in valid_pairs)
    expected_ratio = reference_words / source_words

    def features_and_chrf(name: str) -> tuple[np.ndarray, np.ndarray]:
        rows, chrf = [], []
        for record, (_, reference) in zip(translated[name], splits[name][0]):
            coverage = source_coverage(np.array(record["matrix"]).reshape(len(record["target_words"]), -1))
            rows.append(
                confidence_features(
                    record["mean_log_prob"], coverage, record["source_words"], record["target_words"], expected_ratio
                )
            )
            chrf.append(sacrebleu.sentence_chrf(record["hypothesis"], [reference]).score / 100)
        return np.array(rows), np.array(chrf)

    x_valid, y_valid = features_and_chrf("valid")
    weights, *_ = np.linalg.lstsq(x_valid, y_valid, rcond=None)
    print(
        f"\nconfidence vs sentence chrF (Spearman's rho; beam {args.beam_size}); weights fitted on valid: "
        f"bias {weights[0]:.3f}, log-prob {weights[1]:.3f}, coverage {weights[2]:.3f}, length {weights[3]:.3f}; "
        f"expected length ratio {expected_ratio:.3f}"
    )
    print(
        f"{'split':<6} {'pairs':>5} {'log-prob alone':>15} {'coverage alone':>15} {'length alone':>13} "
        f"{'confidence':>11} {'mean conf':>10} {'mean chrF':>10}"
    )
    for name in names:
        x, y = features_and_chrf(name) if name != "valid" else (x_valid, y_valid)
        confidence = np.clip(x @ weights, 0.0, 1.0)
        row = {
            "split": name,
            "pairs": len(y),
            "log_prob": spearman(x[:, 1], y),
            "coverage": spearman(x[:, 2], y),
            "length": spearman(x[:, 3], y),
            "confidence": spearman(confidence, y),
            "mean_confidence": float(confidence.mean()),
            "mean_chrf": float(y.mean()),
        }
        print(
            f"{name:<6} {len(y):>5} {row['log_prob']:15.3f} {row['coverage']:15.3f} {row['length']:13.3f} "
            f"{row['confidence']:11.3f} {row['mean_confidence']:10.3f} {row['mean_chrf']:10.3f}"
        )
        report.setdefault("confidence", []).append(row)
    return weights, expected_ratio
