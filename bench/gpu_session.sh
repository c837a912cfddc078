#!/usr/bin/env bash
# One call on the lent GPU machine: runs the named steps with binaries built on the dev machine
# and carried in .gpu/ (see bench/NOTES.md § Workflow). Logs and results go to $OUT.
#   bench/gpu_session.sh info membound gemmcheck gputests smoke tma-suite ...
set -uo pipefail
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu/devlibs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KTUNE_HOME=$PWD KTUNE_WORKER=$PWD/.gpu/ktune-worker
OUT=${OUT:-/tmp/ktune-out}
STATE=${STATE:-/tmp/ktune-state}   # the RocksDB store the suites write their winners to
mkdir -p "$OUT"
mkdir -p "$OUT/logs"
step() {  # step NAME SECONDS CMD...
  local name=$1 secs=$2; shift 2
  echo "=== $name ($(date -u +%T))"
  local t0=$(date +%s)
  timeout "$secs" "$@" > "$OUT/logs/$name.log" 2>&1
  local rc=$?
  echo "--- $name rc=$rc in $(( $(date +%s) - t0 )) s"
  tail -n "${TAIL:-25}" "$OUT/logs/$name.log"
}
# Only a few files come back from the device: the logs travel as one archive.
trap 'tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs && rm -rf "$OUT/logs"' EXIT
for s in "$@"; do
  case $s in
    info) step info 30 bash -c 'nvidia-smi; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv; nproc' ;;
    membound) TAIL=60 step membound 240 .gpu/membound_check ;;
    gemmcheck) TAIL=60 step gemmcheck 240 .gpu/gemm_check ;;
    gputests) TAIL=40 step gputests 300 .gpu/gpu_tests ;;
    clientgputests) TAIL=30 step clientgputests 240 env KTUNED="$PWD/.gpu/ktuned" .gpu/client_gpu_tests ;;
    torchgpu) TAIL=30 step torchgpu 240 env KTUNED="$PWD/.gpu/ktuned" PYTHONPATH="$PWD/client/python" \
        python3 tests/client/python/gpu_torch_test.py ;;
    # CPU only (issue 10): RSS of LookupService after 10M never-seen lookups; pin it with taskset
    # away from the CPUs the GPU steps use when both run in one call.
    memdistinct) TAIL=5 step memdistinct 280 bash -c ".gpu/ktune-memory-bench --distinct 10000000 \
        --threads ${MEM_THREADS:-12} --max-seconds 240 --label h200-node-cpu > $OUT/memory-distinct.json" ;;
    smoke) step smoke 180 .gpu/ktune-bench --suite smoke --budget 30 --out "$OUT/smoke.json" ;;
    compilebench) step compilebench 120 .gpu/ktune-compile-bench --configs 64 --out "$OUT/compile-h200.json" ;;
    membound-suite) TAIL=12 step membound-suite 300 .gpu/ktune-bench --suite membound --strategy model \
        --budget "${BUDGET_MB:-60}" --target-ms 30 --data-dir "$STATE" --out "$OUT/membound-h200.json" ;;
    gemm-suite) TAIL=14 step gemm-suite 420 .gpu/ktune-bench --suite gemm --strategy model \
        --budget "${BUDGET_GEMM:-100}" --target-ms 30 --data-dir "$STATE" --out "$OUT/gemm-h200.json" ;;
    tma-suite) TAIL=14 step tma-suite 420 .gpu/ktune-bench --suite tma --template gemm_tma --strategy model \
        --budget "${BUDGET_TMA:-120}" --target-ms 30 --out "$OUT/gemm-tma-h200.json" --record "$OUT/gemm-tma-h200-trials.json" ;;
    sweep) TAIL=8 step sweep 420 .gpu/ktune-bench --strategy exhaustive --budget 0 --target-ms 10 --finalists 1 \
        ${SWEEP_PROBLEMS:---problem gemm:bf16:rc:M=16,N=4096,K=4096 --problem gemm:bf16:rc:M=16,N=14336,K=4096} \
        --record "$OUT/h200_gemm_sweep.json" --out "$OUT/sweep-h200.json" ;;
    warm) TAIL=6 step warm 300 .gpu/ktune-bench --problem gemm:bf16:rc:M=4096,N=4096,K=4096 --strategy model \
        --budget "${BUDGET_WARM:-100}" --target-ms 30 --data-dir /tmp/ktune-warm --warm-repeat --out "$OUT/warm-h200.json" ;;
    tunecli) step tunecli 120 .gpu/ktune tune gemm --dtype bf16 --layout rc --shape M=2048,N=2048,K=2048 \
        --budget 40 --data-dir /tmp/ktune-cli ;;
    export) step export 60 .gpu/ktune-bench --suite none --data-dir "$STATE" --export "$OUT/h200.json" ;;
    *) echo "unknown step $s" ;;
  esac
done
