#!/usr/bin/env bash
# Screenshots of the dashboard's pages for docs/dashboard.md: the browser walk-through test
# (tests/ui/test_browser.py) and the budget views' test (tests/ui/test_browser_budgets.py) save
# one per page into docs/dashboard/ as they go. Needs the
# Debian chromium and chromium-driver (scripts/setup.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
out=docs/dashboard
mkdir -p "$out"
DPSYN_SCREENSHOTS="$out" REQUIRE_SERVICES=1 "$PYTHON" -m pytest -q \
  tests/ui/test_browser.py tests/ui/test_browser_budgets.py tests/ui/test_browser_fleet.py \
  -k "walks_through or per_label or 360_px or fleet" -p no:cacheprovider
ls -l "$out"
