#!/usr/bin/env bash
# PromptPATE end to end through the embedded server on the CPU model (Gemma-3-270M): upload
# SST-2 as private data and the IMDB sample as public data, give SST-2 a budget of epsilon = 10,
# run a PromptPATE job at epsilon = 8 (30 teachers of 1 demonstration, at most 100 public
# reviews cut to 300 characters), show its stats and prompt, and classify one sentence.
# About five minutes on two cores. Run scripts/quickstart.sh first for the AdaDPSyn path.
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

echo "== uploading SST-2 (private) and the IMDB sample (public)"
private=$("$dpsyn" datasets upload "$DATA_DIR/sst2/stsa.binary.train" --task sst2 --name sst2 -q)
public=$("$dpsyn" datasets upload "$DATA_DIR/imdb/test_sample2000.jsonl" --public \
  --name imdb-sample -q)
"$dpsyn" datasets list
"$dpsyn" budget set "$private" --epsilon 10

echo "== PromptPATE job at epsilon 8"
job=$("$dpsyn" jobs submit --dataset "$private" --method promptpate --public-dataset "$public" \
  --epsilon 8 --shots 4 --param teachers=30 --param queries=40 --param max_public=100 \
  --param max_chars=300 --param candidates=8 --wait --json)
echo "$job" | tee out/sst2_pate_job.json
prompt=$(echo "$job" | .venv/bin/python -c 'import json, sys; print(json.load(sys.stdin)["prompt_id"])')

echo "== prompt $prompt"
"$dpsyn" prompts get "$prompt"
"$dpsyn" prompts get "$prompt" --json >out/sst2_pate_prompt.json

echo "== one sentence"
"$dpsyn" prompts complete "$prompt" --query "A gorgeous, witty and deeply moving film ."

echo "== budget history"
"$dpsyn" budget show "$private"
