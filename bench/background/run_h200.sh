#!/usr/bin/env bash
# The background-tuning benchmark on a GPU node (bench/NOTES.md § Background tuning):
#   1. a foreign PyTorch matmul loop alone for 20 s (its throughput without ktuned);
#   2. ktuned (gpu_policy idle) with the real worker; an application asks 6 GEMM and 3 row-op
#      problems nobody tuned and records when each answer turns exact; midway the same foreign
#      loop runs 20 s: the lane must pause within 1 s and resume after; cached-lookup latency
#      while tuning and when idle (ktune-lookup-load);
#   3. ktune-bench tunes the same problems (same strategy and budget, the daemon's cubin cache);
#   4. summarize.py folds it all into $OUT/background.json.
# Binaries come from BIN (default .gpu, built on the dev box; see docs/GPU workflow in NOTES).
#   OUT=/tmp/out bash bench/background/run_h200.sh
#   FAKE=1 ... runs the same flow without a GPU (fake worker, fault template, fake NVML).
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-.gpu}
OUT=${OUT:-/tmp/ktune-background}
BUDGET=${BUDGET:-48}
FOREIGN_S=${FOREIGN_S:-20}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/ktune-bg-XXXXXX)
export PYTHONPATH=$PWD/client/python
S=$W/ktuned.sock
SETS=(--set tuning.gpu_policy=idle --set tuning.idle_settle_seconds=2 --set tuning.idle_poll_ms=100
      --set tuning.budget_trials=$BUDGET --set tuning.strategy=model --set server.metrics=127.0.0.1:0)
FOREIGN=(python3 bench/background/foreign.py --seconds "$FOREIGN_S")
APP=(python3 bench/background/app.py)
if [ -n "${FAKE:-}" ]; then
  mkdir -p "$W/nvml"
  export KTUNE_FAKE_NVML_DIR=$W/nvml FAKE_WORKER_DELAY_MS=250
  SETS+=(--set tuning.worker=$BIN/fake-worker --set tuning.devices=0
         --set templates.dirs=$PWD/tests/data/templates --set tuning.trial_timeout_ms=300
         --set tuning.idle_settle_seconds=0.3 --set store.seed_tables= --set tuning.miss_threshold_us=0)
  FOREIGN+=(--fake "$W/nvml")
  APP+=(--fake)
else
  SETS+=(--set tuning.worker=$BIN/ktune-worker)
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu \
             --format=csv > "$OUT/gpu.csv" 2>&1
fi

echo "== 1. foreign workload alone (${FOREIGN_S} s)"
"${FOREIGN[@]}" --out "$OUT/foreign_alone.json" || exit 1

echo "== 2. ktuned + application"
$BIN/ktuned --socket "$S" --data-dir "$W/state" "${SETS[@]}" > "$OUT/ktuned.log" 2>&1 &
KTUNED=$!
for _ in $(seq 200); do $BIN/ktune --socket "$S" status > /dev/null 2>&1 && break; sleep 0.1; done
"${APP[@]}" --socket "$S" --lookup-load $BIN/ktune-lookup-load --out "$OUT/app.json" \
  --foreign "${FOREIGN[@]}" --out "$OUT/foreign_paused.json"
APP_RC=$?
$BIN/ktune --socket "$S" status > "$OUT/status.txt" 2>&1
$BIN/ktune --socket "$S" jobs > "$OUT/jobs.txt" 2>&1
kill $KTUNED; wait $KTUNED

BENCH=()
if [ -z "${FAKE:-}" ]; then
  echo "== 3. ktune-bench on the same problems (the daemon's cubin cache)"
  PROBS=()
  for p in $(python3 -c "
import json
for r in json.load(open('$OUT/app.json'))['problems']:
    a = r['asked']; d = ','.join(f'{k}={v}' for k, v in a['dims'].items())
    print(f\"{a['op']}:{a['dtype']}:{a.get('layout', '')}:{d}\")"); do PROBS+=(--problem "$p"); done
  $BIN/ktune-bench "${PROBS[@]}" --strategy model --budget "$BUDGET" --data-dir "$W/state" \
    --out "$OUT/bench.json" > "$OUT/bench.log" 2>&1
  BENCH=(--bench "$OUT/bench.json" --gpu "$OUT/gpu.csv")
fi

echo "== 4. summary"
python3 bench/background/summarize.py --app "$OUT/app.json" --foreign-alone "$OUT/foreign_alone.json" \
  --foreign-paused "$OUT/foreign_paused.json" "${BENCH[@]}" --out "$OUT/background.json"
rm -rf "$W"
exit $APP_RC
