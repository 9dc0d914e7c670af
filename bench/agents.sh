#!/usr/bin/env bash
# Per-byte cost of syncing other agents' sessions against eVi's own (issue
# 44): the same plan of sessions generated as eVi writes them and as Claude
# Code, Codex, Gemini CLI and OpenCode write them (evi-gen-home,
# `--claude-code`, `--codex`, `--gemini`, `--opencode`), each pushed first
# from device A and pulled fresh on device B, against a real evi-server on
# loopback (a fresh data folder per home), in one run.
#
#   bench/agents.sh [DIR]
#
# DIR keeps the generated homes between runs (DIR/<kind>); without it they
# go in a temp dir. GEN_ARGS adds evi-gen-home options (the default plan:
# 2,000 sessions, 300 MB, one of 200 MB over two days). KINDS picks the
# homes (default: all five; eVi's is the reference, always run).
# Prints, per home: synced bytes (the agent's session files; OpenCode's, the
# mirror files push made of its database's rows), wall and CPU seconds and
# peak RSS of `sync push` and `sync pull`, and the agent/eVi ratio per byte
# of each, by wall and by CPU time. RUNS (default 3) repeats the whole
# round, every home once per round, and prints the median of each time and
# the highest RSS: one run moves by up to 1.3x on 2 cores.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# shellcheck source=bench/lib.sh
source bench/lib.sh

cargo build --release --quiet -p evi -p evi-server -p evi-tests
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
evi=$target/release/evi
server=$target/release/evi-server
gen=$target/release/evi-gen-home

kinds="evi ${KINDS:-claude-code codex gemini opencode}"
kinds=$(tr ' ' '\n' <<< "$kinds" | awk 'NF && !seen[$0]++' | tr '\n' ' ')

# The agent's folder in a home, and evi-gen-home's option for it.
folder() { [[ $1 == claude-code ]] && echo claude || echo "$1"; }

bench_work evi-agents-bench
homes=${1:-$work/homes}
for kind in $kinds; do
  h=$homes/$kind
  if [[ ! -f $h/gen-home.txt ]]; then
    echo "generating $h ..." >&2
    extra=
    [[ $kind != evi ]] && extra=--$kind
    mkdir -p "$h"
    # shellcheck disable=SC2086
    "$gen" "$h" ${GEN_ARGS:-} $extra > /dev/null
  fi
done

export EVI_SYNC_PASSWORD=bench-password-123 EVI_KEY_PASSPHRASE=bench-passphrase-123

# timed KEY CMD...: one run after a `sync`; adds to walls[KEY], cpus[KEY]
# (user + system seconds: on a machine shared with other work, the steadier
# of the two) and sets rss[KEY] (KiB) to the highest yet.
declare -A walls cpus rss
timed() {
  local key=$1
  shift
  sync
  if ! /usr/bin/time -o "$work/$key.time" -f '%e %M %U %S' "$@" > "$work/$key.out" 2> "$work/$key.err"; then
    echo "failed: $*" >&2
    cat "$work/$key.err" >&2
    exit 1
  fi
  local w r user sys
  read -r w r user sys < "$work/$key.time"
  walls[$key]+=" $w"
  cpus[$key]+=" $(awk "BEGIN{printf \"%.2f\", $user + $sys}")"
  (( r > ${rss[$key]:-0} )) && rss[$key]=$r
  return 0
}

# median LIST: the middle of the numbers in LIST (the lower middle of an
# even count).
median() {
  tr ' ' '\n' <<< "$1" | awk 'NF' | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'
}

# synced DIR KIND: the bytes of KIND's sessions in home DIR.
synced() {
  local where=$1/transcripts
  case $2 in
    evi) ;;
    opencode) where=$1/opencode/evi-sync ;;
    *) where=$1/$(folder "$2") ;;
  esac
  find "$where" -type f -name '*.jsonl' -printf '%s\n' | awk '{s += $1} END {print s + 0}'
}

