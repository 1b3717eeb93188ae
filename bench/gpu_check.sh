#!/usr/bin/env bash
# End-to-end check on a GPU machine with vLLM installed: start a vLLM OpenAI-compatible server
# on a local model, run one AdaDPSyn synthesis through the vllm backend, report throughput.
#
# Environment (all optional):
#   MODEL        local HF model folder     (default $HOME/.cache/dpsyn/models/gemma-3-270m)
#   PORT         server port               (default 8000)
#   DATA         TREC training file        (default ../shared/data/trec/train.txt, from the repo root)
#   OUT          folder for gpu_check.json and the server log (default /tmp)
#   VLLM_PYTHON  python that has vllm      (default python)
#   BUDGET_S     whole-script budget, s    (default 470, i.e. under 8 minutes)
#
# Time: waiting for /health may take up to 300 s and synthesis up to 420 s, but the synthesis
# timeout is cut to what is left of BUDGET_S once the server is up, so the script ends in time.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL="${MODEL:-$HOME/.cache/dpsyn/models/gemma-3-270m}"
PORT="${PORT:-8000}"
DATA="${DATA:-../shared/data/trec/train.txt}"
OUT="${OUT:-/tmp}"
VLLM_PYTHON="${VLLM_PYTHON:-python}"
BUDGET_S="${BUDGET_S:-470}"
URL="http://127.0.0.1:$PORT"
RESULT="$OUT/gpu_check.json"
SERVER_LOG="$OUT/vllm_server.log"

mkdir -p "$OUT"
[[ -d "$MODEL" ]] || { echo "gpu_check: model folder $MODEL not found" >&2; exit 2; }
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

# --max-logprobs 200: room for top_k and for the top_logprobs fallback.
# --enable-tokenizer-info-endpoint: the backend reads the EOS token from /tokenizer_info.
echo "gpu_check: starting vLLM on $MODEL (log: $SERVER_LOG)"
"$VLLM_PYTHON" -m vllm.entrypoints.openai.api_server \
    --model "$MODEL" --port "$PORT" --max-logprobs 200 --dtype auto \
    --enable-tokenizer-info-endpoint >"$SERVER_LOG" 2>&1 &
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
    --backend vllm --url "$URL" --model "$MODEL" --out "$RESULT"

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
