"""`crossalign eval`: sacreBLEU BLEU and chrF, with their signatures.

Either score a file of translations against references, or translate a test split with a
model and score that.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from tqdm import tqdm

from seq2seq.config import DecodeConfig

log = logging.getLogger("crossalign.eval")


def score(hypotheses: list[str], references: list[str]) -> dict:
    """Corpus BLEU and chrF with sacreBLEU's default tokenisation, plus their signatures."""
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    return {
        "bleu": round(bleu_score.score, 2), "chrf": round(chrf_score.score, 2),
        "bleu_signature": str(bleu.get_signature()), "chrf_signature": str(chrf.get_signature()),
        "sentences": len(hypotheses),
    }


def translate_file(model: Path, backend: str, sources: list[str], config: DecodeConfig, batch_size: int = 64) -> list[str]:
    from seq2seq.loading import load_translator

    translator = load_translator(model, backend)
    out = []
    for start in tqdm(range(0, len(sources), batch_size), desc="translate", unit="batch", file=sys.stderr,
                      disable=not sys.stderr.isatty()):
        out.extend(r.text for r in translator.translate_batch(sources[start:start + batch_size], config))
    return out


def read_tsv_pairs(path: Path) -> tuple[list[str], list[str]]:
    sources, references = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        fields = line.split("\t")
        if len(fields) < 2:
            raise ValueError(f"{path}:{number}: expected source<TAB>reference")
        sources.append(fields[0])
        references.append(fields[1])
    return sources, references


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", type=Path, help="model directory to translate --test with")
    parser.add_argument("--test", type=Path, help="source<TAB>reference file (e.g. DATA/test.tsv)")
    parser.add_argument("--hyp", type=Path, help="file of translations, one per line (instead of --model)")
    parser.add_argument("--ref", type=Path, help="file of references, one per line (with --hyp)")
    parser.add_argument("--backend", choices=("onnx", "torch"), default="onnx")
    parser.add_argument("--beam-size", type=int, default=DecodeConfig.beam_size)
    parser.add_argument("--limit", type=int, default=0, help="score only the first N sentences")
    parser.add_argument("--save-hyp", type=Path, help="write the model's translations here")
    parser.add_argument("--json", action="store_true", help="print the scores as JSON")


def main(args: argparse.Namespace) -> int:
    if args.hyp:
        if not args.ref and not args.test:
            raise SystemExit("--hyp needs --ref or --test")
        hypotheses = args.hyp.read_text(encoding="utf-8").splitlines()
        references = args.ref.read_text(encoding="utf-8").splitlines() if args.ref else read_tsv_pairs(args.test)[1]
    elif args.model and args.test:
        sources, references = read_tsv_pairs(args.test)
        if args.limit:
            sources, references = sources[: args.limit], references[: args.limit]
        started = time.time()
        hypotheses = translate_file(args.model, args.backend, sources,
                                    DecodeConfig(beam_size=args.beam_size, return_attention=False))
        log.info("translated %d sentences in %.1fs", len(sources), time.time() - started)
        if args.save_hyp:
            args.save_hyp.write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    else:
        raise SystemExit("give --model and --test, or --hyp with --ref/--test")
    result = score(hypotheses, references)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"BLEU = {result['bleu']:.2f}  ({result['bleu_signature']})")
        print(f"chrF = {result['chrf']:.2f}  ({result['chrf_signature']})")
    return 0
