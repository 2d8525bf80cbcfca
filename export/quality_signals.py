"""Do the quality signals of `seq2seq/analysis/quality.py` work? Measure them, and choose a model's detectors.

1. **Planted omissions and insertions** (export/planted.py). Held-out reference translations
   are damaged on purpose: a contiguous span of 1-3 target words is deleted, or 1-2 words
   of another reference are inserted. The damaged pair is aligned by teacher forcing, as
   `crossalign align` does (seq2seq/decoding/forced.py), and `untranslated` / `ungrounded` are
   scored against the planted truth (precision, recall, F1) beside the baseline that flags
   as many words, each sentence's lowest-coverage (lowest-peak) ones. The flags on the
   intact pairs (false alarms per 100 words) are shown beside them.
2. **Confidence vs quality** (export/quality_confidence.py). The model translates each
   split (beam 4, as served); the sentence confidence and, alone, the length-normalised
   log-probability are ranked against sentence chrF (Spearman's ρ).

The intact and omission pairs are also teacher-forced once per source word with that word
removed (`seq2seq.analysis.occlusion`, about 3.5x the time of the plain pass here): the untranslated
detector reads the drop of the target's log-probability, and "occlusion drop" is scored alone.
Its attention-only twin (the same features but the occlusion ones: quality mode "fast") is
fitted, scored and saved beside it (`untranslated_fast`).

The valid split is cut in two: the pairs with an even index (`valid-fit`) fit the flags'
detectors (logistic regressions over `seq2seq.analysis.quality.word_features`) and choose every
threshold; the odd ones (`valid-held`), test and gold are scored at those values. The
expected length ratio and the confidence weights are fitted on all of valid. `--save`
writes them all as the model's `quality.json` (`seq2seq.analysis.quality.QualityThresholds`).

    python -m export.quality_signals --model models/de-en --data ~/.cache/crossalign/data/ding8k \\
        --save models/de-en/quality.json

The held-out eflomal links (DATA/eflomal.valid.pharaoh, DATA/eflomal.test.pharaoh) come
from `export/eflomal_heldout.py`. Translations are cached under --cache (keyed by the
model's bundle.json and the split file), so re-runs only re-align.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from data.files import BUNDLE_FILE
from export.planted import (
    HEADER,
    Case,
    Scored,
    best_threshold,
    content,
    evaluate_split,
    false_alarms,
    fit_detector,
    flag_below,
    make_cases,
    prf,
    print_row,
    select,
)
from export.quality_confidence import Splits, report_confidence
from seq2seq.analysis.aer import read_gold, read_pharaoh
from seq2seq.analysis.occlusion import OCCLUSION_FEATURES
from seq2seq.analysis.quality import (
    Detector,
    Evidence,
    QualityThresholds,
    feature_names,
    source_coverage,
    target_entropy,
    target_peak,
    word_features,
)
from seq2seq.core.alignment import align, words
from seq2seq.core.config import (
    AlignmentError,
    AlignmentOptions,
    DecodeConfig,
)
from seq2seq.decoding.forced import forced_attention, occluded_given
from seq2seq.decoding.translator import Translator
from seq2seq.loading import load_translator
from seq2seq.runtime.bundle import set_quality_file

REPO = Path(__file__).resolve().parents[1]

FIT, HELD = "valid-fit", "valid-held"


# --------------------------------------------------------------------------- helpers


def read_pairs(path: Path) -> list[tuple[str, str]]:
    pairs = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        fields = line.split("\t")
        if len(fields) < 2:
            raise SystemExit(f"{path}:{number}: expected source<TAB>target")
        pairs.append((fields[0], fields[1]))
    return pairs


def decoder_sha256(model: Path) -> str | None:
    """The sha256 from bundle.json of the decoder graph the bundle serves (its precision's:
    an int8-only bundle has no decoder_step.onnx): which weights the thresholds were chosen for."""
    manifest = model / BUNDLE_FILE
    if not manifest.is_file():
        return None
    values = json.loads(manifest.read_text())
    name = values.get("graphs", {}).get(values.get("precision"), {}).get("decoder_step", "decoder_step.onnx")
    return values["files"].get(name, {}).get("sha256")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--model", type=Path, required=True, help="release bundle directory (onnxruntime backend)")
    parser.add_argument(
        "--data",
        type=Path,
        default=Path.home() / ".cache/crossalign/data/ding8k",
        help="prepared data: valid.tsv, test.tsv and eflomal.{valid,test}.pharaoh",
    )
    parser.add_argument("--gold", type=Path, default=REPO / "data/gold/de-en.gold.tsv")
    parser.add_argument("--limit", type=int, default=0, help="use only the first N pairs of valid and test")
    parser.add_argument("--no-test", action="store_true", help="skip the test split")
    parser.add_argument("--beam-size", type=int, default=DecodeConfig.beam_size)
    parser.add_argument("--seed", type=int, default=1, help="seed of the planted damage")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument(
        "--cache", type=Path, default=Path.home() / ".cache/crossalign/quality", help="translations cached here"
    )
    parser.add_argument("--save", type=Path, help="write the chosen thresholds here (the model's quality.json)")
    parser.add_argument("--json", type=Path, help="also write every figure as JSON here")
    return parser.parse_args(argv)


def read_splits(args: argparse.Namespace) -> Splits:
    """valid (and test) with their eflomal links, and the gold set with its possible links."""
    splits: Splits = {}
    for name in ("valid",) + (() if args.no_test else ("test",)):
        pairs, links_file = read_pairs(args.data / f"{name}.tsv"), args.data / f"eflomal.{name}.pharaoh"
        if not links_file.is_file():
            raise SystemExit(f"{links_file}: missing; make it with export/eflomal_heldout.py")
        links = read_pharaoh(links_file)
        if len(links) != len(pairs):
            raise SystemExit(f"{links_file}: {len(links)} lines for {len(pairs)} pairs")
        if args.limit:
            pairs, links = pairs[: args.limit], links[: args.limit]
        splits[name] = (pairs, links)
    gold = read_gold(args.gold)
    splits["gold"] = ([(g.source, g.target) for g in gold], [set(g.possible) for g in gold])
    return splits


def planted_cases(splits: Splits, seed: int) -> list[Case]:
    """Every split's planted cases; valid's are labelled by half (FIT: even pair index, HELD: odd)."""
    cases = [c for name, (pairs, links) in splits.items() for c in make_cases(name, pairs, links, seed)]
    for case in cases:
        if case.split == "valid":
            case.split = FIT if case.pair % 2 == 0 else HELD
    return cases


def scored(case: Case, values: np.ndarray, tokens) -> Scored:
    """`values` per word of `case`: an omission's unlinked source words are left out of the scoring."""
    kept = content(tokens)
    if case.kind != "omission":
        return Scored(case, values, kept)
    return Scored(case, values, [i for i in kept if i not in case.unlinked], [i for i in kept if i in case.unlinked])


