"""Which score a text of several sentences should have: the evidence behind seq2seq/decoding/texts.py's rule.

    python bench/text_score.py --model models/de-en \\
        --pairs ~/.cache/crossalign/data/ding8k-all-en-de/test.tsv --reverse --n 600

Consecutive pairs of a test split are joined into texts of two and three sentences (in
turn); each text is translated by the one text pipeline (sentence by sentence, the model's
own search settings) and scored by two rules: the plain mean of its sentences' scores (what
/v1/translate answered), and the mean weighted by the pieces each sentence produced (target
pieces + EOS: what the batch CLI answered, and how the joined quality block weighs its
sentences). Printed for each rule: how far it lies from the score one search over the whole
text reports (the text translated unsplit: the score a text's pieces would have as one
hypothesis) and its Pearson correlation with it, and its Pearson and Spearman correlation
with the text's chrF against its joined reference (sacreBLEU): a score is read as a
confidence.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import sacrebleu

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from seq2seq.decoding.texts import translate_texts  # noqa: E402
from seq2seq.loading import load_translator  # noqa: E402


def read_texts(path: Path, n: int, reverse: bool) -> list[tuple[str, str]]:
    """(source text, reference text) of the first `n` pairs, two and three sentences at a time."""
    pairs = []
    for line in path.read_text(encoding="utf-8").splitlines()[:n]:
        source, target = line.split("\t")[:2]
        pairs.append((target, source) if reverse else (source, target))
    texts, start, size = [], 0, 2
    while start + size <= len(pairs):
        group = pairs[start : start + size]
        texts.append((" ".join(s for s, _ in group), " ".join(t for _, t in group)))
        start, size = start + size, 5 - size  # 2, 3, 2, 3, ...
    return texts


def ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    ranked = np.empty(len(values))
    ranked[order] = np.arange(len(values))
    return ranked


def correlations(scores: np.ndarray, quality: np.ndarray) -> tuple[float, float]:
    """(Pearson, Spearman) of `scores` with `quality`."""
    return float(np.corrcoef(scores, quality)[0, 1]), float(np.corrcoef(ranks(scores), ranks(quality))[0, 1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=Path("models/de-en"))
    parser.add_argument("--pairs", type=Path, required=True, help="a TSV of source<TAB>reference lines")
    parser.add_argument("--reverse", action="store_true", help="the TSV holds reference<TAB>source")
    parser.add_argument("--n", type=int, default=600, help="pairs read (joined into texts)")
    args = parser.parse_args()
    translator = load_translator(args.model)
    texts = read_texts(args.pairs.expanduser(), args.n, args.reverse)
    config = translator.decode_defaults
    translated = translate_texts([s for s, _ in texts], lambda sentences: translator.translate_batch(sentences, config))
    whole = np.array([r.score for r in translator.translate_batch([s for s, _ in texts], config)])
    chrf = np.array([sacrebleu.sentence_chrf(t.text, [r]).score for t, (_, r) in zip(translated, texts)])
    plain = np.array([np.mean([r.score for r in t.results]) for t in translated])
    weighted = np.array([t.score for t in translated])
    print(f"{len(texts)} texts of 2-3 sentences, {sum(len(t.results) for t in translated)} sentences, {args.model}")
    for name, scores in (("plain mean", plain), ("weighted by pieces", weighted)):
        pearson, spearman = correlations(scores, chrf)
        gap, agree = np.mean(np.abs(scores - whole)), np.corrcoef(scores, whole)[0, 1]
        print(
            f"{name:>20}: |score - one search's| {gap:.3f}, Pearson {agree:.3f} with it; "
            f"Pearson {pearson:.3f}, Spearman {spearman:.3f} with text chrF"
        )
    print(f"mean |plain - weighted| {np.mean(np.abs(plain - weighted)):.3f}")


if __name__ == "__main__":
    main()
