#!/usr/bin/env bash
# Build the release bundle models/de-en from a finished training run, measure it, and
# write its model card. Every figure in the model card comes from this script.
#
#   [NOTES=notes.md] [EARLIER="RUN ..."] [PREPARE="crossalign data prepare ..."] \
#       export/release.sh [RUN_DIR] [DATA_DIR=~/.cache/crossalign/data/ding8k] [OUT=models/de-en]
#
# EARLIER names the runs that RUN_DIR continues (`crossalign train --init-from`), oldest
# first: the model card's curve and table show every stage. RUN_DIR/train_command.txt holds
# the training command(s) the card gives for reproduction.
#
# 1. choose the default alignment source (layer, heads) on the gold set, 2. export to
# ONNX with parity checks, 3. choose the length penalty on the valid split (never on test),
# 4. test-split BLEU/chrF/length ratio (beam 4 and greedy), the same on the 162 everyday
# gold sentences, and gold-set AER, 5. quality-signal thresholds chosen on valid
# (bench/quality_signals.py), 6. metrics into bundle.json, 7. MODEL_CARD.md + curve.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN="${1:-$HOME/.cache/crossalign/runs/release}"; DATA="${2:-$HOME/.cache/crossalign/data/ding8k}"; OUT="${3:-models/de-en}"
PREPARE="${PREPARE:-crossalign data prepare --out $DATA --tokenizer models/de-en/spm.model}"
PY=.venv/bin/python
GOLD=data/gold/de-en.gold.tsv

echo "== alignment sources on the gold set"
$PY bench/alignment_sources.py --model "$RUN/final" --backend torch --gold "$GOLD" --json "$RUN/alignment_sources.json"
# The best source (layer, heads, step shift) becomes the bundle's default map; a guided
# model's supervised head wins here when the supervision worked.
$PY - "$RUN" <<'PY'
import json, sys
from pathlib import Path
run = Path(sys.argv[1])
rows = json.loads((run / "alignment_sources.json").read_text())
best = min(rows, key=lambda r: r["aer"])
path = run / "final" / "config.json"
config = json.loads(path.read_text())
config["alignment_layer"] = best["layer"]
config["alignment_heads"] = [] if best["heads"] == "mean" else best["heads"]
config["alignment_step_shift"] = best["step_shift"]
path.write_text(json.dumps(config, indent=2) + "\n")
print("default alignment source:", best)
PY

echo "== export"
$PY -m seq2seq.cli export "$RUN/final" --out "$OUT" --data-manifest "$DATA/manifest.json" --force
cp "$RUN/alignment_sources.json" "$OUT/"   # the ranking behind the default, shipped for reference

echo "== length penalty on the valid split (beam 4)"
for alpha in ${ALPHAS:-0.6 1.0 1.5 2.0}; do
    $PY -m seq2seq.cli eval --model "$OUT" --test "$DATA/valid.tsv" --beam-size 4 --length-penalty "$alpha" --json \
        | $PY -c "import json, sys; print(json.dumps(json.load(sys.stdin) | {'length_penalty': $alpha}))"
done > "$RUN/valid_length_penalty.jsonl"
ALPHA=$($PY -c "import json, sys; rows = [json.loads(l) for l in open(sys.argv[1])]; print(max(rows, key=lambda r: (r['bleu'], -abs(1 - r['length_ratio'])))['length_penalty'])" "$RUN/valid_length_penalty.jsonl")
echo "chosen length penalty: $ALPHA"; cat "$RUN/valid_length_penalty.jsonl"

echo "== evaluate"
$PY -m seq2seq.cli eval --model "$OUT" --test "$DATA/test.tsv" --beam-size 4 --length-penalty "$ALPHA" --json --save-hyp "$RUN/test.beam4.en" > "$RUN/test_beam4.json"
$PY -m seq2seq.cli eval --model "$OUT" --test "$DATA/test.tsv" --beam-size 1 --json > "$RUN/test_greedy.json"
$PY -m seq2seq.cli eval --model "$OUT" --test "$GOLD" --beam-size 4 --length-penalty "$ALPHA" --json > "$RUN/gold_beam4.json"
$PY -m seq2seq.cli eval --gold "$GOLD" --model "$OUT" --json > "$RUN/gold_aer.json"
$PY -m seq2seq.cli eval --gold "$GOLD" --hyp data/gold/eflomal.gold.pharaoh --json > "$RUN/gold_aer_eflomal.json"

echo "== quality-signal thresholds on valid"
$PY bench/quality_signals.py --model "$OUT" --data "$DATA" --save "$OUT/quality.json" --no-test > "$RUN/quality_signals.txt" || {
    echo "quality thresholds not re-chosen (see $RUN/quality_signals.txt)" >&2; }

$PY - "$RUN" "$OUT" "$ALPHA" <<'PY'
import json, sys
from pathlib import Path
from seq2seq.bundle import update_metrics
run, out, alpha = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
beam4, greedy, gold = (json.loads((run / f).read_text()) for f in ("test_beam4.json", "test_greedy.json",
                                                                  "gold_beam4.json"))
aer, eflomal = (json.loads((run / f).read_text()) for f in ("gold_aer.json", "gold_aer_eflomal.json"))
metrics = {
    "test_bleu_beam4": beam4["bleu"], "test_chrf_beam4": beam4["chrf"],
    "test_bleu_greedy": greedy["bleu"], "test_chrf_greedy": greedy["chrf"],
    "test_length_ratio_beam4": beam4["length_ratio"],
    "gold_bleu_beam4": gold["bleu"], "gold_chrf_beam4": gold["chrf"], "gold_length_ratio_beam4": gold["length_ratio"],
    "gold_sentences": gold["sentences"], "decoding": {"beam_size": 4, "length_penalty": alpha},
    "test_sentences": beam4["sentences"], "bleu_signature": beam4["bleu_signature"],
    "chrf_signature": beam4["chrf_signature"],
    "gold_aer_default_map": aer["aer"], "gold_precision_default_map": aer["precision"],
    "gold_recall_default_map": aer["recall"], "gold_aer_eflomal_baseline": eflomal["aer"],
}
update_metrics(out, metrics)
(run / "metrics.json").write_text(json.dumps(metrics, indent=1) + "\n")
print(json.dumps(metrics, indent=1))
PY

echo "== model card"
$PY -m export.model_card --bundle "$OUT" --run "$RUN" --data "$DATA" --metrics "$RUN/metrics.json" \
    ${NOTES:+--notes "$NOTES"} $(for run in ${EARLIER:-}; do printf -- '--earlier-run %s ' "$run"; done) --command "$PREPARE && $(cat "$RUN/train_command.txt")"
du -sh "$OUT"; ls -la "$OUT"
