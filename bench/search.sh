#!/usr/bin/env bash
# Benchmark of `evi sessions search` and its index (issue 28) on the bench
# home: the same evi-gen-home defaults as bench/sync.sh (2,000 sessions,
# 348 MB of transcripts) unless GEN_ARGS overrides them.
#
#   bench/search.sh [HOME_DIR]
#
# Copies the home to a temp dir (the generated one is never written), then:
#
#   1. index build from scratch: the first `evi sessions search` (wall, peak
#      RSS from /usr/bin/time -v), and the index size against the
#      transcripts';
#   2. a no-op search (nothing new: a stat per file), median of RUNS;
#   3. incremental: one line appended to the newest file of 10 sessions, then
#      one search (update + query);
#   4. query latency, whole `evi` process each time, RUNS runs each: a common
#      word, a phrase, a rare word (one of the 10 new lines); p50 and p99.
#
# Environment: RUNS (default 50), GEN_ARGS, KEEP=1 (keep the temp dir).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
runs=${RUNS:-50}
gen_defaults="--sessions 2000 --total-mb 348 --lognormal-lines --tool-pct 55 --huge-lines 4"
cd "$root"
cargo build --release --quiet -p evi -p evi-tests
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
evi="$target/release/evi"
gen="$target/release/evi-gen-home"
# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"
bench_work evi-search-bench

home=${1:-$work/gen}
if [[ ! -f "$home/gen-home.txt" ]]; then
  echo "generating $home ..." >&2
  # shellcheck disable=SC2086
  "$gen" "$home" $gen_defaults ${GEN_ARGS:-} >&2
fi
h=$work/home
mkdir -p "$h"
cp -a "$home/transcripts" "$h/transcripts"
export EVI_HOME=$h NO_COLOR=1

ms() { date +%s%N; }
# pct FILE P: the P-th percentile (nearest rank) of the numbers in FILE.
pct() { sort -n "$1" | awk -v p="$2" '{a[NR]=$1} END {i=int((p/100)*NR+0.999); if (i<1) i=1; printf "%.1f", a[i]}'; }
# timed OUT ARGS...: appends the wall time of one search in ms to OUT.
timed() {
  local out=$1; shift
  local t0 t1
  t0=$(ms); "$evi" sessions search "$@" > /dev/null; t1=$(ms)
  awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f\n", (b-a)/1e6}' >> "$out"
}

sync
/usr/bin/time -v "$evi" sessions search cargo > /dev/null 2> "$work/build.time"
build_s=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$work/build.time" | awk -F: '{print $(NF-1)*60+$NF}')
build_rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$work/build.time")
home_bytes=$(find "$h/transcripts" -type f -printf '%s\n' | awk '{s+=$1} END {print s}')
index_bytes=$(find "$h/sync" -name 'search.db*' -type f -printf '%s\n' | awk '{s+=$1} END {print s}')

for _ in $(seq 5); do timed "$work/noop" cargo; done

# 10 new lines, one word in them that is nowhere else.
find "$h/transcripts" -name '*.jsonl' -printf '%T@ %p\n' | sort -rn > "$work/newest"
head -10 "$work/newest" | cut -d' ' -f2- |
  while read -r f; do
    printf '{"role":"user","content":"the quetzalcoatl migration, once more","ts":"%s"}\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >> "$f"
  done
sync
t0=$(ms); "$evi" sessions search quetzalcoatl > "$work/inc.out"; t1=$(ms)
inc_ms=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", (b-a)/1e6}')
inc_hits=$(grep -c quetzalcoatl "$work/inc.out" || true)

for _ in $(seq "$runs"); do
  timed "$work/word" cargo
  timed "$work/phrase" '"cargo test"'
  timed "$work/rare" quetzalcoatl
done
query_rss=$( { /usr/bin/time -v "$evi" sessions search cargo > /dev/null; } 2>&1 | sed -n 's/.*Maximum resident set size (kbytes): //p')

awk -v hb="$home_bytes" -v ib="$index_bytes" -v bs="$build_s" -v br="$build_rss" \
  -v inc="$inc_ms" -v hits="$inc_hits" -v qr="$query_rss" -v noop="$(pct "$work/noop" 50)" \
  -v w50="$(pct "$work/word" 50)" -v w99="$(pct "$work/word" 99)" \
  -v p50="$(pct "$work/phrase" 50)" -v p99="$(pct "$work/phrase" 99)" \
  -v r50="$(pct "$work/rare" 50)" -v r99="$(pct "$work/rare" 99)" -v runs="$runs" 'BEGIN {
  printf "| step | figure | target |\n|---|---|---|\n"
  printf "| home (transcripts) | %.1f MB | |\n", hb/1e6
  printf "| index build from scratch (first search) | %.1f s, peak RSS %.0f MB | |\n", bs, br/1024
  printf "| index size | %.1f MB = %.1f %% of the home | < 40 %% |\n", ib/1e6, 100*ib/hb
  printf "| no-op search (stat per file + query), median of 5 | %s ms | |\n", noop
  printf "| incremental: 10 new lines, then one search (update + query) | %s ms (%d hits) | < 100 ms |\n", inc, hits
  printf "| query, one word (`cargo`), %d runs | p50 %s ms, p99 %s ms | p99 < 50 ms |\n", runs, w50, w99
  printf "| query, phrase (`\"cargo test\"`), %d runs | p50 %s ms, p99 %s ms | p99 < 50 ms |\n", runs, p50, p99
  printf "| query, rare word, %d runs | p50 %s ms, p99 %s ms | p99 < 50 ms |\n", runs, r50, r99
  printf "| peak RSS of a search | %.0f MB | |\n", qr/1024
}'
