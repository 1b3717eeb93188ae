#!/usr/bin/env bash
# Set up, then run the main job on the embedded defaults.
# Until the synthesis engine lands, the main job is the privacy calculation of the AdaDPSyn
# paper's TREC setting: its epsilon under both accountants, and the noise that meets epsilon=4.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
TREC=(--M 20 --N 2 --tmax 15 --n-label 835 --n-total 5452)
ADA=(--method adadpsyn --sigma0 15 --sigma2 5 --T 2)
echo "AdaDPSyn, TREC setting of the paper (sigma1 = 1.09):"
echo -n "  paper-compatible RDP: "
.venv/bin/dpsyn privacy epsilon "${ADA[@]}" --sigma1 1.09 --accounting paper "${TREC[@]}"
echo -n "  tight PLD (default):  "
.venv/bin/dpsyn privacy epsilon "${ADA[@]}" --sigma1 1.09 --accounting tight "${TREC[@]}"
echo "Noise for a budget of epsilon = 4:"
echo -n "  AdaDPSyn: "
.venv/bin/dpsyn privacy calibrate "${ADA[@]}" --epsilon 4 "${TREC[@]}"
echo -n "  DP few-shot generation (Tang et al.): "
.venv/bin/dpsyn privacy calibrate --method tang --epsilon 4 "${TREC[@]}"
