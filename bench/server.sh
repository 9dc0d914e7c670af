#!/usr/bin/env bash
# Server benchmark (issue 22): the embedded store beside Postgres + S3, with
# one and two replicas, on the same machine in one run. Writes server/BENCH.md
# (between the generated-block markers) unless NO_RESULTS=1.
#
#   bench/server.sh [HOME_DIR]
#
# Needs: PostgreSQL (BENCH_POSTGRES_URL, default
# postgres://postgres@127.0.0.1:5432/test: each configuration gets a fresh
# database made there and dropped after), s3s-fs (EVI_TEST_S3_SERVER or on
# PATH; .ci/run installs it), caddy (in front of the two replicas, as
# deploy/scale/ runs them), psql.
#
# Configurations:
#   sqlite   one evi-server, SQLite and packs in a data folder (the default)
#   pg1      one evi-server on Postgres + S3 (s3s-fs on loopback)
#   pg2      two evi-server replicas on one Postgres + one bucket, Caddy in
#            front round robin (the clients see one URL)
#
# Per configuration:
#   1. bulk push of the bench home (bench/sync.sh's generator and journal:
#      2,000 sessions, ~348 MB, 400 blobs) from device A;
#   2. fresh pull of it on device B (an empty home with A's key);
#   3. evi-load syncs: ACCOUNTS accounts (1,000) x 3 devices, each round one
#      device pushes a few lines and the other two pull them, ROUNDS rounds:
#      syncs/s, p50/p99 per sync, server CPU per sync;
#   4. evi-load waits (sqlite and pg2): WAITS long polls (10,000) parked over
#      the replicas; server memory per parked wait; p50/p99 from a push on one
#      replica to the wake-up of a wait parked on the other.
# B's transcripts must equal A's byte for byte, or the run fails.
#
# Environment: ACCOUNTS, ROUNDS (5), WAITS (10000), CONFIGS ("sqlite pg1
# pg2"), GEN_ARGS, KEEP=1, NO_RESULTS=1.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
accounts=${ACCOUNTS:-1000}
rounds=${ROUNDS:-5}
waits=${WAITS:-10000}
configs=${CONFIGS:-sqlite pg1 pg2}
pg_url=${BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}
cmdline="bench/server.sh${*:+ $*}"
gen_defaults="--sessions 2000 --total-mb 348 --lognormal-lines --tool-pct 55 --huge-lines 4"
cd "$root"

s3s=${EVI_TEST_S3_SERVER:-$(command -v s3s-fs || echo "$HOME/.cargo/bin/s3s-fs")}
needs=()
[[ $configs == *pg* ]] && needs+=(psql "$s3s")
[[ $configs == *pg2* ]] && needs+=(caddy)
for tool in "${needs[@]}"; do
  command -v "$tool" > /dev/null || {
    echo "$tool is missing (see the header of $0)" >&2
    exit 1
  }
done

cargo build --release --quiet -p evi -p evi-server -p evi-tests --features evi-tests/load
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
evi=$target/release/evi
server=$target/release/evi-server
gen=$target/release/evi-gen-home
load=$target/release/evi-load

work=$(mktemp -d "${TMPDIR:-/tmp}/evi-server-bench.XXXXXX")
pids=()
dbs=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null || true; done
  for d in "${dbs[@]}"; do psql -q "$pg_url" -c "DROP DATABASE IF EXISTS $d WITH (FORCE)" 2> /dev/null || true; done
  if [[ ${KEEP:-0} == 1 ]]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

