"""The release gate per register: a new model against the releases it replaces, kind by kind.

    python -m export.registers --model models/de-en \\
        --baseline stage9=~/.cache/crossalign/bundles/de-en-stage9 \\
        --data ~/.cache/crossalign/data/ding8k-po [--json registers.json]

A single BLEU over a mixed test set lets a model trade one kind of sentence for another: stage
10 gained 14 BLEU on technical gold sentences and lost 4 on idioms and modal verbs, and the
release rule of the day ("chrF up, BLEU within noise") let the loss through (issue #39). So
every model is scored on each register apart — the Ding valid and test splits, and the gold
set by kind (data/gold/kinds.tsv: everyday, news, technical, narrative, idioms) — and the new
model is compared with each baseline by sacreBLEU's paired bootstrap resampling (Koehn 2004;
`sacrebleu.significance.PairedTest`, 1,000 resamples, sacreBLEU's fixed seed): the same
resampled sentences score both systems, and p is the share of resamples whose difference
strays from its mean by more than the observed difference (two-sided). The gate refuses the
new model when it is worse than a baseline with p < 0.05 on any register, in BLEU or in chrF.

Each model translates with its own bundle's decoding (bundle.json `decoding`) and graphs
(its default precision: int8 for every shipped bundle), as the service and `crossalign eval`
do. Translations are cached per (bundle, split) under `--cache`: the key is the sha256 of
what decides a translation (the graphs, tokenizer, term index, model config, decoding) and of
the split's sources, so a re-run or a second comparison with the same bundle translates
nothing. A code change that alters translations needs a fresh cache (`--cache` elsewhere, or
delete it).

Prints a Markdown table (register, sentences, BLEU / chrF of every model, the new model's Δ
and p against each baseline), writes it as JSON with `--json`; exit status 1 names every
register that refuses the model, 0 when none does. Torch-free (onnxruntime only).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from data.files import BUNDLE_FILE, DICTIONARY_FILE, ENSEMBLE_FILE
from data.prepare import read_tsv_pairs
from seq2seq.runtime.bundle import read_ensemble

REPO = Path(__file__).resolve().parent.parent
GOLD_DIR = REPO / "data" / "gold"
KINDS_FILE = GOLD_DIR / "kinds.tsv"
# The kinds of gold sentence, in table order, with the words the table gives them.
KINDS = {
    "everyday": "everyday",
    "news": "news",
    "technical": "technical",
    "narrative": "narrative",
    "idioms": "idioms, modal verbs, clauses",
}
ALPHA = 0.05  # a difference with p below this is significant (and refuses a worse model)
BOOTSTRAP_SAMPLES = 1000  # sacreBLEU's default number of resamples
METRICS = ("bleu", "chrf")
METRIC_NAMES = {"bleu": "BLEU", "chrf": "chrF"}
DEFAULT_CACHE = Path("~/.cache/crossalign/registers")

log = logging.getLogger("crossalign.registers")


@dataclass(frozen=True)
class Split:
    """Sentences translated together and cached as one file: a Ding split or the gold set."""

    name: str  # "valid", "test", "gold"
    sources: tuple[str, ...]
    references: tuple[str, ...]


@dataclass(frozen=True)
class Register:
    """One kind of sentence: some rows of a split."""

    name: str  # "Ding valid", "gold everyday", ...
    split: str
    rows: tuple[int, ...]


@dataclass(frozen=True)
class Comparison:
    """The new model against one baseline on one register."""

    baseline: str
    delta: dict[str, float]  # metric -> new minus baseline
    p_value: dict[str, float]  # metric -> sacreBLEU's paired bootstrap p (two-sided)


@dataclass(frozen=True)
class RegisterResult:
    register: str
    sentences: int
    scores: dict[str, dict[str, float]]  # model name -> metric -> corpus score
    comparisons: tuple[Comparison, ...]


def read_kinds(path: Path = KINDS_FILE) -> dict[str, str]:
    """German sentence -> kind, from `kind<TAB>German sentence` lines (`#` lines and blank
    lines skipped). Raises ValueError naming file:line for an unknown kind, a line without
    its two fields or a sentence listed twice."""
    kinds: dict[str, str] = {}
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 2 or not fields[1].strip():
            raise ValueError(f"{path}:{number}: expected kind<TAB>German sentence")
        kind, sentence = fields[0], fields[1].strip()
        if kind not in KINDS:
            raise ValueError(f"{path}:{number}: unknown kind {kind!r}: one of {', '.join(KINDS)}")
        if sentence in kinds:
            raise ValueError(f"{path}:{number}: {sentence!r} is listed twice")
        kinds[sentence] = kind
    return kinds


def gold_kinds(german: Sequence[str], kinds: dict[str, str], where: str = "gold") -> list[str]:
    """The kind of every gold pair, given its German sentences in file order; raises
    ValueError naming the pairs that have none."""
    missing = [number for number, sentence in enumerate(german, start=1) if sentence.strip() not in kinds]
    if missing:
        raise ValueError(f"{where}: pairs {missing[:10]} have no kind in {KINDS_FILE.name}; add them there")
    return [kinds[sentence.strip()] for sentence in german]


def registers(splits: Sequence[Split], gold_kind_of_row: Sequence[str]) -> list[Register]:
    """The Ding splits whole (`Ding valid`, `Ding test`) and the gold split by kind, in KINDS order."""
    out = [
        Register(f"Ding {split.name}", split.name, tuple(range(len(split.sources))))
        for split in splits
        if split.name != "gold"
    ]
    for kind in KINDS:
        rows = tuple(i for i, k in enumerate(gold_kind_of_row) if k == kind)
        if rows:
            out.append(Register(f"gold {KINDS[kind]}", "gold", rows))
    return out


def paired_test(
    references: Sequence[str],
    new: Sequence[str],
    baseline: Sequence[str],
    samples: int = BOOTSTRAP_SAMPLES,
) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """(new's scores, baseline's scores, p-values), each metric -> value, from sacreBLEU's
    paired bootstrap resampling of `new` against `baseline` (BLEU and chrF, default settings)."""
    from sacrebleu.metrics import BLEU, CHRF
    from sacrebleu.significance import PairedTest

    test = PairedTest(
        [("baseline", list(baseline)), ("new", list(new))],
        {"bleu": BLEU(), "chrf": CHRF()},
        [list(references)],
        test_type="bs",
        n_samples=samples,
    )
    _, results = test()
    # PairedTest names its columns after each metric's own name (BLEU, chrF2), in the order given.
    columns = [name for name in results if name != "System"]
    scores = dict(zip(METRICS, (results[name] for name in columns), strict=True))
    return (
        {metric: float(row[1].score) for metric, row in scores.items()},
        {metric: float(row[0].score) for metric, row in scores.items()},
        {metric: float(row[1].p_value) for metric, row in scores.items()},
    )


def compare(
    register: str,
    references: Sequence[str],
    hypotheses: dict[str, Sequence[str]],
    new: str,
    samples: int = BOOTSTRAP_SAMPLES,
) -> RegisterResult:
    """Every model's BLEU and chrF on one register, and the new model against each other one
    (`hypotheses`: model name -> its translations of the register, the new model's among them)."""
    from sacrebleu.metrics import BLEU, CHRF

    scores: dict[str, dict[str, float]] = {}
    comparisons = []
    for name, hyps in hypotheses.items():
        if name == new:
            continue
        new_scores, base_scores, p_values = paired_test(references, hypotheses[new], hyps, samples)
        scores[name] = base_scores
        scores.setdefault(new, new_scores)
        delta = {metric: new_scores[metric] - base_scores[metric] for metric in METRICS}
        comparisons.append(Comparison(name, delta, p_values))
    if new not in scores:  # no baseline: the new model's scores alone
        refs = [list(references)]
        scores[new] = {
            "bleu": BLEU().corpus_score(list(hypotheses[new]), refs).score,
            "chrf": CHRF().corpus_score(list(hypotheses[new]), refs).score,
        }
    ordered = {name: scores[name] for name in hypotheses}
    return RegisterResult(register, len(references), ordered, tuple(comparisons))


def is_worse(delta: float, p_value: float, alpha: float = ALPHA) -> bool:
    """Significantly worse: below the baseline, with p under alpha. An identical system gets a
    tiny p from sacreBLEU's bootstrap (no resample strays from a zero difference), so the sign
    decides, never p alone."""
    return delta < 0 and p_value < alpha


def format_p(p: float, alpha: float = ALPHA) -> str:
    """p to 3 decimals, or to 5 where 3 would round it across alpha (0.04995 is not "0.050")."""
    text = f"{p:.3f}"
    return f"{p:.5f}" if (float(text) < alpha) != (p < alpha) else text


def refusals(results: Sequence[RegisterResult], alpha: float = ALPHA) -> list[str]:
    """One line per (register, baseline, metric) where the new model is significantly worse."""
    lines = []
    for result in results:
        for comparison in result.comparisons:
            for metric in METRICS:
                delta, p = comparison.delta[metric], comparison.p_value[metric]
                if is_worse(delta, p, alpha):
                    lines.append(
                        f"{result.register}: {METRIC_NAMES[metric]} {delta:+.2f} against {comparison.baseline} "
                        f"(p = {format_p(p, alpha)} < {alpha})"
                    )
    return lines


def register_table(results: Sequence[dict], alpha: float = ALPHA) -> str:
    """The Markdown table of `RegisterResult`s as dicts (what the JSON holds): a significant
    loss is in bold, a significant gain in italics."""
    if not results:
        return ""
    models = list(results[0]["scores"])
    baselines = [c["baseline"] for c in results[0]["comparisons"]]
    header = ["register", "sentences", *(f"{m} BLEU / chrF" for m in models)]
    header += [f"Δ {METRIC_NAMES[metric]} (p) vs {b}" for b in baselines for metric in METRICS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for result in results:
        cells = [result["register"], f"{result['sentences']:,}"]
        cells += [f"{result['scores'][m]['bleu']:.2f} / {result['scores'][m]['chrf']:.2f}" for m in models]
        for comparison in result["comparisons"]:
            for metric in METRICS:
                delta, p = comparison["delta"][metric], comparison["p_value"][metric]
                cell = f"{delta:+.2f} ({format_p(p, alpha)})"
                if is_worse(delta, p, alpha):
                    cell = f"**{cell}**"
                elif is_worse(-delta, p, alpha):
                    cell = f"*{cell}*"
                cells.append(cell)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def bundle_key(bundle: Path) -> str:
    """sha256 of what decides a bundle's translations: its default graphs, tokenizer, term
    index, model config and decoding (not its card, metrics or quality thresholds); of an
    ensemble directory, its members' keys, alignment member and decoding."""
    if (bundle / ENSEMBLE_FILE).is_file():
        spec = read_ensemble(bundle)
        decides_ensemble = {
            "members": [bundle_key(member) for member in spec.members],
            "alignment": spec.alignment,
            "decoding": None if spec.decoding is None else spec.decoding.search_settings,
        }
        return hashlib.sha256(json.dumps(decides_ensemble, sort_keys=True).encode()).hexdigest()
    manifest = json.loads((bundle / BUNDLE_FILE).read_text(encoding="utf-8"))
    precision = manifest["precision"]
    names = [manifest["tokenizer"], *manifest["graphs"][precision].values()]
    names += [DICTIONARY_FILE] if DICTIONARY_FILE in manifest["files"] else []
    decides = {
        "files": {name: manifest["files"][name]["sha256"] for name in sorted(names)},
        "precision": precision,
        "model_config": manifest["model_config"],
        "decoding": manifest.get("decoding"),
    }
    return hashlib.sha256(json.dumps(decides, sort_keys=True).encode()).hexdigest()


def text_key(texts: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(texts).encode()).hexdigest()


def translations(bundle: Path, split: Split, cache: Path) -> list[str]:
    """`bundle`'s translations of `split`, from the cache or made (and cached) now."""
    from seq2seq.loading import translate_file

    path = cache / bundle_key(bundle)[:16] / f"{split.name}.{text_key(split.sources)[:16]}.json"
    if path.is_file():
        cached = json.loads(path.read_text(encoding="utf-8"))
        if len(cached["translations"]) == len(split.sources):
            log.info("%s %s: %d cached translations (%s)", bundle, split.name, len(split.sources), path)
            return cached["translations"]
    log.info("%s: translating %s (%d sentences)", bundle, split.name, len(split.sources))
    started = time.time()
    out, config = translate_file(bundle, "onnx", list(split.sources))
    log.info("%s %s: %.0f s", bundle, split.name, time.time() - started)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"bundle": str(bundle), "split": split.name, "decoding": config.search_settings, "translations": out}
    path.with_suffix(".tmp").write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")
    path.with_suffix(".tmp").replace(path)
    return out


def languages(bundle: Path) -> tuple[str, str]:
    if (bundle / ENSEMBLE_FILE).is_file():
        spec = read_ensemble(bundle)
        return languages(spec.members[spec.alignment])
    manifest = json.loads((bundle / BUNDLE_FILE).read_text(encoding="utf-8"))
    return manifest["languages"]["source"], manifest["languages"]["target"]


def read_splits(data: Path | None, gold: Path, german_side: int) -> tuple[list[Split], list[str]]:
    """The Ding splits of `data` (valid, test; none without `data`) and the gold set, with the
    kind of every gold row. `german_side`: 0 when the gold sources are German, 1 when the
    references are."""
    from seq2seq.analysis.aer import read_gold

    splits = []
    for name in ("valid", "test") if data is not None else ():
        sources, references = read_tsv_pairs(data / f"{name}.tsv")
        splits.append(Split(name, tuple(sources), tuple(references)))
    pairs = read_gold(gold)
    splits.append(Split("gold", tuple(p.source for p in pairs), tuple(p.target for p in pairs)))
    german = [(p.source, p.target)[german_side] for p in pairs]
    return splits, gold_kinds(german, read_kinds(), str(gold))


def named_bundle(text: str) -> tuple[str, Path]:
    """`NAME=DIR` or `DIR` (named after its folder) -> (name, path)."""
    name, _, path = text.partition("=") if "=" in text and "/" not in text.split("=", 1)[0] else ("", "", text)
    path = Path(path).expanduser()
    if not (path / BUNDLE_FILE).is_file() and not (path / ENSEMBLE_FILE).is_file():
        raise SystemExit(f"{path}: not a bundle (no {BUNDLE_FILE}); give a release bundle or an ensemble directory")
    return name or path.resolve().name, path


def evaluate(
    new: tuple[str, Path],
    baselines: Sequence[tuple[str, Path]],
    splits: Sequence[Split],
    kind_of_row: Sequence[str],
    cache: Path,
    samples: int = BOOTSTRAP_SAMPLES,
) -> list[RegisterResult]:
    """Translate every split with every model (cached), then compare register by register."""
    models = dict([new, *baselines])
    if len(models) != 1 + len(baselines):
        raise SystemExit("every model needs its own name: give NAME=DIR")
    by_split = {split.name: split for split in splits}
    made = {name: {s.name: translations(path, s, cache) for s in splits} for name, path in models.items()}
    results = []
    for register in registers(splits, kind_of_row):
        split = by_split[register.split]
        references = [split.references[i] for i in register.rows]
        hypotheses = {name: [made[name][split.name][i] for i in register.rows] for name in models}
        results.append(compare(register.name, references, hypotheses, new[0], samples))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m export.registers",
        description="BLEU and chrF per register (Ding valid, test, the gold set by kind) of a new bundle and "
        "its baselines, with paired bootstrap p-values; exits 1 when the new one is significantly worse on any",
    )
    parser.add_argument("--model", required=True, help="the new bundle: DIR or NAME=DIR")
    parser.add_argument(
        "--baseline", action="append", default=[], help="a release to compare with: DIR or NAME=DIR (repeatable)"
    )
    parser.add_argument("--data", type=Path, help="a prepared data directory with valid.tsv and test.tsv")
    parser.add_argument("--gold", type=Path, help="gold pairs (default: data/gold/<direction>.gold.tsv)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="translations per (bundle, split)")
    parser.add_argument("--samples", type=int, default=BOOTSTRAP_SAMPLES, help="bootstrap resamples")
    parser.add_argument("--alpha", type=float, default=ALPHA, help="significance level of the gate")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    if args.samples < 1 or not 0 < args.alpha < 1:
        parser.error("--samples must be >= 1 and --alpha between 0 and 1")
    if args.data is not None and not all((args.data / f"{s}.tsv").is_file() for s in ("valid", "test")):
        parser.error(f"--data {args.data}: no valid.tsv and test.tsv there (crossalign data prepare writes them)")
    new = named_bundle(args.model)
    baselines = [named_bundle(text) for text in args.baseline]
    direction = languages(new[1])
    for name, path in baselines:
        if languages(path) != direction:
            raise SystemExit(f"{name} ({path}) translates {'-'.join(languages(path))}, not {'-'.join(direction)}")
    if "de" not in direction:
        raise SystemExit(f"the gold kinds are keyed by German sentences; {'-'.join(direction)} has no German side")
    gold = args.gold or GOLD_DIR / f"{direction[0]}-{direction[1]}.gold.tsv"
    splits, kind_of_row = read_splits(args.data, gold, direction.index("de"))
    results = evaluate(new, baselines, splits, kind_of_row, args.cache.expanduser(), args.samples)
    as_dicts = [asdict(result) for result in results]
    refused = refusals(results, args.alpha)
    print(register_table(as_dicts, args.alpha))
    if args.json:
        record = {
            "model": new[0],
            "baselines": [name for name, _ in baselines],
            "alpha": args.alpha,
            "bootstrap_samples": args.samples,
            "registers": as_dicts,
            "refusals": refused,
        }
        args.json.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    for line in refused:
        print(f"refused: {line}", file=sys.stderr)
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
