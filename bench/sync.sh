#!/usr/bin/env bash
# Benchmark of `evi sync` push and pull on a generated eVi home, against a
# real evi-server on loopback, beside restic and dd on the same bytes in the
# same run (issue 10).
#
#   bench/sync.sh [HOME_DIR]
#
# Builds release, generates a home of 2,000 sessions / 348 MB of transcripts
# with evi-gen-home (log-normal line sizes, 55% of the bytes tool output, 4
# tool outputs of 2-6 MB, one 200 MB session spanning two days) in HOME_DIR if
# given (reused when it already holds a generated home) or in a temp dir, and
# adds a checkpoint journal unless it has one: one blob per line, log-normal
# sizes from 1 KB to 5 MiB (half source-like text, half random bytes), 400 of
# them (about 60 MB) for a 348 MB home, proportionally fewer for a smaller
# one. The home itself is never synced: each run copies it (cp -a) to a temp
# dir as device A, so no sync/ folder is left in it. Then, with a fresh
# evi-server (--registration open, temp data folder):
#
#   1. initial push on A           4. fresh pull on B (empty home that joined
#   2. no-op push on A (median)       with A's exported key)
#   3. incremental push on A       5. pull on A right after its push (it
#      (one line appended to the      downloads its own records back)
#      newest file of 10 sessions)
#
# and restic (Debian's package; installed with apt-get when missing and run as
# root) on a local repository in the temp dir, over the same folders of A
# (transcripts/ and checkpoints/):
#
#   R1. initial backup             R3. incremental backup (after the change
#   R2. no-op backup (median)          of step 3)
#                                  R4. restore of the latest snapshot into an
#                                      empty folder
#
# and `rsync -a` of the same two folders into an empty folder, then `sync`
# (a plain copy made durable; Debian's package, installed like restic), and
# `dd if=/dev/zero bs=1M conv=fsync` of the synced byte count, the disk's
# durable-write limit. Every step runs under /usr/bin/time (wall, user+sys
# CPU, peak RSS) after a `sync`, so none pays for the previous one's dirty
# pages; evi-server's CPU per step comes from /proc; the first push and
# the fresh pull also run under bench/busy.py (what the cores did: busy,
# idle, waiting on the disk; how many threads were runnable). The script checks that
# B's transcripts are byte-identical to A's and B's copy of A's journal and
# blobs to A's, and that restic's restore equals A's two folders; prints the
# table, the evi/restic ratios against issue 10's targets, and writes them
# into bench/RESULTS.md (section "## sync", between the generated-block
# markers). The server is stopped by its PID.
#
# Environment: RUNS (no-op repetitions, default 5), SHAPE (the home: `issue10`,
# the default above, or `issue26`: 2,000 sessions, 300 MB of transcripts, a
# 20 MB session and eight with a 2-6 MB tool output instead of one 200 MB
# session, 400 checkpoint blobs; give each shape its own HOME_DIR), GEN_ARGS
# (evi-gen-home options, after the shape's, so they override sizes), KEEP=1 (keep
# the temp dir), NO_RESULTS=1 (do not touch bench/RESULTS.md), EVI_BIN_DIR
# (take evi and evi-server from there).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
runs=${RUNS:-5}
cmdline="bench/sync.sh${*:+ $*}"
[[ -n ${RUNS:-} ]] && cmdline="RUNS=$RUNS $cmdline"
[[ -n ${GEN_ARGS:-} ]] && cmdline="GEN_ARGS=\"$GEN_ARGS\" $cmdline"
shape=${SHAPE:-issue10}
[[ -n ${SHAPE:-} ]] && cmdline="SHAPE=$SHAPE $cmdline"
blob_count=
case $shape in
  # The home issue 10 measured: 2,000 sessions, 348 MB of transcripts.
  issue10) gen_defaults="--sessions 2000 --total-mb 348 --lognormal-lines --tool-pct 55 --huge-lines 4" ;;
  # Issue 26's: 2,000 sessions, 300 MB, a few large sessions, 400 blobs.
  issue26)
    gen_defaults="--sessions 2000 --total-mb 300 --big-mb 20 --lognormal-lines --tool-pct 55 --huge-lines 8"
    blob_count=400
    ;;
  *)
    echo "SHAPE is issue10 or issue26, not $shape" >&2
    exit 2
    ;;
