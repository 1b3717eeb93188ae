# Sourced by the quickstart scripts: set up, then start the embedded server in the background
# (`dpsyn serve`: SQLite and the admin key in ./.dpsyn/, an in-process worker, the packaged
# CPU model) and wait until it answers; it is stopped when the calling script exits.
# Sets DATA_DIR (default ../shared/data), DPSYN_URL and dpsyn (the CLI).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh
DATA_DIR=${DATA_DIR:-../shared/data}
PORT=${DPSYN_PORT:-8000}
export DPSYN_URL="http://127.0.0.1:$PORT"
dpsyn=.venv/bin/dpsyn
mkdir -p .dpsyn out

# The server's log without the admin key it prints once at the first start (the line after
# "admin API key"): the key stays in .dpsyn/admin_key (0600), never on a terminal or in CI logs.
show_log() { awk 'skip { skip = 0; next } /admin API key/ { print; skip = 1; next } { print }' \
  .dpsyn/serve.log; }

echo "== starting dpsyn serve on $DPSYN_URL (log: .dpsyn/serve.log)"
"$dpsyn" serve --port "$PORT" >.dpsyn/serve.log 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 240); do
  if ! kill -0 "$server" 2>/dev/null; then
    show_log >&2
    echo "dpsyn serve exited (is port $PORT in use? set DPSYN_PORT)" >&2
    exit 1
  fi
  curl -fsS "$DPSYN_URL/healthz" >/dev/null 2>&1 && break
  sleep 0.5
done
curl -fsS "$DPSYN_URL/healthz" >/dev/null