if [[ $# -ge 1 ]]; then home=$1; else home=$work/gen; fi
if [[ ! -f "$home/gen-home.txt" ]]; then
  echo "generating $home ..." >&2
  # shellcheck disable=SC2086
  "$gen" "$home" $gen_defaults ${GEN_ARGS:-} >&2
fi
if [[ ! -f "$home/checkpoints/journal.jsonl" ]]; then
  transcript_bytes=$(find "$home/transcripts" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
  python3 "$root/bench/add_journal.py" "$home/checkpoints" "$transcript_bytes"
fi
synced_bytes=$(find "$home/transcripts" "$home/checkpoints" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 200); do
    (exec 3<> "/dev/tcp/127.0.0.1/$1") 2> /dev/null && return 0
    sleep 0.05
  done
  echo "nothing listens on port $1" >&2
  exit 1
}
clk_tck=$(getconf CLK_TCK)
# cpu_of PID...: their CPU seconds so far (user + system).
cpu_of() {
  local t=0 p
  for p in "$@"; do
    t=$(awk -v t="$clk_tck" -v acc="$t" '{sub(/^.*\) /, ""); printf "%.2f", acc + ($12 + $13) / t}' "/proc/$p/stat")
  done
  echo "$t"
}
rss_of() {
  local t=0 p
  for p in "$@"; do
    t=$((t + $(awk '/^VmRSS/ {print $2}' "/proc/$p/status")))
  done
  echo "$t"
}

# Limits raised for one address standing for thousands of devices.
# --trust-forwarded-for: as behind the operator's proxy, so the per-address
# connection bound (half the total) is off for the one address here.
server_flags=(--registration open --trust-forwarded-for --auth-rate-per-ip 1000000 --auth-rate-per-user-total 1000000
  --max-connections 19000 --max-connections-per-ip 19000 --max-waiters 18000
  --max-waiters-per-user 64 --wait-rate-per-device 100000)

# start_servers CONFIG: sets url (what clients use) and srv_pids.
start_servers() {
  local config=$1 n=1 i port
  srv_pids=()
  local args=() envs=()
  case $config in
    sqlite)
      args=(--data "$work/$config/data")
      ;;
    pg1 | pg2)
      [[ $config == pg2 ]] && n=2
      local db
      db=evi_bench_${config}_$$_$RANDOM
      psql -q "$pg_url" -c "CREATE DATABASE $db"
      dbs+=("$db")
      local s3port s3root=$work/$config/s3
      s3port=$(free_port)
      mkdir -p "$s3root/bench"
      "$s3s" --host 127.0.0.1 --port "$s3port" --access-key bench-key --secret-key bench-secret-key-123 \
        "$s3root" > /dev/null 2> "$work/$config/s3.log" &
      pids+=($!)
      wait_port "$s3port"
      args=(--data "$work/$config/data" --database "${pg_url%/*}/$db" --store s3://bench/evi)
      envs=(AWS_ACCESS_KEY_ID=bench-key AWS_SECRET_ACCESS_KEY=bench-secret-key-123 AWS_REGION=us-east-1
        AWS_ENDPOINT_URL=http://127.0.0.1:$s3port AWS_ALLOW_HTTP=true)
      ;;
  esac
  local upstreams=()
  for i in $(seq "$n"); do
    port=$(free_port)
    mkdir -p "$work/$config/data"
    env "${envs[@]}" "$server" --listen "127.0.0.1:$port" "${server_flags[@]}" "${args[@]}" \
      > "$work/$config/server$i.out" 2> "$work/$config/server$i.err" &
    pids+=($!)
    srv_pids+=($!)
    wait_port "$port"
    upstreams+=("127.0.0.1:$port")
  done
  if ((n == 1)); then
    url=http://${upstreams[0]}
  else
    port=$(free_port)
    cat > "$work/$config/Caddyfile" << EOF
{
	admin off
	auto_https off
}
http://127.0.0.1:$port {
	request_body {
		max_size 64MiB
	}
	reverse_proxy ${upstreams[*]} {
		lb_policy round_robin
		flush_interval -1
	}
}
EOF
    XDG_DATA_HOME=$work/$config XDG_CONFIG_HOME=$work/$config \
      caddy run --adapter caddyfile --config "$work/$config/Caddyfile" > "$work/$config/caddy.log" 2>&1 &
    pids+=($!)
    wait_port "$port"
    url=http://127.0.0.1:$port
    replica_urls=$(printf 'http://%s,' "${upstreams[@]}")
    replica_urls=${replica_urls%,}
  fi
  [[ $n == 1 ]] && replica_urls=$url
  return 0
}

stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null || true; done
  pids=()
}

