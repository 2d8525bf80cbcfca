#!/usr/bin/env bash
# Issue #13's shipping decision, applied to a release bundle (default models/de-en): int8
# graphs become what it serves and the only graphs it carries (fp32 and int8 together are
# 83 MB, over the 60 MB budget); model.pt stays, and the fp32 graphs are one command away:
#     crossalign export models/de-en --in-place --graphs int8 fp32
# (they come back as the same bytes). Both precisions are measured on the same bundle first,
# and the int8 figures become bundle.json's metrics (the fp32 ones kept under metrics.fp32).
#
#     export/ship_int8.sh [BUNDLE] [TEST_TSV]      # PYTHON=.venv/bin/python by default
set -euo pipefail
BUNDLE=${1:-models/de-en}
TEST=${2:-$HOME/.cache/crossalign/data/ding8k-all/test.tsv}
GOLD=data/gold/de-en.gold.tsv
PYTHON=${PYTHON:-.venv/bin/python}
OUT=$(mktemp -d /tmp/ship-int8.XXXXXX)
crossalign() { "$PYTHON" -m seq2seq.cli "$@"; }

crossalign export "$BUNDLE" --in-place --graphs int8 fp32
for precision in fp32 int8; do
    crossalign eval --model "$BUNDLE" --precision $precision --test "$TEST" --json > "$OUT/$precision.test.json"
    crossalign eval --model "$BUNDLE" --precision $precision --test "$TEST" --beam-size 1 --json \
        > "$OUT/$precision.greedy.json"
    crossalign eval --model "$BUNDLE" --precision $precision --test "$GOLD" --json > "$OUT/$precision.gold.json"
    crossalign eval --model "$BUNDLE" --precision $precision --gold "$GOLD" --json > "$OUT/$precision.aer.json"
done
"$PYTHON" - "$BUNDLE" "$OUT" <<'PY'
import json, sys
from pathlib import Path
from seq2seq.bundle import update_metrics

bundle, out = Path(sys.argv[1]), Path(sys.argv[2])
def figures(precision):
    read = lambda name: json.loads((out / f"{precision}.{name}.json").read_text())
    test, greedy, gold, aer = read("test"), read("greedy"), read("gold"), read("aer")
    return {"test_bleu_beam4": test["bleu"], "test_chrf_beam4": test["chrf"],
            "test_length_ratio_beam4": test["length_ratio"], "test_bleu_greedy": greedy["bleu"],
            "test_chrf_greedy": greedy["chrf"], "gold_bleu_beam4": gold["bleu"], "gold_chrf_beam4": gold["chrf"],
            "gold_length_ratio_beam4": gold["length_ratio"], "gold_aer_default_map": aer["aer"],
            "gold_precision_default_map": aer["precision"], "gold_recall_default_map": aer["recall"]}
fp32, int8 = figures("fp32"), figures("int8")
print(json.dumps({"fp32": fp32, "int8": int8}, indent=2))
drop = fp32["test_bleu_beam4"] - int8["test_bleu_beam4"]
if drop > 0.3:
    sys.exit(f"int8 loses {drop:.2f} BLEU on the test split (> 0.3): it does not ship; the bundle keeps both graphs")
update_metrics(bundle, {**int8, "graphs": "int8", "fp32": fp32})
PY
crossalign export "$BUNDLE" --in-place --graphs int8
du -sh "$BUNDLE"
echo "measurements in $OUT"
