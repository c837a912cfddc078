#!/usr/bin/env bash
# User-space instructions a server executes per request, counted by callgrind over every thread of
# the server: ktuned per lookup of each traffic class, and redis-server per GET over the same Zipf
# law. A measure that does not move with the host (the 2-vCPU dev VM's socket timings of one binary
# spread +-20 % run to run; bench/NOTES.md), so two builds of ktuned compare to the instruction.
# The kernel's socket work (about the same per request for both servers: bench/NOTES.md "Warm Zipf
# lookups against Redis GET") is not counted.
#   bench/lookup_traffic/server_instructions.sh build/daemon/ktuned [/tmp/base-ktuned ...]
# COUNT (20000) winners from make_table.py, POINTS ("one zipf-warm cold cold-near redis"),
# REQUESTS per point (2000; cold points 300), LOAD (the load generator), ANNOTATE=1 for the top
# functions of each point. Every cold build runs on the executor (server.inline_build_us 0): under
# callgrind every build measures dear, so the inline budget would decide nothing reproducibly; the
# hop's instructions (a post each way and a wake-up) are counted in every cold point.
# CALLGRIND_ARGS: more callgrind options (--cache-sim=yes: simulated cache misses per request too;
# then SORT=DLmr orders ANNOTATE's functions by last-level read misses; INCLUSIVE=no lists
# each function's own cost instead of what it and its callees cost).
# OUT_JSON: also write the points there (bench/results/...). Needs valgrind, redis-server and
# redis-tools.
set -euo pipefail
cd "$(dirname "$0")/../.."
COUNT=${COUNT:-20000}
REQUESTS=${REQUESTS:-2000}
COLD_REQUESTS=${COLD_REQUESTS:-300}
POINTS=${POINTS:-one zipf-warm cold cold-near redis}
LOAD=${LOAD:-build/bench/ktune-lookup-load}
W=$(mktemp -d /tmp/server-ir-XXXXXX)
PIDS=()
cleanup() { kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$W"; }
trap cleanup EXIT
want() { [[ " $POINTS " == *" $1 "* ]]; }

start() {  # name, then the server's command line: runs it under callgrind, collecting nothing yet
  local name=$1; shift
  valgrind --tool=callgrind --instr-atstart=no ${CALLGRIND_ARGS:-} --callgrind-out-file="$W/$name.%p.out" \
    "$@" >"$W/$name.log" 2>&1 &
  PIDS+=($!)
  SPID=$!
}
wait_socket() {  # a server under valgrind starts in tens of seconds
  for _ in $(seq 1800); do
    [ -S "$1" ] && return 0
    kill -0 "$SPID" 2>/dev/null || break
    sleep 0.1
  done
  echo "no socket $1; the server's log:" >&2; tail -20 "$W"/*.log >&2; exit 1
}

measure() {  # label, pid, then the load generator's arguments: instructions per request served
  local label=$1 pid=$2; shift 2
  # Unmeasured warm-up of the same class first, so that caches, the index and the allocator are
  # in their steady state (cold points: other never-seen shapes).
  callgrind_control -z "$pid" >/dev/null 2>&1
  callgrind_control -i on "$pid" >/dev/null 2>&1
  "$LOAD" --json "$@" >"$W/load.json"
  callgrind_control -i off "$pid" >/dev/null 2>&1
  callgrind_control -d "$(echo "$label" | tr -c "a-zA-Z0-9_\n-" _)" "$pid" >/dev/null 2>&1
  local out=""
  for _ in $(seq 300); do  # the dump is written by the server, after callgrind_control returns
    out=$(ls -t "$W"/*.out.* 2>/dev/null | head -1 || true)
    [ -n "$out" ] && grep -q "^totals:" "$out" && break
    sleep 0.1
  done
  [ -n "$out" ] || { echo "$label: no dump from callgrind" >&2; exit 1; }
  local ir
  ir=$(grep -E "^totals:" "$out" | head -1 | awk '{print $2}')
  local served
  served=$(python3 -c "
import json, sys
d = json.load(open('$W/load.json'))
if d['errors']: sys.exit(f'{d[\"errors\"]} error replies: not a measurement')
print(d['requests'])")
  echo "$label: $((ir / served)) instructions per request ($ir over $served)"
  python3 - "$out" "$served" "$label" >>"$W/points.jsonl" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
events = next(l for l in lines if l.startswith("events:")).split()[1:]
totals = next(l for l in lines if l.startswith("totals:")).split()[1:]
n = int(sys.argv[2])
print(json.dumps({"point": sys.argv[3], "requests": n,
                  "per_request": {e: round(int(t) / n, 1) for e, t in zip(events, totals)}}))
PY
  # With CALLGRIND_ARGS=--cache-sim=yes: every simulated event per request (D1mr: first-level
  # data read misses, DLmr: last-level ones, ...).
  if grep -q "^events: Ir [A-Z]" "$out"; then
    python3 - "$out" "$served" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
events = next(l for l in lines if l.startswith("events:")).split()[1:]
totals = next(l for l in lines if l.startswith("totals:")).split()[1:]
print("  per request: " + ", ".join(f"{e} {int(t) / int(sys.argv[2]):.1f}" for e, t in zip(events, totals)))
PY
  fi
  if [ -n "${ANNOTATE:-}" ]; then
    callgrind_annotate --inclusive="${INCLUSIVE:-yes}" ${SORT:+--sort=$SORT} "$out" 2>/dev/null | grep -E "^ *[0-9,]+ " | sed -n 2,40p \
      | sed -E 's/\[[^]]*\]$//; s/\(([^()]|\([^()]*\))*\)//g' | cut -c1-150
  fi
  rm -f "$out"
}

for bin in "$@"; do
  tag=$(basename "$(dirname "$bin")")-$(basename "$bin")
  sock="$W/k.sock"
  rm -f "$sock"
  start ktuned "$bin" --socket "$sock" --data-dir "$W/data-$tag" --set server.metrics= \
    --set log.level=warn --set store.seed_tables= --set server.inline_build_us=0 \
    --set tuning.on_miss=false
  kpid=$SPID
  wait_socket "$sock"
  [ -f "$W/table.json" ] || python3 bench/lookup_traffic/make_table.py "$sock" "$W/table.json" --count "$COUNT" >/dev/null
  PYTHONPATH=client/python python3 -c "
import ktune
c = ktune.Client(socket_path='$sock', cache_ttl=0, timeout=3600)
c.import_file('$W/table.json')
"
  if want one; then
    "$LOAD" --socket "$sock" --mix repeat:1 --requests 200 >/dev/null
    measure "$bin one" "$kpid" --socket "$sock" --mix repeat:1 --requests "$REQUESTS"
  fi
  if want zipf-warm; then
    # The measured requests are the warm-up's first ones again (same seed): every answer is
    # cached, as Redis holds every key (a fresh draw would still meet never-asked shapes of the
    # law's tail, each a cold build).
    "$LOAD" --socket "$sock" --mix zipf:8 --requests $((REQUESTS / 8)) --seed 7 >/dev/null
    measure "$bin zipf-warm" "$kpid" --socket "$sock" --mix zipf:8 --requests $((REQUESTS / 8)) --seed 7
  fi
  if want cold; then
    "$LOAD" --socket "$sock" --mix novel:1 --requests 100 --novel-offset 500000000 >/dev/null
    measure "$bin cold" "$kpid" --socket "$sock" --mix novel:1 --requests "$COLD_REQUESTS" \
      --novel-offset 400000000
  fi
  if want cold-near; then
    "$LOAD" --socket "$sock" --mix novel:1 --requests 100 --novel-offset 746777216 >/dev/null
    measure "$bin cold-near" "$kpid" --socket "$sock" --mix novel:1 --requests "$COLD_REQUESTS" \
      --novel-offset 738388608
  fi
  kill "$kpid"; wait "$kpid" 2>/dev/null || true
done

if want redis; then
  rsock="$W/r.sock"
  start redis redis-server --port 0 --unixsocket "$rsock" --save '' --appendonly no --loglevel warning
  rpid=$SPID
  wait_socket "$rsock"
  python3 -c "
import sys
v = 'x' * 600
for z in range(10000):
    k = f'zipf:{z}'
    sys.stdout.write(f'*3\r\n\$3\r\nSET\r\n\${len(k)}\r\n{k}\r\n\${len(v)}\r\n{v}\r\n')
" | redis-cli -s "$rsock" --pipe >/dev/null
  measure "redis-server GET zipf" "$rpid" --socket "$rsock" --redis --mix zipf:8 --requests $((REQUESTS / 8)) --seed 7
fi

if [ -n "${OUT_JSON:-}" ]; then
  python3 - "$W/points.jsonl" "$OUT_JSON" "$COUNT" "$(redis-server --version 2>/dev/null || echo none)" "${CALLGRIND_ARGS:-}" <<'PY'
import datetime, json, platform, sys
points = [json.loads(l) for l in open(sys.argv[1])]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
json.dump({"bench": "server_instructions", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "host": platform.node(), "cpu": cpu, "winners": int(sys.argv[3]), "redis": sys.argv[4],
           "callgrind_args": sys.argv[5], "points": points}, open(sys.argv[2], "w"), indent=1)
print("wrote", sys.argv[2])
PY
fi
