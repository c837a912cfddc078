#!/usr/bin/env bash
# One call on the lent GPU machine: runs the named steps with binaries built on the dev machine
# and carried in .gpu/ (see bench/NOTES.md § Workflow). Logs and results go to $OUT.
#   bench/gpu_session.sh info membound gemmcheck gputests smoke ...
set -uo pipefail
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu/devlibs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KTUNE_HOME=$PWD KTUNE_WORKER=$PWD/.gpu/ktune-worker
OUT=${OUT:-/tmp/ktune-out}
mkdir -p "$OUT"
step() {  # step NAME SECONDS CMD...
  local name=$1 secs=$2; shift 2
  echo "=== $name ($(date -u +%T))"
  local t0=$(date +%s)
  timeout "$secs" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "--- $name rc=$rc in $(( $(date +%s) - t0 )) s"
  tail -n "${TAIL:-25}" "$OUT/$name.log"
}
for s in "$@"; do
  case $s in
    info) step info 30 bash -c 'nvidia-smi; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu --format=csv; nproc' ;;
    membound) TAIL=60 step membound 240 .gpu/membound_check ;;
    gemmcheck) TAIL=60 step gemmcheck 240 .gpu/gemm_check ;;
    gputests) TAIL=40 step gputests 300 .gpu/gpu_tests ;;
    smoke) step smoke 180 .gpu/ktune-bench --suite smoke --budget 30 --out "$OUT/smoke.json" ;;
    compilebench) step compilebench 120 .gpu/ktune-compile-bench --configs 64 --out "$OUT/compile-h200.json" ;;
    *) echo "unknown step $s" ;;
  esac
done
