#!/usr/bin/env bash
# Launching served kernels on a GPU node (bench/NOTES.md § Launching served kernels):
#   1. the GPU tests: client_gpu_tests (ktune::Kernel and the typed helpers against host
#      references) and gpu_tests (the worker);
#   2. a ktuned started here (gpu_policy never, on_miss off: it serves, it does not tune), answering
#      from the shipped H200 table;
#   3. bench/launch/mlp_torch.py: a PyTorch MLP block and the row ops through ktune.torch against
#      torch, with first-call cost and per-call host overhead -> $OUT/launch-torch.json;
#   4. ktune-launch-bench: the same GEMMs from C++ against cuBLAS -> $OUT/launch-cpp.json.
# K holds what was built on the dev box: bin/ (ktuned, ktune-worker, client_gpu_tests, gpu_tests,
# ktune-launch-bench), devlibs/ (shared/tools/device-bundle) and home/ (a copy of the checkout's
# templates/, tables/, tests/data/, client/python/ and bench/launch/).
#   K=.cache/k11 OUT=/tmp/out bash .cache/k11/home/bench/launch/run_h200.sh
set -uo pipefail
K=$(cd "${K:-.cache/k11}" && pwd)
OUT=${OUT:-/tmp/ktune-launch}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$K/devlibs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KTUNE_HOME=$K/home PYTHONPATH=$K/home/client/python PYTHONUNBUFFERED=1
W=$(mktemp -d /tmp/ktune-launch-XXXXXX)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu \
           --format=csv > "$OUT/gpu.csv" 2>&1

if [ "${TESTS:-1}" = 1 ]; then  # TESTS=0: the benchmarks only
  echo "== gpu tests"
  KTUNED=$K/bin/ktuned timeout 120 "$K/bin/client_gpu_tests" 2>&1 | tee "$OUT/gpu-tests.log"
  KTUNE_WORKER=$K/bin/ktune-worker timeout 200 "$K/bin/gpu_tests" 2>&1 | tee -a "$OUT/gpu-tests.log"
fi

echo "== ktuned"
S=$W/ktuned.sock
"$K/bin/ktuned" --socket "$S" --data-dir "$W/data" --set tuning.gpu_policy=never \
  --set tuning.on_miss=false --set server.metrics=127.0.0.1:0 > "$W/ktuned.log" 2>&1 &
KTUNED_PID=$!
for _ in $(seq 100); do [ -S "$S" ] && break; sleep 0.1; done

echo "== PyTorch through ktune.torch"
timeout 240 python3 "$K/home/bench/launch/mlp_torch.py" --socket "$S" --out "$OUT/launch-torch.json" \
  > "$OUT/launch-torch.log" 2>&1
echo "rc=$?"; tail -5 "$OUT/launch-torch.log"

echo "== C++ against cuBLAS"
timeout 120 "$K/bin/ktune-launch-bench" --socket "$S" --out "$OUT/launch-cpp.json" \
  > "$OUT/launch-cpp.log" 2>&1
echo "rc=$?"; tail -5 "$OUT/launch-cpp.log"

kill "$KTUNED_PID"; wait "$KTUNED_PID"
cp "$W/ktuned.log" "$OUT/ktuned.log"
