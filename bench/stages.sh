#!/usr/bin/env bash
# Where the CPU of a first push and a fresh pull goes, by stage (issue 10:
# "CPU seconds per MB at each stage").
#
#   bench/stages.sh HOME        # HOME: a generated home, e.g. the one bench/sync.sh keeps
#
# Builds evi and evi-server with symbols (release, not stripped, line tables)
# into target/stages (or $STAGES_TARGET), starts a fresh evi-server on loopback, pushes a copy of
# HOME from device A and pulls it on an empty device B, each under `perf
# record` (client) while a second `perf record` follows the server. Each
# sample is put in a stage by its symbol (zstd, age's ChaCha20-Poly1305,
# SHA-256/HMAC, JSON, memory copies and the allocator, the kernel: file and
# network system calls, page faults; the rest: evi's own code, hyper,
# SQLite), and the stage's CPU seconds are the process's CPU time (from
# /usr/bin/time for the client, /proc for the server) times its share of
# samples. Prints one table per operation: CPU s and CPU s per synced MB.
# Needs perf (Debian's linux-perf).
set -euo pipefail
cd "$(dirname "$0")/.."
home=${1:?usage: bench/stages.sh HOME (a generated home, see bench/sync.sh)}
command -v perf > /dev/null || {
  echo "perf is missing: apt-get install linux-perf" >&2
  exit 1
}
# STAGES_TARGET: another target dir for the build with symbols.
tdir=${STAGES_TARGET:-$PWD/target/stages}
CARGO_PROFILE_RELEASE_STRIP=false CARGO_PROFILE_RELEASE_DEBUG=line-tables-only \
  cargo build --release --quiet -p evi -p evi-server --target-dir "$tdir"
evi=$tdir/release/evi
server=$tdir/release/evi-server

# shellcheck source=bench/lib.sh
source "$PWD/bench/lib.sh"
bench_work evi-stages
a=$work/a b=$work/b data=$work/data
mkdir -p "$a" "$b" "$data"
cp -a "$home/transcripts" "$home/checkpoints" "$a/"
synced=$(find "$a" -type f -printf '%s\n' | awk '{s += $1} END {print s / 1e6}')

start_server "$data"
url=http://$addr
export EVI_SYNC_PASSWORD=bench-password-123 EVI_KEY_PASSPHRASE=bench-passphrase-123
EVI_HOME=$a "$evi" sync init --server "$url" --user bench --device a > /dev/null
EVI_HOME=$a "$evi" sync key export -o "$work/key.age" > /dev/null
EVI_HOME=$b "$evi" sync key import "$work/key.age" > /dev/null
EVI_HOME=$b "$evi" sync login --server "$url" --user bench --device b > /dev/null

clk_tck=$(getconf CLK_TCK)
server_cpu() {
  awk -v t="$clk_tck" '{sub(/^.*\) /, ""); printf "%.3f", ($12 + $13) / t}' "/proc/$server_pid/stat"
}

# profile NAME DEVICE CMD: the client under perf, the server followed meanwhile.
profile() {
  local name=$1 dev=$2
  shift 2
  sync
  local s0
  s0=$(server_cpu)
  perf record -q -F 1999 -p "$server_pid" -o "$work/$name.server.data" 2> /dev/null &
  local perf_pid=$!
  sleep 0.5
  EVI_HOME=$dev /usr/bin/time -o "$work/$name.time" -f '%U %S' \
    perf record -q -F 1999 -o "$work/$name.client.data" -- "$evi" "$@" > /dev/null
  kill -INT "$perf_pid"
  wait "$perf_pid" 2> /dev/null || true
  echo "$(awk '{print $1 + $2}' "$work/$name.time") $(awk "BEGIN{print $(server_cpu) - $s0}")" > "$work/$name.cpu"
}
profile push "$a" sync push
profile pull "$b" sync pull

report() {
  perf report -i "$1" --no-children --sort dso,sym --stdio -q 2> /dev/null
}
for op in push pull; do
  report "$work/$op.client.data" > "$work/$op.client.txt"
  report "$work/$op.server.data" > "$work/$op.server.txt"
done

python3 - "$work" "$synced" << 'EOF'
import re, sys
work, mb = sys.argv[1], float(sys.argv[2])
# First match wins: (stage, pattern on "dso symbol").
STAGES = [
    ("kernel (I/O, page faults, network)", r"\[kernel|\[k\]"),
    ("zstd", r"zstd|ZSTD_|HUF_|FSE_"),
    ("ChaCha20-Poly1305 (age)", r"chacha|poly1305|Poly1305|ChaCha"),
    ("SHA-256 / HMAC", r"sha2|sha256|Sha256|hmac"),
    ("JSON (serde_json)", r"serde_json"),
    ("SQLite", r"sqlite3|rusqlite"),
    ("memory copy, allocator", r"memmove|memcpy|memset|malloc|_int_free|cfree|realloc|\bfree\b|alloc::|__rust_"),
]
def shares(path):
    totals, all_ = {}, 0.0
    for line in open(path):
        m = re.match(r"\s*([\d.]+)%\s+(.*)", line)
        if not m:
            continue
        pct, rest = float(m.group(1)), m.group(2)
        stage = next((s for s, p in STAGES if re.search(p, rest)), "other (evi, hyper, tokio)")
        totals[stage] = totals.get(stage, 0.0) + pct
        all_ += pct
    return {k: v / all_ for k, v in totals.items()} if all_ else {}
for op in ("push", "pull"):
    client_cpu, server_cpu = map(float, open(f"{work}/{op}.cpu").read().split())
    c, s = shares(f"{work}/{op}.client.txt"), shares(f"{work}/{op}.server.txt")
    print(f"\n{op}: client CPU {client_cpu:.2f} s, server CPU {server_cpu:.2f} s, {mb:.1f} MB synced\n")
    print("| stage | client CPU s | server CPU s | CPU ms per MB |")
    print("|---|---:|---:|---:|")
    names = [s for s, _ in STAGES] + ["other (evi, hyper, tokio)"]
    for n in names:
        cs, ss = c.get(n, 0) * client_cpu, s.get(n, 0) * server_cpu
        if cs + ss < 0.005:
            continue
        print(f"| {n} | {cs:.2f} | {ss:.2f} | {1000 * (cs + ss) / mb:.2f} |")
    total = client_cpu + server_cpu
    print(f"| **all** | {client_cpu:.2f} | {server_cpu:.2f} | {1000 * total / mb:.2f} |")
    print(f"\nOn 2 cores the CPU alone needs at least {total / 2:.2f} s of wall time for {op}.")
EOF
