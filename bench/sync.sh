#!/usr/bin/env bash
# Benchmark of `evi sync` push and pull on a generated eVi home, against a
# real evi-server on loopback.
#
#   bench/sync.sh [HOME_DIR]
#
# Builds release, generates a home of 2,000 sessions / 300 MB with
# evi-gen-home in HOME_DIR if given (reused when it already holds a generated
# home) or in a temp dir, and adds a checkpoint journal (200 blobs of
# 10-200 KB) unless it has one. The home itself is never synced: each run
# copies it (cp -a) to a temp dir as device A, so no sync/ folder is left in
# it. Then, with a fresh evi-server (--registration open, temp data folder):
#
#   1. initial push on A           4. fresh pull on B (empty home that joined
#   2. no-op push on A (median)       with A's exported key)
#   3. incremental push on A       5. pull on A right after its push (it
#      (one line appended to the      downloads its own records back)
#      newest file of 10 sessions)
#
# each under /usr/bin/time (wall, peak RSS), then checks that B's transcripts
# are byte-identical to A's and B's copy of A's journal and blobs to A's,
# prints a table and writes it into bench/RESULTS.md (section "## sync",
# between the generated-block markers). The server is stopped by its PID.
#
# Environment: RUNS (no-op push repetitions, default 5), GEN_ARGS (extra
# evi-gen-home options), KEEP=1 (keep the temp dir), NO_RESULTS=1 (do not
# touch bench/RESULTS.md), EVI_BIN_DIR (take evi and evi-server from there).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
runs=${RUNS:-5}
cmdline="bench/sync.sh${*:+ $*}"
[[ -n ${RUNS:-} ]] && cmdline="RUNS=$RUNS $cmdline"
[[ -n ${GEN_ARGS:-} ]] && cmdline="GEN_ARGS=\"$GEN_ARGS\" $cmdline"
cd "$root"

cargo build --release --quiet -p evi -p evi-server -p evi-tests
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
# EVI_BIN_DIR: take evi and evi-server from there instead (an older build,
# to compare one run against another on the same home).
evi="${EVI_BIN_DIR:-$target/release}/evi"
server="${EVI_BIN_DIR:-$target/release}/evi-server"
gen="$target/release/evi-gen-home"

