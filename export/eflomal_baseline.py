"""eflomal baseline for the alignment gold set: what a dedicated statistical aligner scores.

eflomal (Östling & Tiedemann 2017, Bayesian IBM1 -> HMM -> HMM+fertility, Gibbs sampling) is
trained on the prepared corpus (all of `train.tsv`: sentence pairs and dictionary phrases)
plus the gold sentences, which only adds their words to the statistics, no labels. Both
directions are run and symmetrised with grow-diag-final (`seq2seq.analysis.aer.grow_diag_final`); the
gold slice is scored with `seq2seq.analysis.aer.score`. Tokens are `seq2seq.core.alignment.words()`,
lowercased, so gold indices and eflomal's indices are the same words.

    pip install eflomal
    OMP_NUM_THREADS=1 python -m export.eflomal_baseline --seed 1 \
        --gold-out data/gold/eflomal.gold.pharaoh --train-out work/ding8k/eflomal.train.pharaoh

Reproducibility: eflomal has no seed option; it reads its seed from /dev/urandom. With
`--seed N` (the default is 1) this script preloads a tiny C shim (compiled with `cc` into a
temporary directory) that answers that one read with a fixed 8-byte state derived from N;
with one OpenMP thread (the script sets OMP_NUM_THREADS=1 for eflomal) the samplers then
draw their states in a fixed order and the run is deterministic. `--seed -1` keeps
eflomal's own random seed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from math import sqrt
from pathlib import Path

from seq2seq.analysis.aer import Link, grow_diag_final, read_gold, read_pharaoh, score, write_pharaoh
from seq2seq.core.alignment import words

# Answers eflomal's fopen("/dev/urandom") with EFLOMAL_SEED, mixed by splitmix64 so that a
# small seed (even 0) gives a well-spread, non-zero xorshift state.
SEED_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char state_bytes[8];

static FILE *seeded(const char *path) {
    const char *seed = getenv("EFLOMAL_SEED");
    if (seed == NULL || strcmp(path, "/dev/urandom") != 0) return NULL;
    uint64_t z = strtoull(seed, NULL, 10) + 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    if (z == 0) z = 1;
    memcpy(state_bytes, &z, sizeof z);
    return fmemopen(state_bytes, sizeof state_bytes, "rb");
}

FILE *fopen(const char *path, const char *mode) {
    FILE *file = seeded(path);
    if (file) return file;
    FILE *(*real)(const char *, const char *) = dlsym(RTLD_NEXT, "fopen");
    return real(path, mode);
}

FILE *fopen64(const char *path, const char *mode) {
    FILE *file = seeded(path);
    if (file) return file;
    FILE *(*real)(const char *, const char *) = dlsym(RTLD_NEXT, "fopen64");
    return real(path, mode);
}
"""


def tokenize(text: str) -> str:
    """The project's words, lowercased, space-joined: eflomal's input line."""
    return " ".join(token.text.lower() for token in words(text))


def read_train(path: Path) -> list[tuple[str, str]]:
    """(source, target) of every line of a prepared `source<TAB>target<TAB>kind` file."""
    pairs = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 2:
                raise ValueError(f"{path}:{number}: expected source<TAB>target<TAB>kind")
            pairs.append((fields[0], fields[1]))
    return pairs


def default_iterations(n_sentences: int, rel_iterations: float = 1.0) -> tuple[int, int, int]:
    """eflomal's own default (its Python wrapper): IBM1, HMM, fertility iterations."""
    iters = max(2, int(round(rel_iterations * 5000 / sqrt(n_sentences))))
    quarter = max(1, iters // 4)
    return max(2, quarter), quarter, iters


def build_shim(directory: Path) -> Path:
    source, library = directory / "seed_shim.c", directory / "seed_shim.so"
    source.write_text(SEED_SHIM)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(library), str(source), "-ldl"], check=True)
    return library


