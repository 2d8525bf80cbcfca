"""Does a target language model help the reranking? An n-gram LM of the training targets,
added to the channel reranking of the n-best lists bench/rerank.py cached.

    python bench/rerank.py ... --out ~/.cache/crossalign/runs/rerank-stage12     # the lists first
    python bench/target_lm.py --run ~/.cache/crossalign/runs/rerank-stage12 \\
        --data ~/.cache/crossalign/data/ding8k-po --gold data/gold/de-en.gold.tsv

The language model: interpolated Kneser-Ney (one discount, 0.75) over lower-cased words, of
order `--order`, fitted on the target side of `DATA/train.tsv` (every line: what the model
itself was trained on, as issue 39 asks of it). Each candidate's key is its search score +
λ_channel · its channel score (as `RerankOptions`' channel mode) + λ_lm · its log P per word
(with the end of the sentence). The grid of (λ_channel, λ_lm) is scored on the even lines of
valid by corpus BLEU, as bench/rerank.py tunes; the best setting and the mildest one within 0.3
BLEU of it (the smallest λ_lm: the rule release.sh chooses α by) are reported on the odd lines,
the gold set and test against the channel alone, with sacreBLEU's paired bootstrap p. The LM
reads no GPU and no model: a minute or two on one core.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import re
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from data.prepare import read_tsv_pairs  # noqa: E402
from export.registers import paired_test  # noqa: E402
from seq2seq.analysis.corpus_scores import corpus_scores  # noqa: E402

WORD = re.compile(r"\w+|[^\w\s]")
CHANNEL_WEIGHTS = (0.0, 2.0)
LM_WEIGHTS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0)


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


class KneserNey:
    """Interpolated Kneser-Ney: the highest order counts n-grams, the lower ones count the
    distinct words each n-gram follows (its continuations)."""

    def __init__(self, sentences: list[str], order: int = 4, discount: float = 0.75) -> None:
        self.order, self.discount = order, discount
        top: collections.Counter = collections.Counter()
        for sentence in sentences:
            padded = ["<s>"] * (order - 1) + words(sentence) + ["</s>"]
            for end in range(order, len(padded) + 1):
                top[tuple(padded[end - order : end])] += 1
        self.counts: dict[int, collections.Counter] = {order: top}
        for n in range(order - 1, 0, -1):
            self.counts[n] = collections.Counter(gram[1:] for gram in self.counts[n + 1])
        self.totals: dict[int, collections.Counter] = {}
        self.followers: dict[int, collections.Counter] = {}
        for n, counts in self.counts.items():
            totals, followers = collections.Counter(), collections.Counter()
            for gram, count in counts.items():
                totals[gram[:-1]] += count
                followers[gram[:-1]] += 1
            self.totals[n], self.followers[n] = totals, followers
        self.vocabulary = len(self.counts[1]) + 1

    def probability(self, gram: tuple[str, ...]) -> float:
        p = 1.0 / self.vocabulary
        for n in range(1, len(gram) + 1):
            context = gram[len(gram) - n : -1]
            total = self.totals[n].get(context)
            if total:
                seen = max(self.counts[n].get(gram[len(gram) - n :], 0) - self.discount, 0.0)
                p = seen / total + self.discount * self.followers[n][context] / total * p
        return p

    def log_prob_per_word(self, text: str) -> float:
        padded = ["<s>"] * (self.order - 1) + words(text) + ["</s>"]
        grams = [tuple(padded[end - self.order : end]) for end in range(self.order, len(padded) + 1)]
        return sum(math.log(self.probability(gram)) for gram in grams) / len(grams)


def choose(found: dict, lm: list[list[float]], rows: list[int], channel_weight: float, lm_weight: float) -> list[str]:
    out = []
    for row in rows:
        key = np.array(found["scores"][row]) + channel_weight * np.array(found["channel"][row])
        key = key + lm_weight * np.array(lm[row])
        out.append(found["lists"][row][int(np.argmax(key))])  # ties: the search's order, as rerank_order
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, required=True, help="bench/rerank.py's --out, with its nbest.*.json")
    parser.add_argument("--data", type=Path, required=True, help="a data directory with train, valid and test.tsv")
    parser.add_argument("--gold", type=Path, default=REPO / "data" / "gold" / "de-en.gold.tsv")
    parser.add_argument("--candidates", type=int, default=8, help="the lists' size (their file names)")
    parser.add_argument("--order", type=int, default=4)
    args = parser.parse_args(argv)
    data, run = args.data.expanduser(), args.run.expanduser()
    targets = [line.split("\t")[1] for line in (data / "train.tsv").read_text(encoding="utf-8").splitlines()]
    print(f"fitting a {args.order}-gram LM on {len(targets):,} target lines", file=sys.stderr, flush=True)
    lm = KneserNey(targets, args.order)
    references = {
        "valid": read_tsv_pairs(data / "valid.tsv")[1],
        "gold": read_tsv_pairs(args.gold)[1],
        "test": read_tsv_pairs(data / "test.tsv")[1],
    }
    found = {name: json.loads((run / f"nbest.{name}.{args.candidates}.json").read_text()) for name in references}
    scored = {name: [[lm.log_prob_per_word(c) for c in texts] for texts in f["lists"]] for name, f in found.items()}
    tune = list(range(0, len(references["valid"]), 2))
    held = list(range(1, len(references["valid"]), 2))

    def bleu(name: str, rows: list[int], texts: list[str]) -> dict:
        return corpus_scores(texts, [references[name][i] for i in rows])

    grid = []
    for channel_weight in CHANNEL_WEIGHTS:
        for lm_weight in LM_WEIGHTS:
            texts = choose(found["valid"], scored["valid"], tune, channel_weight, lm_weight)
            grid.append((bleu("valid", tune, texts)["bleu"], channel_weight, lm_weight))
            print(f"tune λ channel {channel_weight} λ lm {lm_weight}: BLEU {grid[-1][0]:.2f}", file=sys.stderr)
    best = max(grid)
    mildest = next(g for g in grid if g[1] == best[1] and g[0] >= best[0] - 0.3)
    report: dict = {"lm": {"order": args.order, "lines": len(targets)}, "grid": grid, "settings": {}}
    for label, (_, channel_weight, lm_weight) in (("best", best), ("mildest within 0.3", mildest)):
        row: dict = {"channel_weight": channel_weight, "lm_weight": lm_weight}
        for name in references:
            rows = held if name == "valid" else list(range(len(references[name])))
            texts = choose(found[name], scored[name], rows, channel_weight, lm_weight)
            without = choose(found[name], scored[name], rows, channel_weight, 0.0)
            _, _, p_values = paired_test([references[name][i] for i in rows], texts, without)
            row[name] = {
                "with_lm": {k: round(v, 2) for k, v in bleu(name, rows, texts).items() if k in ("bleu", "chrf")},
                "without": {k: round(v, 2) for k, v in bleu(name, rows, without).items() if k in ("bleu", "chrf")},
                "p": {k: round(v, 4) for k, v in p_values.items()},
            }
        report["settings"][label] = row
    (run / "target_lm.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report["settings"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
