"""The release figures of one precision, read from the `crossalign eval --json` outputs that
export/release.sh and export/ship_int8.sh write, and issue #13's rule for shipping int8.

A directory holds `{prefix}test_beam4.json`, `{prefix}test_greedy.json`, `{prefix}gold_beam4.json`
(BLEU/chrF runs) and `{prefix}gold_aer.json` (`eval --gold`). Torch-free.
"""

from __future__ import annotations

import json
from pathlib import Path

EVALS = ("test_beam4", "test_greedy", "gold_beam4", "gold_aer")
INT8_MAX_BLEU_DROP = 0.3  # int8 ships only if it loses at most this much test BLEU (beam 4) against fp32


def release_figures(directory: Path, prefix: str = "") -> dict[str, float]:
    """The bundle.json metrics of one precision (keys as in export/model_card.py's QUALITY_LABELS)."""
    beam4, greedy, gold, aer = (json.loads((Path(directory) / f"{prefix}{name}.json").read_text()) for name in EVALS)
    return {
        "test_bleu_beam4": beam4["bleu"],
        "test_chrf_beam4": beam4["chrf"],
        "test_bleu_greedy": greedy["bleu"],
        "test_chrf_greedy": greedy["chrf"],
        "test_length_ratio_beam4": beam4["length_ratio"],
        "gold_bleu_beam4": gold["bleu"],
        "gold_chrf_beam4": gold["chrf"],
        "gold_length_ratio_beam4": gold["length_ratio"],
        "gold_aer_default_map": aer["aer"],
        "gold_precision_default_map": aer["precision"],
        "gold_recall_default_map": aer["recall"],
    }


def int8_refusal(fp32: dict[str, float], int8: dict[str, float]) -> str | None:
    """Why int8 must not ship (it loses more than INT8_MAX_BLEU_DROP test BLEU), or None."""
    drop = fp32["test_bleu_beam4"] - int8["test_bleu_beam4"]
    if drop > INT8_MAX_BLEU_DROP:
        return f"int8 loses {drop:.2f} test BLEU (> {INT8_MAX_BLEU_DROP}): it does not ship"
    return None
