"""Do the quality signals of `seq2seq/quality.py` work? Measure them, and choose a model's thresholds.

1. **Planted omissions and insertions.** Held-out reference translations are damaged on
   purpose: a contiguous span of 1-3 target words is deleted (the source words linked only
   to that span, by the gold links or by eflomal's, have lost their translation), or 1-2
   words taken from another reference are inserted (they translate nothing). The damaged
   pair is aligned by teacher forcing, as `crossalign align` does (seq2seq/forced.py), and
   `untranslated` / `ungrounded` are scored against the planted truth: precision, recall,
   F1 over all non-punctuation words of the damaged pairs, against the baseline that flags
   the same number of words, spread over the sentences in proportion to their length,
   picking the lowest-coverage (lowest-peak) words of each sentence. The flags on the
   intact pairs (false alarms per 100 words) are shown beside them.
2. **Confidence vs quality.** The model translates each split (beam 4, as served); the
   sentence confidence and, alone, the length-normalised log-probability are ranked
   against sentence chrF (Spearman's ρ).

Thresholds (coverage below which a source word is untranslated, peak below which a target
word is ungrounded), the expected length ratio and the confidence weights are chosen on
the **valid** split only; gold and test figures are read at those values. `--save` writes
them as the model's `quality.json` (`seq2seq.quality.QualityThresholds`).

    python bench/quality_signals.py --model models/de-en --data ~/.cache/crossalign/data/ding8k \\
        --save models/de-en/quality.json

The held-out eflomal links (DATA/eflomal.valid.pharaoh, DATA/eflomal.test.pharaoh) come
from `bench/eflomal_heldout.py`. Translations are cached under --cache (keyed by the
model's bundle.json and the split file), so re-runs only re-align.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from seq2seq.aer import read_gold, read_pharaoh  # noqa: E402
from seq2seq.alignment import AlignmentError, AlignmentOptions, align, projection, words  # noqa: E402
from seq2seq.bundle import BUNDLE_FILE, set_quality_file  # noqa: E402
from seq2seq.config import DecodeConfig  # noqa: E402
from seq2seq.forced import forced_attention  # noqa: E402
from seq2seq.loading import load_translator  # noqa: E402
from seq2seq.quality import (  # noqa: E402
    QualityThresholds,
    confidence_features,
    is_punctuation,
    source_coverage,
    target_entropy,
    target_peak,
)
from seq2seq.search import pad_batch  # noqa: E402

Links = set[tuple[int, int]]
THRESHOLDS = np.round(np.arange(0.02, 2.001, 0.02), 2)      # coverage may exceed 1


# --------------------------------------------------------------------------- planting


@dataclass
class Case:
    """One pair to align: intact, or damaged with the words the damage concerns."""

    split: str
    kind: str                 # "intact", "omission" (truth: source words), "insertion" (truth: target words)
    source: str
    target: str
    truth: frozenset[int]


def content(tokens) -> list[int]:
    return [i for i, t in enumerate(tokens) if not is_punctuation(t.text)]


def plant_omission(source: str, target: str, links: Links, rng: random.Random, tries: int = 20
                   ) -> tuple[str, frozenset[int]] | None:
    """Delete 1-3 contiguous target words -> (damaged target, source words that lost their translation)."""
    source_words, target_words = words(source), words(target)
    kept_content = content(target_words)
    for _ in range(tries):
        length = rng.choice((1, 2, 3))
        start = rng.randrange(len(target_words))
        span = range(start, start + length)
        if span.stop > len(target_words) or any(is_punctuation(target_words[j].text) for j in span):
            continue
        if len(kept_content) - length < 2:
            continue
        inside = {i for i, j in links if j in span}
        outside = {i for i, j in links if j not in span}
        truth = frozenset(i for i in inside - outside if not is_punctuation(source_words[i].text))
        if not truth:
            continue
        before, after = target[:target_words[start].start].rstrip(), target[target_words[span.stop - 1].end:].lstrip()
        joiner = "" if not before or not after or is_punctuation(after[0]) else " "
        damaged = before + joiner + after
        if not before and damaged[:1].islower() and target[:1].isupper():
            damaged = damaged[0].upper() + damaged[1:]
        expected = [t.text.lower() for j, t in enumerate(target_words) if j not in span]
        if [t.text.lower() for t in words(damaged)] != expected:
            continue
        return damaged, truth
    return None


def plant_insertion(target: str, pool: list[str], rng: random.Random, tries: int = 20
                    ) -> tuple[str, frozenset[int]] | None:
    """Insert 1-2 words of other references before a word -> (damaged target, inserted target words)."""
    target_words = words(target)
    for _ in range(tries):
        position = rng.randrange(1, max(2, len(target_words)))
        if position >= len(target_words):
            continue
        at = target_words[position].start
        if target[at - 1] != " " or is_punctuation(target_words[position].text):
            continue
        inserted = [rng.choice(pool) for _ in range(rng.choice((1, 2)))]
        damaged = target[:at] + " ".join(inserted) + " " + target[at:]
        got = [t.text for t in words(damaged)]
        if got[position:position + len(inserted)] != inserted or len(got) != len(target_words) + len(inserted):
            continue
        return damaged, frozenset(range(position, position + len(inserted)))
    return None


def make_cases(split: str, pairs: list[tuple[str, str]], links: list[Links], seed: int) -> list[Case]:
    rng = random.Random(f"{seed}:{split}")
    # Insertion material: the references' words, except sentence-initial ones (capitalised).
    pool = [t.text for _, target in pairs for t in words(target)[1:] if not is_punctuation(t.text)]
    cases = []
    for (source, target), pair_links in zip(pairs, links):
        cases.append(Case(split, "intact", source, target, frozenset()))
        omitted = plant_omission(source, target, pair_links, rng)
        if omitted:
            cases.append(Case(split, "omission", source, omitted[0], omitted[1]))
        inserted = plant_insertion(target, pool, rng)
        if inserted:
            cases.append(Case(split, "insertion", source, inserted[0], inserted[1]))
    return cases


# --------------------------------------------------------------------------- scoring


@dataclass
class Scored:
    """One aligned case under one alignment source: the per-word values and what counts."""

    case: Case
    values: np.ndarray        # coverage per source word (omission) or peak per target word (insertion)
    entropy: np.ndarray       # per target word (insertions only)
    candidates: list[int]     # word indices that may be flagged (not punctuation)
    original: int = 0         # id() of the planted Case it was scored from


def prf(flags: list[set[int]], truths: list[frozenset[int]]) -> tuple[float, float, float]:
    hits = sum(len(f & t) for f, t in zip(flags, truths))
    flagged, true = sum(map(len, flags)), sum(map(len, truths))
    precision = hits / flagged if flagged else 0.0
    recall = hits / true if true else 0.0
    return precision, recall, 2 * precision * recall / (precision + recall) if hits else 0.0


def flag_below(items: list[Scored], threshold: float, key: str = "values", above: bool = False) -> list[set[int]]:
    out = []
    for item in items:
        values = getattr(item, key)
        out.append({i for i in item.candidates if (values[i] > threshold if above else values[i] < threshold)})
    return out


def rank_baseline(items: list[Scored], total: int, key: str = "values", above: bool = False) -> list[set[int]]:
    """Flag `total` words: in every sentence the lowest-valued ones, the same share of each sentence."""
    ranked = []
    for n, item in enumerate(items):
        values = getattr(item, key)
        order = sorted(item.candidates, key=lambda i: -values[i] if above else values[i])
        ranked += [((rank + 0.5) / len(order), n, i) for rank, i in enumerate(order)]
    ranked.sort()
    out: list[set[int]] = [set() for _ in items]
    for _, n, i in ranked[:total]:
        out[n].add(i)
    return out


def false_alarms(items: list[Scored], threshold: float, key: str = "values", above: bool = False) -> float:
    flags = flag_below(items, threshold, key, above)
    words_seen = sum(len(item.candidates) for item in items)
    return 100 * sum(map(len, flags)) / max(words_seen, 1)


def best_threshold(items: list[Scored], key: str = "values", above: bool = False,
                   grid: np.ndarray = THRESHOLDS) -> tuple[float, float]:
    """The threshold of `grid` with the best F1 on `items`, and that F1."""
    truths = [item.case.truth for item in items]
    scores = [(prf(flag_below(items, t, key, above), truths)[2], float(t)) for t in grid]
    f1, threshold = max(scores)
    return threshold, f1


# --------------------------------------------------------------------------- helpers


def read_pairs(path: Path) -> list[tuple[str, str]]:
    pairs = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        fields = line.split("\t")
        if len(fields) < 2:
            raise SystemExit(f"{path}:{number}: expected source<TAB>target")
        pairs.append((fields[0], fields[1]))
    return pairs


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's ρ: Pearson correlation of the ranks, ties given their mean rank."""
    def ranks(values: np.ndarray) -> np.ndarray:
        order = np.argsort(values, kind="stable")
        ranked = np.empty(len(values))
        ranked[order] = np.arange(len(values))
        _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
        sums = np.bincount(inverse, weights=ranked)
        return (sums / counts)[inverse]
    return float(np.corrcoef(ranks(np.asarray(x, float)), ranks(np.asarray(y, float)))[0, 1])


