#!/usr/bin/env bash
# One hostile account among many (issue 46): the other accounts' sync
# latency on a quiet server, then on a fresh one while one account runs
# issue 46's findings 1-4 at full speed (evi-load --hostile: damage reports
# of 1,000 seqs against 20,000 entries in a loop, pairing slots minting
# devices in a loop, TRICKLE (200) uploads sending a byte every 10 s, and
# pairing long polls parked in a loop). Bounded and on loopback. Prints one
# line per run and the p99 ratio per backend.
#
#   bench/hostile.sh
#
# Environment: ACCOUNTS (200), DEVICES (2), ROUNDS (10), CONCURRENCY (32),
# TRICKLE (200), CONFIGS ("sqlite pg1"), BENCH_POSTGRES_URL (default
# postgres://postgres@127.0.0.1:5432/test), KEEP=1. The servers run as the
# shipped unit does behind its proxy (--trust-forwarded-for: no bound per
# address), with --max-connections 1000.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
accounts=${ACCOUNTS:-200}
devices=${DEVICES:-2}
rounds=${ROUNDS:-10}
concurrency=${CONCURRENCY:-32}
trickle=${TRICKLE:-200}
configs=${CONFIGS:-sqlite pg1}
pg_url=${BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}
cd "$root"
s3s=${EVI_TEST_S3_SERVER:-$(command -v s3s-fs || echo "$HOME/.cargo/bin/s3s-fs")}

cargo build --release --quiet -p evi-server -p evi-tests --features evi-tests/load --bin evi-server --bin evi-load
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
server=$target/release/evi-server
load=$target/release/evi-load

work=$(mktemp -d "${TMPDIR:-/tmp}/evi-hostile-bench.XXXXXX")
pids=()
dbs=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null || true; done
  for d in "${dbs[@]}"; do psql -q "$pg_url" -c "DROP DATABASE IF EXISTS $d WITH (FORCE)" 2> /dev/null || true; done
  if [[ ${KEEP:-0} == 1 ]]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 200); do
    (exec 3<> "/dev/tcp/127.0.0.1/$1") 2> /dev/null && return 0
    sleep 0.05
  done
  echo "nothing listens on port $1" >&2
  exit 1
}

server_flags=(--registration open --trust-forwarded-for --auth-rate-per-ip 1000000
  --auth-rate-per-user-total 1000000 --max-connections 1000)

# start_server RUN CONFIG: sets url and srv_pid.
start_server() {
  local run=$1 config=$2 args=() envs=(EVI_SERVER_LOG=warn)
  mkdir -p "$work/$run/data"
  if [[ $config == pg1 ]]; then
    local db s3port s3root=$work/$run/s3
    db=evi_hostile_${run//-/_}_$$
    psql -q "$pg_url" -c "CREATE DATABASE $db"
    dbs+=("$db")
    s3port=$(free_port)
    mkdir -p "$s3root/bench"
    "$s3s" --host 127.0.0.1 --port "$s3port" --access-key bench-key --secret-key bench-secret-key-123 \
      "$s3root" > /dev/null 2> "$work/$run/s3.log" &
    pids+=($!)
    wait_port "$s3port"
    args=(--database "${pg_url%/*}/$db" --store s3://bench/evi)
    envs+=(AWS_ACCESS_KEY_ID=bench-key AWS_SECRET_ACCESS_KEY=bench-secret-key-123 AWS_REGION=us-east-1
      AWS_ENDPOINT_URL=http://127.0.0.1:$s3port AWS_ALLOW_HTTP=true)
  fi
  local port
  port=$(free_port)
  env "${envs[@]}" "$server" --listen "127.0.0.1:$port" --data "$work/$run/data" "${server_flags[@]}" \
    "${args[@]}" > "$work/$run/server.out" 2> "$work/$run/server.err" &
  srv_pid=$!
  pids+=($!)
  wait_port "$port"
  url=http://127.0.0.1:$port
}

p99() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])["p99_ms"])' "$1"; }
echo "| backend | run | syncs | p50 ms | p99 ms | syncs/s | what the hostile account got |"
echo "|---|---|---:|---:|---:|---:|---|"
for config in $configs; do
  declare -A p=()
  for run in quiet hostile; do
    start_server "$config-$run" "$config"
    extra=()
    [[ $run == hostile ]] && extra=(--hostile 1 --trickle "$trickle")
    out=$("$load" syncs --servers "$url" --accounts "$accounts" --devices "$devices" --rounds "$rounds" \
      --concurrency "$concurrency" --pids "$srv_pid" "${extra[@]}")
    kill "$srv_pid"
    wait "$srv_pid" 2> /dev/null || true
    p[$run]=$(p99 "$out")
    python3 - "$config" "$run" "$out" << 'PY'
import json, sys
config, run, v = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
h = v.get("hostile") or {}
got = "; ".join(f"{a}: " + ", ".join(f"{n}x{s}" for s, n in sorted(st.items())) for a, st in sorted(h.items()))
print(f"| {config} | {run} | {v['syncs']} | {v['p50_ms']:.1f} | {v['p99_ms']:.1f} | {v['syncs_per_sec']:.0f} | {got or '-'} |")
PY
  done
  python3 -c 'import sys; q, h = float(sys.argv[2]), float(sys.argv[3]); print(f"{sys.argv[1]}: p99 under attack / quiet = {h / q:.2f}")' \
    "$config" "${p[quiet]}" "${p[hostile]}" >&2
done
