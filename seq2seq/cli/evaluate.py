"""`crossalign eval`: sacreBLEU BLEU and chrF, with their signatures; or alignment error rate.

Translations: either score a file of translations against references, or translate a test
split with a model and score that.

Alignments (`--gold FILE`, a hand-aligned set as documented in data/gold/README.md): AER,
precision and recall (seq2seq/analysis/aer.py, Och & Ney 2003) of either a Pharaoh file of any
aligner (`--hyp FILE.pharaoh`, one line per gold pair), or the model's own alignment of
the gold pairs, read by teacher forcing the gold target (seq2seq/decoding/forced.py) from
`--layer` / `--heads` / `--step-shift` (default: the model's alignment source).

    crossalign eval --gold data/gold/de-en.gold.tsv --hyp data/gold/eflomal.gold.pharaoh
    crossalign eval --gold data/gold/de-en.gold.tsv --model models/de-en --layer 1 --heads 2 --step-shift
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from data.prepare import read_tsv_pairs
from seq2seq.analysis.corpus_scores import corpus_scores
from seq2seq.cli.align import add_alignment_source_arguments
from seq2seq.cli.translate_args import add_decoding_arguments, asked_decoding
from seq2seq.loading import BACKENDS, DEFAULT_BACKEND, translate_file
from seq2seq.runtime.bundle import PRECISIONS

log = logging.getLogger("crossalign.eval")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", type=Path, help="model directory to translate --test with")
    parser.add_argument("--test", type=Path, help="source<TAB>reference file (e.g. DATA/test.tsv)")
    parser.add_argument(
        "--hyp",
        type=Path,
        help="file of translations, one per line (instead of --model); with --gold a Pharaoh file of alignments",
    )
    parser.add_argument("--ref", type=Path, help="file of references, one per line (with --hyp)")
    parser.add_argument("--backend", choices=BACKENDS, default=DEFAULT_BACKEND)
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default=None,
        help="onnx graphs to run (default: the bundle's, named in its bundle.json)",
    )
    add_decoding_arguments(parser)  # --beam-size, --length-penalty, ..., as `translate`
    parser.add_argument("--limit", type=int, default=0, help="score only the first N sentences")
    parser.add_argument(
        "--save-hyp", type=Path, help="write the model's translations (with --gold: its Pharaoh links) here"
    )
    parser.add_argument("--json", action="store_true", help="print the scores as JSON")
    alignment = parser.add_argument_group("alignment (AER against a gold set)")
    alignment.add_argument(
        "--gold",
        type=Path,
        help="gold alignments, source<TAB>target<TAB>links (data/gold/de-en.gold.tsv); --hyp is then a Pharaoh file",
    )
    add_alignment_source_arguments(alignment)


def alignment_links(
    model: Path,
    backend: str,
    pairs: list[tuple[str, str]],
    layer: int | None,
    heads: tuple[int, ...] | None,
    step_shift: bool | None,
    precision: str | None = None,
) -> list[set[tuple[int, int]]]:
    """The model's hard word links of given pairs (an unalignable pair has none)."""
    from seq2seq.core.config import AlignmentError
    from seq2seq.decoding.forced import align_pairs
    from seq2seq.loading import load_translator

    translator = load_translator(model, backend, precision=precision)
    links = []
    for number, result in enumerate(align_pairs(translator, pairs, "word", layer, heads, step_shift), start=1):
        if isinstance(result, AlignmentError):
            log.warning("gold pair %d not aligned: %s", number, result)
            links.append(set())
        else:
            links.append(set(result.links))
    return links


def evaluate_alignment(args: argparse.Namespace) -> int:
    """`--gold`: AER, precision and recall of `--hyp` (Pharaoh) or of `--model`'s maps."""
    from seq2seq.analysis.aer import read_gold, read_pharaoh, write_pharaoh
    from seq2seq.analysis.aer import score as alignment_score

    gold = read_gold(args.gold)
    if args.limit:
        gold = gold[: args.limit]
    if args.hyp:
        hypotheses = read_pharaoh(args.hyp)
        if args.limit:
            hypotheses = hypotheses[: args.limit]
        source = str(args.hyp)
    elif args.model:
        heads = None if args.heads is None else tuple(args.heads)
        hypotheses = alignment_links(
            args.model,
            args.backend,
            [(p.source, p.target) for p in gold],
            args.layer,
            heads,
            args.step_shift,
            args.precision,
        )
        shift = "" if args.step_shift is None else (" step-shift" if args.step_shift else " no step-shift")
        source = (
            f"{args.model} layer {'default' if args.layer is None else args.layer} heads "
            f"{'default' if heads is None else (list(heads) or 'mean')}{shift}"
        )
        if args.save_hyp:
            write_pharaoh(args.save_hyp, hypotheses)
    else:
        raise SystemExit("--gold needs --hyp FILE.pharaoh or --model DIR")
    result = alignment_score(hypotheses, gold)
    if args.json:
        print(
            json.dumps(
                {
                    "aer": round(100 * result.aer, 2),
                    "precision": round(100 * result.precision, 2),
                    "recall": round(100 * result.recall, 2),
                    "hypothesis_links": result.hypothesis_links,
                    "sure_links": result.sure_links,
                    "possible_links": result.possible_links,
                    "pairs": len(gold),
                    "alignments": source,
                }
            )
        )
    else:
        print(f"{result}  [{len(gold)} pairs; {source}]")
    return 0


def main(args: argparse.Namespace) -> int:
    if getattr(args, "gold", None):
        return evaluate_alignment(args)
    if args.hyp:
        if not args.ref and not args.test:
            raise SystemExit("--hyp needs --ref or --test")
        hypotheses = args.hyp.read_text(encoding="utf-8").splitlines()
        references = args.ref.read_text(encoding="utf-8").splitlines() if args.ref else read_tsv_pairs(args.test)[1]
        decoding = None
    elif args.model and args.test:
        sources, references = read_tsv_pairs(args.test)
        if args.limit:
            sources, references = sources[: args.limit], references[: args.limit]
        started = time.time()
        hypotheses, config = translate_file(
            args.model, args.backend, sources, asked_decoding(args), precision=args.precision
        )
        decoding = config.search_settings  # what the figures were measured with
        log.info("translated %d sentences in %.1fs", len(sources), time.time() - started)
        if args.save_hyp:
            args.save_hyp.write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    else:
        raise SystemExit("give --model and --test, or --hyp with --ref/--test")
    result = corpus_scores(hypotheses, references) | ({"decoding": decoding} if decoding else {})
    if args.json:
        print(json.dumps(result))
    else:
        print(f"BLEU = {result['bleu']:.2f}  ({result['bleu_signature']})")
        print(f"chrF = {result['chrf']:.2f}  ({result['chrf_signature']})")
        print(f"length ratio = {result['length_ratio']:.3f}  (hypothesis / reference)")
    return 0
