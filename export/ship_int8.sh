#!/usr/bin/env bash
# Issue #13's shipping decision, applied to a release bundle (default models/de-en): int8
# graphs become what it serves and the only graphs it carries (fp32 and int8 together are
# 83 MB, over the 60 MB budget); model.pt stays, and the fp32 graphs are one command away:
#     crossalign export models/de-en --in-place --graphs int8 fp32
# (they come back as the same bytes). Both precisions are measured on the same bundle first,
# and the int8 figures become bundle.json's metrics (the fp32 ones kept under metrics.fp32).
#
# The int8 graphs' activation scales are calibrated on CALIBRATION (the first 128 valid
# sources by default; export/calibrate.py), in both exports below.
#
#     export/ship_int8.sh [BUNDLE] [TEST_TSV] [CALIBRATION]     # PYTHON=.venv/bin/python by default
set -euo pipefail
BUNDLE=${1:-models/de-en}
TEST=${2:-$HOME/.cache/crossalign/data/ding8k-all/test.tsv}
CALIBRATION=${3:-$HOME/.cache/crossalign/data/ding8k-all/valid.tsv}
GOLD=data/gold/de-en.gold.tsv
PYTHON=${PYTHON:-.venv/bin/python}
OUT=$(mktemp -d /tmp/ship-int8.XXXXXX)
crossalign() { "$PYTHON" -m seq2seq.cli "$@"; }

crossalign export "$BUNDLE" --in-place --graphs int8 fp32 --calibration "$CALIBRATION"
sha256sum "$BUNDLE"/*.int8.onnx    # the graphs measured below ...
for precision in fp32 int8; do
    crossalign eval --model "$BUNDLE" --precision $precision --test "$TEST" --json > "$OUT/$precision.test_beam4.json"
    crossalign eval --model "$BUNDLE" --precision $precision --test "$TEST" --beam-size 1 --json \
        > "$OUT/$precision.test_greedy.json"
    crossalign eval --model "$BUNDLE" --precision $precision --test "$GOLD" --json > "$OUT/$precision.gold_beam4.json"
    crossalign eval --model "$BUNDLE" --precision $precision --gold "$GOLD" --json > "$OUT/$precision.gold_aer.json"
done
"$PYTHON" - "$BUNDLE" "$OUT" <<'PY'
import json, sys
from pathlib import Path
from export.figures import int8_refusal, release_figures
from seq2seq.runtime.bundle import update_metrics

bundle, out = Path(sys.argv[1]), Path(sys.argv[2])
fp32, int8 = release_figures(out, "fp32."), release_figures(out, "int8.")
print(json.dumps({"fp32": fp32, "int8": int8}, indent=2))
refusal = int8_refusal(fp32, int8)
if refusal:
    sys.exit(f"{refusal}; the bundle keeps both graphs")
update_metrics(bundle, {**int8, "graphs": "int8", "fp32": fp32})
PY
crossalign export "$BUNDLE" --in-place --graphs int8 --calibration "$CALIBRATION"
sha256sum "$BUNDLE"/*.int8.onnx    # ... and the ones shipped: the same bytes
du -sh "$BUNDLE"
echo "measurements in $OUT"
