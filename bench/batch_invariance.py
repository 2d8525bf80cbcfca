"""Does a translation depend on what else is in its batch? (README, "int8 that does not
depend on the batch".)

    python bench/batch_invariance.py --bundle BUNDLE --test ~/.cache/crossalign/data/ding8k-all/test.tsv --n 192

Translates the first N test sources once each alone and once in batches of 32, with every
precision the bundle carries, greedy and beam 4, and prints how many translations differ.
Dynamically quantized int8 graphs differ (their activation scale is computed over the whole
batch); fp32 and calibrated int8 graphs (export/calibrate.py) should not.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from seq2seq.core.config import DecodeConfig  # noqa: E402
from seq2seq.loading import load_translator  # noqa: E402
from seq2seq.runtime.bundle import load_bundle_manifest  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, default=Path("models/de-en"), help="bundle directory")
    parser.add_argument("--test", type=Path, required=True, help="source<TAB>target TSV")
    parser.add_argument("--n", type=int, default=192, help="sentences (default 192)")
    parser.add_argument("--batch-size", type=int, default=32, help="(default 32)")
    args = parser.parse_args(argv)
    lines = args.test.read_text(encoding="utf-8").splitlines()[: args.n]
    sources = [line.split("\t")[0] for line in lines]
    for precision in load_bundle_manifest(args.bundle, verify=False).precisions:
        translator = load_translator(args.bundle, precision=precision, verify=False)
        for beam in (1, 4):
            config = DecodeConfig(beam_size=beam)
            alone = [translator.translate(s, config).text for s in sources]
            batched = [
                r.text
                for first in range(0, len(sources), args.batch_size)
                for r in translator.translate_batch(sources[first : first + args.batch_size], config)
            ]
            differ = sum(a != b for a, b in zip(alone, batched, strict=True))
            print(f"{precision} beam {beam}: {differ}/{len(sources)} differ alone vs batch {args.batch_size}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
