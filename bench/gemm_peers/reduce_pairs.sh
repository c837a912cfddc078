#!/usr/bin/env bash
# gemm_tma's split-K reductions side by side on the GPU node: for each tile (128x128 in 6 stages,
# 128x256 and 256x128 in 4) and each slice count (2, 4, 8), the workspace hand-off (REDUCE 0) and
# the cluster reduction through DSMEM (REDUCE 1), both EPILOGUE 0 without multicast, so each pair
# differs in REDUCE alone; plus the last table run's served winners of the split-K shapes. Every
# config is measured by ktune-bench (the tuner's timing and fp64 check) and written with --record.
#   bash bench/gemm_peers/make_kit.sh                       # dev box: the kit in .gpu/
#   OUT=/tmp/out bash bench/gemm_peers/reduce_pairs.sh      # GPU node: $OUT/reduce-pairs*.json
# Knobs: SHAPES (MxNxK ...), TARGET_MS (30), K (.gpu).
set -euo pipefail
cd "$(dirname "$0")/../.."
K=$(cd "${K:-.gpu}" && pwd)
OUT=${OUT:-/tmp/reduce-pairs}
SHAPES=${SHAPES:-"1024x1024x65536 512x1024x32768 2048x2048x16384"}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$K/devlibs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KTUNE_HOME=$PWD
ARGS=(--template gemm_tma --strategy model --target-ms "${TARGET_MS:-30}")
N=0
for tile in 128,128,6 128,256,4 256,128,4; do
  IFS=, read -r bm bn st <<< "$tile"
  for splits in 2 4 8; do
    for reduce in 0 1; do
      ARGS+=(--seed "BLOCK_M=$bm,BLOCK_N=$bn,BLOCK_K=64,STAGES=$st,CONSUMERS=2,GROUP_M=1,EPILOGUE=0,CLUSTER_M=1,CLUSTER_N=1,RASTER=0,PERSISTENT=0,SPLITS=$splits,SCHEDULE=0,STREAMK=0,REDUCE=$reduce")
      N=$((N + 1))
    done
  done
done
# The served winners of bench/results/gemm-peers-h200-20261203-cluster-splitk.json.
ARGS+=(--seed "BLOCK_M=128,BLOCK_N=128,BLOCK_K=64,STAGES=5,CONSUMERS=2,GROUP_M=8,EPILOGUE=1,CLUSTER_M=1,CLUSTER_N=1,RASTER=0,PERSISTENT=0,SPLITS=2,SCHEDULE=0,STREAMK=0,REDUCE=0"
       --seed "BLOCK_M=128,BLOCK_N=128,BLOCK_K=64,STAGES=6,CONSUMERS=2,GROUP_M=1,EPILOGUE=2,CLUSTER_M=2,CLUSTER_N=1,RASTER=1,PERSISTENT=0,SPLITS=4,SCHEDULE=0,STREAMK=0,REDUCE=0")
N=$((N + 2))
for s in $SHAPES; do
  IFS=x read -r m n k <<< "$s"
  ARGS+=(--problem "gemm:bf16:rc:M=$m,N=$n,K=$k")
done
# The heuristic's configs come first, then the seeds: a budget of seeds + 8 measures every seed.
"$K/ktune-bench" "${ARGS[@]}" --budget $((N + 8)) --out "$OUT/reduce-pairs.json" \
  --record "$OUT/reduce-pairs-trials.json" -v
