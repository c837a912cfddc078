#!/usr/bin/env bash
# Times a few gemm_tma configs of one problem against each other and against cuBLAS, in one
# process per round: ktune-bench measures each listed config as a seeded trial (the tuner's
# timing and fp64 check; the heuristic's config joins them as one more trial), re-times them all
# interleaved as finalists in steady state, and times its winner interleaved with cuBLAS. ROUNDS
# rounds, the configs rotated each round (the first trial of a process runs on a cooler GPU);
# TARGET_MS per candidate (30; ~1500 reaches the power cap on large GEMMs); L2 (flushed, the
# tuner's default, or rotated: ktune-bench's --l2).
#   bash bench/gemm_peers/make_kit.sh                  # dev box: .gpu/
#   OUT=/tmp/o bash bench/gemm_peers/tile_probe.sh     # GPU node, repo root
# PROBES: lines "problem|config;config;..." (ktune-bench's --problem and --seed syntax).
# $OUT: summary.txt (what the script prints) and probe.tar.gz (time-, trials- and log- files per
# problem and round).
set -uo pipefail
cd "$(dirname "$0")/../.."
K=$(cd "${K:-.gpu}" && pwd) || exit 2
OUT=${OUT:-/tmp/tile-probe}
ROUNDS=${ROUNDS:-2}
TARGET_MS=${TARGET_MS:-30}
L2=${L2:-flushed}
[ -n "${PROBES:-}" ] || { echo "tile_probe: set PROBES" >&2; exit 2; }
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$K/devlibs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KTUNE_HOME=$PWD KTUNE_WORKER=$K/ktune-worker

n=0
while IFS='|' read -r problem list; do
  [ -n "$problem" ] || continue
  n=$((n + 1))
  IFS=';' read -r -a configs <<< "$list"
  c=${#configs[@]}
  echo "problem $n: $problem, $c configs"
  for r in $(seq "$ROUNDS"); do
    seeds=()
    for i in $(seq 0 $((c - 1))); do seeds+=(--seed "${configs[$(((i + r - 1) % c))]}"); done
    "$K/ktune-bench" --problem "$problem" --template gemm_tma --strategy model "${seeds[@]}" \
      --budget "$((c + 1))" --finalists "$((c + 1))" --target-ms "$TARGET_MS" --l2 "$L2" --out "$OUT/time-$n-$r.json" \
      --record "$OUT/trials-$n-$r.json" > "$OUT/log-$n-$r.txt" 2>&1 ||
      echo "problem $n round $r: ktune-bench failed (log-$n-$r.txt)"
  done
done <<< "$PROBES"

python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import glob, json, os, sys
out = sys.argv[1]
def tag(q):
    return (f"{q.get('BLOCK_M')}x{q.get('BLOCK_N')}x{q.get('BLOCK_K')} s{q.get('STAGES')} E{q.get('EPILOGUE')} "
            f"g{q.get('GROUP_M')} r{q.get('RASTER')} cl{q.get('CLUSTER_M')}x{q.get('CLUSTER_N')} "
            f"p{q.get('PERSISTENT')} sch{q.get('SCHEDULE')} sk{q.get('STREAMK')} sp{q.get('SPLITS')}")
for f in sorted(glob.glob(os.path.join(out, "time-*.json"))):
    _, n, r = os.path.basename(f)[:-5].split("-")
    for res in json.load(open(f)).get("results", []):
        it = res.get("interleaved", {})
        ratio = (it["cublas_us"] / it["ktune_us"]) if it.get("ktune_us") else None
        print(f"problem {n} round {r}: winner {tag(res.get('params', {}))} median {res['median_us']:.2f} us; "
              f"interleaved ktune {it.get('ktune_us')} cuBLAS {it.get('cublas_us')} speed {ratio and round(ratio, 3)}; "
              f"winner timed at {res.get('sm_clock_mhz')} MHz, {res.get('power_w')} W")
        for fin in res.get("finalists", []):
            print(f"    finalist {tag(fin.get('params', {}))}: {fin.get('median_us')}")
    t = os.path.join(out, f"trials-{n}-{r}.json")
    if os.path.exists(t):
        for prob in json.load(open(t)).get("problems", []):
            for tr in prob["trials"]:
                print(f"    trial {tag(tr['params'])}: {tr['outcome']} {tr['median_us']:.2f} us "
                      f"spread {tr['spread_pct']:.1f} % regs {tr['registers']} "
                      f"at {tr.get('sm_clock_mhz', 0)} MHz (counted {tr.get('sm_clock_counted_mhz', '-')}) "
                      f"{tr.get('power_w', 0)} W")
PY
tar -C "$OUT" -czf "$OUT/probe.tar.gz" $(cd "$OUT" && ls time-*.json trials-*.json log-*.txt 2>/dev/null) &&
  (cd "$OUT" && rm -f time-*.json trials-*.json log-*.txt)
