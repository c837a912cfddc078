#!/usr/bin/env bash
# gemm_gpu_run.sh — one device call's worth of gemm work on the H200, with a binary built on the
# development machine (bench/kernel_check/README.md): clocks, the full check (correctness + timing),
# optional ncu profiles of a few configs and a SASS dump. Everything goes to $OUT.
#   bash bench/kernel_check/gemm_gpu_run.sh BIN [PROFILE_SPEC ...]
# PROFILE_SPEC: "FILTER|M|N|K", one ncu run of the configs whose name contains FILTER.
set -u
BIN=$1; shift
OUT=${OUT:-/tmp/gemm_out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > "$OUT/smi.txt" 2>&1
nvidia-smi dmon -s pc -d 1 > "$OUT/dmon.txt" 2>&1 &
DMON=$!
timeout ${CHECK_TIMEOUT:-150} "$BIN" ${CHECK_ARGS:-} > "$OUT/gemm.log" 2>&1
echo "gemm_check exit: $?" >> "$OUT/gemm.log"
kill "$DMON" 2>/dev/null
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
i=0
for spec in "$@"; do
  i=$((i + 1))
  IFS='|' read -r f m n k <<< "$spec"
  timeout ${NCU_TIMEOUT:-40} "$NCU" --clock-control none -k regex:ktune_gemm\|gemm_variant -c 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section Occupancy \
    "$BIN" --profile "$f" "$m" "$n" "$k" >> "$OUT/ncu.txt" 2>&1
  echo "== ncu exit $? for [$spec]" >> "$OUT/ncu.txt"
  if [ -n "${NCU_METRICS:-}" ]; then  # e.g. the stall-reason breakdown
    timeout ${NCU_TIMEOUT:-40} "$NCU" --clock-control none -k regex:ktune_gemm\|gemm_variant -c 1 \
      --metrics "$NCU_METRICS" "$BIN" --profile "$f" "$m" "$n" "$k" >> "$OUT/ncu.txt" 2>&1
    echo "== ncu metrics exit $? for [$spec]" >> "$OUT/ncu.txt"
  fi
done
if [ -n "${SASS:-}" ]; then
  CUOBJDUMP=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
  timeout 30 "$CUOBJDUMP" --dump-sass "$BIN" 2>&1 | gzip -c > "$OUT/sass.txt.gz"
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv >> "$OUT/smi.txt" 2>&1
grep -E "FAIL|NOTE|correctness|exit" "$OUT/gemm.log" | head -40
sed -n '/== summary/,$p' "$OUT/gemm.log"