esac
cd "$root"

for tool in restic rsync; do
  command -v "$tool" > /dev/null && continue
  if [[ $(id -u) == 0 ]] && command -v apt-get > /dev/null; then
    echo "installing $tool (apt-get install -y $tool) ..." >&2
    apt-get install -y "$tool" > /dev/null || { apt-get update > /dev/null && apt-get install -y "$tool" > /dev/null; }
  else
    echo "$tool is missing: install it (sudo apt-get install $tool) and run again" >&2
    exit 1
  fi
done

cargo build --release --quiet -p evi -p evi-server -p evi-tests
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
# EVI_BIN_DIR: take evi and evi-server from there instead (an older build,
# to compare one run against another on the same home).
evi="${EVI_BIN_DIR:-$target/release}/evi"
server="${EVI_BIN_DIR:-$target/release}/evi-server"
gen="$target/release/evi-gen-home"

# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"
bench_work evi-sync-bench

if [[ $# -ge 1 ]]; then
  home=$1
else
  home=$work/gen
fi
if [[ ! -f "$home/gen-home.txt" ]]; then
  echo "generating $home ..." >&2
  # shellcheck disable=SC2086
  "$gen" "$home" $gen_defaults ${GEN_ARGS:-} >&2
fi
if [[ -e "$home/sync" ]]; then
  echo "$home/sync exists: this script never syncs the generated home itself; remove it" >&2
  exit 1
fi

# The checkpoint journal: log-normal blob sizes (median 36 KB, 1 KB to
# 5 MiB), half source-like text, half random bytes, seeded; 400 blobs per
# 348 MB of transcripts (at least 20), one journal line each.
if [[ ! -f "$home/checkpoints/journal.jsonl" ]]; then
  echo "adding a checkpoint journal to $home ..." >&2
  transcript_bytes=$(find "$home/transcripts" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
  # shellcheck disable=SC2086 # no count: add_journal.py's own
  python3 "$root/bench/add_journal.py" "$home/checkpoints" "$transcript_bytes" $blob_count
fi

a=$work/a
b=$work/b
data=$work/server-data
mkdir -p "$b" "$data"
cp -a "$home" "$a"
rm -f "$a/gen-home.txt"

# What evi syncs and restic backs up: A's transcripts/ and checkpoints/.
synced_bytes=$(find "$a/transcripts" "$a/checkpoints" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
synced_mb=$(awk "BEGIN{printf \"%.1f\", $synced_bytes / 1e6}")

# The server, on a free loopback port.
start_server "$data"
url=http://$addr
export EVI_SYNC_PASSWORD=bench-password-123 EVI_KEY_PASSPHRASE=bench-passphrase-123
EVI_HOME=$a "$evi" sync init --server "$url" --user bench --device a > /dev/null

export RESTIC_REPOSITORY=$work/restic RESTIC_PASSWORD=bench-password-123 RESTIC_CACHE_DIR=$work/restic-cache
restic init > "$work/restic-init.out" 2>&1 || {
  cat "$work/restic-init.out" >&2
  exit 1
}
restic_version=$(restic version | awk '{print $2}')
restic_repo_version=$(restic cat config 2> /dev/null | sed -n 's/.*"version": *\([0-9]*\).*/\1/p')

clk_tck=$(getconf CLK_TCK)
# Server CPU seconds so far (user + system), 0 once it is stopped.
server_cpu() {
  if [[ -n $server_pid && -r /proc/$server_pid/stat ]]; then
    awk -v t="$clk_tck" '{sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / t}' "/proc/$server_pid/stat"
  else
    echo 0
  fi
}

# Per step (by key): wall s, CPU s (user + sys), peak RSS KiB, server CPU s.
declare -A wall cpu rss srv
# timed [-q] KEY CMD...: one run after a `sync`, under /usr/bin/time; the
# command's stdout goes to $work/KEY.out (its tail is shown unless -q), its
# stderr to $work/KEY.err (shown on failure).
timed() {
  local quiet=0
  if [[ $1 == -q ]]; then
    quiet=1
    shift
  fi
  local key=$1
  shift
  local tf=$work/$key.time s0 s1
  sync
  s0=$(server_cpu)
  if ! /usr/bin/time -o "$tf" -f '%e %U %S %M' "$@" > "$work/$key.out" 2> "$work/$key.err"; then
    echo "failed: $*" >&2
    cat "$work/$key.err" >&2
    exit 1
  fi
  s1=$(server_cpu)
  local w u s k
  read -r w u s k < "$tf"
  wall[$key]=$w
  cpu[$key]=$(awk "BEGIN{printf \"%.2f\", $u + $s}")
  rss[$key]=$k
  srv[$key]=$(awk "BEGIN{printf \"%.2f\", $s1 - $s0}")
  if [[ $quiet == 0 ]]; then
    echo "$key: ${wall[$key]} s; $(tail -n 3 "$work/$key.out" | tr '\n' ' ')" >&2
  fi
}
# timed_median KEY CMD...: RUNS runs; median wall, median CPU, largest RSS,
# median server CPU.
timed_median() {
  local key=$1
  shift
  local ws=() cs=() ss=() r=0 i
  for i in $(seq "$runs"); do
    timed -q "$key.$i" "$@"
    ws+=("${wall[$key.$i]}")
    cs+=("${cpu[$key.$i]}")
    ss+=("${srv[$key.$i]}")
    if ((rss[$key.$i] > r)); then r=${rss[$key.$i]}; fi
  done
  local mid=$(((runs + 1) / 2))
  wall[$key]=$(printf '%s\n' "${ws[@]}" | sort -n | sed -n "${mid}p")
  cpu[$key]=$(printf '%s\n' "${cs[@]}" | sort -n | sed -n "${mid}p")
  srv[$key]=$(printf '%s\n' "${ss[@]}" | sort -n | sed -n "${mid}p")
  rss[$key]=$r
  echo "$key (median of $runs): ${wall[$key]} s; last run: $(tail -n 3 "$work/$key.$runs.out" | tr '\n' ' ')" >&2
}

# The first push and the fresh pull run under bench/busy.py, which tells
# what the cores did meanwhile (its sampling, every 10 ms, is in their CPU s).
busy=(python3 "$root/bench/busy.py" --also "$server_pid" --)
timed push1 "${busy[@]}" env EVI_HOME="$a" "$evi" sync push
evi_data_bytes=$(du -sb "$data" | cut -f1)
# Of which SQLite's write-ahead log (checkpointed into the database later).
evi_wal_bytes=$(find "$data" -name '*-wal' -printf '%s\n' | awk '{s += $1} END {print s + 0}')
timed_median push2 env EVI_HOME="$a" "$evi" sync push

timed backup1 restic backup --host bench "$a/transcripts" "$a/checkpoints"
restic_repo_bytes=$(du -sb "$RESTIC_REPOSITORY" | cut -f1)
timed_median backup2 restic backup --host bench "$a/transcripts" "$a/checkpoints"

# One complete line appended to the newest file of the 10 most recently
# active sessions; evi's incremental push and restic's incremental backup
# both see this change.
mapfile -t touched < <(find "$a/transcripts" -name '*.jsonl' -printf '%T@ %f %p\n' |
  sort -rn | awk '!seen[$2]++ { print $3 }' | head -n 10)
ts=$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)
for f in "${touched[@]}"; do
  printf '{"role":"user","content":"bench: one more line","ts":"%s"}\n' "$ts" >> "$f"
done
timed push3 env EVI_HOME="$a" "$evi" sync push
timed backup3 restic backup --host bench "$a/transcripts" "$a/checkpoints"

timed pull5 env EVI_HOME="$a" "$evi" sync pull

EVI_HOME=$a "$evi" sync key export -o "$work/key.age" > /dev/null 2> "$work/key.err"
EVI_HOME=$b "$evi" sync key import "$work/key.age" > /dev/null
EVI_HOME=$b "$evi" sync login --server "$url" --user bench --device b > /dev/null
timed pull4 "${busy[@]}" env EVI_HOME="$b" "$evi" sync pull

restored=$work/restore
timed restore4 restic restore latest --target "$restored"

# A plain copy of the same folders, made durable: what a restore costs
# with no encryption, no format and no server.
copied=$work/rsync
mkdir -p "$copied"
# shellcheck disable=SC2016 # expanded by that sh
timed rsync sh -c 'rsync -a "$1/transcripts" "$1/checkpoints" "$2/" && sync' sh "$a" "$copied"

kill "$server_pid"
wait "$server_pid" 2> /dev/null || true
server_pid=
evi_end_bytes=$(du -sb "$data" | cut -f1)
restic_end_bytes=$(du -sb "$RESTIC_REPOSITORY" | cut -f1)

# The disk's durable-write limit for the same bytes: one file, 1 MiB writes,
# one fsync at the end.
dd_count=$(((synced_bytes + 1048575) / 1048576))
timed dd dd if=/dev/zero of="$work/dd.bin" bs=1M count="$dd_count" conv=fsync
rm -f "$work/dd.bin"

home_mb=$(du -sm "$a/transcripts" | cut -f1)
blobs=$(find "$a/checkpoints/blobs" -type f | wc -l)
blob_mb=$(du -sm "$a/checkpoints/blobs" | cut -f1)

# B must hold A's transcripts byte for byte, and A's journal and blobs.
diff -r "$a/transcripts" "$b/transcripts"
# A's journal lands in devices/<name>-<short device id>/ (devices/<name>/
# from builds before journals were named by device id).
pulled_journal=$(find "$b/checkpoints/devices" -name journal.jsonl | head -n 1)
cmp "$a/checkpoints/journal.jsonl" "$pulled_journal"
diff -r "$a/checkpoints/blobs" "$b/checkpoints/blobs"
echo "B's transcripts, journal and blobs are identical to A's" >&2
# restic restores under the full path it backed up.
diff -r "$a/transcripts" "$restored$a/transcripts"
diff -r "$a/checkpoints" "$restored$a/checkpoints"
echo "restic's restore is identical to A's transcripts and checkpoints" >&2
diff -r "$a/transcripts" "$copied/transcripts"
diff -r "$a/checkpoints" "$copied/checkpoints"

# Formatting helpers.
mib() { awk "BEGIN{printf \"%.1f\", $1 / 1024}"; }
rate() { awk "BEGIN{ if ($1 < 0.005) print \"-\"; else printf \"%.0f\", $synced_bytes / 1e6 / $1 }"; }
ratio() { awk "BEGIN{ if ($2 <= 0) print \"-\"; else printf \"%.2f\", $1 / $2 }"; }
# le VALUE LIMIT: yes when VALUE is a number <= LIMIT.
le() { awk -v v="$1" -v l="$2" 'BEGIN{ print (v != "-" && v + 0 <= l + 0) ? "yes" : "no" }'; }

row() {
  local key=$1 label=$2 server_col=${3:-}
  printf '| %-52s | %7.2f | %6.2f | %7.1f | %6s | %6s |\n' "$label" "${wall[$key]}" "${cpu[$key]}" \
    "$(mib "${rss[$key]}")" "$(rate "${wall[$key]}")" "${server_col:-${srv[$key]}}"
}
table=$(
  echo "| step | wall s | CPU s | peak RSS MiB | MB/s | server CPU s |"
  echo "|---|---:|---:|---:|---:|---:|"
  row push1 "1. evi initial push (A)"
  row push2 "2. evi no-op push (A, median of $runs)"
  row push3 "3. evi incremental push (A, 1 line in 10 sessions)"
  row pull4 "4. evi fresh pull (B, empty home)"
  row pull5 "5. evi pull on A right after its own push"
  row backup1 "R1. restic initial backup" -
  row backup2 "R2. restic no-op backup (median of $runs)" -
  row backup3 "R3. restic incremental backup (same change as 3)" -
  row restore4 "R4. restic restore of the latest snapshot" -
  row rsync "rsync -a of the same folders + sync (empty folder)" -
  row dd "dd bs=1M count=$dd_count conv=fsync (same bytes)" -
)

r_push=$(ratio "${wall[push1]}" "${wall[backup1]}")
r_noop=$(ratio "${wall[push2]}" "${wall[backup2]}")
r_incr=$(ratio "${wall[push3]}" "${wall[backup3]}")
r_pull=$(ratio "${wall[pull4]}" "${wall[restore4]}")
r_dd=$(ratio "${wall[pull4]}" "${wall[dd]}")
r_rsync=$(ratio "${wall[pull4]}" "${wall[rsync]}")
r_bytes=$(ratio "$evi_data_bytes" "$restic_repo_bytes")
r_cpu_push=$(ratio "$(awk "BEGIN{print ${cpu[push1]} + ${srv[push1]}}")" "${cpu[backup1]}")
r_cpu_pull=$(ratio "$(awk "BEGIN{print ${cpu[pull4]} + ${srv[pull4]}}")" "${cpu[restore4]}")
peak_push=$(mib "$(printf '%s\n' "${rss[push1]}" "${rss[push2]}" "${rss[push3]}" | sort -n | tail -n 1)")
peak_pull=$(mib "$(printf '%s\n' "${rss[pull4]}" "${rss[pull5]}" | sort -n | tail -n 1)")
met_pull_restore=$(le "$r_pull" 0.5)
met_pull_dd=$(le "$r_dd" 1.3)
met_noop=$([[ $(le "$r_noop" 0.1) == yes && $(le "${wall[push2]}" 0.049) == yes ]] && echo yes || echo no)
met_pull=$([[ $met_pull_restore == yes || $met_pull_dd == yes ]] && echo yes || echo no)
targets=$(
  echo "| issue 10 target | evi | baseline | evi/baseline | met |"
  echo "|---|---:|---:|---:|---|"
  echo "| initial push ≤ 0.5× \`restic backup\` | ${wall[push1]} s | ${wall[backup1]} s | ${r_push}× | $(le "$r_push" 0.5) |"
  echo "| fresh pull ≤ 0.5× \`restic restore\` | ${wall[pull4]} s | ${wall[restore4]} s | ${r_pull}× | $met_pull_restore |"
  echo "| fresh pull ≤ 1.3× \`dd conv=fsync\` of the same bytes | ${wall[pull4]} s | ${wall[dd]} s | ${r_dd}× | $met_pull_dd |"
  echo "| no-op push ≤ 0.1× no-op \`backup\` and < 50 ms | ${wall[push2]} s | ${wall[backup2]} s | ${r_noop}× | $met_noop |"
  echo "| incremental push ≤ 0.1× incremental \`backup\` | ${wall[push3]} s | ${wall[backup3]} s | ${r_incr}× | $(le "$r_incr" 0.1) |"
  echo "| peak RSS of push ≤ 64 MiB | $peak_push MiB | $(mib "${rss[backup1]}") MiB | | $(le "$peak_push" 64) |"
  echo "| peak RSS of pull ≤ 64 MiB | $peak_pull MiB | $(mib "${rss[restore4]}") MiB | | $(le "$peak_pull" 64) |"
  echo "| server bytes after the initial push ≤ restic's repository | $(mib $((evi_data_bytes / 1024))) MiB | $(mib $((restic_repo_bytes / 1024))) MiB | ${r_bytes}× | $(le "$evi_data_bytes" "$restic_repo_bytes") |"
)
targets26=$(
  echo "| issue 26 target (aim 0.5×) | evi | baseline | evi/baseline | met |"
  echo "|---|---:|---:|---:|---|"
  echo "| first push ≤ 1.0× \`restic backup\` | ${wall[push1]} s | ${wall[backup1]} s | ${r_push}× | $(le "$r_push" 1.0) |"
  echo "| fresh pull ≤ 1.0× \`restic restore\` | ${wall[pull4]} s | ${wall[restore4]} s | ${r_pull}× | $(le "$r_pull" 1.0) |"
  echo "| fresh pull / \`rsync -a\` + sync (no target) | ${wall[pull4]} s | ${wall[rsync]} s | ${r_rsync}× | |"
)
notes=$(
  echo "Fresh pull target (either bound): $([[ $met_pull == yes ]] && echo met || echo "not met"). Peak RSS at 2× the home's size is a separate run (GEN_ARGS=\"--total-mb 696\")."
  echo
  echo "Where the first push's and the fresh pull's time went (bench/busy.py): push: $(grep -h '^cores\|^busy\|^a core free' "$work/push1.err" | tr '\n' ' ')pull: $(grep -h '^cores\|^busy\|^a core free' "$work/pull4.err" | tr '\n' ' ')"
  echo
  echo "Synced bytes: $synced_mb MB (transcripts $home_mb MiB + $blobs checkpoint blobs, $blob_mb MiB). MB/s is synced bytes / wall for every step (a scan rate for the no-op and incremental ones). CPU s is the client's user + system time; server CPU s is evi-server's over the same step (restic has no server). CPU evi (client + server) / restic: initial push ${r_cpu_push}×, fresh pull ${r_cpu_pull}×."
  echo
  echo "Server bytes after the initial push: evi-server's data folder $(mib $((evi_data_bytes / 1024))) MiB, of which $(mib $((evi_wal_bytes / 1024))) MiB SQLite write-ahead log; restic's repository $(mib $((restic_repo_bytes / 1024))) MiB. At the end (all pushes and backups, evi-server stopped, its log checkpointed): $(mib $((evi_end_bytes / 1024))) MiB and $(mib $((restic_end_bytes / 1024))) MiB."
  echo
  echo "restic $restic_version, repository version ${restic_repo_version:-?}, local repository on the same disk; dd writes ${dd_count} MiB of zeros to one file and fsyncs it once: $(awk "BEGIN{printf \"%.2f\", ${wall[dd]}}") s, $(rate "${wall[dd]}") MB/s."
)

load=$(cut -d' ' -f1-3 /proc/loadavg)
machine="$(nproc) cores, $(uname -sr), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(df -T "$work" | awk 'NR == 2 {print $2}') temp dir, load average $load at the end"

sed 's/^/# /' "$home/gen-home.txt"
echo "# $machine"
echo "$table"
echo
echo "$targets"
echo
echo "$targets26"
echo
echo "$notes"

if [[ ${NO_RESULTS:-0} != 1 ]]; then
  block=$(
    echo "<!-- bench/sync.sh: generated block, replaced on each run -->"
    echo
    echo "Command: \`$cmdline\`, release build of commit $(git rev-parse --short HEAD)$(git diff --quiet -- cli/src server/src || echo ' (with uncommitted changes in cli/src or server/src)')."
    echo
    echo "Machine: $machine. Home ($shape): $(sed -n 's/^\(sessions=[^ ]* files=[^ ]* lines=[^ ]* bytes=[^ ]*\).*/\1/p' "$home/gen-home.txt"), plus $blobs checkpoint blobs."
    echo
    echo "$table"
    echo
    echo "$targets"
    echo
    echo "$targets26"
    echo
    echo "$notes"
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
