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
import dataclasses
import json
import logging
import time
from pathlib import Path

from data.prepare import read_tsv_pairs
from seq2seq.analysis.corpus_scores import corpus_scores
from seq2seq.cli import UsageError
from seq2seq.cli.align import add_alignment_source_arguments
from seq2seq.cli.models import add_rerank_arguments, channel_model, check_model_dir, rerank_options
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
    add_rerank_arguments(parser.add_argument_group("reranking the n-best (as `translate`)"))
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
        raise UsageError("--gold needs --hyp FILE.pharaoh or --model DIR")
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
    if args.gold:
        return evaluate_alignment(args)
    if args.hyp:
        if not args.ref and not args.test:
            raise UsageError("--hyp needs --ref FILE or --test FILE")
        hypotheses = _read(args.hyp, "--hyp").splitlines()
        references = _read(args.ref, "--ref").splitlines() if args.ref else _read_pairs(args.test)[1]
        decoding = None
    elif args.model and args.test:
        sources, references = _read_pairs(args.test)
        if args.limit:
            sources, references = sources[: args.limit], references[: args.limit]
        check_model_dir(args.model, "--model")
        rerank = rerank_options(args)
        channel = channel_model(rerank, args.channel_model, args.model)
        started = time.time()
        asked = asked_decoding(args) | {"rerank": rerank}
        hypotheses, config = translate_file(
            args.model, args.backend, sources, asked, precision=args.precision, channel=channel
        )
        decoding = config.search_settings  # what the figures were measured with
        if rerank is not None:
            decoding["rerank"] = dataclasses.asdict(rerank) | {"channel_model": str(channel) if channel else None}
        log.info("translated %d sentences in %.1fs", len(sources), time.time() - started)
        if args.save_hyp:
            args.save_hyp.write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    else:
        raise UsageError("give --model DIR and --test FILE, or --hyp FILE with --ref FILE or --test FILE")
    if len(hypotheses) != len(references):
        raise UsageError(
            f"{len(hypotheses)} translations for {len(references)} references: give files of as many lines"
        )
    result = corpus_scores(hypotheses, references) | ({"decoding": decoding} if decoding else {})
    if args.json:
        print(json.dumps(result))
    else:
        print(f"BLEU = {result['bleu']:.2f}  ({result['bleu_signature']})")
        print(f"chrF = {result['chrf']:.2f}  ({result['chrf_signature']})")
        print(f"length ratio = {result['length_ratio']:.3f}  (hypothesis / reference)")
    return 0


def _read(path: Path, flag: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"cannot read {path}: {error}; give {flag} FILE") from None


def _read_pairs(path: Path) -> tuple[list[str], list[str]]:
    """(sources, references) of a `source<TAB>reference` file, a bad one a UsageError."""
    try:
        return read_tsv_pairs(path)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise UsageError(f"cannot read --test {path}: {error}") from None
