#!/usr/bin/env bash
# Set up, lint, type-check, and run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# What .ci/run runs: every service, browser, packaged model and shared data file is required,
# so a test that finds one missing fails (its message names the piece and what installs it)
# instead of skipping. REQUIRE_SERVICES=0, set explicitly, lets those tests skip instead.
export REQUIRE_SERVICES=${REQUIRE_SERVICES:-1}
# Bytecode caches are written (into the gitignored __pycache__ folders), whatever the
# environment says: with PYTHONDONTWRITEBYTECODE set, as on this project's machines, every
# test worker re-rewrote every test module's asserts (collection: 21 s of CPU a worker, 12 s
# with the caches), and every process the tests start compiled the service afresh.
unset PYTHONDONTWRITEBYTECODE
STARTED=$SECONDS
# The virtualenvs are not byte-compiled at install (scripts/setup.sh): with the caches
# written, the first import of each module compiles it, and the tests import a fraction of
# what compiling everything costs (about 55 s of CPU a virtualenv).
DPSYN_CONVERT_LATER=1 DPSYN_COMPILE_BYTECODE=0 scripts/setup.sh
echo "test.sh: setup took $((SECONDS - STARTED)) s" >&2
STARTED=$SECONDS
# The models convert (two processes, scripts/convert_models.sh) in the background from here
# on: beside lint and types (mypy is one process), then beside the first tests. Gemma's
# conversion is one thread for most of a minute, so waiting for it would leave a core idle;
# a test (or the vLLM server) that needs a model before it is ready waits for it on the
# conversion's lock (app/llm/conversion.py), and converts it itself should this one fail.
scripts/convert_models.sh &
CONVERT_PID=$!
trap 'kill "$CONVERT_PID" 2>/dev/null || true' EXIT  # a failure stops it too
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "test.sh: lint and format took $((SECONDS - STARTED)) s" >&2
# Type check app/ and workers/ ([tool.mypy] in pyproject.toml) beside the tests: mypy is one
# process for about a minute of CPU on a clean clone (no cache), which the whole command
# used to wait for. Its report prints after pytest's; a type error fails the command as a
# test does.
MYPY_LOG=$(mktemp)
.venv/bin/mypy > "$MYPY_LOG" 2>&1 &
MYPY_PID=$!
trap 'kill "$CONVERT_PID" "$MYPY_PID" 2>/dev/null || true; rm -f "$MYPY_LOG"' EXIT
# Three pytest-xdist workers on two cores by default (DPSYN_TEST_WORKERS=0: one process).
# Much of the suite waits on subprocesses, servers, sleeps and the database: with two
# workers the cores stood idle a fifth of the run (891 s of pytest on 1,400 s of CPU), with
# three the third fills those waits (796 s on the same CPU; four gained nothing more:
# docs/testing.md). The tests that time something against a bound leave room for a loaded
# machine. tests/conftest.py shares the tests out by module (pytest_xdist_make_scheduler) so
# that each module's fixtures, and the vLLM servers, are set up once.
WORKERS=${DPSYN_TEST_WORKERS:-3}
PYTEST_STATUS=0
if [ "$WORKERS" = "0" ]; then
  .venv/bin/python -m pytest "$@" || PYTEST_STATUS=$?
else
  .venv/bin/python -m pytest -n "$WORKERS" "$@" || PYTEST_STATUS=$?
fi
MYPY_STATUS=0
wait "$MYPY_PID" || MYPY_STATUS=$?
echo "test.sh: mypy (beside the tests):" >&2
cat "$MYPY_LOG" >&2
wait "$CONVERT_PID"  # its own failure fails the command too
if [ "$PYTEST_STATUS" = "0" ]; then
  exit "$MYPY_STATUS"
fi
exit "$PYTEST_STATUS"
