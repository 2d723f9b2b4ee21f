#!/usr/bin/env bash
# One GPU-machine run (../shared/GPU.md): configure and build with the carried .gpu-sysroot and the
# machine's libtorch, run the `gpu` tests, compute-sanitizer (memcheck, racecheck) on them, the CPU
# test suite, and the benchmarks; print a short table last. Full logs go to $OUT when it is set.
#
# From the device tool:  run(command="FLASHCHECK_COMMIT=<hash> bash tools/gpu-check.sh", carry=[".gpu-sysroot"])
# Prepare once here:     bash ../shared/gpu/make-sysroot.sh
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# Logs are written to a scratch folder and gathered at the end into $OUT/logs.txt (the device tool
# brings back at most 8 files), with the bench records beside it.
final_out=${OUT:-$root/build-gpu/out}
out=$(mktemp -d)
mkdir -p "$final_out"
declare -a rows
row() { rows+=("$(printf '%-34s %s' "$1" "$2")"); }
running=""
step() {  # step NAME LOGFILE COMMAND...: runs, logs, records pass/fail
  local name=$1 log=$2 rc; shift 2
  local start=$SECONDS
  # (in the background and waited for, so a TERM from `timeout` reaches the trap below at once)
  "$@" >"$out/$log" 2>&1 &
  running=$!
  wait "$running"; rc=$?
  running=""
  if [ "$rc" = 0 ]; then row "$name" "ok ($((SECONDS - start)) s)"; return 0; fi
  row "$name" "FAILED ($((SECONDS - start)) s, see $log)"; tail -n 40 "$out/$log"; return 1
}
# Cut short (e.g. `timeout 580 bash tools/gpu-check.sh` inside the device tool's 600 s): stop the running
# step, and still print the table so far and bring the logs back.
on_term() {
  [ -n "$running" ] && kill -TERM "$running" 2>/dev/null
  row "(cut short)" "by a TERM signal"
  printf '%s\n' "${rows[@]}"
  gather
  exit 124
}
trap on_term TERM INT

