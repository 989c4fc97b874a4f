#!/usr/bin/env bash
# Runs the fuzz targets of fuzz/ (libFuzzer through cargo-fuzz, on stable Rust: no sanitizer),
# each for FUZZ_SECONDS seconds (default 60), FUZZ_JOBS at a time (default: one per CPU; each
# fuzzer uses one), and prints per target the executions per second and the corpus libFuzzer
# ended with.
#
#   scripts/fuzz.sh [TARGET...]        every target when none is named
#
# Each target starts from its seeds (fuzz/seeds/<target>, committed) and the corpus earlier runs
# grew (fuzz/corpus/<target>, not committed); new inputs are added to the latter. A crash, a
# failed assertion, an input that runs over 10 s or a leak past 2 GiB stops that target: the
# script goes on with the others, then exits 1 naming the input libFuzzer left under
# fuzz/artifacts/<target>/. Turn such an input into a regression test of the parser's own crate.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

seconds="${FUZZ_SECONDS:-60}"
if [ $# -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(cargo fuzz list)
fi

cargo fuzz build --sanitizer none

mkdir -p target/logs
jobs="${FUZZ_JOBS:-$(nproc)}"

# One target's run; its exit status is left in target/logs/<target>.status.
run_target() {
  local target=$1 log="target/logs/$1.log"
  rm -f "target/logs/$target.status"
  mkdir -p "corpus/$target" "artifacts/$target"
  if cargo fuzz run --sanitizer none "$target" "corpus/$target" "seeds/$target" -- \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="artifacts/$target/" >"$log" 2>&1; then
    echo ok >"target/logs/$target.status"
  else
    echo FAILED >"target/logs/$target.status"
  fi
}

running=0
for target in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
  run_target "$target" &
  running=$((running + 1))
done
wait

failed=()
printf '%-22s %12s %10s %10s\n' target execs/s corpus bytes
for target in "${targets[@]}"; do
  log="target/logs/$target.log"
  status=$(cat "target/logs/$target.status" 2>/dev/null || echo FAILED)
  [ "$status" = ok ] || failed+=("$target")
  execs=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  # The last status line says how many inputs the corpus holds and their size: "corp: 42/384b".
  corpus=$(grep -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' "$log" | tail -n 1 | sed 's/corp: //')
  printf '%-22s %12s %10s %10s %s\n' "$target" "${execs:--}" "${corpus%%/*}" "${corpus##*/}" \
    "$([ "$status" = ok ] || echo FAILED)"
done

if [ ${#failed[@]} -gt 0 ]; then
  for target in "${failed[@]}"; do
    echo "fuzz: $target failed; the end of fuzz/target/logs/$target.log:" >&2
    tail -n 30 "target/logs/$target.log" >&2
    ls -1 "artifacts/$target" | sed "s|^|fuzz: input left at fuzz/artifacts/$target/|" >&2
  done
  exit 1
fi
