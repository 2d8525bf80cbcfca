#!/usr/bin/env bash
# Distil an ensemble of our own de-en stages into one served-size student, on the CPU
# (docs/training.md, "An ensemble of our stages, distilled"; Kim & Rush 2016, sequence-level
# knowledge distillation). Every step is resumable: run the same command again after an
# interruption and it goes on where it stopped; a finished step is skipped.
#
#   [MEMBERS="de-en/stage9"] [LP=1.0] [STEPS=2000] [COOLDOWN=700] [VALID_EVERY=1000] [DING_ONLY=0] [WORKERS=1] \
#       export/distill_ensemble.sh [RUN=~/.cache/crossalign/runs/distill] [DATA=~/.cache/crossalign/data/ding8k-po]
#
# 1. the data: Ding + Debian's translated software messages, eflomal links, hint candidates
#    (the commands of docs/training.md, "More sentences: translated software messages");
# 2. the ensemble: the shipped models/de-en (its alignment head) with the earlier releases
#    MEMBERS, rebuilt from git history (export/releases.py), as an ensemble directory
#    RUN/ensemble (ensemble.json: the shipped model's decoding at length penalty LP; its
#    dictionary hints too when every member has the hint pieces, as stages 9 and 10 do:
#    on valid, stages 9 + 10 with hints 12.04 / 34.27, without 11.48 / 33.11, and with
#    stage 7, which has no hint pieces, 11.89 / 33.32);
# 3. the teacher's translations of every training sentence: `crossalign translate` over the
#    ensemble, resumable (`--resume`);
# 4. the student's data, DATA-distilled: the training lines plus each sentence with the
#    ensemble's translation (seq2seq/training/distill.py; DING_ONLY=1 adds the Ding
#    sentences' only);
# 5. the student: the shipped weights trained STEPS steps on it with the stage-10 recipe
#    (guided alignment, hints at 0.5, phrases at 30%, a COOLDOWN-step cooldown), in RUN/student;
#    release it with export/release.sh, whose register gate decides whether it ships.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN="${1:-$HOME/.cache/crossalign/runs/distill}"; DATA="${2:-$HOME/.cache/crossalign/data/ding8k-po}"
MEMBERS="${MEMBERS:-de-en/stage9}"; STEPS="${STEPS:-2000}"; COOLDOWN="${COOLDOWN:-700}"
LP="${LP:-1.0}"; VALID_EVERY="${VALID_EVERY:-1000}"; DING_ONLY="${DING_ONLY:-0}"; WORKERS="${WORKERS:-1}"
PY=.venv/bin/python; CLI="$PY -m seq2seq.cli"
CATALOGS="${CATALOGS:-$HOME/.cache/crossalign/catalogs/de}"
BUNDLES="${BUNDLES:-$HOME/.cache/crossalign/bundles}"
mkdir -p "$RUN"

echo "== 1. data: $DATA"
[ -d "$CATALOGS" ] || $CLI data catalogs --out "$CATALOGS"
[ -f "$DATA/train.tsv" ] || $CLI data prepare --out "$DATA" --tokenizer models/de-en/spm.model --max-phrases -1 \
    --extra-corpus "gettext:$CATALOGS"
[ -f "$DATA/eflomal.train.pharaoh" ] || OMP_NUM_THREADS=1 $PY -m export.eflomal_baseline --seed 1 \
    --train "$DATA/train.tsv" --train-out "$DATA/eflomal.train.pharaoh"
[ -f "$DATA/eflomal.valid.pharaoh" ] || $PY -m export.eflomal_heldout --seed 1 --train "$DATA/train.tsv" \
    --heldout "$DATA/valid.tsv" "$DATA/test.tsv" --out-dir "$DATA"
[ -f "$DATA/hints.train.jsonl" ] || $CLI data hints --data-dir "$DATA"

echo "== 2. the ensemble: models/de-en + $MEMBERS"
paths=(models/de-en)
for member in $MEMBERS; do
    paths+=("$($PY -m export.releases extract "$member" --out "$BUNDLES/${member/\//-}" 2>&1 | tail -1)")
done
$PY - "$RUN/ensemble" "$LP" "${paths[@]}" <<'PY'
import sys
from seq2seq.runtime.bundle import decode_defaults, write_ensemble
out, alpha, members = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
decoding = decode_defaults(members[0]).search_settings | {"length_penalty": alpha}
print("ensemble:", write_ensemble(out, members, alignment=0, decoding=decoding), decoding)
PY

echo "== 3. the ensemble translates the training sentences"
$PY -m seq2seq.training.distill sources --data-dir "$DATA" --out "$RUN/sources.de"
$CLI translate -m "$RUN/ensemble" -i "$RUN/sources.de" -o "$RUN/teacher.en" --resume --workers "$WORKERS"

echo "== 4. the student's data"
STUDENT_DATA="$DATA-distilled"; ONLY=()
[ "$DING_ONLY" = 1 ] && { STUDENT_DATA="$DATA-distilled-ding"; ONLY=(--main-corpus-only); }
[ -f "$STUDENT_DATA/distilled.json" ] || $PY -m seq2seq.training.distill build --data-dir "$DATA" \
    --translations "$RUN/teacher.en" --out "$STUDENT_DATA" "${ONLY[@]}"
cat "$STUDENT_DATA/distilled.json"

echo "== 5. the student"
TRAIN=(train --init-from models/de-en --data-dir "$STUDENT_DATA" --out-dir "$RUN/student"
    --guided-alignment "$STUDENT_DATA/eflomal.train.pharaoh" --guided-head 2 --guided-weight 0.5 --guided-step-shift true
    --phrase-share 0.3 --dropout 0.3 --word-dropout 0.1 --label-smoothing 0.2 --max-tokens 5000 --lr 3e-4
    --warmup-steps 100 --valid-bleu-sentences -1 --save-every 100 --threads 2 --hint-rate 0.5
    --max-steps "$STEPS" --cooldown-steps "$COOLDOWN" --valid-every "$VALID_EVERY" --keep-checkpoints 6 --average-last 3)
echo "crossalign ${TRAIN[*]}" > "$RUN/student.train_command.txt"
$CLI "${TRAIN[@]}"
echo "student: $RUN/student/final (release: export/release.sh $RUN/student $STUDENT_DATA; the register gate decides)"