class Signals:
    """The per-word signals of every teacher-forced case: coverage and peak per alignment
    source (layer, heads, step shift; computed once per source), and the detectors' features
    (with source occlusion, `occlusion` mode, on the intact and omission cases)."""

    def __init__(self, cases: list[Case], prepared: list, translator: Translator, occlusion: str = "remove") -> None:
        pairs = [(case, item) for case, item in zip(cases, prepared) if not isinstance(item, AlignmentError)]
        self.cases, self.prepared, self.config = [c for c, _ in pairs], [p for _, p in pairs], translator.config
        self.own = AlignmentOptions().resolve(self.config)
        self.memo: dict = {}
        maps = [align(a, c.source, sp, c.target, tp, self.own) for c, (a, sp, tp, *_) in zip(self.cases, self.prepared)]
        started = time.perf_counter()
        occluded = occluded_given(
            translator,
            [(c.source, c.target) for c in self.cases],
            [m if c.kind in ("intact", "omission") else AlignmentError("not scored") for c, m in zip(self.cases, maps)],
            mode=occlusion,
        )
        self.occlusion_seconds = time.perf_counter() - started
        self.occluded = occluded  # per case: (Sw, T+1) log-probs, each source word occluded; None for insertions
        self.features = [  # per case: (per source word, per target word) feature tables
            word_features(m, Evidence(attention, token_log_probs, self.own, o))
            for m, (attention, _, _, token_log_probs, _), o in zip(maps, self.prepared, occluded)
        ]

    def maps(self, source) -> list:
        if source not in self.memo:
            options = AlignmentOptions("word", *source).resolve(self.config)
            self.memo[source] = [
                align(attention, case.source, sp, case.target, tp, options).word
                for case, (attention, sp, tp, *_) in zip(self.cases, self.prepared)
            ]
        return self.memo[source]

    def coverage(self, source) -> list[Scored]:
        """Source-word coverage of the intact and omission cases."""
        return [
            scored(case, source_coverage(word.matrix), word.source_tokens)
            for case, word in zip(self.cases, self.maps(source))
            if case.kind in ("intact", "omission")
        ]

    def per_target(self, source, signal) -> list[Scored]:
        """A target-word signal (target_peak, target_entropy) of the intact and insertion cases."""
        return [
            scored(case, signal(word.matrix), word.target_tokens)
            for case, word in zip(self.cases, self.maps(source))
            if case.kind in ("intact", "insertion")
        ]

    def tables(self, side: int) -> list[tuple[dict, Case]]:
        """(feature table, case) of the cases that side (0: source, 1: target) is scored on."""
        kinds = ("intact", "omission") if side == 0 else ("intact", "insertion")
        return [(features[side], case) for case, features in zip(self.cases, self.features) if case.kind in kinds]

    def detector(self, side: int, detector: Detector) -> list[Scored]:
        """The logits of `detector` on every case of that side."""
        return [
            scored(case, detector.logits(table), words(case.source if side == 0 else case.target))
            for table, case in self.tables(side)
        ]

    def feature(self, side: int, name: str) -> list[Scored]:
        return [
            scored(case, table[name], words(case.source if side == 0 else case.target))
            for table, case in self.tables(side)
        ]


