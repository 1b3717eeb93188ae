#!/usr/bin/env bash
# Convert both packaged CPU models once into the model cache (DPSYN_CACHE_DIR, default
# ~/.cache/dpsyn), rather than in the first test or job that loads one (app/llm/conversion.py:
# safe under concurrency either way). Needs .venv (scripts/setup.sh, which runs this; the test
# command runs it beside lint and types instead). Skipped without starting Python when both
# converted folders are complete.
set -euo pipefail
cd "$(dirname "$0")/.."
STARTED=$SECONDS
MODELS_DIR=${DPSYN_CACHE_DIR:-$HOME/.cache/dpsyn}/models
if [ ! -f "$MODELS_DIR/gemma-3-270m/config.json" ] || [ ! -f "$MODELS_DIR/smollm2-135m/config.json" ]; then
  echo "convert_models.sh: converting the packaged models once into $MODELS_DIR (about a minute)" >&2
  # One process per model, side by side: 53 s instead of 69 s on two cores (each conversion
  # is mostly one thread reading and dequantising its GGUF file).
  CONVERT='import sys; from app.llm.transformers_backend import model_folder; model_folder(sys.argv[1])'
  .venv/bin/python -c "$CONVERT" smollm2-135m &
  SMOLLM_PID=$!
  .venv/bin/python -c "$CONVERT" gemma-3-270m
  wait "$SMOLLM_PID"
  echo "convert_models.sh: model conversion took $((SECONDS - STARTED)) s" >&2
fi
