#!/usr/bin/env bash
# Set up, then run the main job end to end through the embedded server: `dpsyn serve` (SQLite
# and the admin key in ./.dpsyn/, an in-process worker, the packaged CPU model Gemma-3-270M),
# upload TREC, give it a budget of epsilon = 10, run an AdaDPSyn job (one demonstration per label: 6) at
# epsilon = 8, read the prompt, classify two questions with it, and show the budget's ledger.
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

# Two questions of two of TREC's labels, each with the label a person would give it (the
# 270M model reads "What is the capital of ...?" as Number now and then: docs/synthesis.md).
echo "== a question whose answer is a Location"
"$dpsyn" prompts complete "$prompt" --query "What city is the capital of Australia ?"
echo "== a question whose answer is a Number"
"$dpsyn" prompts complete "$prompt" --query "How many legs does a spider have ?"

echo "== budget history"
"$dpsyn" budget show "$dataset"
