#!/usr/bin/env bash
# Per-byte cost of syncing another agent's sessions against eVi's own
# (issue 44): the same plan of sessions generated as eVi writes them and as
# Claude Code writes them (evi-gen-home, `--claude-code`), each pushed first
# from device A and pulled fresh on device B, against a real evi-server on
# loopback (a fresh data folder per home), in one run.
#
#   bench/agents.sh [DIR]
#
# DIR keeps the generated homes between runs (DIR/evi, DIR/claude-code);
# without it they go in a temp dir. GEN_ARGS adds evi-gen-home options (the
# default plan: 2,000 sessions, 300 MB, one of 200 MB over two days).
# Prints, per home: synced bytes, wall seconds, peak RSS of `sync push` and
# `sync pull`, seconds per 100 MB, and the agent/eVi ratio per byte.
# Codex, Gemini CLI and OpenCode have no generator yet (see RESULTS.md).
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

bench_work evi-agents-bench
homes=${1:-$work/homes}
for kind in evi claude-code; do
  h=$homes/$kind
  if [[ ! -f $h/gen-home.txt ]]; then
    echo "generating $h ..." >&2
    extra=
    [[ $kind == claude-code ]] && extra=--claude-code
    mkdir -p "$h"
    # shellcheck disable=SC2086
    "$gen" "$h" ${GEN_ARGS:-} $extra > /dev/null
  fi
done

export EVI_SYNC_PASSWORD=bench-password-123 EVI_KEY_PASSPHRASE=bench-passphrase-123

# timed KEY CMD...: one run after a `sync`; sets wall[KEY] and rss[KEY] (KiB).
declare -A wall rss
timed() {
  local key=$1
  shift
  sync
  if ! /usr/bin/time -o "$work/$key.time" -f '%e %M' "$@" > "$work/$key.out" 2> "$work/$key.err"; then
    echo "failed: $*" >&2
    cat "$work/$key.err" >&2
    exit 1
  fi
  read -r wall[$key] rss[$key] < "$work/$key.time"
}

declare -A bytes
for kind in evi claude-code; do
  a=$work/$kind-a
  b=$work/$kind-b
  mkdir -p "$b"
  cp -a "$homes/$kind" "$a"
  rm -f "$a/gen-home.txt"
  if [[ $kind == claude-code ]]; then
    # Device A's own Claude Code folder; B gets one of its own, empty.
    printf '[agents]\nclaude-code = true\nclaude-code-dir = "%s"\n' "$a/claude" > "$a/config.toml"
    printf '[agents]\nclaude-code = true\nclaude-code-dir = "%s"\n' "$b/claude" > "$b/config.toml"
    mkdir -p "$b/claude"
    bytes[$kind]=$(find "$a/claude" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
  else
    bytes[$kind]=$(find "$a/transcripts" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
  fi
  mkdir -p "$work/$kind-data"
  start_server "$work/$kind-data"
  url=http://$addr
  EVI_HOME=$a "$evi" sync init --server "$url" --user bench --device a > /dev/null
  timed "$kind-push" env EVI_HOME="$a" "$evi" sync push
  EVI_HOME=$a "$evi" sync key export -o "$work/$kind-key.age" > /dev/null 2>&1
  EVI_HOME=$b "$evi" sync key import "$work/$kind-key.age" > /dev/null
  EVI_HOME=$b "$evi" sync login --server "$url" --user bench --device b > /dev/null
  timed "$kind-pull" env EVI_HOME="$b" "$evi" sync pull
  kill "$server_pid"
  wait "$server_pid" 2> /dev/null || true
  server_pid=
done

# The pulled Claude Code home holds what A had.
pulled=$(find "$work/claude-code-b/claude" -name '*.jsonl' | wc -l)
pushed=$(find "$work/claude-code-a/claude" -name '*.jsonl' | wc -l)
if [[ $pulled != "$pushed" ]]; then
  echo "the fresh pull brought $pulled Claude Code files of $pushed" >&2
  exit 1
fi

per100() { awk "BEGIN{printf \"%.3f\", $1 / ($2 / 1e8)}"; }
echo "| step | eVi: MB | wall s | RSS MiB | s/100 MB | Claude Code: MB | wall s | RSS MiB | s/100 MB | Claude Code / eVi per byte |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for step in push pull; do
  e=evi-$step
  c=claude-code-$step
  pe=$(per100 "${wall[$e]}" "${bytes[evi]}")
  pc=$(per100 "${wall[$c]}" "${bytes[claude-code]}")
  printf '| first %s | %.1f | %s | %.1f | %s | %.1f | %s | %.1f | %s | %s |\n' \
    "$([[ $step == push ]] && echo push || echo "pull (fresh)")" \
    "$(awk "BEGIN{print ${bytes[evi]}/1e6}")" "${wall[$e]}" "$(awk "BEGIN{print ${rss[$e]}/1024}")" "$pe" \
    "$(awk "BEGIN{print ${bytes[claude-code]}/1e6}")" "${wall[$c]}" "$(awk "BEGIN{print ${rss[$c]}/1024}")" "$pc" \
    "$(awk "BEGIN{printf \"%.2fx\", $pc / $pe}")"
done
