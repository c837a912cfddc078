#!/usr/bin/env bash
# run_gpu_check.sh — one-shot build + run of the gemm GPU check on the H200 (see README.md).
# Run from the repository root. Writes logs to $OUT (or /tmp/gemm_check_out) and prints a summary.
#   bash bench/kernel_check/run_gpu_check.sh [--quick]
set -euo pipefail
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
OUT_DIR=${OUT:-/tmp/gemm_check_out}
mkdir -p "$OUT_DIR"
BIN="$OUT_DIR/gemm_check"

nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv \
  > "$OUT_DIR/gpu_before.txt" 2>&1 || true

echo "== build (nvcc, sm_90) =="
time "$NVCC" -std=c++17 -O3 -gencode arch=compute_90,code=sm_90 -I templates/common \
  -Xptxas -v bench/kernel_check/gemm_check.cu -lcublas -o "$BIN" > "$OUT_DIR/build.log" 2>&1 \
  || { tail -50 "$OUT_DIR/build.log"; exit 1; }
grep -E "spill" "$OUT_DIR/build.log" | sort | uniq -c | sed 's/^/  /'

# SASS: every gemm kernel should show HMMA.16816, LDSM (ldmatrix), LDGSTS (cp.async), no LDL/STL.
if command -v cuobjdump > /dev/null || [ -x /usr/local/cuda/bin/cuobjdump ]; then
  CUOBJDUMP=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
  "$CUOBJDUMP" --dump-sass "$BIN" > "$OUT_DIR/gemm_check.sass" 2>&1 || true
  echo "== SASS opcode counts over all kernels =="
  grep -oE "(HMMA\.[0-9A-Z.]+|LDSM\.[0-9A-Z.]+|LDGSTS\.[0-9A-Z.]+|LDL[.A-Z0-9]*|STL[.A-Z0-9]*) " \
    "$OUT_DIR/gemm_check.sass" | sort | uniq -c | sed 's/^/  /' || true
fi

echo "== run =="
"$BIN" "$@" 2>&1 | tee "$OUT_DIR/gemm_check.log"
status=${PIPESTATUS[0]}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv \
  > "$OUT_DIR/gpu_after.txt" 2>&1 || true
exit "$status"
