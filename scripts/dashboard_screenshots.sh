#!/usr/bin/env bash
# Screenshots of the dashboard's pages for docs/dashboard.md: the browser walk-through test
# (tests/ui/test_browser.py) saves one per page into docs/dashboard/ as it goes. Needs the
# Debian chromium and chromium-driver (scripts/setup.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
out=docs/dashboard
mkdir -p "$out"
DPSYN_SCREENSHOTS="$out" REQUIRE_SERVICES=1 "$PYTHON" -m pytest -q \
  tests/ui/test_browser.py -k walks_through -p no:cacheprovider
ls -l "$out"
