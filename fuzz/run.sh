#!/usr/bin/env bash
# Runs every cargo-fuzz target (or those named) for FUZZ_SECONDS (60) each
# on the nightly toolchain, and prints each one's executions. New inputs go
# to work/<target>/ (ignored by git); the committed seeds in corpus/<target>/
# are read, never written. `./run.sh --merge [TARGET…]` instead folds what
# work/ found into corpus/ as a small set with the same edge coverage (hit
# counts aside, which would keep thousands of files).
# A crash leaves its input in artifacts/<target>/ and fails the script.
set -euo pipefail
cd "$(dirname "$0")"
merge=false
if [ "${1:-}" = "--merge" ]; then merge=true; shift; fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(transcript_lines segment frames wire_types ids)
secs="${FUZZ_SECONDS:-60}"
for t in "${targets[@]}"; do
  mkdir -p "work/$t"
  if $merge; then
    rm -rf "work/$t.merged" && mkdir "work/$t.merged"
    cargo +nightly fuzz run "$t" "work/$t.merged" "corpus/$t" "work/$t" -- \
      -set_cover_merge=1 -use_counters=0 \
      >"work/$t.merge.log" 2>&1
    rm -rf "corpus/$t" && mv "work/$t.merged" "corpus/$t"
    echo "$t: $(ls "corpus/$t" | wc -l) corpus files"
    continue
  fi
  status=0
  cargo +nightly fuzz run "$t" "work/$t" "corpus/$t" -- \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    >"work/$t.log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "work/$t.log" | tail -1)
  echo "$t: ${execs:-?} executions in ${secs} s, exit $status"
  if [ "$status" -ne 0 ]; then
    grep -E "^(==|SUMMARY|artifact_prefix|Test unit written)|panicked" "work/$t.log" | head -20
    exit "$status"
  fi
done
