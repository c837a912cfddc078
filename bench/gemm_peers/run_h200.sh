#!/usr/bin/env bash
# Issue 13's peer comparison in one GPU-node call: ktune's tuned GEMM winners, served by ktuned,
# against cuBLAS and torch.compile(mode="max-autotune") in one PyTorch process.
#
#   # dev box, once per change: build ktuned, ktune, ktune-worker, ktune-bench into .gpu/ with the
#   # shared libraries the GPU node lacks, and the commit they were built at
#   bash bench/gemm_peers/make_kit.sh
#   # GPU node, from the repo root (the working tree with .gpu/ carried along; the device tool's
#   # call: command "bash bench/gemm_peers/run_h200.sh", carry [".gpu"], timeout_s 600):
#   OUT=/tmp/out bash bench/gemm_peers/run_h200.sh      # $OUT: where the 3 result files go
#
# Steps, each fitted into BUDGET_S seconds in all (default 520: one 9-minute device call):
#   1. meta: date, commit, ktuned --version, the GPU (name, driver, clocks, power limit);
#   2. ktuned on a fresh data dir with the real worker (gpu_policy always, no seed tables, no tuning
#      on misses), and the shapes tuned one after the other: TUNER=daemon (default) sends each as
#      a `tune` job (what `ktune tune` sends: every gemm template, the daemon's timing), TUNER=bench
#      runs `ktune-bench --template gemm_tma --target-ms 30` into the store ktuned then serves;
#      each shape's tuning wall time recorded; no job starts after TUNE_CAP_S;
#   3. peers.py measure: cuBLAS, torch.compile max-autotune (its compile + autotune time) and
#      ktune's served winner through ktune.torch, checked and timed interleaved (do_bench), then
#      8192^3 sustained with SM clock and power sampled;
#   4. ktune export -> $OUT/h200.json; cuobjdump -sass of each served cubin (HGMMA, LDL/STL);
#   5. $OUT/gemm-peers-h200.json (everything, with a summary) and $OUT/logs.tar.gz (logs, each
#      step's JSON, cubins, SASS listings, nvidia-smi samples).
# Knobs (environment): SHAPES ("tma" = the 10 of `ktune-bench --suite tma`, or MxNxK,...),
# TUNER, TRIALS (120), STRATEGY (model), JOB_SECONDS (45 per shape), TUNE_CAP_S (230), ROUNDS (15),
# SUSTAIN_S (4 per phase, 4 phases), SUSTAIN_SHAPES (MxNxK,... of SHAPES also sustained, in
# phases of SUSTAIN_MORE_S, 2; SUSTAIN_RANKED=N: there the lookup's first N ranked configs, the
# tuner's re-timed finalists, each in phases of its own, peers.py --sustain-ranked), BURST_IDLE_S (3: idle before each 8192^3 burst), SETS (3 input sets of 384 MB at 8192^3), BUDGET_S, K (.gpu),
# TWINS=1 (also time each served gemm_tma config's stream-K twin, peers.py --twins; TWINS=reduce:
# a split-K winner's REDUCE 1 / REDUCE 0 pair at its tile, peers.py --twins reduce), TEMPLATES
# ("gemm_tma ...": the daemon's jobs search only these) and SEEDS ("NAME=V,... ...": configs each
# job measures first; both TUNER=daemon only), FINALISTS (5: configs each job re-times in steady
# state before its winner, tuning.finalists), DAEMON_SETS ("key=value ...": more ktuned
# settings, e.g. tuning.retime_rounds=5).
# FAKE=1 runs the same flow on a machine without a GPU: tests/fakes/fake_worker (from $K) measures,
# `measure` runs on tests/bench/fake_torch (a stand-in torch: shapes, no numbers), no nvidia-smi
# or cuobjdump; tests/bench/gemm_peers_test.py runs it.
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$(date +%s)
K=$(cd "${K:-.gpu}" && pwd) || exit 2
OUT=${OUT:-/tmp/gemm-peers}
BUDGET_S=${BUDGET_S:-520}
TUNER=${TUNER:-daemon}
SHAPES=${SHAPES:-tma}
TRIALS=${TRIALS:-120}
STRATEGY=${STRATEGY:-model}
JOB_SECONDS=${JOB_SECONDS:-45}
TUNE_CAP_S=${TUNE_CAP_S:-230}
ROUNDS=${ROUNDS:-15}
SUSTAIN_S=${SUSTAIN_S:-4}
BURST_IDLE_S=${BURST_IDLE_S:-3}
SETS=${SETS:-3}
SUSTAIN_ARGS=(--sustain-shapes "${SUSTAIN_SHAPES:-}" --sustain-more-s "${SUSTAIN_MORE_S:-2}"
              --sustain-ranked "${SUSTAIN_RANKED:-1}")
