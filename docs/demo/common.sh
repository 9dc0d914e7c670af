# What the three-home demos share (sourced, not run): a real evi-server
# on SQLite in a temporary folder, `dev`/`show` to run evi in a home, and
# `pair` to join a home to A's account with a pairing code.
# shellcheck shell=bash
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${EVI_BIN_DIR:-$root/target/release}
T=$(mktemp -d)
trap 'kill $server 2>/dev/null || true; rm -rf "$T"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$bin/evi-server" --data "$T/server" --listen "127.0.0.1:$port" --registration open \
  2>"$T/server.log" &
server=$!
url=http://127.0.0.1:$port
for _ in $(seq 50); do curl -fs "$url/healthz" >/dev/null 2>&1 && break; sleep 0.1; done

export EVI_SYNC_PASSWORD="demo password, not a real one" EVI_KEY_PASSPHRASE="demo passphrase"
dev() { local d=$1; shift; ( cd "$T/$d" && HOME="$T/$d" EVI_HOME="$T/$d/evi" TZ=UTC COLUMNS=100 NO_COLOR=1 "$bin/evi" "$@" ); }
show() { printf '\n$ (%s) evi %s\n' "$1" "${*:2}"; dev "$@"; }
pair() {
  dev a sync pair --yes --json >"$T/pair.json" 2>"$T/pair.err" &
  local p=$!
  for _ in $(seq 100); do grep -q '"code"' "$T/pair.json" 2>/dev/null && break; sleep 0.1; done
  local code
  code=$(head -1 "$T/pair.json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["code"])')
  printf '\n$ (a) evi sync pair --yes   # prints the code: %s\n' "$code"
  ( unset EVI_SYNC_PASSWORD EVI_KEY_PASSPHRASE; show "$1" sync join "$code" --server "$url" --name "$2" )
  wait $p
}
