#!/usr/bin/env bash
# A fresh pull of one session that came in many records, one record a page
# (`--max-page-records 1`), as a long-used account's busy session does over
# many pages: its wall time shows whether pull waits on its own writes (it
# must not: issue 20, defect 6 follow-up). Not a test: it prints a figure.
#
#   bench/pages.sh [EVI]      EVI: the evi binary to time (default: this build's)
#
# Environment: RECORDS (default 60), KEEP=1 (keep the temp dir).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/lib.sh"
evi=${1:-$root/target/release/evi}
server=$root/target/release/evi-server
records=${RECORDS:-60}
bench_work evi-pages
"$server" --listen 127.0.0.1:0 --data "$work/data" --registration open --max-page-records 1 \
  > "$work/server.out" 2> "$work/server.err" &
server_pid=$!
for _ in $(seq 100); do
  addr=$(sed -n '1s/^listening on //p' "$work/server.out")
  [[ -n $addr ]] && break
  sleep 0.1
done
export EVI_SYNC_PASSWORD=correct-horse-battery EVI_KEY_PASSPHRASE=bench-passphrase
day=$(date +%F)
pad=$(head -c 2000 /dev/zero | tr '\0' x)
export EVI_HOME=$work/a
mkdir -p "$EVI_HOME/transcripts/$day"
"$evi" sync init --server "http://$addr" --user bench --device a > /dev/null 2>&1
for i in $(seq "$records"); do
  echo "{\"role\":\"user\",\"content\":\"line $i $pad\"}" >> "$EVI_HOME/transcripts/$day/s1.jsonl"
  "$evi" sync push > /dev/null 2>&1
done
"$evi" sync key export -o "$work/key.age" > /dev/null 2>&1
export EVI_HOME=$work/b
"$evi" sync key import "$work/key.age" > /dev/null 2>&1
"$evi" sync login --server "http://$addr" --user bench --device b > /dev/null 2>&1
/usr/bin/time -f "fresh pull of $records one-record pages: %e s wall, %U s user, %S s system, %M KiB peak RSS" \
  "$evi" sync pull > /dev/null
echo "lines on the new device: $(wc -l < "$work/b/transcripts/$day/s1.jsonl") of $records"
