#!/usr/bin/env bash
# Lookups under application traffic (issue 10) and the mixed-load run of issue 9, side by side in
# one run on one machine, against ktuned holding a table of COUNT (100,000) winners:
#   cold        one client, a never-seen gemm shape per request (pipeline 1): what a new shape costs
#               an application that sleeps until its reply comes (its own wake-up included)
#   cold-poll   the same, the client busy-polling its socket: the daemon's latency alone (the
#               generator spins on one CPU; with one client the other is the daemon's)
#   cold-near   (and cold-near-poll) the same over shapes whose N and K lie inside the table's grid
#               (offset 730,000,000: N from 1536, K 5632, M 1..8192), as an LLM server's are:
#               nearest shapes answer, the dearer build (the points above have no neighbour)
#   one         one client repeating one cached lookup (pipeline 1), sleeping / busy-polling
#   one-poll    (as cold / cold-poll): the round trip any reply costs on this machine, which
#               the cold points include; Redis GET is measured the same way (redis-one*)
#   cached      63 clients repeating an exact lookup, alone ...
#   cached+cold ... and with one more client flooding never-seen shapes (16 in flight)
#   cached+near ... the flood's shapes inside the grid (offset 746,777,216), as cold-near's
#   cached+import ... and with one more client importing the table back to back (every record
#               replaced each time): the lookups' tail while a big import runs
#   zipf        64 clients over 10,000 shapes (Zipf s=1), next to redis-server GET over the same law
#   zipf-warm   the same again, ktune's answers built by the zipf point (Redis's keys are all set)
#   mixed       64 clients x REQUESTS (100,000) requests: lookups (zipf), status, templates,
#               misses, jobs — errors and the daemon's RSS
#   distinct    (DISTINCT=10000000 to run) that many never-seen keys from 64 clients, then RSS
#
#   bench/lookup_traffic/run.sh [seconds-per-point]      (needs redis-server, redis-tools)
# Writes bench/results/lookup-traffic-<host>-<date>[-LABEL].json (or $OUT_JSON) and prints each
# point. On a machine without the build (the GPU node), name what to run:
#   KTUNED=bin/ktuned LOAD=bin/ktune-lookup-load TABLE=table.json PIN=0,1 LABEL=after \
#   COMMIT=abc1234 POINTS="cold cached cached+cold zipf" bench/lookup_traffic/run.sh 5
# PIN: CPUs (taskset -c) for ktuned, the load generator and redis-server, e.g. 0,1 for a 2-core
# box; TABLE: an exported table to import instead of asking the daemon for one (make_table.py);
# POINTS: which points to run (default: all; distinct only with DISTINCT > 0).
# SERVER_PERF=1: perf stat on the server (ktuned, redis-server) over each timed point's measured
# seconds: its CPU time (task-clock; user and system from /proc), context switches and syscalls
# by kind, per request served (a point's "server_perf"): CPU per request moves less with other
# work on a shared box than requests per second do.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-5}
COUNT=${COUNT:-100000}
REQUESTS=${REQUESTS:-100000}
DISTINCT=${DISTINCT:-0}
BUILD=${BUILD_DIR:-build}
POINTS=${POINTS:-cold cold-poll cold-near cold-near-poll one one-poll cached cached+cold cached+near cached+import zipf zipf-warm mixed distinct redis}
if [ -z "${KTUNED:-}" ]; then
  cmake --build "$BUILD" --target ktuned ktune-lookup-load >/dev/null
