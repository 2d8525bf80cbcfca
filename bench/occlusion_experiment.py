"""EXPERIMENT (issue #14): does source occlusion help the `untranslated` detector?

Plants the omissions of `bench/quality_signals.py`, teacher-forces every intact and omission
case once more per source word with that word occluded (`seq2seq.analysis.occlusion`), and fits the
detector on valid-fit with the attention features alone, with occlusion features added, and
with the occlusion features alone; scores them on valid-held and gold.

    python bench/occlusion_experiment.py --model models/de-en --data ~/.cache/crossalign/data/ding8k-all \\
        --mode remove --singles
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
for path in (REPO, REPO / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from planted import HEADER, best_threshold, evaluate_split, fit_detector, print_row  # noqa: E402
from quality_signals import FIT, HELD, Signals, planted_cases, read_splits  # noqa: E402

from seq2seq.analysis.occlusion import OCCLUSION_FEATURES  # noqa: E402
from seq2seq.analysis.quality import feature_names  # noqa: E402
from seq2seq.core.alignment import projection, subword_map, visible, words  # noqa: E402
from seq2seq.decoding.forced import forced_attention  # noqa: E402
from seq2seq.loading import load_translator  # noqa: E402


def features(base: np.ndarray, occluded: np.ndarray, attention: np.ndarray, to_words: np.ndarray) -> dict:
    """Candidate occlusion features per source word, from base (T+1,) and occluded (Sw, T+1) log-probs."""
    drops = np.nan_to_num(base[None, :] - occluded, nan=0.0)  # (Sw, T+1): how much less likely each piece got
    total = drops.sum(axis=1)
    attended = np.stack([subword_map(attention, n, (), False) @ to_words for n in range(attention.shape[0])])
    weights = attended.mean(axis=0)  # (T, Sw) mean over layers, output steps
    weighted = (weights * drops[:, :-1].T).sum(axis=0) / np.maximum(weights.sum(axis=0), 1e-6)
    clipped = np.maximum(drops, 0.0)
    return {
        "occ_total": total,
        "occ_mean": total / drops.shape[1],
        "occ_max": drops.max(axis=1),
        "occ_log_max": np.log(np.maximum(drops.max(axis=1), 0.0) + 0.1),
        "occ_log_pos": np.log(clipped.sum(axis=1) + 0.1),
        "occ_neg": np.minimum(drops, 0.0).sum(axis=1),
        "occ_attended": weighted,
        "occ_eos": drops[:, -1],
        "occ_share": clipped.sum(axis=1) / max(clipped.sum(), 1e-6),
    }


def score(signals: Signals, names: tuple[str, ...], label: str) -> None:
    """Fit a detector over `names` on FIT (omission cases) and print valid-held and gold."""
    items = [
        (table, item)
        for (table, case), item in zip(signals.tables(0), signals.feature(0, "log_coverage"))
        if case.split == FIT and case.kind == "omission"
    ]
    detector = fit_detector(items, names)
    logits = signals.detector(0, detector)
    baseline = signals.feature(0, "log_coverage")
    for split in (HELD, "gold"):
        row = evaluate_split(logits, split, "omission", detector.threshold, True, baseline)
        print_row(label, f"logit > {detector.threshold:.2f}", row)


def single(signals: Signals, name: str, above: bool) -> None:
    """One feature alone, its threshold chosen on FIT."""
    items = signals.feature(0, name)
    fit = [i for i in items if i.case.split == FIT and i.case.kind == "omission"]
    grid = np.unique(np.quantile(np.concatenate([i.values[i.candidates] for i in fit]), np.linspace(0, 1, 201)))
    threshold, _ = best_threshold(fit, above, grid)
    for split in (HELD, "gold"):
        row = evaluate_split(items, split, "omission", threshold, above, signals.feature(0, "log_coverage"))
        print_row(name, f"{'>' if above else '<'} {threshold:.3f}", row)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--gold", type=Path, default=REPO / "data/gold/de-en.gold.tsv")
    parser.add_argument("--mode", default="remove", help="remove, unk or mask (seq2seq.analysis.occlusion)")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--singles", action="store_true", help="also score each candidate feature alone")
    args = parser.parse_args()
    args.no_test, args.limit = True, 0
    translator = load_translator(args.model, "onnx", args.threads)
    config = translator.backend.config
    cases = planted_cases(read_splits(args), args.seed)
    started = time.perf_counter()
    prepared = forced_attention(translator, [(c.source, c.target) for c in cases])
    plain = time.perf_counter() - started
    signals = Signals(cases, prepared, translator, occlusion=args.mode)
    occluded = [n for n, o in enumerate(signals.occluded) if o is not None]
    print(
        f"{len(signals.cases)} cases teacher-forced in {plain:.1f} s; {len(occluded)} intact/omission cases, "
        f"{sum(int((~np.isnan(signals.occluded[n][:, 0])).sum()) for n in occluded)} occluded rows ({args.mode}) "
        f"in {signals.occlusion_seconds:.1f} s",
        flush=True,
    )
    for n in occluded:
        attention, source_pieces, _, base, _ = signals.prepared[n]
        case = signals.cases[n]
        to_words = projection(
            [visible(p, case.source) for p in source_pieces], words(case.source)
        )  # (S, Sw), as the maps
        signals.features[n][0].update(features(base, signals.occluded[n], attention, to_words))
    attention_only = tuple(f for f in feature_names(config.decoder_layers)[0] if f not in OCCLUSION_FEATURES)
    candidates = tuple(k for k in signals.features[occluded[0]][0] if k.startswith("occ_"))
    print(HEADER)
    for name in candidates if args.singles else ():
        single(signals, name, False)
    for label, names in (
        ("attention (10)", attention_only),
        ("attn + shipped occlusion", attention_only + OCCLUSION_FEATURES),
        ("occ only (all)", candidates),
        ("attn + tot,lpos", attention_only + ("occ_total", "occ_log_pos")),
        ("attn + tot,lpos,lmax", attention_only + ("occ_total", "occ_log_pos", "occ_log_max")),
        ("attn + tot,lpos,lmax,att", attention_only + ("occ_total", "occ_log_pos", "occ_log_max", "occ_attended")),
        (
            "attn + tot,lpos,lmax,att,neg",
            attention_only + ("occ_total", "occ_log_pos", "occ_log_max", "occ_attended", "occ_neg"),
        ),
        ("attn + lpos,lmax,att", attention_only + ("occ_log_pos", "occ_log_max", "occ_attended")),
        ("attn + lpos,neg", attention_only + ("occ_log_pos", "occ_neg")),
        ("attn + lpos,neg,lmax", attention_only + ("occ_log_pos", "occ_neg", "occ_log_max")),
        ("attn + all occ", attention_only + candidates),
    ):
        score(signals, names, label)
    return 0


if __name__ == "__main__":
    sys.exit(main())