declare -A res
field() { python3 -c 'import json,sys; print(round(json.loads(sys.argv[1])[sys.argv[2]], 1))' "$1" "$2"; }
export EVI_SYNC_PASSWORD=bench-password-123 EVI_KEY_PASSPHRASE=bench-passphrase-123
for config in $configs; do
  echo "== $config" >&2
  mkdir -p "$work/$config"
  start_servers "$config"
  a=$work/$config/a b=$work/$config/b
  cp -a "$home" "$a"
  rm -f "$a/gen-home.txt"
  mkdir -p "$b"
  EVI_HOME=$a "$evi" sync init --server "$url" --user bench --device a > /dev/null
  sync
  c0=$(cpu_of "${srv_pids[@]}")
  /usr/bin/time -o "$work/$config/push.time" -f '%e %M' env EVI_HOME="$a" "$evi" sync push > /dev/null
  c1=$(cpu_of "${srv_pids[@]}")
  read -r res[$config.push] res[$config.push_rss] < "$work/$config/push.time"
  res[$config.push_srv]=$(awk "BEGIN{printf \"%.2f\", $c1 - $c0}")
  EVI_HOME=$a "$evi" sync key export -o "$work/$config/key.age" > /dev/null 2>&1
  EVI_HOME=$b "$evi" sync key import "$work/$config/key.age" > /dev/null
  EVI_HOME=$b "$evi" sync login --server "$url" --user bench --device b > /dev/null
  sync
  c0=$(cpu_of "${srv_pids[@]}")
  /usr/bin/time -o "$work/$config/pull.time" -f '%e %M' env EVI_HOME="$b" "$evi" sync pull > /dev/null
  c1=$(cpu_of "${srv_pids[@]}")
  read -r res[$config.pull] res[$config.pull_rss] < "$work/$config/pull.time"
  res[$config.pull_srv]=$(awk "BEGIN{printf \"%.2f\", $c1 - $c0}")
  diff -r "$a/transcripts" "$b/transcripts"
  echo "$config: push ${res[$config.push]} s, pull ${res[$config.pull]} s (B = A)" >&2
  rm -rf "$a" "$b"

  pid_list=$(IFS=,; echo "${srv_pids[*]}")
  "$load" syncs --servers "$replica_urls" --accounts "$accounts" --rounds "$rounds" --pids "$pid_list" \
    > "$work/$config/syncs.json"
  res[$config.syncs]=$(cat "$work/$config/syncs.json")
  # Server CPU per sync over the rounds (not the set-up's argon2 logins).
  res[$config.cpu_per_sync]=$(field "${res[$config.syncs]}" server_cpu_ms_per_sync)
  echo "$config: ${res[$config.syncs]}" >&2

  if [[ $config != pg1 ]]; then
    rss0=$(rss_of "${srv_pids[@]}")
    # Each parked wait holds a descriptor, and a server fits its bounds to
    # its descriptor limit (two per connection): one process holds fewer
    # waits than two replicas.
    cfg_waits=$waits
    max_one=$(((($(ulimit -Hn) - 128) / 2) * 7 / 8 - 400))
    if ((${#srv_pids[@]} == 1 && cfg_waits > max_one)); then cfg_waits=$max_one; fi
    per=$((cfg_waits / accounts))
    "$load" waits --servers "$replica_urls" --accounts "$accounts" --waits "$per" \
      > "$work/$config/waits.json" 2> "$work/$config/waits.err" &
    lp=$!
    until grep -q '^parked' "$work/$config/waits.err" 2> /dev/null; do
      kill -0 "$lp" 2> /dev/null || { cat "$work/$config/waits.err" >&2; exit 1; }
      sleep 0.2
    done
    rss1=$(rss_of "${srv_pids[@]}")
    wait "$lp"
    res[$config.waits]=$(cat "$work/$config/waits.json")
    res[$config.wait_kib]=$(awk "BEGIN{printf \"%.1f\", ($rss1 - $rss0) / ($per * $accounts)}")
    res[$config.wait_n]=$((per * accounts))
    echo "$config: ${res[$config.waits]}, ${res[$config.wait_kib]} KiB per wait" >&2
  fi
  stop_all
done

ratio() { awk "BEGIN{ if ($2 <= 0) print \"-\"; else printf \"%.2f\", $1 / $2 }"; }
synced_mb=$(awk "BEGIN{printf \"%.0f\", $synced_bytes / 1e6}")
table=$(
  echo "| configuration | bulk push s | fresh pull s | server CPU push/pull s | syncs/s | sync p50/p99 ms | server CPU ms/sync | wake p50/p99 ms | KiB/wait |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
  for config in $configs; do
    name=$config
    case $config in
      sqlite) name="SQLite + folder, one process" ;;
      pg1) name="Postgres + S3, one replica" ;;
      pg2) name="Postgres + S3, two replicas behind Caddy" ;;
    esac
    s=${res[$config.syncs]}
    w=${res[$config.waits]:-}
    printf '| %s | %s | %s | %s / %s | %s | %s / %s | %s | %s | %s |\n' "$name" \
      "${res[$config.push]}" "${res[$config.pull]}" "${res[$config.push_srv]}" "${res[$config.pull_srv]}" \
      "$(field "$s" syncs_per_sec)" "$(field "$s" p50_ms)" "$(field "$s" p99_ms)" "${res[$config.cpu_per_sync]}" \
      "$([[ -n $w ]] && echo "$(field "$w" wake_p50_ms) / $(field "$w" wake_p99_ms) (${res[$config.wait_n]} waits)" || echo -)" \
      "${res[$config.wait_kib]:--}"
  done
)
echo "$table"
summary=""
if [[ -n ${res[sqlite.push]:-} && -n ${res[pg1.push]:-} ]]; then
  summary="Postgres + S3 (one replica) against SQLite: bulk push $(ratio "${res[pg1.push]}" "${res[sqlite.push]}")×, fresh pull $(ratio "${res[pg1.pull]}" "${res[sqlite.pull]}")× (target ≤ 1.5×)."
  echo "$summary"
fi

if [[ ${NO_RESULTS:-0} != 1 ]]; then
  out=$root/server/BENCH.md
  block=$(
    echo "<!-- generated by bench/server.sh: begin -->"
    echo "Run: \`$cmdline\` on $(date -u +%Y-%m-%d), $(nproc) cores, home of ${synced_mb} MB"
    echo "(transcripts and checkpoints), $accounts accounts × 3 devices × $rounds rounds, $waits waits."
    echo
    echo "$table"
    echo
    echo "$summary"
    echo "<!-- generated by bench/server.sh: end -->"
  )
  python3 - "$out" "$block" << 'PY'
import sys, re, os
path, block = sys.argv[1], sys.argv[2]
text = open(path).read() if os.path.exists(path) else "# Server benchmark\n\n"
begin, end = "<!-- generated by bench/server.sh: begin -->", "<!-- generated by bench/server.sh: end -->"
if begin in text:
    text = text[:text.index(begin)] + block + text[text.index(end) + len(end):]
else:
    text = text.rstrip() + "\n\n" + block + "\n"
open(path, "w").write(text)
PY
  echo "wrote $out" >&2
fi
