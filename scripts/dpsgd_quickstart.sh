#!/usr/bin/env bash
# PromptDPSGD end to end through the embedded server on the CPU model (Gemma-3-270M): upload
# SST-2 as private data, give it a budget of epsilon = 10, train a soft prompt with DP-SGD at
# epsilon = 8 (the CPU defaults: 8 soft tokens, 60 steps of expected batch 16), show its
# metadata, download its file (checked against its SHA-256), classify one sentence with it and
# show the budget's ledger. About five minutes on two idle cores (the server's bfloat16 model
# trains on a float32 copy of itself). Run scripts/quickstart.sh first for the AdaDPSyn path.
source "$(dirname "$0")/serve_lib.sh"

echo "== uploading SST-2 (private)"
private=$("$dpsyn" datasets upload "$DATA_DIR/sst2/stsa.binary.train" --task sst2 --name sst2 -q)
"$dpsyn" budget set "$private" --epsilon 10

echo "== PromptDPSGD job at epsilon 8"
started=$(date +%s)
job=$("$dpsyn" jobs submit --dataset "$private" --method promptdpsgd --epsilon 8 --wait --json)
echo "$job" | tee out/sst2_dpsgd_job.json
echo "job took $(($(date +%s) - started)) s from submission to its stored soft prompt"
prompt=$(echo "$job" | .venv/bin/python -c 'import json, sys; print(json.load(sys.stdin)["prompt_id"])')

echo "== prompt $prompt"
"$dpsyn" prompts get "$prompt"
"$dpsyn" prompts download "$prompt" -o out/sst2_dpsgd.safetensors --force

echo "== one sentence"
"$dpsyn" prompts complete "$prompt" --query "A gorgeous, witty and deeply moving film ."

echo "== budget history"
"$dpsyn" budget show "$private"