def describe(source) -> str:
    n, h, s = source
    return f"layer {n} {'heads ' + ','.join(map(str, h)) if h else 'mean'}{' shift' if s else ''}"


def score_rows(
    report: dict,
    signal: str,
    name: str,
    rule: str,
    items: list[Scored],
    kind: str,
    threshold: float,
    above: bool,
    baseline: list[Scored],
    names: list[str],
) -> None:
    for split in names:
        row = evaluate_split(items, split, kind, threshold, above, baseline)
        print_row(name, rule, row)
        report["signals"].setdefault(signal, []).append({"source": name} | row)


def sweep(items: list[Scored], intact: list[Scored], label: str) -> None:
    """Precision, recall, F1 and false alarms of a range of thresholds (the operating points)."""
    print(
        f"  operating points on {FIT} ({label}):  "
        + "  ".join(
            f"{t:.2f}: P {100 * p:.0f} R {100 * r:.0f} F1 {100 * f:.0f} intact {false_alarms(intact, t):.0f}/100w"
            for t in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)
            for p, r, f in [prf(flag_below(items, t), [i.case.truth for i in items])]
        )
    )


def print_detector(name: str, detector: Detector | None) -> None:
    if detector is None:
        print(f"  {name} detector: nothing to fit on {FIT} (no planted truth)")
        return
    terms = " ".join(f"{w:+.3f}·{f}" for f, w in zip(detector.features, detector.weights))
    print(f"  {name} detector: {detector.bias:+.3f} {terms} > {detector.threshold:.3f}")


# --------------------------------------------------------------------------- the reports


def report_untranslated(
    signals: Signals, sources: list, names: list[str], report: dict
) -> tuple[float, Detector | None, Detector | None]:
    """untranslated: coverage < t per alignment source, and the detectors with and without
    occlusion; thresholds and weights fitted on FIT. Returns the own source's threshold
    and the two detectors (thorough, fast)."""
    own = signals.coverage(sources[0])
    print(
        f"\nuntranslated: planted omissions; thresholds and detector fitted on {FIT}; baseline = as many flags "
        "on each sentence's lowest-coverage words (the model's alignment source)"
    )
    print(HEADER)
    chosen = 0.0
    for source in sources:
        items = signals.coverage(source)
        threshold, _ = best_threshold(select(items, FIT, "omission"))
        score_rows(
            report,
            "untranslated",
            describe(source),
            f"coverage < {threshold:.2f}",
            items,
            "omission",
            threshold,
            False,
            own,
            names,
        )
        if source == sources[0]:
            chosen = threshold
    drops = signals.feature(0, "occlusion_drop")
    threshold, _ = best_threshold(select(drops, FIT, "omission"), False, np.round(np.arange(-3, 3.001, 0.05), 2))
    score_rows(
        report,
        "untranslated",
        "occlusion drop",
        f"drop < {threshold:.2f}",
        drops,
        "omission",
        threshold,
        False,
        own,
        names,
    )
    attention_only = tuple(f for f in feature_names(signals.config.decoder_layers)[0] if f not in OCCLUSION_FEATURES)
    fast = report_detector(
        signals, 0, own, names, report, attention_only, f"attention detector ({len(attention_only)})"
    )
    detector = report_detector(signals, 0, own, names, report)
    sweep(select(own, FIT, "omission"), select(own, FIT, "intact"), "coverage")
    print_detector("untranslated", detector)
    print_detector("untranslated_fast", fast)
    return chosen, detector, fast


def report_detector(
    signals: Signals,
    side: int,
    baseline: list[Scored],
    names: list[str],
    report: dict,
    features: tuple[str, ...] = (),
    name: str = "",
) -> Detector | None:
    """Fit the detector of one side (0: untranslated on omissions, 1: ungrounded on
    insertions) over `features` (default: all of that side) on FIT and score it on every split
    (its rows named `name`, default "detector (N features)")."""
    signal, kind = ("untranslated", "omission") if side == 0 else ("ungrounded", "insertion")
    features = features or feature_names(signals.config.decoder_layers)[side]
    detector = fit_detector(
        [
            (table, item)
            for (table, case), item in zip(signals.tables(side), baseline)
            if case.split == FIT and case.kind == kind
        ],
        features,
    )
    if detector is not None:
        score_rows(
            report,
            signal,
            name or f"detector ({len(features)} features)",
            f"logit > {detector.threshold:.2f}",
            signals.detector(side, detector),
            kind,
            detector.threshold,
            True,
            baseline,
            names,
        )
    return detector