def model_key(model: Path) -> str:
    manifest = model / "bundle.json"
    text = manifest.read_bytes() if manifest.is_file() else (model / "model.pt").read_bytes()
    return hashlib.sha256(text).hexdigest()[:12]


def decoder_sha256(model: Path) -> str | None:
    """The decoder graph's sha256 from bundle.json: which weights the thresholds were chosen for."""
    manifest = model / "bundle.json"
    if not manifest.is_file():
        return None
    return json.loads(manifest.read_text())["files"].get("decoder_step.onnx", {}).get("sha256")


def translate_split(translator, split: str, pairs: list[tuple[str, str]], config: DecodeConfig,
                    cache: Path | None, key: str) -> list[dict]:
    """Per pair: the translation, its mean token log-prob and its word map from the default source."""
    path = None
    if cache is not None:
        digest = hashlib.sha256(json.dumps([key, split, pairs, config.beam_size, config.length_penalty]).encode())
        path = cache / f"translations-{split}-{digest.hexdigest()[:16]}.json"
        if path.is_file():
            return json.loads(path.read_text())
    records = []
    batch = 32
    for start in tqdm(range(0, len(pairs), batch), desc=f"translate {split}", unit="batch", file=sys.stderr):
        chunk = pairs[start:start + batch]
        for (source, _), result in zip(chunk, translator.translate_batch([s for s, _ in chunk], config)):
            alignment = translator.align(source, result)
            records.append({
                "hypothesis": result.text,
                "mean_log_prob": result.mean_log_prob,
                "source_words": [t.text for t in alignment.source_tokens],
                "target_words": [t.text for t in alignment.target_tokens],
                "matrix": np.round(alignment.matrix, 5).tolist(),
            })
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(records))
    return records