def run_eflomal(
    sources: list[str],
    targets: list[str],
    directory: Path,
    seed: int,
    model: int,
    n_samplers: int,
    null_prior: float,
    iterations: tuple[int, int, int],
) -> tuple[list[set[Link]], list[set[Link]]]:
    """Forward and reverse links, both as (source, target) index pairs, one set per pair."""
    import eflomal  # optional dependency: pip install eflomal

    source_file, target_file = directory / "source.eflomal", directory / "target.eflomal"
    with open(source_file, "wb") as source_out, open(target_file, "wb") as target_out:
        eflomal.Aligner().prepare_files(sources, source_out, targets, target_out, None, None)
    binary = Path(eflomal.__file__).parent / "bin" / "eflomal"
    forward_file, reverse_file = directory / "forward.pharaoh", directory / "reverse.pharaoh"
    command = [
        str(binary),
        "-s",
        str(source_file),
        "-t",
        str(target_file),
        "-f",
        str(forward_file),
        "-r",
        str(reverse_file),
        "-m",
        str(model),
        "-n",
        str(n_samplers),
        "-N",
        str(null_prior),
        "-1",
        str(iterations[0]),
        "-2",
        str(iterations[1]),
        "-3",
        str(iterations[2]),
        "-q",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if seed >= 0:
        env["LD_PRELOAD"] = str(build_shim(directory))
        env["EFLOMAL_SEED"] = str(seed)
    subprocess.run(command, check=True, env=env)
    return read_pharaoh(forward_file), read_pharaoh(reverse_file)


def align_pairs(
    pairs: list[tuple[str, str]],
    seed: int,
    iterations: tuple[int, int, int],
    model: int = 3,
    n_samplers: int = 3,
    null_prior: float = 0.2,
) -> tuple[list[set[Link]], list[set[Link]]]:
    """eflomal's forward and reverse links of every (source, target) pair, in a scratch
    directory; exits if eflomal returns another number of alignments."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="eflomal-") as tmp:
        forward, reverse = run_eflomal(
            [tokenize(s) for s, _ in pairs],
            [tokenize(t) for _, t in pairs],
            Path(tmp),
            seed,
            model,
            n_samplers,
            null_prior,
            iterations,
        )
    if len(forward) != len(pairs) or len(reverse) != len(pairs):
        sys.exit(f"eflomal returned {len(forward)}/{len(reverse)} alignments for {len(pairs)} pairs")
    print(f"aligned in {time.perf_counter() - started:.0f} s")
    return forward, reverse


def report(name: str, hypotheses: Iterable[set[Link]], gold) -> None:
    print(f"{name:<16} {score(list(hypotheses), gold)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument(
        "--train",
        type=Path,
        default=Path("work/ding8k/train.tsv"),
        help="prepared training corpus, source<TAB>target<TAB>kind",
    )
    parser.add_argument("--gold", type=Path, default=Path("data/gold/de-en.gold.tsv"))
    parser.add_argument(
        "--train-out",
        type=Path,
        default=None,
        help="also write the grow-diag-final links of every --train line here (Pharaoh)",
    )
    parser.add_argument(
        "--gold-out",
        type=Path,
        default=None,
        help="also write the grow-diag-final links of the gold pairs here, to rescore with "
        "`python -m seq2seq.analysis.aer score`",
    )
    parser.add_argument("--seed", type=int, default=1, help="eflomal's random seed; -1: from /dev/urandom")
    parser.add_argument("--model", type=int, default=3, choices=(1, 2, 3), help="1 IBM1, 2 +HMM, 3 +fertility")
    parser.add_argument(
        "--samplers", type=int, default=3, help="independent Gibbs samplers (eflomal's Aligner default)"
    )
    parser.add_argument("--null-prior", type=float, default=0.2)
    parser.add_argument(
        "--rel-iterations",
        type=float,
        default=1.0,
        help="iterations relative to eflomal's default for this corpus size",
    )
    args = parser.parse_args(argv)

    if shutil.which("cc") is None and args.seed >= 0:
        sys.exit("--seed needs a C compiler (cc) for the seed shim; use --seed -1 to run unseeded")
    gold = read_gold(args.gold)
    train = read_train(args.train)
    pairs = train + [(pair.source, pair.target) for pair in gold]
    iterations = default_iterations(len(pairs), args.rel_iterations)
    print(
        f"eflomal model {args.model}, {args.samplers} samplers, iterations {iterations}, seed {args.seed}: "
        f"{len(train)} training pairs + {len(gold)} gold pairs",
        flush=True,
    )

    forward, reverse = align_pairs(pairs, args.seed, iterations, args.model, args.samplers, args.null_prior)
    symmetric = [grow_diag_final(f, r) for f, r in zip(forward, reverse)]

    n = len(train)
    report("forward", forward[n:], gold)
    report("reverse", reverse[n:], gold)
    report("intersection", (f & r for f, r in zip(forward[n:], reverse[n:])), gold)
    report("union", (f | r for f, r in zip(forward[n:], reverse[n:])), gold)
    report("grow-diag-final", symmetric[n:], gold)
    if args.gold_out:
        write_pharaoh(args.gold_out, symmetric[n:])
    if args.train_out:
        write_pharaoh(args.train_out, symmetric[:n])
        print(f"wrote {n} grow-diag-final alignments of {args.train} to {args.train_out}")


if __name__ == "__main__":
    main()