work=$(mktemp -d "${TMPDIR:-/tmp}/evi-sync-bench.XXXXXX")
server_pid=
cleanup() {
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
trap cleanup EXIT

if [[ $# -ge 1 ]]; then
  home=$1
else
  home=$work/gen
fi
if [[ ! -f "$home/gen-home.txt" ]]; then
  echo "generating $home ..." >&2
  # shellcheck disable=SC2086
  "$gen" "$home" ${GEN_ARGS:-} >&2
fi
if [[ -e "$home/sync" ]]; then
  echo "$home/sync exists: this script never syncs the generated home itself; remove it" >&2
  exit 1
fi

# The checkpoint journal: 200 blobs of 10-200 KB (half source-like text,
# half random bytes, seeded), one journal line each.
if [[ ! -f "$home/checkpoints/journal.jsonl" ]]; then
  echo "adding a checkpoint journal to $home ..." >&2
  python3 - "$home/checkpoints" << 'EOF'
import datetime, hashlib, json, os, random, sys
root = sys.argv[1]
os.makedirs(os.path.join(root, "blobs"), exist_ok=True)
rng = random.Random(42)
words = ("let mut fn impl struct pub use match Some None Ok Err self return "
         "async await loop for while if else where trait enum const").split()
t = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=6)
lines = []
for seq in range(1, 201):
    size = rng.randint(10_000, 200_000)
    if seq % 2:
        text, n = [], 0
        while n < size:
            w = " ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
            line = "    " * rng.randint(0, 3) + w + f" // {rng.randrange(1 << 32):08x}\n"
            text.append(line)
            n += len(line)
        data = "".join(text).encode()[:size]
    else:
        data = rng.randbytes(size)
    sha = hashlib.sha256(data).hexdigest()
    with open(os.path.join(root, "blobs", sha), "wb") as f:
        f.write(data)
    t += datetime.timedelta(seconds=rng.randint(30, 2400))
    lines.append(json.dumps({
        "seq": seq,
        "ts": t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z",
        "path": f"/home/dev/proj/src/mod{seq % 37}/file{seq}.rs",
        "op": "write", "blob": sha, "size": size,
    }, separators=(",", ":")))
with open(os.path.join(root, "journal.jsonl"), "w") as f:
    f.write("\n".join(lines) + "\n")
EOF
fi

a=$work/a
b=$work/b
data=$work/server-data
mkdir -p "$b" "$data"
cp -a "$home" "$a"
rm -f "$a/gen-home.txt"

# The server, on a free loopback port.
"$server" --listen 127.0.0.1:0 --data "$data" --registration open > "$work/server.out" 2> "$work/server.err" &
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
url=http://$addr
export EVI_SYNC_PASSWORD=bench-password-123 EVI_KEY_PASSPHRASE=bench-passphrase-123
EVI_HOME=$a "$evi" sync init --server "$url" --user bench --device a > /dev/null

rows=()
# measure LABEL HOME CMD...: one timed run; prints the command's stdout on
# stderr (its summary) and appends a table row.
measure() {
  local label=$1 h=$2
  shift 2
  local tf=$work/time
  if ! EVI_HOME=$h /usr/bin/time -o "$tf" -f '%e s %M KiB' "$@" > "$tf.out" 2> "$tf.err"; then
    echo "failed: $*" >&2
    cat "$tf.err" >&2
    exit 1
  fi
  local wall kib
  read -r wall _ kib _ < "$tf"
  echo "$label: $(tr '\n' ' ' < "$tf.out")" >&2
  rows+=("$(printf '| %-52s | %7.2f | %7.1f |' "$label" "$wall" "$(awk "BEGIN{print $kib/1024}")")")
}

measure "1. initial push (A)" "$a" "$evi" sync push

# No-op push: RUNS runs, median wall, largest RSS.
walls=() rss=0
for _ in $(seq "$runs"); do
  EVI_HOME=$a /usr/bin/time -o "$work/time" -f '%e s %M KiB' "$evi" sync push > "$work/noop.out"
  read -r wall _ kib _ < "$work/time"
  walls+=("$wall")
  ((kib > rss)) && rss=$kib
done
echo "2. no-op push: $(tr '\n' ' ' < "$work/noop.out")" >&2
median=$(printf '%s\n' "${walls[@]}" | sort -n | sed -n "$(((runs + 1) / 2))p")
rows+=("$(printf '| %-52s | %7.2f | %7.1f |' "2. no-op push (A, median of $runs)" "$median" "$(awk "BEGIN{print $rss/1024}")")")

# One complete line appended to the newest file of the 10 most recently
# active sessions.
mapfile -t touched < <(find "$a/transcripts" -name '*.jsonl' -printf '%T@ %f %p\n' |
  sort -rn | awk '!seen[$2]++ { print $3 }' | head -n 10)
ts=$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)
for f in "${touched[@]}"; do
  printf '{"role":"user","content":"bench: one more line","ts":"%s"}\n' "$ts" >> "$f"
done
measure "3. incremental push (A, 1 line in 10 sessions)" "$a" "$evi" sync push

measure "5. pull on A right after its own push" "$a" "$evi" sync pull

EVI_HOME=$a "$evi" sync key export -o "$work/key.age" > /dev/null 2> "$work/key.err"
EVI_HOME=$b "$evi" sync key import "$work/key.age" > /dev/null
EVI_HOME=$b "$evi" sync login --server "$url" --user bench --device b > /dev/null
measure "4. fresh pull (B, empty home)" "$b" "$evi" sync pull

# Row order as numbered.
rows=("${rows[0]}" "${rows[1]}" "${rows[2]}" "${rows[4]}" "${rows[3]}")

server_kib=$(du -sk "$data" | cut -f1)
home_mb=$(du -sm "$a/transcripts" | cut -f1)
blobs=$(find "$a/checkpoints/blobs" -type f | wc -l)

# B must hold A's transcripts byte for byte, and A's journal and blobs.
diff -r "$a/transcripts" "$b/transcripts"
# A's journal lands in devices/<name>-<short device id>/ (devices/<name>/
# from builds before journals were named by device id).
pulled_journal=$(find "$b/checkpoints/devices" -name journal.jsonl | head -n 1)
cmp "$a/checkpoints/journal.jsonl" "$pulled_journal"
diff -r "$a/checkpoints/blobs" "$b/checkpoints/blobs"
echo "B's transcripts, journal and blobs are identical to A's" >&2

kill "$server_pid"
wait "$server_pid" 2> /dev/null || true
server_pid=

load=$(cut -d' ' -f1-3 /proc/loadavg)
machine="$(nproc) cores, $(uname -sr), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), load average $load at the end"
table=$(
  echo "| step | wall s | peak RSS MiB |"
  echo "|---|---:|---:|"
  printf '%s\n' "${rows[@]}"
)
server_line="Server data folder after all pushes: $(awk "BEGIN{printf \"%.1f\", $server_kib/1024}") MiB (transcripts ${home_mb} MiB + ${blobs} checkpoint blobs)."

sed 's/^/# /' "$home/gen-home.txt"
echo "# $machine"
echo "$table"
echo "$server_line"

if [[ ${NO_RESULTS:-0} != 1 ]]; then
  block=$(
    echo "<!-- bench/sync.sh: generated block, replaced on each run -->"
    echo
    echo "Command: \`$cmdline\`, release build of commit $(git rev-parse --short HEAD)$(git diff --quiet -- cli/src server/src || echo ' (with uncommitted changes in cli/src or server/src)')."
    echo
    echo "Machine: $machine. Home: $(sed -n 's/^\(sessions=[^ ]* files=[^ ]* lines=[^ ]* bytes=[^ ]*\).*/\1/p' "$home/gen-home.txt"), plus $blobs checkpoint blobs."
    echo
    echo "$table"
    echo
    echo "$server_line"
    echo
    echo "<!-- end of generated block -->"
  )
  python3 - "$root/bench/RESULTS.md" "$block" << 'EOF'
import re, sys
path, block = sys.argv[1], sys.argv[2]
text = open(path).read()
begin, end = "<!-- bench/sync.sh: generated block", "<!-- end of generated block -->"
if begin in text:
    i = text.index(begin)
    j = text.index(end, i) + len(end)
    text = text[:i] + block + text[j:]
elif re.search(r"^## sync$", text, re.M):
    m = re.search(r"^## sync$", text, re.M)
    text = text[:m.end()] + "\n\n" + block + "\n" + text[m.end():]
else:
    text = text.rstrip("\n") + "\n\n## sync\n\n" + block + "\n"
open(path, "w").write(text)
EOF
  echo "wrote bench/RESULTS.md (section \"## sync\")" >&2
fi