# sessions DIR KIND: how many sessions of KIND `evi sessions list` finds in DIR.
sessions() {
  local agent=()
  [[ $2 != evi ]] && agent=(--agent "$2")
  EVI_HOME=$1 "$evi" sessions list "${agent[@]}" --limit 1000000 --json | grep -o '"short_id":' | wc -l
}

declare -A bytes
for run in $(seq "${RUNS:-3}"); do
for kind in $kinds; do
  a=$work/$kind-a
  b=$work/$kind-b
  rm -rf "$a" "$b" "$work/$kind-data" "$work/$kind-key.age"
  echo "round $run: $kind ..." >&2
  cp -a "$homes/$kind" "$a"
  rm -f "$a/gen-home.txt"
  mkdir -p "$b"
  if [[ $kind != evi ]]; then
    # Device A's own agent folder (the config named the generated one);
    # B gets one of its own, empty (OpenCode's: its database, no rows).
    f=$(folder "$kind")
    printf '[tools]\ntranscripts = true\n[agents]\n%s = true\n%s-dir = "%s"\n' "$kind" "$kind" "$a/$f" > "$a/config.toml"
    "$gen" "$b" "--$kind" --empty > /dev/null
  fi
  mkdir -p "$work/$kind-data"
  start_server "$work/$kind-data"
  url=http://$addr
  EVI_HOME=$a "$evi" sync init --server "$url" --user bench --device a > /dev/null
  timed "$kind-push" env EVI_HOME="$a" "$evi" sync push
  bytes[$kind]=$(synced "$a" "$kind")
  EVI_HOME=$a "$evi" sync key export -o "$work/$kind-key.age" > /dev/null 2>&1
  EVI_HOME=$b "$evi" sync key import "$work/$kind-key.age" > /dev/null 2>&1
  EVI_HOME=$b "$evi" sync login --server "$url" --user bench --device b > /dev/null
  timed "$kind-pull" env EVI_HOME="$b" "$evi" sync pull
  kill "$server_pid"
  wait "$server_pid" 2> /dev/null || true
  server_pid=
  # A has every session generated, and the fresh pull brought them all.
  made=$(sed -n 's/^sessions=\([0-9]*\).*/\1/p' "$homes/$kind/gen-home.txt")
  pushed=$(sessions "$a" "$kind")
  pulled=$(sessions "$b" "$kind")
  if [[ $pushed != "$made" ]]; then
    echo "evi lists $pushed $kind sessions of the $made generated" >&2
    exit 1
  fi
  if [[ $pulled != "$pushed" ]]; then
    echo "the fresh pull of $kind brought $pulled sessions of $pushed" >&2
    exit 1
  fi
  got=$(synced "$b" "$kind")
  if [[ $got != "${bytes[$kind]}" ]]; then
    echo "note: $kind on B holds $got bytes of sessions, A $((bytes[$kind]))" >&2
  fi
done
done
declare -A wall cpu
for key in "${!walls[@]}"; do
  wall[$key]=$(median "${walls[$key]}")
  cpu[$key]=$(median "${cpus[$key]}")
done

# ratio KIND STEP TIMES: KIND's seconds per byte over eVi's, from TIMES (wall or cpu).
ratio() {
  local -n t=$3
  awk "BEGIN{printf \"%.2fx\", (${t[$1-$2]} / ${bytes[$1]}) / (${t[evi-$2]} / ${bytes[evi]})}"
}
mib() { awk "BEGIN{printf \"%.1f\", $1 / 1024}"; }
echo "| home | MB | push s | push CPU s | push RSS MiB | push / eVi per byte (wall, CPU) | pull s | pull CPU s | pull RSS MiB | pull / eVi per byte (wall, CPU) |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for kind in $kinds; do
  row="| $kind | $(awk "BEGIN{printf \"%.1f\", ${bytes[$kind]}/1e6}")"
  for step in push pull; do
    k=$kind-$step
    row+=" | ${wall[$k]} | ${cpu[$k]} | $(mib "${rss[$k]}") | $(ratio "$kind" "$step" wall), $(ratio "$kind" "$step" cpu)"
  done
  echo "$row |"
done
