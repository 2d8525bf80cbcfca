"""Corpus-level translation scores: sacreBLEU's BLEU and chrF with their signatures.

`crossalign eval`, the release script and the benches score with this one function, so a
figure in the docs and the model card is always computed the same way. sacrebleu is a
training/evaluation dependency, imported only when scoring (serving never needs it).
"""

from __future__ import annotations


def corpus_scores(hypotheses: list[str], references: list[str]) -> dict:
    """Corpus BLEU and chrF with sacreBLEU's default tokenisation, plus their signatures."""
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    return {
        "bleu": round(bleu_score.score, 2),
        "chrf": round(chrf_score.score, 2),
        # hypothesis / reference length (sacreBLEU's tokens): below 1 means dropped content
        "length_ratio": round(bleu_score.sys_len / max(bleu_score.ref_len, 1), 3),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
        "sentences": len(hypotheses),
    }
