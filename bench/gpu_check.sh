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

# Throughput from the server's own counters (the job's stats hold no token counts).
METRICS_BEFORE="$OUT/vllm_metrics_before.txt"
METRICS_AFTER="$OUT/vllm_metrics_after.txt"
curl -sf "$URL/metrics" >"$METRICS_BEFORE"
echo "gpu_check: synthesizing (timeout ${synth_timeout} s)"
job_start=$(date +%s.%N)
timeout "$synth_timeout" .venv/bin/dpsyn synthesize \
    --data "$DATA" --task trec --method adadpsyn --epsilon 8 \
    --backend vllm --url "$URL" --out "$RESULT"
job_end=$(date +%s.%N)
curl -sf "$URL/metrics" >"$METRICS_AFTER"

.venv/bin/python - "$METRICS_BEFORE" "$METRICS_AFTER" "$job_start" "$job_end" <<'PY'
import sys

def counters(path):
    """Sum each vLLM counter of interest over its label sets."""
    names = ("vllm:prompt_tokens_total", "vllm:prefix_cache_queries_total",
             "vllm:prefix_cache_hits_total")
    out = dict.fromkeys(names, 0.0)
    for line in open(path):
        name = line.split("{", 1)[0]
        if name in out:
            out[name] += float(line.rsplit(" ", 1)[1])
    return out

before, after = counters(sys.argv[1]), counters(sys.argv[2])
seconds = float(sys.argv[4]) - float(sys.argv[3])
tokens = after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"]
queries = after["vllm:prefix_cache_queries_total"] - before["vllm:prefix_cache_queries_total"]
hits = after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"]
print(f"gpu_check: job {seconds:.1f} s, {tokens:,.0f} prompt tokens: "
      f"{tokens / seconds:,.0f} prompt tokens/s; prefix cache {hits:,.0f} of {queries:,.0f} "
      f"({hits / max(queries, 1):.1%})")
PY
echo "gpu_check: done in $((SECONDS - START)) s; result in $RESULT"
