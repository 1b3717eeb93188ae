#!/usr/bin/env bash
# End-to-end check on a GPU machine with vLLM installed: start the engine with
# scripts/vllm_serve.sh (the deployment's flags), run one AdaDPSyn synthesis through the vllm
# backend (the served model found from /v1/models), report throughput and prefix-cache hits.
#
# Environment (all optional):
#   MODEL        model folder or hub ID to serve (default: the packaged model's converted
#                folder, as scripts/vllm_serve.sh picks it)
#   PORT         server port               (default 8000)
#   DATA         TREC training file        (default ../shared/data/trec/train.txt, from the repo root)
#   OUT          folder for gpu_check.json and the server log (default /tmp)
#   VLLM_PYTHON  python that has vllm      (default: scripts/vllm_serve.sh's choice)
#   BUDGET_S     whole-script budget, s    (default 470, i.e. under 8 minutes)
#
# Time: waiting for /health may take up to 300 s and synthesis up to 420 s, but the synthesis
# timeout is cut to what is left of BUDGET_S once the server is up, so the script ends in time.
set -euo pipefail
cd "$(dirname "$0")/.."

PORT="${PORT:-8000}"
DATA="${DATA:-../shared/data/trec/train.txt}"
OUT="${OUT:-/tmp}"
BUDGET_S="${BUDGET_S:-470}"
URL="http://127.0.0.1:$PORT"
RESULT="$OUT/gpu_check.json"
SERVER_LOG="$OUT/vllm_server.log"

mkdir -p "$OUT"
[[ -f "$DATA" ]] || { echo "gpu_check: data file $DATA not found" >&2; exit 2; }

START=$SECONDS
SERVER_PID=""
stop_server() {
    if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 1 20); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.5; done
        kill -9 "$SERVER_PID" 2>/dev/null || true
    fi
}
trap stop_server EXIT

echo "gpu_check: starting vLLM with scripts/vllm_serve.sh $PORT (log: $SERVER_LOG)"
if [[ -n "${MODEL:-}" ]]; then export VLLM_MODEL="$MODEL"; fi
scripts/vllm_serve.sh "$PORT" >"$SERVER_LOG" 2>&1 &
SERVER_PID=$!

deadline=$((SECONDS + 300))
until curl -sf "$URL/health" >/dev/null 2>&1; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
        echo "gpu_check: vLLM exited during startup; last log lines:" >&2
        tail -n 40 "$SERVER_LOG" >&2
        exit 1
    fi
    if ((SECONDS >= deadline)); then
        echo "gpu_check: vLLM not healthy after 300 s; last log lines:" >&2
        tail -n 40 "$SERVER_LOG" >&2
        exit 1
    fi
    sleep 2
done
echo "gpu_check: server healthy after $((SECONDS - START)) s"

left=$((BUDGET_S - (SECONDS - START) - 10))
synth_timeout=$((left < 420 ? left : 420))
if ((synth_timeout < 30)); then
    echo "gpu_check: only ${left} s left of the ${BUDGET_S} s budget; not starting" >&2
    exit 1
fi

echo "gpu_check: synthesizing (timeout ${synth_timeout} s)"
time timeout "$synth_timeout" .venv/bin/dpsyn synthesize \
    --data "$DATA" --task trec --method adadpsyn --epsilon 8 \
    --backend vllm --url "$URL" --out "$RESULT"
curl -s "$URL/metrics" | grep -E '^vllm:prefix_cache_(hits|queries)_total' || true

.venv/bin/python - "$RESULT" <<'PY'
import json
import sys

with open(sys.argv[1]) as f:
    result = json.load(f)
stats = result.get("stats") if isinstance(result, dict) else None
if isinstance(stats, dict) and "prompt_tokens" in stats and stats.get("seconds"):
    rate = stats["prompt_tokens"] / stats["seconds"]
    print(f"gpu_check: {stats['prompt_tokens']} prompt tokens in {stats['seconds']:.1f} s: "
          f"{rate:,.0f} prompt tokens/s")
else:
    print("gpu_check: no stats.prompt_tokens / stats.seconds in the output; no throughput")
PY
echo "gpu_check: done in $((SECONDS - START)) s; result in $RESULT"
