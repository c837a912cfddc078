#!/usr/bin/env bash
# Instructions a cold lookup executes, counted by callgrind: a measure of the cold path's CPU that
# does not move with the host (the 2-vCPU dev VM's timings of one binary spread 27-39 us run to
# run; bench/NOTES.md). Counts LookupService::lookup (of a JSON body: the request read too) and
# everything under it, per cold phase of
# ktune-memory-bench (`--cold PHASE`), for each binary given, so two builds compare side by side.
#   bench/lookup_instructions.sh build/bench/ktune-memory-bench [/tmp/base-memory-bench ...]
# WINNERS (20000), QUERIES (1000), PHASES ("cold cold_live cold_novel_n64_k64"). Prints one line
# per binary and phase: instructions per lookup, and the top functions (inclusive) with
# ANNOTATE=1. Needs valgrind (Debian: apt-get install valgrind).
set -euo pipefail
WINNERS=${WINNERS:-20000}
QUERIES=${QUERIES:-1000}
PHASES=${PHASES:-"cold cold_live cold_novel_n64_k64"}
W=$(mktemp -d /tmp/lookup-ir-XXXXXX)
trap 'rm -rf "$W"' EXIT
for phase in $PHASES; do
  n=$QUERIES
  [ "$phase" = cold_novel_n64_k64 ] && [ "$n" -gt 8192 ] && n=8192
  i=0
  for bin in "$@"; do
    i=$((i + 1))
    valgrind --tool=callgrind --callgrind-out-file="$W/$i-$phase.out" \
      --toggle-collect='ktune::LookupService::lookup(nlohmann*' \
      "$bin" --winners "$WINNERS" --queries "$QUERIES" --cold "$phase" > "$W/$i-$phase.json" 2> "$W/$i-$phase.err" &
  done
  wait
  i=0
  for bin in "$@"; do
    i=$((i + 1))
    ir=$(grep -E "^summary:|^totals:" "$W/$i-$phase.out" | head -1 | awk '{print $2}')
    echo "$phase $bin: $((ir / n)) instructions per lookup ($ir over $n)"
    if [ -n "${ANNOTATE:-}" ]; then
      callgrind_annotate --inclusive=yes "$W/$i-$phase.out" 2>/dev/null | grep -E "^ *[0-9,]+ \(" | sed -n 2,40p \
        | sed -E 's/\[[^]]*\]$//; s/\(([^()]|\([^()]*\))*\)//g' | cut -c1-150
    fi
  done
done