mkdir -p "$OUT"
W=$(mktemp -d /tmp/gemm-peers-XXXXXX)
L=$W/logs
mkdir -p "$L"
export LD_LIBRARY_PATH=$K/devlibs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export KTUNE_HOME=$PWD PYTHONPATH=$PWD/client/python PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=$W/inductor TRITON_CACHE_DIR=$W/triton  # cold, as a new user's
PEERS=(python3 bench/gemm_peers/peers.py --shapes "$SHAPES")
S=$W/ktuned.sock
KTUNED_PID=
now() { echo $(( $(date +%s) - T0 )); }
say() { echo "== [$(now) s] $*"; }
finish() {
  [ -n "$KTUNED_PID" ] && kill "$KTUNED_PID" 2> /dev/null && wait "$KTUNED_PID"
  cp "$W"/*.json "$L"/ 2> /dev/null
  [ -d "$W/cubins" ] && cp -r "$W/cubins" "$L/"
  tar -C "$W" -czf "$OUT/logs.tar.gz" logs
  say "done; files in $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
}
trap finish EXIT

SETS_DAEMON=(--set tuning.on_miss=false --set store.seed_tables=
             --set server.metrics= --set tuning.strategy="$STRATEGY"
             --set tuning.finalists="${FINALISTS:-5}")
WORKER=$K/ktune-worker
if [ -n "${FAKE:-}" ]; then
  WORKER=$K/fake-worker
  SETS_DAEMON+=(--set tuning.devices=0 --set templates.compile_threads="${COMPILE_THREADS:-2}")
fi
SETS_DAEMON+=(--set tuning.worker="$WORKER")
for kv in ${DAEMON_SETS:-}; do SETS_DAEMON+=(--set "$kv"); done
start_ktuned() {  # start_ktuned POLICY: serves $W/data on $S; tunes only with POLICY always
  "$K/ktuned" --socket "$S" --data-dir "$W/data" "${SETS_DAEMON[@]}" --set tuning.gpu_policy="$1" \
    >> "$L/ktuned.log" 2>&1 &
  KTUNED_PID=$!
  for _ in $(seq 300); do "$K/ktune" --socket "$S" status > /dev/null 2>&1 && return 0; sleep 0.1; done
  echo "ktuned did not answer within 30 s"; tail -20 "$L/ktuned.log"; exit 1
}

say "1. meta"
"${PEERS[@]}" meta --commit-file "$K/COMMIT" --ktuned "$K/ktuned" --out "$W/meta.json"
cat "$W/meta.json"
"${PEERS[@]}" plan --tuner "$TUNER" --trials "$TRIALS" --job-seconds "$JOB_SECONDS" --finalists "${FINALISTS:-5}" \
  --rounds "$ROUNDS" --sustain-s "$SUSTAIN_S" --burst-idle-s "$BURST_IDLE_S" --sets "$SETS" "${SUSTAIN_ARGS[@]}" --out "$W/plan.json" > /dev/null

say "2. tuning ($TUNER, $STRATEGY, $TRIALS trials per shape, cap ${TUNE_CAP_S} s)"
if [ "$TUNER" = bench ]; then
  PROBLEMS=()
  for s in $(python3 -c "import sys; sys.path.insert(0, 'bench/gemm_peers'); import peers
print(' '.join(peers.shape_name(s) for s in peers.parse_shapes('$SHAPES')))"); do
    IFS=x read -r m n k <<< "$s"
    PROBLEMS+=(--problem "gemm:bf16:rc:M=$m,N=$n,K=$k")
  done
  KTUNE_WORKER=$WORKER timeout "$TUNE_CAP_S" "$K/ktune-bench" "${PROBLEMS[@]}" \
    --template gemm_tma --strategy "$STRATEGY" --budget "$TRIALS" --seconds "$JOB_SECONDS" \
    --target-ms 30 --finalists "${FINALISTS:-5}" --data-dir "$W/data" --out "$W/tune.json" > "$L/tune.log" 2>&1
  echo "ktune-bench rc=$?"; cat "$L/tune.log"
  start_ktuned never
else
  start_ktuned always
  TUNE_EXTRA=()  # TEMPLATES="a b", SEEDS="CFG CFG": the daemon's tune jobs restricted and seeded
  for t in ${TEMPLATES:-}; do TUNE_EXTRA+=(--template "$t"); done
  for c in ${SEEDS:-}; do TUNE_EXTRA+=(--seed "$c"); done
  # No job starts after the cap; one running then ends within its JOB_SECONDS (+ re-timing).
  timeout $(( TUNE_CAP_S + JOB_SECONDS + 60 - $(now) )) "${PEERS[@]}" tune --socket "$S" \
    --strategy "$STRATEGY" --trials "$TRIALS" --job-seconds "$JOB_SECONDS" \
    --deadline $(( T0 + TUNE_CAP_S )) --out "$W/tune.json" "${TUNE_EXTRA[@]}" 2>&1 | tee "$L/tune.log"
fi
"$K/ktune" --socket "$S" status > "$L/status.txt" 2>&1
"$K/ktune" --socket "$S" jobs > "$L/jobs.txt" 2>&1

END=$(( T0 + BUDGET_S - 25 ))   # kept for export, SASS, the report and the archive
[ -n "${FAKE:-}" ] && export PYTHONPATH=$PWD/tests/bench/fake_torch:$PYTHONPATH
say "3. peers: cuBLAS, torch.compile max-autotune, ktune (until $(( END - T0 )) s)"
# Progress on stdout; torch's and Inductor's logs (its AUTOTUNE tables) on stderr.
LEFT=$(( END - $(date +%s) + 15 ))
case "${TWINS:-}" in
  "") TWIN_ARGS=() ;;
  1) TWIN_ARGS=(--twins) ;;
  *) TWIN_ARGS=(--twins "$TWINS") ;;
esac
timeout $(( LEFT > 30 ? LEFT : 30 )) "${PEERS[@]}" measure --socket "$S" --deadline "$END" \
  --rounds "$ROUNDS" --sustain-s "$SUSTAIN_S" --burst-idle-s "$BURST_IDLE_S" --sets "$SETS" "${SUSTAIN_ARGS[@]}" --cubins "$W/cubins" --logs "$L" \
  --out "$W/measure.json" "${TWIN_ARGS[@]}" > "$L/measure.log" 2> "$L/measure.err"
RC=$?
cat "$L/measure.log"
echo "measure rc=$RC"; [ $RC = 0 ] || tail -20 "$L/measure.err"

say "4. export and SASS"
"$K/ktune" --socket "$S" export --format json -o "$OUT/h200.json" 2>&1 | tee "$L/export.log"
"${PEERS[@]}" sass --cubins "$W/cubins" --out "$W/sass.json" 2>&1 | tee "$L/sass.log"

say "5. report"
"${PEERS[@]}" assemble --meta-json "$W/meta.json" --plan-json "$W/plan.json" \
  --tuning-json "$W/tune.json" --measured-json "$W/measure.json" --sass-json "$W/sass.json" \
  --autotune-log "$L/measure.err" \
  --out "$OUT/gemm-peers-h200.json"
