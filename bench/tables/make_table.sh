#!/usr/bin/env bash
# Tunes the problems of bench/tables/problems.txt on this node's GPU through a real ktuned (the
# real worker, a fresh store, no seed tables) and exports the winners: the shipped table of this
# GPU (tables/<gpu>.json) comes from here.
#   bash bench/gemm_peers/make_kit.sh                     # dev box: the kit in .gpu/
#   OUT=/tmp/t bash bench/tables/make_table.sh            # GPU node (device call: carry [".gpu"])
# Writes $OUT/table.json (ktune export), $OUT/jobs.txt (each job: state, trials, seconds, winner)
# and $OUT/ktuned.log. Knobs: PROBLEMS (file), TRIALS (120 configs a job), JOB_SECONDS (45),
# BUDGET_S (480: no job starts after it; the export is written whatever finished), SEEDS (gemm
# configs measured first; default bench/gemm_peers/table_seeds.txt), K (.gpu), WORKER
# ($K/ktune-worker), DAEMON_SETS ("key=value ...": more ktuned settings), TEMPLATES_HOME (a
# folder holding templates/, as KTUNE_HOME, relative to the repository root; default the
# repository).
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$(date +%s)
K=$(cd "${K:-.gpu}" && pwd) || exit 2
KTUNE_HOME=$(cd "${TEMPLATES_HOME:-.}" && pwd) || exit 2
export KTUNE_HOME
OUT=${OUT:-/tmp/ktune-table}
PROBLEMS=${PROBLEMS:-bench/tables/problems.txt}
TRIALS=${TRIALS:-120}
JOB_SECONDS=${JOB_SECONDS:-45}
BUDGET_S=${BUDGET_S:-480}
SEEDS=${SEEDS-$(cat bench/gemm_peers/table_seeds.txt)}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/ktune-table-XXXXXX)
export LD_LIBRARY_PATH=$K/devlibs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
CLI=("$K/ktune" --socket "$W/k.sock" --timeout-ms 0)
SETS=()
for kv in ${DAEMON_SETS:-}; do SETS+=(--set "$kv"); done
"$K/ktuned" --socket "$W/k.sock" --data-dir "$W/data" --set server.metrics= --set store.seed_tables= \
  --set tuning.on_miss=false --set tuning.gpu_policy=always --set tuning.worker="${WORKER:-$K/ktune-worker}" \
  --set tuning.budget_trials="$TRIALS" --set tuning.budget_seconds="$JOB_SECONDS" \
  "${SETS[@]}" > "$OUT/ktuned.log" 2>&1 &
KPID=$!
trap 'kill $KPID 2> /dev/null; wait $KPID 2> /dev/null; rm -rf "$W"' EXIT
for _ in $(seq 300); do "${CLI[@]}" status > /dev/null 2>&1 && break; sleep 0.1; done
"${CLI[@]}" status || { tail -20 "$OUT/ktuned.log"; exit 1; }
SEED_ARGS=()
for c in $SEEDS; do SEED_ARGS+=(--seed "$c"); done
failed=0
while read -r op dtype layout dims; do
  case $op in ''|\#*) continue ;; esac
  if (( $(date +%s) - T0 > BUDGET_S )); then echo "budget spent: $op $dims not tuned"; failed=1; continue; fi
  args=("$op" --dtype "$dtype" --shape "$dims" --strategy model --budget "$TRIALS" --seconds "$JOB_SECONDS")
  [ "$layout" != - ] && args+=(--layout "$layout")
  [ "$op" = gemm ] && args+=("${SEED_ARGS[@]}")
  t=$(date +%s)
  "${CLI[@]}" tune "${args[@]}" > "$W/tune.log" 2>&1
  rc=$?
  echo "$op $dtype $layout $dims: rc=$rc in $(( $(date +%s) - t )) s; $(tail -1 "$W/tune.log")"
  (( rc == 0 )) || failed=1
done < "$PROBLEMS"
"${CLI[@]}" jobs --limit 100 > "$OUT/jobs.txt" 2>&1
"${CLI[@]}" export --format json -o "$OUT/table.json" && echo "exported: $(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['count'])" "$OUT/table.json") winners"
echo "make_table: $(( $(date +%s) - T0 )) s, $( ((failed)) && echo 'some problems failed' || echo 'all tuned')"
exit $failed