def report_ungrounded(signals: Signals, source, names: list[str], report: dict) -> tuple[float, Detector | None]:
    """ungrounded: peak < t, entropy > t, decoder surprise > t and the detector, on planted
    insertions. Returns the peak threshold and the detector."""
    peak = signals.per_target(source, target_peak)
    print(
        f"\nungrounded: planted insertions; thresholds and detector fitted on {FIT}; baseline = as many flags "
        "on each sentence's lowest-peak words"
    )
    print(HEADER)
    chosen = 0.0
    for name, items, above, rule, grid in (
        ("peak", peak, False, "peak <", None),
        ("entropy", signals.per_target(source, target_entropy), True, "entropy >", None),
        ("decoder surprise", signals.feature(1, "surprise"), True, "-log p >", np.arange(0.5, 15.01, 0.25)),
    ):
        threshold, _ = best_threshold(select(items, FIT, "insertion"), above, *(() if grid is None else (grid,)))
        score_rows(
            report, "ungrounded", name, f"{rule} {threshold:.2f}", items, "insertion", threshold, above, peak, names
        )
        chosen = threshold if name == "peak" else chosen
    detector = report_detector(signals, 1, peak, names, report)
    print_detector("ungrounded", detector)
    return chosen, detector


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    translator = load_translator(args.model, "onnx", args.threads)
    config = translator.backend.config
    default = AlignmentOptions().resolve(config)
    layer, heads, shift = default.layer, default.heads, default.step_shift
    splits = read_splits(args)

    # ---------------------------------------------------------------- planted damage
    cases = planted_cases(splits, args.seed)
    started = time.perf_counter()
    prepared = forced_attention(translator, [(c.source, c.target) for c in cases])
    forced = time.perf_counter() - started
    signals = Signals(cases, prepared, translator)
    occluded = sum(int((~np.isnan(o[:, 0])).sum()) for o in signals.occluded if o is not None)
    print(
        f"{args.model}: {len(cases)} pairs teacher-forced in {forced:.0f} s (seed {args.seed}); occlusion: "
        f"{occluded} rows (one per non-punctuation source word of the intact and omission pairs) "
        f"in {signals.occlusion_seconds:.0f} s",
        flush=True,
    )
    sources = [(layer, heads, shift)] + [
        (n, (), s) for n in range(config.decoder_layers) for s in (False, True) if (n, (), s) != (layer, heads, shift)
    ]
    report: dict = {"model": str(args.model), "seed": args.seed, "signals": {}}
    names = [n for n in (HELD, "test", "gold") if n in {c.split for c in cases}]
    coverage, untranslated, untranslated_fast = report_untranslated(signals, sources, names, report)
    peak, ungrounded = report_ungrounded(signals, sources[0], names, report)

    # ---------------------------------------------------------------- confidence
    weights, expected_ratio = report_confidence(
        translator, args, splits, [n for n in ("valid", "test", "gold") if n in splits], report
    )
    thresholds = QualityThresholds(
        untranslated_coverage=coverage,
        ungrounded_peak=peak,
        expected_length_ratio=round(expected_ratio, 4),
        confidence_weights=tuple(round(float(w), 4) for w in weights),
        chosen_on={
            "split": str(args.data / "valid.tsv").replace(str(Path.home()), "~"),
            "pairs": len(splits["valid"][0]),
            "flags_fitted_on": "valid pairs with an even index",
            "fit_pairs": len({c.pair for c in cases if c.split == FIT}),
            "seed": args.seed,
            "decoder_sha256": decoder_sha256(args.model),
            "beam_size": args.beam_size,
            "alignment": {"layer": layer, "heads": list(heads), "step_shift": shift},
            "by": "export/quality_signals.py",
        },
        untranslated=untranslated,
        ungrounded=ungrounded,
        untranslated_fast=untranslated_fast,
    )
    print("\nthresholds:", json.dumps(thresholds.to_dict()))
    if args.save:
        thresholds.save(args.save)
        if (args.save.parent / BUNDLE_FILE).is_file():
            set_quality_file(args.save.parent, args.save.name)  # listed and hashed in bundle.json
        print(f"wrote {args.save}")
    if args.json:
        args.json.write_text(json.dumps(report | {"thresholds": thresholds.to_dict()}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
