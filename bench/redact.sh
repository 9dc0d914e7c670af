#!/usr/bin/env bash
# What redaction costs push: the initial push of one generated eVi home with
# `[sync] redact` on (the default) and off, each into its own account of one
# fresh evi-server on loopback, alternating, RUNS times each; prints the wall
# seconds of each run and the medians.
#
#   bench/redact.sh            (GEN_ARGS: evi-gen-home options, RUNS: 3)
#
# Takes the release binaries already built in target/release (run `cargo
# build --release -p evi -p evi-server -p evi-tests` first).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
evi=$target/release/evi
server=$target/release/evi-server
gen=$target/release/evi-gen-home
runs=${RUNS:-3}
# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"
bench_work evi-redact-bench

# shellcheck disable=SC2086
"$gen" "$work/home" --sessions 400 --total-mb 80 --big-mb 20 ${GEN_ARGS:-} > /dev/null
rm -f "$work/home/gen-home.txt"
bytes=$(find "$work/home/transcripts" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
start_server "$work/data"
url=http://$addr
export EVI_SYNC_PASSWORD=bench-password-123

one() { # MODE N: an initial push of a fresh copy; prints its wall seconds
  local h=$work/$1-$2
  cp -a "$work/home" "$h"
  [[ $1 == off ]] && printf '[sync]\nredact = false\n' > "$h/config.toml"
  EVI_HOME=$h "$evi" sync init --server "$url" --user "u$1$2" --device d > /dev/null
  local t0 t1
  t0=$(date +%s.%N)
  EVI_HOME=$h "$evi" sync push > "$work/push-$1-$2.out"
  t1=$(date +%s.%N)
  rm -rf "$h"
  awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f\n", b - a}'
}

on=() off=()
for n in $(seq "$runs"); do
  on+=("$(one on "$n")")
  off+=("$(one off "$n")")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "transcripts: $(awk -v b="$bytes" 'BEGIN{printf "%.1f", b / 1e6}') MB; runs: $runs"
echo "redact on:  ${on[*]} s (median $(median "${on[@]}"))"
echo "redact off: ${off[*]} s (median $(median "${off[@]}"))"