fi
KTUNED=${KTUNED:-$BUILD/daemon/ktuned}
LOAD_BIN=${LOAD:-$BUILD/bench/ktune-lookup-load}
RUN=()
[ -n "${PIN:-}" ] && RUN=(taskset -c "$PIN")
LOAD=("${RUN[@]}" "$LOAD_BIN")
TMP=$(mktemp -d /tmp/ktune-traffic-XXXXXX)
cleanup() { kill "${KPID:-}" "${RPID:-}" "${IPID:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT

"${RUN[@]}" "$KTUNED" --socket "$TMP/k.sock" --data-dir "$TMP/data" --set server.metrics= \
  --set log.level=warn --set store.seed_tables= ${KTUNED_ARGS:-} 2>"$TMP/ktuned.log" & KPID=$!
for _ in $(seq 100); do [ -S "$TMP/k.sock" ] && break; sleep 0.1; done
t0=$(date +%s.%N)
TABLE_JSON=${TABLE:-$TMP/table.json}
[ -n "${TABLE:-}" ] || python3 bench/lookup_traffic/make_table.py "$TMP/k.sock" "$TABLE_JSON" --count "$COUNT"
PYTHONPATH=client/python python3 -c "
import ktune, sys
c = ktune.Client(socket_path='$TMP/k.sock', cache_ttl=0, timeout=600)
print('import:', {k: v for k, v in c.import_file('$TABLE_JSON').items() if k != 'rejected'})
print('winners:', c.status()['winners'])
"
echo "table of $COUNT winners built and imported in $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s"

LOAD_AT_START=$(cut -d' ' -f1-3 /proc/loadavg)  # other work on the box: reported with the numbers
points=()
want() { [[ " $POINTS " == *" $1 "* ]]; }
PERF_EVENTS=task-clock,context-switches,raw_syscalls:sys_enter
for sc in recvfrom read sendto write sendmsg epoll_wait epoll_ctl futex; do
  PERF_EVENTS+=,syscalls:sys_enter_$sc
done
perf_start() {  # server pid: counts over the measured seconds (after the load's 0.5 s warm-up)
  [ -n "${SERVER_PERF:-}" ] || return 0
  (sleep 0.5; cut -d' ' -f14,15 "/proc/$1/stat" > "$TMP/stat0"
   perf stat -x, -e "$PERF_EVENTS" -p "$1" -o "$TMP/perf.txt" -- sleep "$SECS"
   cut -d' ' -f14,15 "/proc/$1/stat" > "$TMP/stat1") &
  PERF_PID=$!
}
perf_stop() {  # point name, the load's JSON result: SP = the server's counts per request, or null
  SP=null
  [ -n "${SERVER_PERF:-}" ] || return 0
  wait "$PERF_PID"
  SP=$(python3 - "$TMP/perf.txt" "$2" "$SECS" "$(cat "$TMP/stat0")" "$(cat "$TMP/stat1")" "$(getconf CLK_TCK)" <<'PY'
import json, sys
perf, result, secs = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3])
(u0, s0), (u1, s1) = (map(int, a.split()) for a in sys.argv[4:6])
tck = int(sys.argv[6])
served = result["rps"] * secs
out = {"requests_in_window": round(served),  # user and system CPU (/proc, clock ticks)
       "user_us": round((u1 - u0) / tck * 1e6 / served, 3), "sys_us": round((s1 - s0) / tck * 1e6 / served, 3)}
for line in open(perf):
    f = line.strip().split(",")
    if len(f) < 3 or line.startswith("#") or not f[0].replace(".", "").isdigit():
        continue
    name = f[2].split(":")[-1].replace("sys_enter_", "").replace("sys_enter", "syscalls")
    value = float(f[0])
    out[name + ("_us" if name == "task-clock" else "")] = round(
        (value * 1000 if name == "task-clock" else value) / served, 3)
print(json.dumps(out))
PY
)
  echo "$1 server per request: $SP"
}
point() {  # name, then ktune-lookup-load arguments
  local name=$1; shift
  want "$name" || return 0
  local out
  perf_start "$KPID"
  out=$("${LOAD[@]}" --socket "$TMP/k.sock" --json "$@") || { echo "$name: errors (see above)"; }
  echo "$name: $out"
  echo "$out" > "$TMP/$name.json"
  perf_stop "$name" "$out"
  points+=("{\"name\":\"$name\",\"args\":\"$*\",\"result\":$out,\"server_perf\":$SP}")
}
point cold --mix novel:1 --seconds "$SECS" --novel-offset 0
point cold-poll --mix novel:1 --seconds "$SECS" --novel-offset 400000000 --poll
point cold-near --mix novel:1 --seconds "$SECS" --novel-offset 730000000
point cold-near-poll --mix novel:1 --seconds "$SECS" --novel-offset 738388608 --poll
point one --mix repeat:1 --seconds "$SECS"
point one-poll --mix repeat:1 --seconds "$SECS" --poll
point cached --mix repeat:63 --seconds "$SECS"
point cached+cold --mix repeat:63,novel:1x16 --seconds "$SECS" --novel-offset 100000000
point cached+near --mix repeat:63,novel:1x16 --seconds "$SECS" --novel-offset 746777216
# The cached clients while one more client imports the table back to back for the whole point,
# every record replaced each time (import_loop.py): a `ktune import` or a fleet sync beside an
# application's lookups. The imports' seconds and counts go into the point as "imports".
if want cached+import; then
  python3 bench/lookup_traffic/import_loop.py "$TMP/k.sock" "$TABLE_JSON" "$TMP/import.ready" \
    "$TMP/import.stop" > "$TMP/imports.json" & IPID=$!
  while [ ! -e "$TMP/import.ready" ]; do
    kill -0 "$IPID" 2>/dev/null || { echo "import_loop.py failed"; exit 1; }
    sleep 0.1
  done
  point cached+import --mix repeat:63 --seconds "$SECS"
  touch "$TMP/import.stop"
  wait "$IPID" || { echo "import_loop.py failed (above)"; echo '{"imports":[],"failed":true}' > "$TMP/imports.json"; }
  last=$(( ${#points[@]} - 1 ))
  points[$last]="${points[$last]%\}},\"imports\":$(cat "$TMP/imports.json")}"
  echo "cached+import imports: $(cat "$TMP/imports.json")"
fi
point zipf --mix zipf:64 --seconds "$SECS"
# The same law again: by now ktune has built (nearly) every one of the 10,000 shapes, as Redis
# holds every key before its run: the like-for-like comparison with Redis GET.
point zipf-warm --mix zipf:64 --seconds "$SECS"
point mixed --mix ops:64 --requests "$REQUESTS" --novel-offset 200000000
if [ "$DISTINCT" -gt 0 ]; then
  point distinct --mix novel:64x4 --requests $(( DISTINCT / 64 )) --novel-offset 300000000
fi

# Redis: the same load generator, GET over the same Zipf law, each value sized so that Redis's
# reply ("$<n>\r\n<n bytes>\r\n") is as long as ktune's mean zipf reply line in this run
# (REDIS_VALUE_BYTES sets n instead. Before 2026-12-05 it was 600 against ktune's ~1,349-byte replies.)
REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}
if want redis && command -v "$REDIS_SERVER" >/dev/null; then
  "${RUN[@]}" "$REDIS_SERVER" --port 0 --unixsocket "$TMP/r.sock" --save '' --appendonly no --loglevel warning \
    >"$TMP/redis.log" 2>&1 & RPID=$!
  for _ in $(seq 50); do [ -S "$TMP/r.sock" ] && break; sleep 0.1; done
  VALUE_BYTES=${REDIS_VALUE_BYTES:-$(python3 - "$TMP" <<'PY'
import json, os, sys
for name in ("zipf-warm", "zipf"):  # ktune's mean reply, the RESP framing taken off
    path = os.path.join(sys.argv[1], name + ".json")
    if os.path.exists(path):
        mean = json.load(open(path)).get("reply_bytes_mean", 0)
        if mean > 0:
            n = int(round(mean)) - 5
            print(n - len(str(n)))
            break
else:
    print(600)
PY
)}
  echo "redis values: $VALUE_BYTES bytes"
  value=$(python3 -c "print('x' * $VALUE_BYTES)")
  python3 -c "
import sys
v = '$value'
for z in range(10000):
    k = f'zipf:{z}'
    sys.stdout.write(f'*3\r\n\$3\r\nSET\r\n\${len(k)}\r\n{k}\r\n\${len(v)}\r\n{v}\r\n')
" | "$REDIS_CLI" -s "$TMP/r.sock" --pipe >/dev/null
  perf_start "$RPID"
  rz=$("${LOAD[@]}" --socket "$TMP/r.sock" --redis --json --mix zipf:64 --seconds "$SECS")
  echo "redis zipf: $rz"
  perf_stop "redis zipf" "$rz"
  points+=("{\"name\":\"redis-zipf\",\"args\":\"--redis --mix zipf:64\",\"value_bytes\":$VALUE_BYTES,\"result\":$rz,\"server_perf\":$SP}")
  if want one; then  # one client's round trip to Redis, as the one/one-poll points measure ktuned's
    for poll in "" --poll; do
      r1=$("${LOAD[@]}" --socket "$TMP/r.sock" --redis --json --mix zipf:1 --seconds "$SECS" $poll)
      echo "redis-one${poll:+-poll}: $r1"
      points+=("{\"name\":\"redis-one${poll:+-poll}\",\"args\":\"--redis --mix zipf:1 $poll\",\"result\":$r1}")
    done
  fi
fi

mkdir -p bench/results
OUT=${OUT_JSON:-bench/results/lookup-traffic-$(hostname)-$(date -u +%Y%m%d)${LABEL:+-$LABEL}.json}
python3 - "$OUT" "$SECS" "$COUNT" "${COMMIT:-$(git rev-parse --short HEAD)}" "$("$REDIS_SERVER" --version 2>/dev/null || echo none)" "${PIN:-all}" "${KTUNED_ARGS:-}" "$LOAD_AT_START" "${points[@]}" <<'PY'
import datetime, json, os, platform, sys
out, secs, count, commit, redis, pin, ktuned_args, load_at_start = sys.argv[1:9]
points = [json.loads(p) for p in sys.argv[9:]]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
by = {p["name"]: p["result"] for p in points}
summary = {}
if "cold" in by:
    summary["cold_p50_us"] = by["cold"]["classes"]["novel"]["p50_us"]
    summary["cold_p99_us"] = by["cold"]["classes"]["novel"]["p99_us"]
for name in ("cold-poll", "cold-near", "cold-near-poll"):
    if name in by:
        key = name.replace("-", "_")
        summary[f"{key}_p50_us"] = by[name]["classes"]["novel"]["p50_us"]
        summary[f"{key}_p99_us"] = by[name]["classes"]["novel"]["p99_us"]
# What a never-seen shape costs beyond the round trip of any reply (the one* points: a cached
# lookup from one client the same way), and that round trip to Redis.
for cold, one in (("cold", "one"), ("cold-poll", "one-poll")):
    if cold in by and one in by:
        key = one.replace("-", "_")
        summary[f"{key}_p50_us"] = by[one]["classes"]["repeat"]["p50_us"]
        summary[f"{cold.replace('-', '_')}_minus_{key}_p50_us"] = round(
            by[cold]["classes"]["novel"]["p50_us"] - by[one]["classes"]["repeat"]["p50_us"], 1)
for name in ("redis-one", "redis-one-poll"):
    if name in by:
        summary[f"{name.replace('-', '_')}_p50_us"] = by[name]["classes"]["zipf"]["p50_us"]
# The cached clients' p99 with a flood beside them over their p99 alone (the cold flood's ratio
# keeps its first name, cached_p99_ratio).
for flood, kind, ratio_key in (("cached+cold", "cold", "cached_p99_ratio"),
                               ("cached+near", "near", "cached_p99_ratio_near_flood")):
    if "cached" in by and flood in by:
        a, b = by["cached"]["classes"]["repeat"]["p99_us"], by[flood]["classes"]["repeat"]["p99_us"]
        summary["cached_p99_us_alone"], summary[f"cached_p99_us_with_{kind}_flood"] = a, b
        summary[ratio_key] = round(b / a, 3) if a else None
if "cached" in by and "cached+import" in by:
    a = by["cached"]["classes"]["repeat"]["p99_us"]
    b = by["cached+import"]["classes"]["repeat"]["p99_us"]
    loop = next(p["imports"] for p in points if p["name"] == "cached+import")
    summary["cached_p99_us_with_import"] = b
    summary["cached_p99_ratio_import"] = round(b / a, 3) if a else None
    summary["imports_during_point"] = len(loop["imports"])
    summary["import_seconds"] = [i["seconds"] for i in loop["imports"]]
    summary["imports_of_a_repeated_copy"] = loop.get("repeated_last_copy")
for name in ("zipf", "zipf-warm"):
    if name in by and "redis-zipf" in by:
        key = name.replace("-", "_")
        summary[f"{key}_over_redis_rps"] = round(by[name]["rps"] / by["redis-zipf"]["rps"], 3)
        summary[f"{key}_p99_us"] = by[name]["classes"]["zipf"]["p99_us"]
if "redis-zipf" in by:
    summary["redis_zipf_p99_us"] = by["redis-zipf"]["classes"]["zipf"]["p99_us"]
for name in ("mixed", "distinct"):
    if name in by:
        summary[f"{name}_requests"] = by[name]["requests"]
        summary[f"{name}_errors"] = by[name]["errors"]
        summary[f"{name}_rss_kib"] = by[name]["server_rss_kib"]
doc = {"benchmark": "lookup_traffic", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
       "host": platform.node(), "cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(),
       "commit": commit, "redis": redis, "cpus_pinned": pin, "ktuned_args": ktuned_args, "seconds_per_point": float(secs),
       "load_average": {"start": [float(x) for x in load_at_start.split()], "end": list(os.getloadavg())}, "winners_in_index": int(count),
       "summary": summary, "points": points}
json.dump(doc, open(out, "w"), indent=2)
print(json.dumps(summary, indent=2))
print("wrote", out)
PY
