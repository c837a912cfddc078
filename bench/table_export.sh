#!/usr/bin/env bash
# Export and import of a big tuning table through a real ktuned and the ktune CLI: wall time, the
# CLI's CPU time and peak RSS (/usr/bin/time -v), the daemon's CPU time for the step and its peak
# RSS (VmHWM, a fresh daemon per step so each peak is that step's own), then yaml-cpp loading the
# YAML export. On a shared machine trust the CPU columns over wall time.
#   bench/table_export.sh [winners] [formats]     # defaults: 50000 "json yaml csv"
# Prints one line per step; needs /usr/bin/time (Debian package `time`).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-50000}
FORMATS=${2:-json yaml csv}
BUILD=${BUILD_DIR:-build}
cmake --build "$BUILD" --target ktuned ktune ktune-table-bench >/dev/null
TMP=$(mktemp -d /tmp/ktune-table-XXXXXX)
cleanup() { [ -n "${KPID:-}" ] && kill "$KPID" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT
CLI=("$BUILD/client/cli/ktune" --socket "$TMP/k.sock" --timeout-ms 3600000)

start_daemon() {
  "$BUILD/daemon/ktuned" --socket "$TMP/k.sock" --data-dir "$TMP/data" --set server.metrics= \
    --set store.seed_tables= --set log.level=warn 2>>"$TMP/ktuned.log" & KPID=$!
  for _ in $(seq 200); do "${CLI[@]}" status >/dev/null 2>&1 && return; sleep 0.05; done
  echo "ktuned did not start"; cat "$TMP/ktuned.log"; exit 1
}
stop_daemon() { kill "$KPID"; wait "$KPID" 2>/dev/null || true; KPID=; }
hwm_mib() { awk '/VmHWM/ {printf "%.0f", $2 / 1024}' "/proc/$KPID/status"; }
# The daemon's CPU seconds so far (user + system).
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$KPID/stat"; }
# Runs the CLI under /usr/bin/time -v; prints "wall_s cli_cpu_s cli_peak_mib".
timed() {
  /usr/bin/time -v -o "$TMP/time" "$@" >"$TMP/out" 2>&1 || { cat "$TMP/out"; exit 1; }
  awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, t, ":"); s = t[n] + 60 * t[n-1] + (n > 2 ? 3600 * t[1] : 0)}
              /User time|System time/ {c += $2}
              /Maximum resident set size/ {r = $2 / 1024}
              END {printf "%.2f %.2f %.0f\n", s, c, r}' "$TMP/time"
}
since() { awk -v a="$(cpu_s)" -v b="$1" 'BEGIN {printf "%.2f", a - b}'; }
row() { printf '%-14s %8s %8s %8s %8s %9s %12s %10s\n' "$@"; }

"$BUILD/bench/ktune-table-bench" --winners "$N" --write "$TMP/table.json" >/dev/null
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
row step winners wall_s cli_cpu cli_mib daemon_cpu daemon_mib bytes
start_daemon
before=$(hwm_mib) c0=$(cpu_s)
read -r wall cpu cli < <(timed "${CLI[@]}" import "$TMP/table.json")
row "import json" "$N" "$wall" "$cpu" "$cli" "$(since "$c0")" "$before->$(hwm_mib)" \
  "$(stat -c %s "$TMP/table.json")"
stop_daemon
for f in $FORMATS; do
  start_daemon
  before=$(hwm_mib) c0=$(cpu_s)
  read -r wall cpu cli < <(timed "${CLI[@]}" export --format "$f" -o "$TMP/out.$f")
  row "export $f" "$N" "$wall" "$cpu" "$cli" "$(since "$c0")" "$before->$(hwm_mib)" \
    "$(stat -c %s "$TMP/out.$f")"
  stop_daemon
done
if [ -f "$TMP/out.yaml" ]; then
  read -r wall cpu cli < <(timed "$BUILD/bench/ktune-table-bench" --yaml-load "$TMP/out.yaml")
  row "yaml-cpp load" "$N" "$wall" "$cpu" "$cli" - - "$(stat -c %s "$TMP/out.yaml")"
fi
