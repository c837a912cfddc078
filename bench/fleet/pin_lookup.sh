#!/usr/bin/env bash
# Lookup latency with a pin against without one (issue 14, pinned tables): one ktuned holding a
# table of COUNT (20,000) gemm winners and a pin of all of them; ktune-lookup-load runs each point
# with the live table and with the pin, alternating, ROUNDS (2) times:
#   repeat   63 clients repeating one exact lookup (the answer and text caches)
#   zipf     64 clients over 1,000 shapes (Zipf s=1; cold builds during the warm-up, then cached)
#   cold     one client, a never-seen shape per request: every answer built (nearest + heuristics)
#
#   bench/fleet/pin_lookup.sh [seconds-per-point] [warm-up seconds]
# Prints one line per point and writes bench/results/pin-lookup-<host>-<date>.json.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-5}
WARM=${2:-10}
COUNT=${COUNT:-20000}
ROUNDS=${ROUNDS:-2}
BUILD=${BUILD_DIR:-build}
KTUNED=$BUILD/daemon/ktuned
LOAD=$BUILD/bench/ktune-lookup-load
KTUNE=$BUILD/client/cli/ktune
TMP=$(mktemp -d /tmp/ktune-pins-XXXXXX)
cleanup() { kill "${KPID:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT

"$KTUNED" --socket "$TMP/k.sock" --data-dir "$TMP/data" --set server.metrics= \
  --set log.level=warn --set store.seed_tables= 2>"$TMP/ktuned.log" & KPID=$!
for _ in $(seq 100); do [ -S "$TMP/k.sock" ] && break; sleep 0.1; done
python3 bench/lookup_traffic/make_table.py "$TMP/k.sock" "$TMP/table.json" --count "$COUNT"
"$KTUNE" --socket "$TMP/k.sock" import "$TMP/table.json" >/dev/null
"$KTUNE" --socket "$TMP/k.sock" pin create bench
EXACT='{"v":1,"id":1,"op":"lookup","device":"nvidia-h200","problem":{"op":"gemm","dtype":"bf16","layout":"rc","dims":{"M":1024,"N":1024,"K":1024}}'
results=()
offset=0
point() {  # name, pin ("" = none), ktune-lookup-load arguments
  local name=$1 pin=$2; shift 2
  local args=(--socket "$TMP/k.sock" --json --seconds "$SECS" --warmup "${W:-$WARM}" "$@")
  [ -n "$pin" ] && args+=(--pin "$pin")
  local out
  out=$("$LOAD" "${args[@]}")
  results+=("{\"point\":\"$name\",\"pin\":\"$pin\",\"result\":$out}")
  python3 -c "
import json, sys
r = json.loads(sys.argv[1])
for c in r['classes'].values():
    print(f\"{sys.argv[2]:7s} {sys.argv[3] or '(live)':7s} {c['rps']:>9.0f} req/s  p50 {c['p50_us']:8.1f} us  p99 {c['p99_us']:9.1f} us  errors {c['errors']}\")
" "$out" "$name" "$pin"
}
for _ in $(seq "$ROUNDS"); do
  for pin in "" bench; do
    req=$EXACT; [ -n "$pin" ] && req+=",\"pin\":\"$pin\""
    point repeat "$pin" --mix repeat:63 --request "$req}"
    point zipf "$pin" --mix zipf:64 --zipf-keys 1000
    offset=$((offset + 1000000))
    W=1 point cold "$pin" --mix novel:1 --novel-offset "$offset"
  done
done
OUT=bench/results/pin-lookup-$(hostname -s)-$(date -u +%Y%m%d).json
( IFS=,; echo "{\"count\":$COUNT,\"seconds\":$SECS,\"warmup\":$WARM,\"points\":[${results[*]}]}" ) \
  | python3 -m json.tool >"$OUT"
echo "wrote $OUT"
