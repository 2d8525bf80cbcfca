"""When a beam search stops a sentence: ours waits for beam_size finished hypotheses
(fairseq's rule, the default); with `DecodeConfig.early_exit` it stops as soon as the best
continuation is EOS. Prints, on one split, each rule's BLEU / chrF / length ratio and its
time in turns, and with --ct2 CTranslate2's time at beam 4 with num_hypotheses 1 against 4
under the bundle's length penalty (were it to stop at the first best EOS, asking for four
hypotheses would slow it down):

    python bench/stopping_rule.py --split ~/.cache/crossalign/data/ding8k-all/valid.tsv --pause-training
    python bench/stopping_rule.py --bundle STAGE6_BOTH --precision fp32 --split DATA/test.tsv --n 640 \
        --ct2 --pause-training

The bundle decodes with its own settings (bundle.json `decoding`), beam 4, batches of 32.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import sacrebleu  # noqa: E402

from bench.inference import read_test, training_paused  # noqa: E402
from seq2seq.decoding.translator import Translator  # noqa: E402
from seq2seq.loading import load_translator  # noqa: E402
from seq2seq.runtime.bundle import load_bundle_manifest  # noqa: E402


def ours(args: argparse.Namespace, translator: Translator, sources: list[str], references: list[str]) -> None:
    seconds: dict[bool, float] = {False: 0.0, True: 0.0}
    outputs: dict[bool, list[str]] = {}
    for _ in range(args.rounds):
        for early in (False, True):
            config = dataclasses.replace(translator.decode_defaults, beam_size=4, early_exit=early)
            began, texts = time.perf_counter(), []
            for first in range(0, len(sources), 32):
                texts += [r.text for r in translator.translate_batch(sources[first : first + 32], config)]
            seconds[early] += time.perf_counter() - began
            outputs[early] = texts
    for early, texts in outputs.items():
        bleu = sacrebleu.corpus_bleu(texts, [references])
        chrf = sacrebleu.corpus_chrf(texts, [references])
        print(
            f"early_exit {str(early):5s}  BLEU {bleu.score:5.2f}  chrF {chrf.score:5.2f}  "
            f"length ratio {bleu.sys_len / bleu.ref_len:.3f}  {len(sources) * args.rounds / seconds[early]:6.1f} sent/s"
        )
    same = sum(a == b for a, b in zip(outputs[False], outputs[True]))
    print(f"early exit {seconds[False] / seconds[True]:.2f}x as fast; {same}/{len(sources)} outputs identical")


def ctranslate2_rates(args: argparse.Namespace, translator: Translator, sources: list[str]) -> None:
    """CTranslate2 on the bundle's weights, as bench/ctranslate2_compare.py runs it, at beam 4
    and the bundle's length penalty, asked for one best hypothesis and for four."""
    from ctranslate2_compare import CTranslate2System, convert

    bundle = load_bundle_manifest(args.bundle, verify=False)
    compute = "int8" if translator.backend.precision == "int8" else "float32"
    decode = dataclasses.replace(translator.decode_defaults, beam_size=4, return_attention=False)
    with tempfile.TemporaryDirectory() as scratch:
        model = convert(args.bundle, Path(scratch) / "ct2")
        system = CTranslate2System(model, translator.tokenizer, bundle.model_config, compute, threads=2)
        seconds = {1: 0.0, 4: 0.0}
        for _ in range(args.rounds):
            for count in seconds:
                began = time.perf_counter()
                for first in range(0, len(sources), 32):
                    system.translate(sources[first : first + 32], decode, num_hypotheses=count)
                seconds[count] += time.perf_counter() - began
    for count, spent in seconds.items():
        print(
            f"ctranslate2 {compute} length_penalty {decode.length_penalty} num_hypotheses {count}: "
            f"{len(sources) * args.rounds / spent:6.1f} sent/s"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    parser.add_argument("--bundle", type=Path, default=REPO / "models/de-en", help="bundle (default models/de-en)")
    parser.add_argument("--precision", choices=("fp32", "int8"), default=None, help="graphs (default: the bundle's)")
    parser.add_argument("--split", type=Path, required=True, help="source<TAB>reference TSV")
    parser.add_argument("--n", type=int, default=100_000, help="sentences (default: all)")
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds, the rules in turn (default 2)")
    parser.add_argument("--ct2", action="store_true", help="also time CTranslate2 (the bench extra)")
    parser.add_argument("--pause-training", action="store_true", help="SIGSTOP the training runs while timing")
    args = parser.parse_args(argv)
    sources, references = read_test(args.split, args.n)
    if not sources:
        parser.error(f"{args.split}: no source<TAB>reference rows")
    translator = load_translator(args.bundle, precision=args.precision)
    with training_paused(args.pause_training):
        ours(args, translator, sources, references)
        if args.ct2:
            sys.path.insert(0, str(REPO / "bench"))
            ctranslate2_rates(args, translator, sources)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