def word_surprise(translator, cases: list[Case], prepared: list, batch: int = 64) -> list[np.ndarray | None]:
    """Per case: -log p of each target word under teacher forcing (mean over its pieces), or None.

    Not an attention signal: the comparison row of the ungrounded table (a word the decoder
    did not expect). Uses the backend's `teacher_force`, which returns the log-probabilities of the
    teacher-forced steps.
    """
    backend, tokenizer = translator.backend, translator.tokenizer
    todo = [n for n, item in enumerate(prepared) if not isinstance(item, AlignmentError)]
    todo.sort(key=lambda n: len(cases[n].target))
    out: list[np.ndarray | None] = [None] * len(cases)
    for start in tqdm(range(0, len(todo), batch), desc="teacher-forced log-probs", unit="batch", file=sys.stderr):
        chunk = todo[start:start + batch]
        sources = [tokenizer.encode_with_offsets(cases[n].source)[0] + [backend.eos_id] for n in chunk]
        targets = [tokenizer.encode_with_offsets(cases[n].target)[0] for n in chunk]
        src_ids, src_mask = pad_batch(sources, backend.pad_id)
        tgt_ids, _ = pad_batch(targets, backend.pad_id)
        log_probs = backend.teacher_force(src_ids, src_mask, tgt_ids).log_probs      # (B, T+1, V)
        for row, (n, target) in enumerate(zip(chunk, targets)):
            pieces = -log_probs[row, np.arange(len(target)), target]                     # (T,)
            to_words = projection(prepared[n][2], words(cases[n].target))                # (T, Tw)
            out[n] = (to_words.T @ pieces) / np.maximum(to_words.sum(axis=0), 1e-12)
    return out


