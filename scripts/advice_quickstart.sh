#!/usr/bin/env bash
# Advice before spending, end to end through the embedded server on the CPU model: upload a
# public labelled set (SST-2's dev split by default; `trec14` for TREC's 14 fine classes),
# start an advice run (POST /v1/advice), follow it, and print what it measured beside
# zero-shot and its recommendation. No budget is involved: the set is public.
# Usage: scripts/advice_quickstart.sh [sst2|trec14]   (SEEDS, EPSILONS, QUERIES, SHOTS to change;
# SHOTS empty: the service's default, 4 and one per label)
source "$(dirname "$0")/serve_lib.sh"

task=${1:-sst2}
case "$task" in
  sst2) file="$DATA_DIR/sst2/stsa.binary.dev" ;;
  trec14) file="$DATA_DIR/trec/test.txt" ;;
  *) echo "usage: $0 [sst2|trec14]" >&2; exit 2 ;;
esac

echo "== uploading $file as a public labelled dataset ($task)"
dataset=$("$dpsyn" datasets upload "$file" --task "$task" --public --labelled \
  --name "$task-public" -q)

echo "== advice run on $dataset"
key=$(cat .dpsyn/admin_key)
body=$(printf '{"dataset_id": "%s", "seeds": %s, "epsilons": [%s], "queries": %s, "shots": [%s]}' \
  "$dataset" "${SEEDS:-1}" "${EPSILONS:-4}" "${QUERIES:-50}" "${SHOTS:-}")
advice=$(curl -fsS -X POST "$DPSYN_URL/v1/advice" -H "Authorization: Bearer $key" \
  -H 'Content-Type: application/json' -d "$body")
id=$(echo "$advice" | .venv/bin/python -c 'import json, sys; print(json.load(sys.stdin)["id"])')
while :; do
  state=$(curl -fsS "$DPSYN_URL/v1/advice/$id" -H "Authorization: Bearer $key")
  status=$(echo "$state" | .venv/bin/python -c 'import json, sys; print(json.load(sys.stdin)["status"])')
  [ "$status" = succeeded ] || [ "$status" = failed ] && break
  sleep 5
done
echo "$state" >"out/advice_$task.json"
.venv/bin/python - "out/advice_$task.json" <<'PY'
import json, sys

run = json.load(open(sys.argv[1]))
if run["status"] != "succeeded":
    sys.exit("advice %s %s: %s" % (run["id"], run["status"], run["error"]))
r = run["result"]
print("%s: %d records stood in for the private set, %d held-out queries"
      % (r["task"], r["n_standin"], r["n_queries"]))
print("zero-shot %.1f%%, majority label %.1f%%" % (100 * r["zero_shot"], 100 * r["majority"]))
for c in sorted(r["candidates"], key=lambda c: (c["epsilon"], -c["mean"])):
    print("  %-9s %2d shots  eps %g: %.1f%% +- %.1f%%"
          % (c["method"], c["shots"], c["epsilon"], 100 * c["mean"], 100 * c["se"]))
print(r["summary"])
PY
