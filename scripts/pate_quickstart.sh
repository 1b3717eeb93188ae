#!/usr/bin/env bash
# PromptPATE end to end through the embedded server on the CPU model (Gemma-3-270M): upload
# SST-2 as private data and the IMDB sample as public data, give SST-2 a budget of epsilon = 10,
# run a PromptPATE job at epsilon = 8 (30 teachers of 1 demonstration, at most 100 public
# reviews cut to 300 characters), show its stats and prompt, and classify one sentence.
# About five minutes on two cores. Run scripts/quickstart.sh first for the AdaDPSyn path.
source "$(dirname "$0")/serve_lib.sh"

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