def sweep(items: list[Scored], intact: list[Scored], label: str) -> None:
    """Precision, recall, F1 and false alarms of a range of thresholds (the operating points)."""
    print(f"  operating points on valid ({label}):  " + "  ".join(
        f"{t:.2f}: P {100 * p:.0f} R {100 * r:.0f} F1 {100 * f:.0f} intact {false_alarms(intact, t):.0f}/100w"
        for t in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)
        for p, r, f in [prf(flag_below(items, t), [i.case.truth for i in items])]))


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="release bundle directory (onnxruntime backend)")
    parser.add_argument("--data", type=Path, default=Path.home() / ".cache/crossalign/data/ding8k",
                        help="prepared data: valid.tsv, test.tsv and eflomal.{valid,test}.pharaoh")
    parser.add_argument("--gold", type=Path, default=REPO / "data/gold/de-en.gold.tsv")
    parser.add_argument("--limit", type=int, default=0, help="use only the first N pairs of valid and test")
    parser.add_argument("--no-test", action="store_true", help="skip the test split")
    parser.add_argument("--beam-size", type=int, default=DecodeConfig.beam_size)
    parser.add_argument("--seed", type=int, default=1, help="seed of the planted damage")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache/crossalign/quality",
                        help="translations cached here")
    parser.add_argument("--save", type=Path, help="write the chosen thresholds here (the model's quality.json)")
    parser.add_argument("--json", type=Path, help="also write every figure as JSON here")
    return parser.parse_args(argv)


Splits = dict[str, tuple[list[tuple[str, str]], list[Links]]]


def read_splits(args: argparse.Namespace) -> Splits:
    """valid (and test) with their eflomal links, and the gold set with its possible links."""
    splits: Splits = {}
    for name in ("valid",) + (() if args.no_test else ("test",)):
        pairs, links_file = read_pairs(args.data / f"{name}.tsv"), args.data / f"eflomal.{name}.pharaoh"
        if not links_file.is_file():
            raise SystemExit(f"{links_file}: missing; make it with bench/eflomal_heldout.py")
        links = read_pharaoh(links_file)
        if len(links) != len(pairs):
            raise SystemExit(f"{links_file}: {len(links)} lines for {len(pairs)} pairs")
        if args.limit:
            pairs, links = pairs[:args.limit], links[:args.limit]
        splits[name] = (pairs, links)
    gold = read_gold(args.gold)
    splits["gold"] = ([(g.source, g.target) for g in gold], [set(g.possible) for g in gold])
    return splits


class AttentionSignals:
    """The coverage and peak of every teacher-forced case, per alignment source (layer,
    heads, step shift), computed once per source."""

    def __init__(self, cases: list[Case], prepared: list, config) -> None:
        self.cases, self.prepared, self.config = cases, prepared, config
        self.memo: dict = {}

    def __call__(self, source) -> list[Scored]:
        if source in self.memo:
            return self.memo[source]
        out = self.memo[source] = []
        for case, item in zip(self.cases, self.prepared):
            if isinstance(item, AlignmentError):
                continue
            attention, source_pieces, target_pieces, _ = item
            n, h, s = source
            options = AlignmentOptions("word", n, h, s).resolve(self.config)
            word = align(attention, case.source, source_pieces, case.target, target_pieces, options).word
            if case.kind in ("intact", "omission"):
                out.append(Scored(Case(case.split, "coverage-" + case.kind, case.source, case.target, case.truth),
                                  source_coverage(word.matrix), np.zeros(0), content(word.source_tokens), id(case)))
            if case.kind in ("intact", "insertion"):
                out.append(Scored(Case(case.split, "peak-" + case.kind, case.source, case.target, case.truth),
                                  target_peak(word.matrix), target_entropy(word.matrix), content(word.target_tokens),
                                  id(case)))
        return out


def describe(source) -> str:
    n, h, s = source
    return f"layer {n} {'heads ' + ','.join(map(str, h)) if h else 'mean'}{' shift' if s else ''}"


def select(items: list[Scored], split: str, kind: str) -> list[Scored]:
    return [i for i in items if i.case.split == split and i.case.kind == kind]


def evaluate_split(items: list[Scored], split: str, damaged_kind: str, intact_kind: str, threshold: float,
                   key: str = "values", above: bool = False) -> dict:
    """Flags at `threshold` on the damaged pairs of `split` against the planted truth, the
    rank baseline with as many flags, and the false alarms on its intact pairs."""
    damaged = select(items, split, damaged_kind)
    truths = [i.case.truth for i in damaged]
    flags = flag_below(damaged, threshold, key, above)
    p, r, f1 = prf(flags, truths)
    bp, br, bf1 = prf(rank_baseline(damaged, sum(map(len, flags)), key, above), truths)
    alarms = false_alarms(select(items, split, intact_kind), threshold, key, above)
    return {"threshold": threshold, "split": split, "pairs": len(damaged), "precision": p, "recall": r, "f1": f1,
            "baseline_precision": bp, "baseline_recall": br, "baseline_f1": bf1,
            "intact_flags_per_100_words": alarms}


