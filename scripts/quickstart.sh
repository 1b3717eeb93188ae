#!/usr/bin/env bash
# Set up, then run the main job end to end through the embedded server: `dpsyn serve` (SQLite
# and the admin key in ./.dpsyn/, an in-process worker, the packaged CPU model Gemma-3-270M),
# upload TREC, give it a budget of epsilon = 10, run an AdaDPSyn job (one demonstration per label: 6) at
# epsilon = 8, read the prompt, classify one question with it, and show the budget's ledger.
# A few minutes on two cores (the first run also converts the model once, about a minute).
source "$(dirname "$0")/serve_lib.sh"
show_log | head -3  # where it listens; the admin key stays in .dpsyn/admin_key

echo "== uploading $DATA_DIR/trec/train.txt"
dataset=$("$dpsyn" datasets upload "$DATA_DIR/trec/train.txt" --task trec --name trec -q)
"$dpsyn" datasets list

echo "== budget"
"$dpsyn" budget set "$dataset" --epsilon 10

echo "== AdaDPSyn job at epsilon 8"
prompt=$("$dpsyn" jobs submit --dataset "$dataset" --method adadpsyn --epsilon 8 --wait -q)

echo "== prompt $prompt"
"$dpsyn" prompts get "$prompt"
"$dpsyn" prompts get "$prompt" --json >out/trec_prompt.json

echo "== one question"
"$dpsyn" prompts complete "$prompt" --query "What is the capital of Australia ?"

echo "== budget history"
"$dpsyn" budget show "$dataset"
