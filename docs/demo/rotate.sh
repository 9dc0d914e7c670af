#!/usr/bin/env bash
# Rotate the key after a device is lost: three homes (A, B, C), one real
# evi-server on SQLite. A rotates and revokes C (the lost one); B is told
# to pair again, does, and syncs; C can do nothing more.
#
#   cargo build --release --workspace && docs/demo/rotate.sh
#
# Everything lives in a temporary folder and goes when the script ends.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
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
for d in a b c; do mkdir -p "$T/$d/evi"; done
day=$(date -u +%F)
mkdir -p "$T/a/evi/transcripts/$day"
for s in 1 2 3; do
  printf '{"role":"user","ts":"%sT09:0%s:00Z","content":"session %s"}\n' "$day" "$s" "$s" \
    >"$T/a/evi/transcripts/$day/session-000$s.jsonl"
done

show a sync init --server "$url" --user demo --device laptop
show a sync push
pair b desktop
pair c travel
show b sync pull
show c sync pull

printf '\n# the travel laptop (C) is stolen: rotate the key on A, revoking it\n'
start=$(date +%s.%N)
show a sync key rotate --revoke travel --yes
printf '# (rotation took %.2f s)\n' "$(echo "$(date +%s.%N) - $start" | bc)"

# B still has the old key; it writes a line offline, then syncs.
printf '{"role":"user","ts":"%sT11:00:00Z","content":"written on B under the old key"}\n' "$day" \
  >>"$T/b/evi/transcripts/$day/session-0001.jsonl"
show b sync push || true
show c sync pull || true
show c sync push || true
show a sync devices
pair b desktop
show b sync push
show a sync pull
show a sessions list
show a sync devices
