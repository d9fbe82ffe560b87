#!/usr/bin/env bash
# The GPU lane (run on a host with a CUDA device): configure (Release), build only the GPU targets
# (gpu_tests, gpu_bench, control_bench; framefused for the cuda_ipc test), run the `gpu`-labelled
# ctests, compute-sanitizer memcheck + racecheck on gpu_tests, the GPU benchmark and, where python3
# has torch + torchvision, the torchvision comparison; a summary table is printed last. Logs and JSON go to $OUT when set (else
# $BUILD_DIR/gpu-lane). Exit status: 0 only when every step that ran passed.
# Environment: BUILD_DIR (build-gpu-lane), CUDA_ARCH (90), JOBS (nproc), SANITIZER_FILTER (gtest
# filter for memcheck), SKIP_BENCH=1, SKIP_TORCH=1, EXTRA_CMAKE_ARGS.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-build-gpu-lane}
LOGS=${OUT:-$BUILD_DIR/gpu-lane}
JOBS=${JOBS:-$(nproc)}
SANITIZER_FILTER=${SANITIZER_FILTER:--*b16*:SampleClip.*:*GpuEngine*}
mkdir -p "$BUILD_DIR" "$LOGS"
LANE_LOG=$LOGS/lane.log
: >"$LANE_LOG"
if [[ -d .gpuhost/ffmpeg/lib/pkgconfig ]]; then
  export PKG_CONFIG_PATH=$ROOT/.gpuhost/ffmpeg/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
fi

summary=()
failed=0
# record STEP RESULT DETAIL
record() {
  summary+=("$(printf '%-14s %-8s %s' "$1" "$2" "$3")")
  [[ $2 == FAIL ]] && failed=1
  return 0
}
# logged TITLE CMD...: runs CMD, appending its output to the lane log (and to the terminal).
logged() {
  local title=$1
  shift
  echo "==== $title: $*" | tee -a "$LANE_LOG"
  local start=$SECONDS
  "$@" 2>&1 | tee -a "$LANE_LOG"
  local rc=${PIPESTATUS[0]}
  echo "==== $title: exit $rc after $((SECONDS - start)) s" | tee -a "$LANE_LOG"
  return "$rc"
}

logged device nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv || true

# shellcheck disable=SC2086
if logged configure cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" -DFRAMEFUSE_TESTS=ON -DFRAMEFUSE_BENCH=ON ${EXTRA_CMAKE_ARGS:-}; then
  record configure ok "$BUILD_DIR, CUDA arch ${CUDA_ARCH:-90}"
else
  record configure FAIL "see lane.log"
fi
if ((failed == 0)) && logged build cmake --build "$BUILD_DIR" --target gpu_tests gpu_bench control_bench framefused -j"$JOBS"; then
  record build ok "gpu_tests gpu_bench control_bench framefused"
else
  record build FAIL "see lane.log"
fi

if ((failed == 0)); then
  logged ctest ctest --test-dir "$BUILD_DIR" -L gpu --output-on-failure -V
  ctest_rc=$?
  skipped=$(grep -E '^\s+[0-9]+ - [a-z_]+ \(Skipped\)' "$LANE_LOG" | awk '{print $3}' | tr '\n' ' ')
  line=$(grep -E '% tests passed' "$LANE_LOG" | tail -1)
  if ((ctest_rc != 0)); then
    record "ctest -L gpu" FAIL "$line"
  elif [[ -n $skipped ]]; then   # on the GPU host every entry runs: a skip is something missing
    missing="no device visible, or no samples/ (tools/make_sample_clip samples where ffmpeg is, brought along)"
    record "ctest -L gpu" FAIL "skipped on the GPU lane: $skipped($missing)"
  else
    record "ctest -L gpu" ok "$line"
  fi
  # Per ctest entry (#N): gtest's closing counts.
  counts=$(grep -E '^[0-9]+: \[ +(PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?' "$LANE_LOG" |
    sed -E 's/^([0-9]+): \[ *([A-Z]+) *\] ([0-9]+).*/#\1 \3 \2,/' | tr '\n' ' ')
  record "  gtest" info "$counts"

  tests_bin=$BUILD_DIR/tests/gpu/gpu_tests
  if command -v compute-sanitizer >/dev/null; then
    # The random-configuration test with 40 of its cases and the damaged-stream test with 6 clips
    # each: every case is a few set-ups, slow under memcheck.
    if FRAMEFUSE_GPU_RANDOM_CASES=40 FRAMEFUSE_GPU_DAMAGE_CASES=6 logged memcheck compute-sanitizer --tool memcheck --leak-check full \
        --error-exitcode 1 "$tests_bin" --gtest_filter="$SANITIZER_FILTER"; then
      record memcheck ok "$(grep -E 'ERROR SUMMARY' "$LANE_LOG" | tail -1) [$SANITIZER_FILTER]"
    else
      errors=$(grep -E 'ERROR SUMMARY' "$LANE_LOG" | tail -1)
      [[ $errors == *": 0 errors"* ]] && errors="0 memory errors, but a test failed under it (see ctest)"
      record memcheck FAIL "$errors"
    fi
    if logged racecheck compute-sanitizer --tool racecheck --error-exitcode 1 \
        "$tests_bin" --gtest_filter='*yuv420p_odd*:GraphCapture.*:GpuControlGraph.*:GpuControlFused.*'; then
      record racecheck ok "$(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$LANE_LOG" | tail -1)"
    else
      record racecheck FAIL "$(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$LANE_LOG" | tail -1)"
    fi
  else
    record sanitizer FAIL "compute-sanitizer not found"
  fi

  if [[ ${SKIP_BENCH:-0} != 1 ]]; then
    if logged gpu_bench "$BUILD_DIR/tests/bench/gpu_bench" --json "$LOGS/gpu_bench.json" >"$LOGS/gpu_bench.log"; then
      record gpu_bench ok "gpu_bench.json"
    else
      record gpu_bench FAIL "see gpu_bench.log"
    fi
    if logged control_bench "$BUILD_DIR/tests/bench/control_bench" >"$LOGS/control_bench.log"; then
      record control_bench ok "control_bench.log"
    else
      record control_bench FAIL "see control_bench.log"
    fi
    if [[ ${SKIP_TORCH:-0} != 1 ]] && python3 -c 'import torch, torchvision' 2>/dev/null; then
      if logged torchvision env PYTHONUNBUFFERED=1 python3 tests/bench/torchvision_bench.py \
          --json "$LOGS/torchvision.json" >"$LOGS/torchvision.log"; then
        record torchvision ok "torchvision.json"
      else
        record torchvision FAIL "see torchvision.log"
      fi
    else
      record torchvision skipped "python3 without torch/torchvision (or SKIP_TORCH=1)"
    fi
  fi
fi

{
  echo
  if [[ -f $LOGS/gpu_bench.log ]]; then
    grep -E '^(device|\||\(|MISMATCH)' "$LOGS/gpu_bench.log"
    echo
  fi
  if [[ -f $LOGS/control_bench.log ]]; then
    grep -E '^(device|\||\()' "$LOGS/control_bench.log"
    echo
  fi
  if [[ -f $LOGS/torchvision.log ]]; then
    grep -E '^(device|\||\()' "$LOGS/torchvision.log"
    echo
  fi
  echo "==== GPU lane summary ($(date -u +%Y-%m-%dT%H:%MZ), logs in $LOGS)"
  printf '%s\n' "${summary[@]}"
  if ((failed == 0)); then echo "GPU lane: PASS"; else echo "GPU lane: FAIL"; fi
} | tee "$LOGS/summary.txt"
exit "$failed"
