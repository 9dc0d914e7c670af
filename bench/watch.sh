#!/usr/bin/env bash
# Benchmark of live sync and the one-session fetch (issue 13), against real
# evi-server processes on loopback. Not a test: it prints figures.
#
#   bench/watch.sh            all four parts
#   PARTS="latency waiters" bench/watch.sh
#
# Parts:
#   latency  two devices, both running `evi sync watch`; 200 lines appended
#            to one session on A, one every 0.3-0.9 s (seeded), each line
#            timed from its write on A until it is in B's transcript (B's
#            file read every 2 ms): p50, p99, max.
#   resume   a generated home of ~400 MB (evi-gen-home: 2,000 sessions, the
#            big session 10 MB over two days) pushed from A; on a new device
#            B that joined, `evi sessions resume BIG --print` (it fetches the
#            big session alone), and for comparison on another new device C
#            `evi sync pull` (what resume did before: the whole history).
#   idle     `evi sync watch` on A (the ~400 MB home, pushed) with nothing
#            happening for IDLE_SECS (default 300): CPU time (utime+stime
#            from /proc) over the span as % of one core, and peak RSS
#            (VmHWM; VmRSS sampled every 5 s).
#   waiters  one server, WAITERS (default 2,000) parked long polls from 40
#            accounts (python asyncio, raw HTTP/1.1), timeout 30 s: server
#            RSS before and with all of them parked, and how many answered
#            200 when their time was up.
#
# Environment: PARTS, IDLE_SECS, WAITERS, KEEP=1 (keep the temp dir). Needs
# python3. Processes it starts are stopped by their PIDs.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
parts=${PARTS:-latency resume idle waiters}
idle_secs=${IDLE_SECS:-300}
waiters=${WAITERS:-2000}
cd "$root"
cargo build --release --quiet -p evi -p evi-server -p evi-tests
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
evi="$target/release/evi"
server="$target/release/evi-server"
gen="$target/release/evi-gen-home"

