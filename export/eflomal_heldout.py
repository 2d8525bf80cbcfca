"""eflomal links for held-out pairs (valid, test): reference links where no gold set exists.

`export/quality_signals.py` plants omissions into held-out reference translations and needs
to know which source words a deleted target span translated. Without hand alignments, the
statistical aligner of `export/eflomal_baseline.py` (AER 13.3 on the gold set, and
independent of any model under test) stands in: it is run on the training corpus plus the
held-out pairs, which only adds their words to the statistics (no labels are involved, and
the model under test never sees these links). Output: one Pharaoh line of grow-diag-final
links per line of each held-out file, indices over `seq2seq.core.alignment.words()`.

    OMP_NUM_THREADS=1 python -m export.eflomal_heldout --train DATA/train.tsv \\
        --heldout DATA/valid.tsv DATA/test.tsv --out-dir DATA    # -> DATA/eflomal.valid.pharaoh, ...
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from export.eflomal_baseline import align_pairs, default_iterations, read_train
from seq2seq.analysis.aer import grow_diag_final, write_pharaoh


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--train", type=Path, required=True, help="prepared corpus, source<TAB>target<TAB>kind")
    parser.add_argument(
        "--heldout",
        type=Path,
        nargs="+",
        required=True,
        help="source<TAB>target files to link (e.g. valid.tsv test.tsv)",
    )
    parser.add_argument(
        "--out-dir", type=Path, required=True, help="writes eflomal.<stem>.pharaoh here for each --heldout file"
    )
    parser.add_argument("--seed", type=int, default=1, help="eflomal's random seed (see eflomal_baseline.py)")
    args = parser.parse_args(argv)

    train = read_train(args.train)
    heldout = [read_train(path) for path in args.heldout]
    pairs = train + [pair for block in heldout for pair in block]
    iterations = default_iterations(len(pairs))
    print(
        f"eflomal: {len(train)} training pairs + {sum(map(len, heldout))} held-out pairs, iterations "
        f"{iterations}, seed {args.seed}",
        flush=True,
    )
    forward, reverse = align_pairs(pairs, args.seed, iterations)
    start = len(train)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for path, block in zip(args.heldout, heldout):
        links = [
            grow_diag_final(f, r)
            for f, r in zip(forward[start : start + len(block)], reverse[start : start + len(block)])
        ]
        out = args.out_dir / f"eflomal.{path.stem}.pharaoh"
        write_pharaoh(out, links)
        print(f"wrote {len(links)} alignments of {path} to {out}")
        start += len(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
