#!/usr/bin/env bash
# Set up, lint, type-check, and run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# Type check app/ and workers/ ([tool.mypy] in pyproject.toml).
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
