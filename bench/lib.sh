# shellcheck shell=bash
# What the bench scripts share (sourced, not run): a temp dir removed at exit
# unless KEEP=1, and an evi-server on a free loopback port, stopped by its PID
# at exit.

# bench_work NAME: makes the temp dir $work and sets the exit trap.
bench_work() {
  work=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
  server_pid=
  trap bench_cleanup EXIT
}

bench_cleanup() {
  if [[ -n $server_pid ]]; then
    kill "$server_pid" 2> /dev/null || true
    wait "$server_pid" 2> /dev/null || true
  fi
  if [[ ${KEEP:-0} == 1 ]]; then
    echo "kept $work" >&2
  else
    rm -rf "$work"
  fi
}

# start_server DATA: runs $server (--registration open) on the data folder
# DATA; sets server_pid and addr (what it printed it listens on).
start_server() {
  "$server" --listen 127.0.0.1:0 --data "$1" --registration open > "$work/server.out" 2> "$work/server.err" &
  server_pid=$!
  addr=
  for _ in $(seq 100); do
    addr=$(sed -n '1s/^listening on //p' "$work/server.out")
    [[ -n $addr ]] && break
    sleep 0.1
  done
  if [[ -z $addr ]]; then
    echo "evi-server did not start:" >&2
    cat "$work/server.err" >&2
    exit 1
  fi
}
