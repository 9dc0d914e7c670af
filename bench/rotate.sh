#!/usr/bin/env bash
# Times `evi sync key rotate` of bench/sync.sh's home (2,000 sessions, 348 MB
# of transcripts, ~400 checkpoint blobs) pushed to a fresh evi-server.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/target/release
work=${WORK:-$(mktemp -d)}
rm -rf "$work"; mkdir -p "$work"
"$bin/evi-gen-home" "$work/a" --sessions 2000 --total-mb 348 --lognormal-lines --tool-pct 55 --huge-lines 4 >&2
tb=$(find "$work/a/transcripts" -type f -printf '%s\n' | awk '{s+=$1} END {print s+0}')
python3 "$root/bench/add_journal.py" "$work/a/checkpoints" "$tb"
rm -f "$work/a/gen-home.txt"
mkdir -p "$work/data"
"$bin/evi-server" --listen 127.0.0.1:0 --data "$work/data" --registration open > "$work/server.out" 2> "$work/server.err" &
spid=$!
trap 'kill $spid' EXIT
for _ in $(seq 100); do addr=$(sed -n '1s/^listening on //p' "$work/server.out"); [[ -n $addr ]] && break; sleep 0.1; done
export EVI_HOME=$work/a EVI_SYNC_PASSWORD=bench-password-123 EVI_KEY_PASSPHRASE=bench-passphrase-123
"$bin/evi" sync init --server "http://$addr" --user bench --device a > /dev/null
/usr/bin/time -f "push: %e s wall, %U+%S s CPU, %M KiB peak" "$bin/evi" sync push > /dev/null
du -sh "$work/data"
/usr/bin/time -f "rotate: %e s wall, %U+%S s CPU, %M KiB peak" "$bin/evi" sync key rotate --yes --json
/usr/bin/time -f "pull after: %e s wall, %U+%S s CPU, %M KiB peak" "$bin/evi" sync pull > /dev/null
du -sh "$work/data"
