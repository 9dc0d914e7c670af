#!/usr/bin/env bash
# Benchmark of the tree-aware session readers on a generated eVi home.
#
#   bench/sessions.sh [HOME_DIR]
#
# Builds release, generates a home of 2,000 sessions / 300 MB (one session of
# 200 MB spanning two days) with evi-gen-home, in HOME_DIR if given (reused
# when it already holds a generated home) or in a temp dir, and the same
# sessions in Claude Code's shape (`evi-gen-home --claude-code`) in
# HOME_DIR-claude-code (or a temp dir), read through an eVi home whose config
# turns that folder on and that holds no eVi sessions; then times each
# command RUNS times (default 5) with /usr/bin/time and prints the median wall
# time and the largest peak RSS. The page cache is warm: the home was just
# written (or read by the previous run), so this measures the reader, not the
# disk.
#
# Environment: RUNS (default 5), GEN_ARGS (extra evi-gen-home options),
# EVI (the evi binary to time instead of the one just built: another
# build's, to compare two on the same homes and machine).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
runs=${RUNS:-5}
cd "$root"

cargo build --release --quiet -p evi -p evi-tests
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
evi=${EVI:-$target/release/evi}
gen="$target/release/evi-gen-home"

if [[ $# -ge 1 ]]; then
  home=$1
  cc_home=${1%/}-claude-code
else
  home=$(mktemp -d "${TMPDIR:-/tmp}/evi-bench.XXXXXX")
  cc_home=$(mktemp -d "${TMPDIR:-/tmp}/evi-bench-cc.XXXXXX")
  trap 'rm -rf "$home" "$cc_home"' EXIT
fi
for h in "$home" "$cc_home"; do
  if [[ ! -f "$h/gen-home.txt" ]]; then
    echo "generating $h ..." >&2
    extra=
    [[ $h == "$cc_home" ]] && extra=--claude-code
    # shellcheck disable=SC2086
    "$gen" "$h" ${GEN_ARGS:-} $extra >&2
  fi
done
big=$(sed -n 's/^big_session=//p' "$home/gen-home.txt")
cc_big=$(sed -n 's/^big_session=//p' "$cc_home/gen-home.txt")
export EVI_HOME=$home COLUMNS=120

# bench LABEL CMD...: RUNS timed runs; stdout discarded, stderr checked.
bench() {
  local label=$1
  shift
  local walls=() rss=0 tf
  tf=$(mktemp)
  for _ in $(seq "$runs"); do
    if ! /usr/bin/time -o "$tf" -f '%e s %M KiB' "$@" > /dev/null 2> "$tf.err"; then
      echo "failed: $*" >&2
      cat "$tf.err" >&2
      exit 1
    fi
    read -r wall _ kib _ < "$tf"
    walls+=("$wall")
    ((kib > rss)) && rss=$kib
  done
  local median
  median=$(printf '%s\n' "${walls[@]}" | sort -n | sed -n "$(((runs + 1) / 2))p")
  rm -f "$tf" "$tf.err"
  printf '| %-44s | %9s | %9.1f |\n' "$label" "$(awk "BEGIN{printf \"%.3f\", $median}")" \
    "$(awk "BEGIN{print $rss/1024}")"
}

cat "$home/gen-home.txt" | sed 's/^/# /'
echo "# $(nproc) cores, $(uname -sr), runs=$runs, warm page cache"
echo "| command | wall s (median) | peak RSS MiB (max) |"
echo "|---|---:|---:|"
bench "sessions list" "$evi" sessions list
bench "sessions list --limit 2000" "$evi" sessions list --limit 2000
bench "sessions show BIG" "$evi" sessions show "$big"
bench "sessions export BIG -f md" "$evi" sessions export "$big" -f md
bench "sessions export BIG -f json" "$evi" sessions export "$big" -f json
bench "sessions export BIG -f html" "$evi" sessions export "$big" -f html

# The same, in Claude Code's shape.
export EVI_HOME=$cc_home
cat "$cc_home/gen-home.txt" | sed 's/^/# claude-code: /'
bench "claude-code: sessions list" "$evi" sessions list
bench "claude-code: sessions list --limit 2000" "$evi" sessions list --limit 2000
if "$evi" sessions show "$cc_big" > /dev/null 2>&1; then
  bench "claude-code: sessions show BIG" "$evi" sessions show "$cc_big"
else
  printf '| %-44s | %9s | %9s |\n' "claude-code: sessions show BIG" "n/a" "n/a"
  echo "# (evi sessions show does not read Claude Code sessions in this build)"
fi
