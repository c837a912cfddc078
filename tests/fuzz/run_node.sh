#!/usr/bin/env bash
# Runs the libFuzzer targets for a fixed number of executions on a many-core machine (the GPU
# node's 16 CPUs: the GPU is not used) and sums what every job executed (docs/reliability.md,
# "Fuzzing"). K holds what was built on the dev box: bin/ (fuzz_request, fuzz_table, fuzz_frame,
# each optionally gzipped), devlibs/ (shared/tools/device-bundle), corpus/ (a copy of
# tests/fuzz/corpus). One target per call keeps each call under the device's 10-minute limit:
#   K=.cache/fuzz OUT=/tmp/out TARGET=fuzz_table RUNS=10200000 JOBS=16 MAX_S=560 \
#     bash tests/fuzz/run_node.sh
# Writes $OUT/<target>/: fuzz-*.log (one per job), summary.json (executions, failures, corpus
# size, the command), crash-* artifacts if any, and the corpus it grew (corpus.tar.gz).
# fuzz_frame: MAX_LEN=256 (docs/reliability.md, "Fuzzing": every framing case fits; cheaper).
set -uo pipefail
K=$(cd "${K:?K: the kit folder}" && pwd)
OUT=${OUT:?OUT: where results go}
TARGET=${TARGET:?TARGET: fuzz_request, fuzz_table or fuzz_frame}
RUNS=${RUNS:-10200000}
JOBS=${JOBS:-$(nproc)}
MAX_S=${MAX_S:-560}
MAX_LEN=${MAX_LEN:-4096}
export LD_LIBRARY_PATH=$K/devlibs:${LD_LIBRARY_PATH:-}
# Speed (the findings reproduce without these): no stack-use-after-return, short malloc traces.
export ASAN_OPTIONS=malloc_context_size=0:detect_stack_use_after_return=0
export UBSAN_OPTIONS=print_stacktrace=1

bin=$K/bin/$TARGET
[ -x "$bin" ] || { gunzip -c "$bin.gz" > "/tmp/$TARGET" && chmod +x "/tmp/$TARGET" && bin=/tmp/$TARGET; }
corpus_name=${TARGET#fuzz_}
dir=$OUT/$TARGET
work=$(mktemp -d "/tmp/$TARGET-XXXXXX")
mkdir -p "$dir"
cp -r "$K/corpus/$corpus_name" "$work/seed"
mkdir -p "$work/grown"

per_job=$(( (RUNS + JOBS - 1) / JOBS ))
start=$(date -u +%Y-%m-%dT%H:%M:%SZ)
t0=$(date +%s)
(cd "$work" && timeout $((MAX_S + 30)) "$bin" grown seed -jobs="$JOBS" -workers="$JOBS" \
   -runs="$per_job" -max_total_time="$MAX_S" -max_len="$MAX_LEN" -print_final_stats=1 \
   -artifact_prefix="$dir/" > "$dir/driver.log" 2>&1)
rc=$?
t1=$(date +%s)
cp "$work"/fuzz-*.log "$dir/" 2>/dev/null
executed=$(cat "$dir"/fuzz-*.log 2>/dev/null | awk '/stat::number_of_executed_units/ {s += $2} END {print s + 0}')
jobs_done=$(grep -l "stat::number_of_executed_units" "$dir"/fuzz-*.log 2>/dev/null | wc -l)
failures=$(ls "$dir" | grep -cE '^(crash|leak|timeout|oom)-')
corpus=$(ls "$work/grown" | wc -l)
tar -czf "$dir/corpus.tar.gz" -C "$work" grown
cat > "$dir/summary.json" <<EOF
{"target": "$TARGET", "started_utc": "$start", "seconds": $((t1 - t0)), "jobs": $JOBS,
 "jobs_reporting": $jobs_done, "runs_per_job": $per_job, "max_len": $MAX_LEN,
 "executions": $executed, "failures": $failures, "corpus_entries": $corpus, "rc": $rc,
 "cpu": "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')", "nproc": $(nproc),
 "command": "$TARGET grown seed -jobs=$JOBS -workers=$JOBS -runs=$per_job -max_total_time=$MAX_S -max_len=$MAX_LEN"}
EOF
cat "$dir/summary.json"