# The tree sent to the GPU machine has no .git: name the commit with FLASHCHECK_COMMIT=<hash>.
commit=${FLASHCHECK_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
device=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
prefix="$root/.gpu-sysroot/usr${torch_prefix:+;$torch_prefix}"
jobs=$(nproc)

gather() {
  for log in "$out"/*.log; do echo "===== $(basename "$log")"; cat "$log"; done > "$final_out/logs.txt"
  # (the gpu step's shard outputs too, so a cut-short run still shows which tests passed and which were running)
  compgen -G "$out/shard-*.txt" > /dev/null && for f in "$out"/shard-*.txt; do echo "===== $(basename "$f")"; cat "$f"; done > "$final_out/shards.txt"
  [ -f "$out/bench/bench.jsonl" ] && cp "$out/bench/bench.jsonl" "$final_out/"
  [ -d "$out/bench-ab" ] && cat "$out"/bench-ab/*/bench.jsonl > "$final_out/bench-ab.jsonl" 2>/dev/null
  return 0
}
step "configure" configure.log cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CUDA_ARCHITECTURES=90a -DFLASHCHECK_CUDA=ON -DFLASHCHECK_WERROR=ON || { printf '%s\n' "${rows[@]}"; gather; exit 1; }
step "build" build.log cmake --build build-gpu -j "$jobs" || { printf '%s\n' "${rows[@]}"; gather; exit 1; }
status=0
# The architectures actually compiled into the GPU test binaries (sm_90a expected for Hopper paths).
archs=$(for t in build-gpu/tests/*_gpu_tests; do cuobjdump --list-elf "$t" 2>/dev/null; done | grep -o 'sm_[0-9a-z]*' | sort -u | tr '\n' ' ')
row "SASS architectures" "${archs:-none}"
# FLASHCHECK_GPU_CASES: harness cases per op and policy in the gpu tests (default 2000).
# FLASHCHECK_GPU_SHARDS=N: run each gpu test binary as N gtest shards at once (the harness's oracle is
# CPU work: 2000 cases of every subject in parallel fit one call of the device tool).
gpu_shards() {
  local fail=0 t i
  for t in build-gpu/tests/*_gpu_tests; do
    [ -x "$t" ] || continue
    for ((i = 0; i < FLASHCHECK_GPU_SHARDS; i++)); do
      GTEST_TOTAL_SHARDS=$FLASHCHECK_GPU_SHARDS GTEST_SHARD_INDEX=$i "$t" > "$out/shard-$(basename "$t")-$i.txt" 2>&1 &
    done
    wait_all || fail=1
  done
  cat "$out"/shard-*.txt
  return $fail
}
wait_all() { local rc=0 j; for j in $(jobs -p); do wait "$j" || rc=1; done; return $rc; }
# FLASHCHECK_STEPS: which of gpu, sanitizer, cpu, bench, sdpa to run (default all)
has() { [[ ",${FLASHCHECK_STEPS:-gpu,sanitizer,cpu,bench,sdpa}," == *",$1,"* ]]; }
if has gpu; then
  if [ -n "${FLASHCHECK_GPU_SHARDS:-}" ]; then
    step "gpu tests ($FLASHCHECK_GPU_SHARDS shards)" gpu-tests.log gpu_shards || status=1
  else
    step "gpu tests" gpu-tests.log ctest --test-dir build-gpu -L gpu -V || status=1
  fi
fi
# compute-sanitizer on the small-shape sweeps (the harness-sized tests would take hours under it)
has sanitizer && for tool in memcheck racecheck; do
  for t in build-gpu/tests/*_gpu_tests; do
    [ -x "$t" ] || continue
    step "compute-sanitizer $tool $(basename "$t")" "sanitizer-$tool-$(basename "$t").log" \
      compute-sanitizer --tool "$tool" --error-exitcode 9 "$t" --gtest_brief=1 \
        --gtest_filter='*SmallShapes*:*BadInput*:DeviceRounding*' || status=1
  done
done
# FLASHCHECK_CPU_TESTS: a ctest -R regex to run only some CPU tests (default: all but gpu and long)
# (braced: without the braces a run without the cpu step failed through `|| status=1`)
has cpu && { step "cpu tests (${FLASHCHECK_CPU_TESTS:-all but long})" cpu-tests.log \
  ctest --test-dir build-gpu -LE "gpu|long" ${FLASHCHECK_CPU_TESTS:+-R "$FLASHCHECK_CPU_TESTS"} -j "$jobs" --output-on-failure || status=1; }
has bench && { step "precision-bench" precision-bench.log build-gpu/bin/precision-bench || status=1; }
# The side-by-side throughput table (FLASHCHECK_BENCH_ARGS narrows it, e.g. "--n 4096 --d 128").
has bench && { step "bench" bench.log build-gpu/bin/flashcheck bench --out "$out/bench" --overwrite ${FLASHCHECK_BENCH_ARGS:-} || status=1; }
# An A/B in the same call: FLASHCHECK_BENCH_AB="NAME=A NAME=B ..." runs the bench (with FLASHCHECK_BENCH_ARGS) once per
# variant in turn, FLASHCHECK_BENCH_ROUNDS rounds (default 2), each run a process of its own, so the variants alternate
# on one card (kernels/cuda/NOTES.md compares figures only so); the records go to bench-ab.jsonl. A variant of several
# options joins them with '+' (NAME=A+OTHER=B: one --option each).
if has bench && [ -n "${FLASHCHECK_BENCH_AB:-}" ]; then
  for ((round = 1; round <= ${FLASHCHECK_BENCH_ROUNDS:-2}; round++)); do
    for variant in $FLASHCHECK_BENCH_AB; do
      options=()
      IFS='+' read -ra parts <<< "$variant"
      for part in "${parts[@]}"; do options+=(--option "$part"); done
      step "bench --option $variant, round $round" "bench-ab-$round-$variant.log" \
        build-gpu/bin/flashcheck bench --out "$out/bench-ab/$round-$variant" --overwrite "${options[@]}" ${FLASHCHECK_BENCH_ARGS:-} || status=1
    done
  done
fi
# PyTorch's own fused attention (torch.sdpa.*, registered when libtorch sees a CUDA device) through
# the harness: FLASHCHECK_GPU_CHECK_CASES cases per op and format (default 500), head dims up to 256 (flash and cuDNN declare it).
# (FLASHCHECK_GPU_CHECK_CASES=0 skips them)
has sdpa && [ "${FLASHCHECK_GPU_CHECK_CASES:-500}" != 0 ] && for subject in $(build-gpu/bin/flashcheck list 2>/dev/null | awk '$1 ~ /^torch\.sdpa\./ {print $1}'); do
  step "check $subject" "check-$subject.log" build-gpu/bin/flashcheck check --subject "$subject" --op all \
    --cases "${FLASHCHECK_GPU_CHECK_CASES:-500}" --seed 2026 --no-corpus --max-head-dim 256 || status=1
done

echo
echo "commit $commit | device ${device:-none} | $(build-gpu/bin/flashcheck --version 2>/dev/null)"
grep -E "tests passed|Skipped|Not Run" "$out/gpu-tests.log" "$out/cpu-tests.log" 2>/dev/null | sed 's/^.*\.log://' | sort -u
[ -f "$out/bench.log" ] && { echo "== bench"; sed -n '/^speed \/ baseline/,$p' "$out/bench.log"; }  # (the side-by-side table)
for log in "$out"/bench-ab-*.log; do  # each A/B run's points (round, then option)
  [ -f "$log" ] && { echo "== $(basename "$log" .log)"; grep -E '^  [a-z0-9]+ d=' "$log" | sed 's/  */ /g'; }
done
grep -hE "^([0-9]+: )?cuda\." "$out/gpu-tests.log" 2>/dev/null | sed 's/^[0-9]*: //' | sort -u
grep -hE "^\[  (PASSED|FAILED) +\]" "$out"/shard-*.txt 2>/dev/null | sort | uniq -c
for log in "$out"/check-*.log; do  # the harness tables of the checks, for the record
  [ -f "$log" ] && { echo "== $(basename "$log" .log)"; grep -E "^(fwd|bwd|bwdbwd) |^check:" "$log"; }
done
for log in "$out"/sanitizer-*.log; do  # compute-sanitizer's verdicts
  [ -f "$log" ] && echo "$(basename "$log" .log): $(grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -n 1)"
done
printf '%s\n' "${rows[@]}"
gather
exit $status
