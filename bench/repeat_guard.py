"""The repetition guard on a model: quality and stutters per `no_repeat_ngram_size` (README,
"Repetition guard").

    python bench/repeat_guard.py --model models/de-en --data ~/.cache/crossalign/data/ding8k-all \
        --sizes 0 2 3 4 --splits valid test

Translates each split once per size (beam 4 and the other decoding defaults) and prints
sacreBLEU BLEU, chrF, the length ratio, and how many outputs stutter: a word said three
or more times in a row ("office office office"), and a word trigram said twice. Words are
`seq2seq.core.alignment.words`, lowercased, punctuation left out. The default is chosen on
valid; test is only read.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data.prepare import read_tsv_pairs  # noqa: E402
from seq2seq.analysis.corpus_scores import corpus_scores  # noqa: E402
from seq2seq.core.alignment import words  # noqa: E402
from seq2seq.core.config import DecodeConfig  # noqa: E402
from seq2seq.loading import load_translator  # noqa: E402


def spoken_words(text: str) -> list[str]:
    """The words of a translation, lowercased, without punctuation tokens."""
    return [w.text.lower() for w in words(text) if any(c.isalnum() for c in w.text)]


def repeats_a_word(text: str, times: int = 3) -> bool:
    """A word said `times` or more times in a row."""
    said = spoken_words(text)
    return any(len(set(said[i : i + times])) == 1 for i in range(len(said) - times + 1))


def repeats_a_trigram(text: str) -> bool:
    """A word trigram said more than once (anywhere in the text)."""
    said = spoken_words(text)
    trigrams = [tuple(said[i : i + 3]) for i in range(len(said) - 2)]
    return len(trigrams) != len(set(trigrams))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("models/de-en"), help="bundle directory")
    parser.add_argument("--data", type=Path, required=True, help="directory with SPLIT.tsv (source<TAB>reference)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[0, 2, 3, 4], help="no_repeat_ngram_size values")
    parser.add_argument(
        "--splits",
        nargs="+",
        default=["valid", "test"],
        help="DATA/NAME.tsv, or a TSV file's path (default valid test)",
    )
    parser.add_argument("--beam-size", type=int, default=DecodeConfig.beam_size)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--save-dir", type=Path, help="write each run's translations here, SPLIT.SIZE.txt")
    args = parser.parse_args(argv)
    translator = load_translator(args.model, verify=False)
    print("| split | no_repeat_ngram_size | BLEU | chrF | length ratio | word x3 in a row | repeated word trigram |")
    print("|---|---|---|---|---|---|---|")
    for split in args.splits:
        path = Path(split) if split.endswith(".tsv") else args.data / f"{split}.tsv"
        sources, references = read_tsv_pairs(path)
        split = path.stem
        for size in args.sizes:
            config = dataclasses.replace(
                DecodeConfig(return_attention=False), beam_size=args.beam_size, no_repeat_ngram_size=size
            )
            started = time.perf_counter()
            hypotheses = [
                r.text
                for first in range(0, len(sources), args.batch_size)
                for r in translator.translate_batch(sources[first : first + args.batch_size], config)
            ]
            seconds = time.perf_counter() - started
            if args.save_dir:
                args.save_dir.mkdir(parents=True, exist_ok=True)
                (args.save_dir / f"{split}.{size}.txt").write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
            result = corpus_scores(hypotheses, references)
            stutters = sum(map(repeats_a_word, hypotheses))
            trigrams = sum(map(repeats_a_trigram, hypotheses))
            print(
                f"| {split} ({len(sources)}) | {size} | {result['bleu']:.2f} | {result['chrf']:.2f} | "
                f"{result['length_ratio']:.3f} | {stutters} | {trigrams} |",
                flush=True,
            )
            print(f"  ({seconds:.1f} s)", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
