#!/usr/bin/env bash
# Set up, then run the main job on the embedded defaults: a real AdaDPSyn synthesis of four
# TREC demonstrations at epsilon = 8 with the packaged CPU model (Gemma-3-270M), printing the
# demonstrations and the privacy spent. A few minutes on two cores (the first run also
# converts the model once, about a minute).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
DATA_DIR=${DATA_DIR:-../shared/data}
mkdir -p out
.venv/bin/dpsyn synthesize --data "$DATA_DIR/trec/train.txt" --task trec \
  --method adadpsyn --epsilon 8 --shots 4 --out out/trec_adadpsyn.json
