#!/usr/bin/env bash
# Heuristic rules (or tables, or daemons) against each other on a GPU node: bench/launch/graph_torch.py
# on the same shapes for every variant, the variants alternating within each round (each round
# starting one variant further on), one call.
#   bash bench/gemm_peers/make_kit.sh                     # dev box: the kit in .gpu/ (carry [".gpu"])
#   SHAPES=16x2048x8192,16x1024x4096 OUT=/tmp/ab bash bench/launch/rules_ab.sh \
#     head=. rule=.gpu/rulehome shipped=.:tables/h100.json
# A variant is NAME=HOME[:TABLE[:KTUNED]]: the templates of HOME (a folder holding templates/, as
# KTUNE_HOME), the seed tables TABLE (default: none, so lookups answer from the heuristics alone)
# and the daemon binary KTUNED (default .gpu/ktuned). Writes $OUT/graph-torch-NAME-ROUND.json per
# variant and round (a failed run's log beside it) and prints torch/ktune (graphed) per shape;
# at the end bench/launch/rules_ab_summary.py's table (means over the rounds) and $OUT/summary.json.
# Relative paths (OUT, HOME, TABLE, KTUNED) are read from the repository root. The other KTUNE_*
# variables of the caller are cleared, so each variant is only what it names. Knobs: ROUNDS (2),
# PER_RUN_S (200).
set -uo pipefail
cd "$(dirname "$0")/../.."
for k in $(compgen -e | grep '^KTUNE_'); do unset "$k"; done
[ $# -ge 1 ] && [ -n "${SHAPES:-}" ] || { echo "usage: SHAPES=MxNxK,... $0 NAME=HOME[:TABLE[:KTUNED]] ..." >&2; exit 2; }
OUT=${OUT:-/tmp/ktune-rules-ab}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.gpu/devlibs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
NONE=$OUT/no-table.json
echo '{"ktune_table": 1, "exported_at": "2026-12-06T00:00:00Z", "count": 0, "winners": []}' > "$NONE"
names=" "
for v in "$@"; do  # check every variant before any GPU time is spent
  IFS=: read -r home table ktuned <<< "${v#*=}"
  case $names in *" ${v%%=*} "*) echo "bad variant '$v': its name is taken" >&2; exit 2 ;; esac
  names+="${v%%=*} "
  [ "$v" != "${v#*=}" ] && [ -d "$home/templates" ] || { echo "bad variant '$v': no templates/ in '$home'" >&2; exit 2; }
  [ -z "$table" ] || [ -f "$table" ] || { echo "bad variant '$v': no table '$table'" >&2; exit 2; }
  [ -x "${ktuned:-.gpu/ktuned}" ] || { echo "bad variant '$v': no daemon '${ktuned:-.gpu/ktuned}'" >&2; exit 2; }
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader
vs=("$@")
for r in $(seq "${ROUNDS:-2}"); do
  # Each round starts one variant further on: a run after another one finds the GPU warmer (calls
  # E and G ran every variant after head's, and torch read 1-6 % slower in those runs).
  for k in $(seq 0 $(($# - 1))); do
    v=${vs[$(((k + r - 1) % $#))]}
    name=${v%%=*}
    IFS=: read -r home table ktuned <<< "${v#*=}"
    echo "=== $name round $r $(date -u +%T)"
    rm -f "$OUT/graph-torch-$name-$r.json" "$OUT/graph-torch-$name-$r.log"
    KTUNE_HOME=$(cd "$home" && pwd) KTUNE_SEED_TABLES=$(realpath "${table:-$NONE}") \
      timeout "${PER_RUN_S:-200}" python3 bench/launch/graph_torch.py --ktuned "${ktuned:-.gpu/ktuned}" \
      --shapes "$SHAPES" --out "$OUT/graph-torch-$name-$r.json" > "$OUT/run.log" 2>&1
    rc=$?
    grep -o "^[0-9x]*:\|torch/ktune graph [0-9.]*" "$OUT/run.log" | paste -sd' ' | sed 's/ \([0-9]*x\)/\n\1/g'
    [ $rc -eq 0 ] || { echo "rc=$rc"; tail -5 "$OUT/run.log"; cp "$OUT/run.log" "$OUT/graph-torch-$name-$r.log"; }
  done
done
rm -f "$OUT/run.log" "$NONE"
python3 bench/launch/rules_ab_summary.py "$OUT" --variants "$(echo $names | tr ' ' ',')" --json "$OUT/summary.json"
