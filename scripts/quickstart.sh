#!/usr/bin/env bash
# Set up, then run the main job end to end through the embedded server: `dpsyn serve` (SQLite
# and the admin key in ./.dpsyn/, an in-process worker, the packaged CPU model Gemma-3-270M),
# upload TREC, give it a budget of epsilon = 10, run an AdaDPSyn job of four demonstrations at
# epsilon = 8, read the prompt, classify one question with it, and show the budget's ledger.
# A few minutes on two cores (the first run also converts the model once, about a minute).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
DATA_DIR=${DATA_DIR:-../shared/data}
PORT=${DPSYN_PORT:-8000}
export DPSYN_URL="http://127.0.0.1:$PORT"
dpsyn=.venv/bin/dpsyn
mkdir -p .dpsyn out

echo "== starting dpsyn serve on $DPSYN_URL (log: .dpsyn/serve.log)"
"$dpsyn" serve --port "$PORT" >.dpsyn/serve.log 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null && wait "$server" 2>/dev/null; true' EXIT
for _ in $(seq 240); do
  if ! kill -0 "$server" 2>/dev/null; then
    cat .dpsyn/serve.log >&2
    echo "dpsyn serve exited (is port $PORT in use? set DPSYN_PORT)" >&2
    exit 1
  fi
  curl -fsS "$DPSYN_URL/healthz" >/dev/null 2>&1 && break
  sleep 0.5
done
curl -fsS "$DPSYN_URL/healthz" >/dev/null
cat .dpsyn/serve.log

echo "== uploading $DATA_DIR/trec/train.txt"
dataset=$("$dpsyn" datasets upload "$DATA_DIR/trec/train.txt" --task trec --name trec -q)
"$dpsyn" datasets list

echo "== budget"
"$dpsyn" budget set "$dataset" --epsilon 10

echo "== AdaDPSyn job at epsilon 8"
prompt=$("$dpsyn" jobs submit --dataset "$dataset" --method adadpsyn --epsilon 8 --shots 4 \
  --wait -q)

echo "== prompt $prompt"
"$dpsyn" prompts get "$prompt"
"$dpsyn" prompts get "$prompt" --json >out/trec_prompt.json

echo "== one question"
"$dpsyn" prompts complete "$prompt" --query "What is the capital of Australia ?"

echo "== budget history"
"$dpsyn" budget show "$dataset"
