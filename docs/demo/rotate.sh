#!/usr/bin/env bash
# Rotate the key after a device is lost: three homes (A, B, C), one real
# evi-server on SQLite. A rotates and revokes C (the lost one); B is told
# to pair again, does, and syncs; C can do nothing more.
#
#   cargo build --release --workspace && docs/demo/rotate.sh
#
# Everything lives in a temporary folder and goes when the script ends.
set -euo pipefail
. "$(dirname "$0")/common.sh"
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
