#!/usr/bin/env bash
# Does a deeper stage ring shorten the consumers' data waits on the split-K shapes? gemm_tma's
# manifest stops STAGES at 6; a variant made here (templates/gemm_tma_deep, STAGES up to 8, never
# committed) lets 128x128x64 run 7 stages, which fits beside no epilogue area only (EPILOGUE 0).
# For each problem, CONFIGS are timed by ktune-bench (trial medians, the tuner's fp64 check, and
# cuBLAS interleaved with the finalist), ROUNDS alternated rounds.
#   bash bench/gemm_peers/make_kit.sh                  # dev box: .gpu/
#   OUT=/tmp/o bash bench/gemm_peers/depth_probe.sh    # GPU node, repo root
# $OUT: summary.txt (what the script prints) and depth.tar.gz (time-, trials- and log- files per
# problem, config and round).
set -uo pipefail
cd "$(dirname "$0")/../.."
K=$(cd "${K:-.gpu}" && pwd) || exit 2
OUT=${OUT:-/tmp/depth-probe}
ROUNDS=${ROUNDS:-3}
# problem|served config (tables/h200.json); the probe adds the served config at 7 stages with
# EPILOGUE 0, and at its own depth with EPILOGUE 0 (what the epilogue alone changes).
PROBES=${PROBES:-"gemm:bf16:rc:M=512,N=1024,K=32768|BLOCK_M=128,BLOCK_N=128,BLOCK_K=64,STAGES=6,CONSUMERS=2,GROUP_M=1,EPILOGUE=2,CLUSTER_M=2,PERSISTENT=0,SPLITS=4,SCHEDULE=0,STREAMK=0,CLUSTER_N=1,RASTER=1,REDUCE=0
gemm:bf16:rc:M=1024,N=1024,K=65536|BLOCK_M=128,BLOCK_N=128,BLOCK_K=64,STAGES=5,CONSUMERS=2,GROUP_M=8,EPILOGUE=1,CLUSTER_M=1,PERSISTENT=0,SPLITS=2,SCHEDULE=0,STREAMK=0,CLUSTER_N=1,RASTER=0,REDUCE=0"}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$K/devlibs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KTUNE_HOME=$PWD KTUNE_WORKER=$K/ktune-worker

rm -rf templates/gemm_tma_deep && cp -r templates/gemm_tma templates/gemm_tma_deep
mv templates/gemm_tma_deep/gemm_tma.yaml templates/gemm_tma_deep/gemm_tma_deep.yaml
sed -i -e 's/^name: gemm_tma$/name: gemm_tma_deep/' \
  -e 's/STAGES: {range: \[2, 6\]}/STAGES: {range: [2, 8]}/' templates/gemm_tma_deep/gemm_tma_deep.yaml
grep -q 'STAGES: {range: \[2, 8\]}' templates/gemm_tma_deep/gemm_tma_deep.yaml || { echo "variant: sed missed"; exit 2; }

n=0
while IFS='|' read -r problem served; do
  [ -n "$problem" ] || continue
  n=$((n + 1))
  stages=$(echo "$served" | sed 's/.*STAGES=\([0-9]*\).*/\1/')
  e0=$(echo "$served" | sed 's/EPILOGUE=[0-9]/EPILOGUE=0/')
  deep=$(echo "$e0" | sed 's/STAGES=[0-9]*/STAGES=7/')
  configs=("$served" "$e0" "$deep")
  echo "problem $n: $problem; configs: served (s$stages), s$stages E0, s7 E0"
  for r in $(seq "$ROUNDS"); do
    for i in 0 1 2; do
      "$K/ktune-bench" --problem "$problem" --template gemm_tma_deep --strategy model --seed "${configs[$i]}" \
        --budget 2 --target-ms 30 --finalists 2 --out "$OUT/time-$n-$i-$r.json" \
        --record "$OUT/trials-$n-$i-$r.json" > "$OUT/log-$n-$i-$r.txt" 2>&1 ||
        echo "problem $n config $i round $r: ktune-bench failed (log-$n-$i-$r.txt)"
    done
  done
done <<< "$PROBES"

python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import glob, json, os, sys
out = sys.argv[1]
names = ["served", "served E0", "7 stages E0"]
for f in sorted(glob.glob(os.path.join(out, "time-*.json"))):
    _, n, i, r = os.path.basename(f)[:-5].split("-")
    d = json.load(open(f))
    for res in d.get("results", []):
        p = res.get("params", {})
        it = res.get("interleaved", {})
        ratio = (it["cublas_us"] / it["ktune_us"]) if it.get("ktune_us") else None
        print(f"problem {n} {names[int(i)]:12s} round {r}: winner s{p.get('STAGES')} E{p.get('EPILOGUE')} "
              f"median {res['median_us']:.2f} us spread {res['spread_pct']:.1f} % "
              f"interleaved ktune {it.get('ktune_us')} cuBLAS {it.get('cublas_us')} "
              f"ktune/cuBLAS speed {ratio and round(ratio, 3)}")
    t = os.path.join(out, f"trials-{n}-{i}-{r}.json")
    if os.path.exists(t):
        for prob in json.load(open(t)).get("problems", []):
            for tr in prob["trials"]:
                q = tr["params"]
                print(f"    trial s{q.get('STAGES')} E{q.get('EPILOGUE')} sp{q.get('SPLITS')} "
                      f"{q.get('BLOCK_M')}x{q.get('BLOCK_N')}: {tr['outcome']} {tr['median_us']:.2f} us "
                      f"spread {tr['spread_pct']:.1f} % regs {tr['registers']}")
PY
tar -C "$OUT" -czf "$OUT/depth.tar.gz" $(cd "$OUT" && ls time-*.json trials-*.json log-*.txt 2>/dev/null) &&
  (cd "$OUT" && rm -f time-*.json trials-*.json log-*.txt)
rm -rf templates/gemm_tma_deep
