#!/usr/bin/env bash
# L2 traffic of one gemm_tma config against cuBLAS's kernel for the same problem, of CALIBRATE
# configs whose operand traffic is known (no multicast, the other operand multicast: does the
# counter count what the kernel asks for?), and of the first config with its A/B tensor maps' L2
# promotion changed (variant templates made here, on the GPU node, never committed): ncu counters
# (ncu_metrics.sh) per kernel, then ROUNDS alternated ktune-bench timings of the promotion
# variants (trial medians, the tuner's timing and fp64 check).
#   bash bench/gemm_peers/make_kit.sh                       # dev box: .gpu/
#   OUT=/tmp/o bash bench/gemm_peers/l2_probe.sh            # GPU node, repo root
# $OUT: summary.txt (what the script prints) and probe.tar.gz (metrics-<template>.csv,
# metrics-calibrate-<i>.csv, metrics-cublas.csv, time-<template>-<round>.json, ncu.err; the device
# returns only a few files).
set -uo pipefail
cd "$(dirname "$0")/../.."
K=$(cd "${K:-.gpu}" && pwd) || exit 2
OUT=${OUT:-/tmp/l2-probe}
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
PROBLEM=${PROBLEM:-gemm:bf16:rc:M=512,N=1024,K=32768}
# The shipped winner of 512x1024x32768 (tables/h200.json) and its kernel's template arguments.
CONFIG=${CONFIG:-BLOCK_M=128,BLOCK_N=128,BLOCK_K=64,STAGES=6,CONSUMERS=2,GROUP_M=1,EPILOGUE=2,CLUSTER_M=2,PERSISTENT=0,SPLITS=4,SCHEDULE=0,STREAMK=0,CLUSTER_N=1,RASTER=1,REDUCE=0}
# No multicast, then A multicast instead of B (CLUSTER_N 2): 32 KB and 24 KB asked per CTA and k-tile.
CALIBRATE=${CALIBRATE-"${CONFIG/CLUSTER_M=2/CLUSTER_M=1} $(echo "$CONFIG" | sed 's/CLUSTER_M=2/CLUSTER_M=1/; s/CLUSTER_N=1/CLUSTER_N=2/')"}
# The kernel's demangled name for a config: gemm_tma's template_args in the manifest's order.
kernel_of() {
  python3 - "$1" templates/gemm_tma/gemm_tma.yaml <<'PY'
import re, sys
cfg = dict(kv.split("=") for kv in sys.argv[1].split(","))
text = open(sys.argv[2]).read()
names = re.search(r"template_args: \[([^\]]*)\]", text, re.S).group(1).replace("\n", " ").split(",")
# As ncu demangles it (int template arguments printed with a cast), as a regex.
args = ["ktune_bf16" if n.strip() in ("T_IN", "T_OUT") else "\\(int\\)" + cfg[n.strip()] for n in names]
print("ktune_gemm_tma<" + ", ".join(args) + ">")
PY
}
PROMOTIONS=${PROMOTIONS:-"none 128B"}
ROUNDS=${ROUNDS:-2}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$K/devlibs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KTUNE_HOME=$PWD KTUNE_WORKER=$K/ktune-worker
. bench/gemm_peers/ncu_metrics.sh

templates=(gemm_tma)
variant() {  # variant NAME: templates/NAME, a copy of gemm_tma under that name (manifest NAME.yaml)
  rm -rf "templates/$1" && cp -r templates/gemm_tma "templates/$1"
  mv "templates/$1/gemm_tma.yaml" "templates/$1/$1.yaml"
  sed -i -e "s/^name: gemm_tma$/name: $1/" "templates/$1/$1.yaml"
  templates+=("$1")
}
for p in $PROMOTIONS; do
  t=gemm_tma_l2$(echo "$p" | tr 'A-Z' 'a-z')
  variant "$t"
  sed -i -e "/{name: tm[AB], tensor_map/s/swizzle: 128B}/swizzle: 128B, l2_promotion: $p}/" "templates/$t/$t.yaml"
  grep -c "l2_promotion: $p" "templates/$t/$t.yaml" | grep -qx 2 || { echo "variant $t: sed missed"; exit 2; }
done
# SLICES_OUTER=1: work unit u is k-slice u / tiles, tile u % tiles (today: tile u / splits, slice
# u % splits), so the CTAs of one k-slice, which read the same k-tiles, launch together.
if [ -n "${SLICES_OUTER:-}" ]; then
  variant gemm_tma_so
  sed -i -e 's|w.tile_unit = u / p.splits;|w.tile_unit = u % (p.units / p.splits);|' \
    -e 's|w.split = u % p.splits;|w.split = u / (p.units / p.splits);|' templates/gemm_tma_so/gemm_tma.cuh
  grep -c "p.units / p.splits" templates/gemm_tma_so/gemm_tma.cuh | grep -qx 2 || { echo "variant gemm_tma_so: sed missed"; exit 2; }
fi
bench() {  # bench TEMPLATE OUTFILE: the config alone (after the heuristic's), finalists re-timed
  "$K/ktune-bench" --problem "$PROBLEM" --template "$1" --strategy model --seed "$CONFIG" --budget 2 \
    --target-ms 30 --finalists 2 --out "$2"
}
profile() {  # profile OUTFILE TEMPLATE CONFIG
  ncu_metrics "$1" --kernel-name-base demangled -k "regex:$(kernel_of "$3")" --launch-count 1 \
    -- "$K/ktune-bench" --problem "$PROBLEM" --template "$2" --seed "$3" --budget 2 --target-ms 5 --finalists 1
}
for t in "${templates[@]}"; do profile "$OUT/metrics-$t.csv" "$t" "$CONFIG"; done
i=0
for c in $CALIBRATE; do i=$((i + 1)); echo "calibrate $i: $c"; profile "$OUT/metrics-calibrate-$i.csv" gemm_tma "$c"; done
ncu_metrics "$OUT/metrics-cublas.csv" -k regex:nvjet --launch-count 1 \
  -- "$K/ktune-bench" --problem "$PROBLEM" --template gemm_tma --seed "$CONFIG" --budget 1 --target-ms 5 --finalists 1
for r in $(seq "$ROUNDS"); do
  for t in "${templates[@]}"; do bench "$t" "$OUT/time-$t-$r.json" > /dev/null 2>&1; done
done
python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import csv, glob, json, os, sys
out = sys.argv[1]
for f in sorted(glob.glob(os.path.join(out, "metrics-*.csv"))):
    vals = {}
    for r in csv.reader(open(f)):
        if len(r) > 14 and r[0].isdigit():
            vals[r[-3]] = r[-1]
    print(os.path.basename(f), {k: vals[k] for k in sorted(vals)})
for f in sorted(glob.glob(os.path.join(out, "time-*.json"))):
    for r in json.load(open(f)).get("results", []):
        i = r.get("interleaved", {})
        print(os.path.basename(f), "median_us", round(r["median_us"], 2), "spread_pct",
              round(r["spread_pct"], 1), "interleaved ktune/cublas us", i.get("ktune_us"), i.get("cublas_us"))
PY
tar -C "$OUT" -czf "$OUT/probe.tar.gz" $(cd "$OUT" && ls metrics-*.csv time-*.json ncu.err 2>/dev/null) &&
  (cd "$OUT" && rm -f metrics-*.csv time-*.json ncu.err)