def print_row(name: str, rule: str, row: dict) -> None:
    print(f"{name:<22} {rule:<15} {row['split']:<6} {row['pairs']:>5} "
          f"{100 * row['precision']:6.1f} {100 * row['recall']:6.1f} {100 * row['f1']:6.1f} "
          f"{100 * row['baseline_precision']:7.1f} {100 * row['baseline_recall']:7.1f} "
          f"{100 * row['baseline_f1']:7.1f} {row['intact_flags_per_100_words']:18.1f}")


def report_attention_signals(scored: AttentionSignals, sources: list, names: list[str],
                             report: dict) -> dict[str, float]:
    """Each signal's threshold chosen on valid and scored on every split, per alignment
    source; returns the thresholds of the model's own source by kind (coverage, peak)."""
    chosen: dict[str, float] = {}
    for signal, kind, key, above, label in (
            ("untranslated", "coverage", "values", False, "coverage <"),
            ("ungrounded", "peak", "values", False, "peak <"),
            ("ungrounded (entropy)", "peak", "entropy", True, "entropy >")):
        print(f"\n{signal}: planted {'omissions' if kind == 'coverage' else 'insertions'}; threshold chosen on "
              f"valid; baseline = the same number of flags on each sentence's lowest-"
              f"{'coverage' if kind == 'coverage' else ('peak' if key == 'values' else 'entropy (highest)')} words")
        print(f"{'alignment source':<22} {'threshold':<15} {'split':<6} {'pairs':>5} {'P':>6} {'R':>6} {'F1':>6} "
              f"{'base P':>7} {'base R':>7} {'base F1':>7} {'intact flags/100w':>18}")
        for source in sources if key == "values" else sources[:1]:
            items = scored(source)
            damaged_kind, intact_kind = f"{kind}-{'omission' if kind == 'coverage' else 'insertion'}", f"{kind}-intact"
            threshold, _ = best_threshold(select(items, "valid", damaged_kind), key, above)
            for split in names:
                row = evaluate_split(items, split, damaged_kind, intact_kind, threshold, key, above)
                print_row(describe(source), label + f" {threshold:.2f}", row)
                report["signals"].setdefault(signal, []).append({"source": describe(source)} | row)
            if source == sources[0] and key == "values":
                chosen[kind] = threshold
                sweep(select(items, "valid", damaged_kind), select(items, "valid", intact_kind), label.strip(" <"))
    return chosen


def report_surprise(translator, scored: AttentionSignals, source, names: list[str], report: dict) -> None:
    """The decoder's own surprise at each target word, for comparison (not an attention signal)."""
    surprise = word_surprise(translator, scored.cases, scored.prepared)
    by_case = {id(case): value for case, value in zip(scored.cases, surprise)}
    items = [Scored(i.case, by_case[i.original], np.zeros(0), i.candidates) for i in scored(source)
             if i.case.kind.startswith("peak-") and by_case.get(i.original) is not None]
    print("\nungrounded, for comparison: the decoder's surprise -log p(word) under teacher forcing (not attention)")
    threshold, _ = best_threshold(select(items, "valid", "peak-insertion"), above=True,
                                  grid=np.arange(0.5, 15.01, 0.25))
    for split in names:
        row = evaluate_split(items, split, "peak-insertion", "peak-intact", threshold, above=True)
        print_row("decoder surprise", f"-log p > {threshold:.2f}", row)
        report["signals"].setdefault("ungrounded (decoder surprise)", []).append(row)


