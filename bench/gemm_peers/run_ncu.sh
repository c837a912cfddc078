#!/usr/bin/env bash
# Nsight Compute on ktune's served GEMM winners and cuBLAS, same shapes, same inputs: where each
# spends its time (tensor-pipe share, stall reasons, L2 and DRAM traffic), for issue 13's
# "explain it with ncu before building on it".
#   bash bench/gemm_peers/make_kit.sh                      # dev box: .gpu/ (ktuned, ktune, ...)
#   SHAPES=4096x4096x14336,... OUT=/tmp/o bash bench/gemm_peers/run_ncu.sh   # GPU node, repo root
# ktuned serves the shipped tables/h200.json, or TABLE (a `ktune export` file, e.g. the h200.json
# run_h200.sh just wrote; no tuning); peers.py profile launches each served
# kernel and torch.matmul once; ncu (--clock-control none: the clocks as the power cap leaves
# them) profiles those launches. $OUT: ncu.csv (every metric of the sections, one row per metric
# and kernel), ncu.txt (the readable report), ncu-sass.csv (the first served kernel per SASS
# instruction: executed count, stall samples; with CUBLAS_SASS=1 also ncu-sass-cublas.csv, cuBLAS's),
# profile.json (what was served), ktuned.log; MEMORY=1 adds ncu-memory.txt and ncu-metrics.csv
# (below).
set -uo pipefail
cd "$(dirname "$0")/../.."
K=$(cd "${K:-.gpu}" && pwd) || exit 2
OUT=${OUT:-/tmp/gemm-ncu}
SHAPES=${SHAPES:-4096x4096x14336,4096x4096x4096,2048x2048x16384}
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/gemm-ncu-XXXXXX)
export LD_LIBRARY_PATH=$K/devlibs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KTUNE_HOME=$PWD PYTHONPATH=$PWD/client/python PYTHONUNBUFFERED=1
"$K/ktuned" --socket "$W/k.sock" --data-dir "$W/data" --set server.metrics= \
  --set tuning.gpu_policy=never --set tuning.on_miss=false ${TABLE:+--set store.seed_tables="$TABLE"} \
  > "$OUT/ktuned.log" 2>&1 &
KPID=$!
trap 'kill $KPID 2>/dev/null; wait $KPID 2>/dev/null' EXIT
for _ in $(seq 300); do "$K/ktune" --socket "$W/k.sock" status > /dev/null 2>&1 && break; sleep 0.1; done
SECTIONS=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
          --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy)
PROFILE=(python3 bench/gemm_peers/peers.py profile --socket "$W/k.sock" --shapes "$SHAPES")
# The served kernels and cuBLAS's (nvjet / sm90_xmma / cutlass names, and the split-K reduce kernel
# it launches after a splitK GEMM), not torch's randn.
FILTER='regex:ktune_gemm|nvjet|xmma|cutlass|gemm|splitKreduce'
"$NCU" --clock-control none -k "$FILTER" "${SECTIONS[@]}" --csv --page details \
  "${PROFILE[@]}" --out "$OUT/profile.json" > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
echo "ncu csv rc=$?"
"$NCU" --clock-control none -k "$FILTER" "${SECTIONS[@]}" "${PROFILE[@]}" > "$OUT/ncu.txt" 2>> "$OUT/ncu.err"
echo "ncu txt rc=$?"
# Where the served kernels' instructions go: per SASS instruction, executed count and the warp
# stalls sampled on it (the first shape's kernel only).
"$NCU" --clock-control none -k regex:ktune_gemm --launch-count 1 --section SourceCounters \
  --section InstructionStats --section WarpStateStats --page source --print-source sass --csv \
  "${PROFILE[@]}" > "$OUT/ncu-sass.csv" 2>> "$OUT/ncu.err"
echo "ncu sass rc=$?"
# CUBLAS_SASS=1: the same listing for cuBLAS's kernel of the first shape (ncu-sass-cublas.csv), to
# set the two main loops side by side instruction by instruction.
if [ -n "${CUBLAS_SASS:-}" ]; then
  "$NCU" --clock-control none -k 'regex:nvjet|xmma|cutlass' --launch-count 1 --section SourceCounters \
    --section InstructionStats --section WarpStateStats --page source --print-source sass --csv \
    "${PROFILE[@]}" > "$OUT/ncu-sass-cublas.csv" 2>> "$OUT/ncu.err"
  echo "ncu sass cublas rc=$?"
fi
# MEMORY=1: where each kernel's bytes come from and go, by source unit (the SM's loads and TMA,
# the other L2 partition through the fabric, DRAM), from the memory tables and raw counters
# (ncu-memory.txt, ncu-metrics.csv): for comparing two kernels that move the same operands.
if [ -n "${MEMORY:-}" ]; then
  "$NCU" --clock-control none -k "$FILTER" --section MemoryWorkloadAnalysis_Tables --print-details all "${PROFILE[@]}" \
    > "$OUT/ncu-memory.txt" 2>> "$OUT/ncu.err"
  echo "ncu memory tables rc=$?"
  . bench/gemm_peers/ncu_metrics.sh
  ncu_metrics "$OUT/ncu-metrics.csv" -k "$FILTER" -- "${PROFILE[@]}"
fi
grep -E "^  [a-z_]+.*\(|Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|L2 Hit Rate|DRAM Throughput|Issue Slots Busy|No Eligible|Active Warps Per Scheduler|Warp Cycles Per Issued" "$OUT/ncu.txt" | head -120
tail -5 "$OUT/ncu.err"