work=$(mktemp -d "${TMPDIR:-/tmp}/evi-watch-bench.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do
    kill "$p" 2> /dev/null || true
    wait "$p" 2> /dev/null || true
  done
  if [[ ${KEEP:-0} == 1 ]]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
ulimit -n 20000 2> /dev/null || true

export EVI_SYNC_PASSWORD="bench password 1" EVI_KEY_PASSPHRASE="bench passphrase"

# start_server NAME [FLAGS…]: sets $url and $server_pid (on $LISTEN if set).
start_server() {
  local name=$1
  shift
  mkfifo "$work/$name.fifo"
  "$server" --listen "${LISTEN:-127.0.0.1:0}" --registration open --data "$work/$name" "$@" \
    > "$work/$name.fifo" 2> "$work/$name.log" &
  server_pid=$!
  pids+=("$server_pid")
  exec 3< "$work/$name.fifo"
  local line
  read -r line <&3
  url="http://${line#listening on }"
  # Keep the pipe drained.
  cat <&3 > /dev/null &
  pids+=($!)
  exec 3<&-
}

# device NAME: an empty home; `first` inits, others join with its identity.
device() {
  mkdir -p "$work/$1"
  echo "$work/$1/evi"
}
evi_in() {
  local home=$1
  shift
  EVI_HOME=$home HOME=$(dirname "$home") "$evi" "$@"
}
join() {
  local first=$1 home=$2 name=$3
  mkdir -p "$home/sync"
  cp "$first/sync/identity.txt" "$home/sync/identity.txt"
  chmod 600 "$home/sync/identity.txt"
  evi_in "$home" sync login --server "$url" --user bench --device "$name" > /dev/null 2>&1
}

# start_watch HOME LOG: sets $watch_pid once it said it started.
start_watch() {
  EVI_HOME=$1 HOME=$(dirname "$1") "$evi" sync watch --json > "$2" 2> "$2.stderr" &
  watch_pid=$!
  pids+=("$watch_pid")
  for _ in $(seq 200); do
    grep -q '"started"' "$2" 2> /dev/null && return
    sleep 0.05
  done
  echo "the watcher did not start: $(cat "$2.stderr")" >&2
  exit 1
}

secs() { python3 -c 'import sys,time; print(f"{time.time():.3f}")'; }

if [[ " $parts " == *" latency "* ]]; then
  start_server lat
  a=$(device lat-a)
  b=$(device lat-b)
  evi_in "$a" sync init --server "$url" --user bench --device laptop > /dev/null 2>&1
  join "$a" "$b" desktop
  start_watch "$a" "$work/lat-a.jsonl"
  wa=$watch_pid
  start_watch "$b" "$work/lat-b.jsonl"
  wb=$watch_pid
  python3 - "$a" "$b" << 'EOF'
import datetime, os, random, statistics, sys, threading, time
a, b = sys.argv[1], sys.argv[2]
day = datetime.datetime.now().strftime("%Y-%m-%d")
session = "01JBENCHLATENCY0000000000"
src = os.path.join(a, "transcripts", day, session + ".jsonl")
dst = os.path.join(b, "transcripts", day, session + ".jsonl")
os.makedirs(os.path.dirname(src), exist_ok=True)
n = 200
sent, seen = {}, {}
done = threading.Event()
def reader():
    pos, buf = 0, b""
    while not done.is_set():
        try:
            with open(dst, "rb") as f:
                f.seek(pos)
                chunk = f.read()
        except FileNotFoundError:
            chunk = b""
        now = time.monotonic()
        if chunk:
            pos += len(chunk)
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for l in lines:
                i = l.find(b"bench line ")
                if i >= 0:
                    k = int(l[i + 11:].split(b'"')[0])
                    seen.setdefault(k, now)
        if len(seen) >= n:
            return
        time.sleep(0.002)
t = threading.Thread(target=reader)
t.start()
rng = random.Random(13)
for k in range(n):
    ts = datetime.datetime.now(datetime.timezone.utc).isoformat()
    line = '{"role":"assistant","content":"bench line %d","ts":"%s"}\n' % (k, ts)
    with open(src, "a") as f:
        f.write(line)
    sent[k] = time.monotonic()
    time.sleep(rng.uniform(0.3, 0.9))
t.join(timeout=60)
done.set()
lat = sorted(seen[k] - sent[k] for k in sent if k in seen)
missing = n - len(lat)
q = statistics.quantiles(lat, n=100) if len(lat) > 1 else lat * 99
print(f"latency: {len(lat)} of {n} lines arrived; p50 {q[49]:.3f} s, p99 {q[98]:.3f} s, max {lat[-1]:.3f} s, min {lat[0]:.3f} s" + (f"; {missing} MISSING" if missing else ""))
EOF
  kill "$wa" "$wb" "$server_pid" 2> /dev/null || true
fi

if [[ " $parts " == *" resume "* || " $parts " == *" idle "* ]]; then
  start_server big
  a=$(device big-a)
  echo "generating a ~400 MB home ..." >&2
  "$gen" "$a" --sessions 2000 --total-mb 400 --big-mb 10 --lognormal-lines --tool-pct 55 > "$work/gen.txt"
  big=$(sed -n 's/^big_session=//p' "$work/gen.txt")
  size=$(du -sm "$a/transcripts" | cut -f1)
  bigsize=$(find "$a/transcripts" -name "$big.jsonl" -printf '%s\n' | awk '{s += $1} END {printf "%.1f", s / 1e6}')
  evi_in "$a" sync init --server "$url" --user bench --device laptop > /dev/null 2>&1
  t0=$(secs)
  evi_in "$a" sync push > /dev/null
  t1=$(secs)
  echo "resume: home ${size} MB of transcripts, big session $big ${bigsize} MB; first push $(python3 -c "print(f'{$t1-$t0:.2f}')") s"
fi

if [[ " $parts " == *" resume "* ]]; then
  b=$(device big-b)
  c=$(device big-c)
  join "$a" "$b" desktop
  join "$a" "$c" tablet
  sync
  t0=$(secs)
  evi_in "$b" sessions resume "$big" --print > "$work/resumed.json" 2> "$work/resume.stderr"
  t1=$(secs)
  msgs=$(python3 -c "import json; print(len(json.load(open('$work/resumed.json'))['messages']))")
  held=$(find "$b/transcripts" -name "*.jsonl" | wc -l)
  sync
  t2=$(secs)
  evi_in "$c" sync pull > /dev/null
  t3=$(secs)
  echo "resume: \`sessions resume BIG --print\` on a new device $(python3 -c "print(f'{$t1-$t0:.2f}')") s ($msgs messages, $held files fetched); whole pull on another new device $(python3 -c "print(f'{$t3-$t2:.2f}')") s"
fi

if [[ " $parts " == *" idle "* ]]; then
  start_watch "$a" "$work/idle-a.jsonl"
  w=$watch_pid
  # Let its start-up catch-up (a push and a pull with nothing to do) pass.
  sleep 10
  tck=$(getconf CLK_TCK)
  cpu() { awk '{print $14 + $15}' "/proc/$w/stat"; }
  c0=$(cpu)
  t0=$(secs)
  peak=0
  end=$((SECONDS + idle_secs))
  while ((SECONDS < end)); do
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$w/status")
    ((rss > peak)) && peak=$rss
    sleep 5
  done
  c1=$(cpu)
  t1=$(secs)
  hwm=$(awk '/VmHWM/ {print $2}' "/proc/$w/status")
  python3 -c "
cpu = ($c1 - $c0) / $tck
span = $t1 - $t0
print(f'idle: {span:.0f} s watched, CPU {cpu:.2f} s = {100 * cpu / span:.3f}% of one core; RSS peak sampled {$peak / 1024:.1f} MiB, VmHWM {$hwm / 1024:.1f} MiB; events: ' + str(sum(1 for _ in open('$work/idle-a.jsonl'))) + ' lines')"
  kill "$w" 2> /dev/null || true
fi

if [[ " $parts " == *" waiters "* ]]; then
  mport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  # All the waits come from 127.0.0.1: lift the per-address connection bound
  # (the server fits the totals to the descriptor limit and logs them).
  wflags=(--max-waiters 100000 --max-waiters-per-user 1000 --wait-rate-per-device 1000000
    --auth-rate-per-ip 100000 --max-connections 100000 --max-connections-per-ip 100000
    --metrics-listen "127.0.0.1:$mport")
  start_server waits "${wflags[@]}"
  # 40 accounts; then a fresh start, so the RSS measured is not what the
  # 40 argon2id hashes of registering left in the allocator.
  python3 - "$url" > "$work/tokens" << 'EOF2'
import json, sys, urllib.request
url = sys.argv[1]
for u in range(40):
    body = json.dumps({"user": f"w{u}", "password": "bench password 1", "device": "d"}).encode()
    req = urllib.request.Request(url + "/api/v1/register", body, {"Content-Type": "application/json"})
    print(json.load(urllib.request.urlopen(req))["token"])
EOF2
  port=${url##*:}
  kill "$server_pid"
  wait "$server_pid" 2> /dev/null || true
  rm -f "$work/waits.fifo"
  LISTEN=127.0.0.1:$port start_server waits "${wflags[@]}"
  python3 - "$url" "$waiters" "$server_pid" "$mport" "$work/tokens" << 'EOF'
import asyncio, sys, time, urllib.request
url, n, pid, mport = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
tokens = open(sys.argv[5]).read().split()
users = len(tokens)
host, port = url.removeprefix("http://").split(":")
def rss(field):
    for l in open(f"/proc/{pid}/status"):
        if l.startswith(field):
            return int(l.split()[1]) / 1024
def parked():
    text = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics").read().decode()
    return float(next(l.split()[1] for l in text.splitlines() if l.startswith("evi_server_waiters ")))
async def one(i):
    r, w = await asyncio.open_connection(host, int(port))
    tok = tokens[i % users]
    w.write(f"GET /api/v1/records/wait?after=0&timeout=30 HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {tok}\r\n\r\n".encode())
    await w.drain()
    status = (await r.readline()).split()[1]
    w.close()
    return status
async def main():
    base = rss("VmRSS")
    t0 = time.monotonic()
    tasks = []
    for i in range(n):
        tasks.append(asyncio.create_task(one(i)))
        if i % 100 == 99:
            await asyncio.sleep(0.05)
    while parked() < n and time.monotonic() - t0 < 60:
        await asyncio.sleep(0.5)
    held = parked()
    at = rss("VmRSS")
    statuses = await asyncio.gather(*tasks, return_exceptions=True)
    ok = sum(1 for s in statuses if s == b"200")
    print(f"waiters: {held:.0f} parked at once ({n} asked); server RSS {base:.1f} MiB before, {at:.1f} MiB with them parked, VmHWM {rss('VmHWM'):.1f} MiB; {ok} of {n} answered 200 at their timeout, {n - ok} errors")
asyncio.run(main())
EOF
fi
