"""Vocabulary-size trial: pieces per sentence and <unk> count for several SentencePiece sizes.

    python bench/vocab_sizes.py --data work/ding8k --sizes 4000 8000 16000

Trains a joint unigram model of each size on the prepared training split (as `data
prepare` does) and encodes the valid split with it. Longer sequences cost compute in
every layer; a larger vocabulary costs it in the output layer (bench/train_throughput.py
measures that side).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from data.prepare import read_pairs
from data.tokenizer import UNK_ID, Tokenizer, train_sentencepiece


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="prepared data directory (train.tsv, valid.tsv)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[4000, 8000, 16000])
    args = parser.parse_args()
    train, valid = read_pairs(args.data / "train.tsv"), read_pairs(args.data / "valid.tsv")
    texts = [text for pair in train for text in (pair.source, pair.target)]
    print(f"{'vocabulary':>10} {'source pieces':>14} {'target pieces':>14} {'<unk>':>6}")
    with tempfile.TemporaryDirectory() as scratch:
        for size in args.sizes:
            tokenizer = Tokenizer(train_sentencepiece(texts, Path(scratch) / f"spm{size}", vocab_size=size))
            sources = tokenizer.encode_batch([p.source for p in valid])
            targets = tokenizer.encode_batch([p.target for p in valid])
            unknown = sum(ids.count(UNK_ID) for ids in sources + targets)
            print(
                f"{size:>10} {sum(map(len, sources)) / len(valid):>14.2f} "
                f"{sum(map(len, targets)) / len(valid):>14.2f} {unknown:>6}"
            )


if __name__ == "__main__":
    main()
