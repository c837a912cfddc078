#!/usr/bin/env bash
# Lookup throughput and latency: ktuned vs redis-server, side by side in one run, same machine,
# both over a Unix socket, 1 and 64 concurrent clients, with and without pipelining (16).
# Redis is the anchor for "a small request answered from memory over a local socket".
#   bench/lookup_vs_redis.sh [seconds-per-point]      (needs: redis-server redis-tools python3)
# Writes bench/results/lookup_vs_redis-<host>-<date>.json and prints a table.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER=${1:-5}
BUILD=${BUILD_DIR:-build}
command -v redis-server >/dev/null || { echo "needs redis-server (apt-get install redis-server redis-tools)"; exit 1; }
cmake --build "$BUILD" --target ktuned ktune-lookup-load >/dev/null
TMP=$(mktemp -d /tmp/ktune-load-XXXXXX)
cleanup() { kill "${KPID:-}" "${RPID:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT

# ktuned with one exact winner, so the benchmarked lookup is the common case: an exact hit.
"$BUILD/daemon/ktuned" --socket "$TMP/k.sock" --data-dir "$TMP/data" --set server.metrics= \
  --set store.seed_tables= --set log.level=warn --set server.io_threads="${IO_THREADS:-1}" 2>"$TMP/ktuned.log" & KPID=$!
PYTHONPATH=client/python python3 - "$TMP" <<'PY'
import json, sys, time, ktune
tmp = sys.argv[1]
c = ktune.Client(socket_path=f"{tmp}/k.sock", cache_ttl=0)
for _ in range(100):
    try: c.status(); break
    except ktune.KtuneError: time.sleep(0.05)
gemm = next(t for t in c.templates()["templates"] if t["name"] == "gemm")
h = c.lookup("gemm", layout="rc", device="nvidia-h200.sm90.132sm.140gib", M=4096, N=4096, K=4096).best
rec = {"device": {"name": "NVIDIA H200", "cc": 90, "sm_count": 132, "memory_gib": 140},
       "problem": {"op": "gemm", "dtype": "bf16", "out_dtype": "bf16", "layout": "rc", "dims": {"M": 4096, "N": 4096, "K": 4096}},
       "validators": {"driver": "none", "nvrtc": c.status()["validators"]["nvrtc"], "store_format": 1},
       "ranked": [{"template": "gemm", "template_hash": gemm["hash"], "params": h.params, "median_us": 190.0}]}
json.dump({"ktune_table": 1, "winners": [rec]}, open(f"{tmp}/t.json", "w"))
print("import:", c.import_file(f"{tmp}/t.json"))
assert c.lookup("gemm", layout="rc", device="nvidia-h200", M=4096, N=4096, K=4096).best.provenance == "exact"
PY

redis-server --port 0 --unixsocket "$TMP/r.sock" --save '' --appendonly no --loglevel warning >"$TMP/redis.log" 2>&1 & RPID=$!
for _ in $(seq 50); do [ -S "$TMP/r.sock" ] && break; sleep 0.1; done
redis-cli -s "$TMP/r.sock" set key:0 xyz >/dev/null

rows=()
printf '%-14s %7s %8s %12s %9s %9s\n' system clients pipeline "requests/s" "p50_us" "p99_us"
for clients in 1 64; do
  for pipeline in 1 16; do
    k=$("$BUILD/bench/ktune-lookup-load" --socket "$TMP/k.sock" --clients $clients --pipeline $pipeline \
        --seconds "$SECONDS_PER" --json)
    # The same load generator against redis (GET): like for like, next to redis-benchmark's own view.
    rl=$("$BUILD/bench/ktune-lookup-load" --socket "$TMP/r.sock" --redis --clients $clients --pipeline $pipeline \
        --seconds "$SECONDS_PER" --json)
    # redis-benchmark runs a request count; size it to about the same duration.
    n=$(python3 -c "import json,sys; print(max(20000, int(json.loads(sys.argv[1])['rps'] * $SECONDS_PER)))" "$k")
    r=$(redis-benchmark -s "$TMP/r.sock" -t get -c $clients -P $pipeline -n "$n" --csv 2>/dev/null | tail -1)
    row=$(python3 - "$k" "$r" $clients $pipeline "$rl" <<'PY'
import json, sys
k = json.loads(sys.argv[1])
f = [x.strip('"') for x in sys.argv[2].split(",")]
r = {"rps": float(f[1]), "p50_us": float(f[4]) * 1000, "p99_us": float(f[6]) * 1000}
rl = json.loads(sys.argv[5])
print(json.dumps({"clients": int(sys.argv[3]), "pipeline": int(sys.argv[4]),
                  "ktune": {"rps": k["rps"], "p50_us": k["p50_us"], "p99_us": k["p99_us"], "errors": k["errors"]},
                  "redis": r,
                  "redis_same_client": {"rps": rl["rps"], "p50_us": rl["p50_us"], "p99_us": rl["p99_us"], "errors": rl["errors"]},
                  "ktune_over_redis_rps": round(k["rps"] / r["rps"], 3),
                  "ktune_over_redis_same_client_rps": round(k["rps"] / rl["rps"], 3)}))
PY
)
    rows+=("$row")
    python3 - "$row" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
for s, label in (("ktune", "ktune"), ("redis", "redis-bench"), ("redis_same_client", "redis(same)")):
    print(f"{label:<14} {r['clients']:7d} {r['pipeline']:8d} {r[s]['rps']:12.0f} {r[s]['p50_us']:9.1f} {r[s]['p99_us']:9.1f}")
PY
  done
done

mkdir -p bench/results
OUT=bench/results/lookup_vs_redis-$(hostname)-$(date -u +%Y%m%d).json
python3 - "$OUT" "$SECONDS_PER" "$(redis-server --version)" "${rows[@]}" <<'PY'
import json, os, platform, subprocess, sys, datetime
out, secs, redis_version, rows = sys.argv[1], float(sys.argv[2]), sys.argv[3], [json.loads(r) for r in sys.argv[4:]]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
doc = {"benchmark": "lookup_vs_redis", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
       "host": platform.node(), "cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(),
       "redis": redis_version, "seconds_per_point": secs,
       "request": "lookup gemm bf16 rc 4096^3 (exact hit), reply ~600 bytes; redis: GET of a 3-byte value",
       "clients": "ktune and redis_same_client: bench/lookup_load.cc (one epoll thread); redis: redis-benchmark -t get",
       "rows": rows}
json.dump(doc, open(out, "w"), indent=2)
print("wrote", out)
PY