def report_confidence(translator, args: argparse.Namespace, splits: Splits, names: list[str],
                      report: dict) -> tuple[np.ndarray, float]:
    """Fit the confidence weights on valid against sentence chrF and score every split;
    returns the weights and the expected length ratio (reference / source words on valid)."""
    decode = DecodeConfig(beam_size=args.beam_size)
    import sacrebleu

    translated = {name: translate_split(translator, name, pairs, decode, args.cache, model_key(args.model))
                  for name, (pairs, _) in splits.items()}
    valid_pairs = splits["valid"][0]
    reference_words = sum(sum(not is_punctuation(t.text) for t in words(r)) for _, r in valid_pairs)
    source_words = sum(sum(not is_punctuation(t.text) for t in words(s)) for s, _ in valid_pairs)
    expected_ratio = reference_words / source_words

    def features_and_chrf(name: str) -> tuple[np.ndarray, np.ndarray]:
        rows, chrf = [], []
        for record, (_, reference) in zip(translated[name], splits[name][0]):
            coverage = source_coverage(np.array(record["matrix"]).reshape(len(record["target_words"]), -1))
            rows.append(confidence_features(record["mean_log_prob"], coverage,
                                            record["source_words"], record["target_words"], expected_ratio))
            chrf.append(sacrebleu.sentence_chrf(record["hypothesis"], [reference]).score / 100)
        return np.array(rows), np.array(chrf)

    x_valid, y_valid = features_and_chrf("valid")
    weights, *_ = np.linalg.lstsq(x_valid, y_valid, rcond=None)
    print(f"\nconfidence vs sentence chrF (Spearman's rho; beam {args.beam_size}); weights fitted on valid: "
          f"bias {weights[0]:.3f}, log-prob {weights[1]:.3f}, coverage {weights[2]:.3f}, length {weights[3]:.3f}; "
          f"expected length ratio {expected_ratio:.3f}")
    print(f"{'split':<6} {'pairs':>5} {'log-prob alone':>15} {'coverage alone':>15} {'length alone':>13} "
          f"{'confidence':>11} {'mean conf':>10} {'mean chrF':>10}")
    for name in names:
        x, y = features_and_chrf(name) if name != "valid" else (x_valid, y_valid)
        confidence = np.clip(x @ weights, 0.0, 1.0)
        row = {"split": name, "pairs": len(y), "log_prob": spearman(x[:, 1], y), "coverage": spearman(x[:, 2], y),
               "length": spearman(x[:, 3], y), "confidence": spearman(confidence, y),
               "mean_confidence": float(confidence.mean()), "mean_chrf": float(y.mean())}
        print(f"{name:<6} {len(y):>5} {row['log_prob']:15.3f} {row['coverage']:15.3f} {row['length']:13.3f} "
              f"{row['confidence']:11.3f} {row['mean_confidence']:10.3f} {row['mean_chrf']:10.3f}")
        report.setdefault("confidence", []).append(row)
    return weights, expected_ratio


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    translator = load_translator(args.model, "onnx", args.threads)
    config = translator.backend.config
    default = AlignmentOptions().resolve(config)
    layer, heads, shift = default.layer, default.heads, default.step_shift
    splits = read_splits(args)

    # ---------------------------------------------------------------- planted damage
    cases = [c for name, (pairs, links) in splits.items() for c in make_cases(name, pairs, links, args.seed)]
    started = time.perf_counter()
    prepared = forced_attention(translator, [(c.source, c.target) for c in cases])
    print(f"{args.model}: {len(cases)} pairs teacher-forced in {time.perf_counter() - started:.0f} s "
          f"(seed {args.seed})", flush=True)
    sources = [(layer, heads, shift)] + [(n, (), s) for n in range(config.decoder_layers) for s in (False, True)
                                         if (n, (), s) != (layer, heads, shift)]
    scored = AttentionSignals(cases, prepared, config)
    report: dict = {"model": str(args.model), "seed": args.seed, "signals": {}}
    names = [n for n in ("valid", "test", "gold") if n in splits]
    chosen = report_attention_signals(scored, sources, names, report)
    report_surprise(translator, scored, sources[0], names, report)

    # ---------------------------------------------------------------- confidence
    weights, expected_ratio = report_confidence(translator, args, splits, names, report)
    thresholds = QualityThresholds(
        untranslated_coverage=chosen["coverage"], ungrounded_peak=chosen["peak"],
        expected_length_ratio=round(expected_ratio, 4),
        confidence_weights=tuple(round(float(w), 4) for w in weights),
        chosen_on={"split": str(args.data / "valid.tsv").replace(str(Path.home()), "~"),
                   "pairs": len(splits["valid"][0]),
                   "seed": args.seed, "decoder_sha256": decoder_sha256(args.model),
                   "beam_size": args.beam_size, "alignment": {"layer": layer, "heads": list(heads),
                                                             "step_shift": shift},
                   "by": "bench/quality_signals.py"})
    print("\nthresholds:", json.dumps(thresholds.to_dict()))
    if args.save:
        thresholds.save(args.save)
        if (args.save.parent / BUNDLE_FILE).is_file():
            set_quality_file(args.save.parent, args.save.name)      # listed and hashed in bundle.json
        print(f"wrote {args.save}")
    if args.json:
        args.json.write_text(json.dumps(report | {"thresholds": thresholds.to_dict()}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
