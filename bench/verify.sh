#!/usr/bin/env bash
# Throughput of `evi sync verify` (issue 11) on the home bench/sync.sh
# measures: 2,000 sessions, 348 MB of transcripts (log-normal lines, 55% tool
# output, 4 tool outputs of 2-6 MB, one 200 MB session) and a checkpoint
# journal of about 400 blobs (about 60 MB, bench/add_journal.py).
#
#   bench/verify.sh [HOME_DIR]
#
# Builds release, generates the home in HOME_DIR if given (reused when it
# holds one already; never synced itself) or in a temp dir, copies it as
# device A, pushes it to a fresh evi-server on loopback (--registration open,
# temp data folder), then runs `evi sync verify` RUNS times (default 3) on A
# and prints each run's summary line and the median MB/s (record and blob
# bytes checked per second). The server is stopped by its PID and the temp
# dir removed (KEEP=1 keeps it).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
runs=${RUNS:-3}
cd "$root"
cargo build --release --quiet -p evi -p evi-server -p evi-tests
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
evi=$target/release/evi
server=$target/release/evi-server

# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"
bench_work evi-verify-bench

home=${1:-$work/gen}
if [[ ! -f "$home/gen-home.txt" ]]; then
  echo "generating $home ..." >&2
  "$target/release/evi-gen-home" "$home" --sessions 2000 --total-mb 348 --lognormal-lines \
    --tool-pct 55 --huge-lines 4 >&2
fi
if [[ ! -f "$home/checkpoints/journal.jsonl" ]]; then
  transcript_bytes=$(find "$home/transcripts" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
  python3 "$root/bench/add_journal.py" "$home/checkpoints" "$transcript_bytes"
fi
a=$work/a
cp -a "$home" "$a"
rm -rf "$a/sync" "$a/gen-home.txt"

mkdir -p "$work/data"
start_server "$work/data"
export EVI_SYNC_PASSWORD=bench-password-123 EVI_KEY_PASSPHRASE=bench-passphrase-123
EVI_HOME=$a "$evi" sync init --server "http://$addr" --user bench --device a > /dev/null
EVI_HOME=$a "$evi" sync push >&2

rates=()
for i in $(seq "$runs"); do
  sync
  line=$(EVI_HOME=$a "$evi" sync verify | head -n 1)
  echo "run $i: $line"
  rates+=("$(sed -n 's/.*: \([0-9.]*\) MB\/s$/\1/p' <<< "$line")")
done
mid=$(((runs + 1) / 2))
echo "median of $runs: $(printf '%s\n' "${rates[@]}" | sort -n | sed -n "${mid}p") MB/s"
