#!/usr/bin/env python3
"""ktune-memory-bench at a small scale: every phase runs without errors, and each cold phase takes
the path it is named for (bench/memory_bench.cc): `cold` finds only stale neighbours (none
served), `cold_live` is answered by neighbours (at least 80 %: a neighbour whose blocks fill
their waves worse here follows the heuristics, LookupService::idles_here; 263 of 300 at this
scale), `cold_novel_n64_k64` has none within the radius.
A bench that silently measured another path would mislead every comparison made with it.

  memory_bench_smoke.py path/to/ktune-memory-bench
"""
import json
import subprocess
import sys

out = subprocess.run([sys.argv[1], "--winners", "3000", "--queries", "300", "--misses", "10",
                      "--big-lines", "1", "--fast", "10"], check=True, capture_output=True, text=True)
d = json.loads(out.stdout)
failures = []
for phase, want in (("cold", "none"), ("cold_live", "most"), ("cold_novel_n64_k64", "none")):
    p = d[phase]
    if p["errors"] != 0:
        failures.append(f"{phase}: {p['errors']} lookups failed")
    if not p["calls"] or not p["p50_us"] > 0:
        failures.append(f"{phase}: no timing ({p})")
    led = p["nearest_first"]
    if want == "none" and led != 0:
        failures.append(f"{phase}: {led} answers led by a neighbour, expected none")
    if want == "most" and led < 0.8 * p["calls"]:
        failures.append(f"{phase}: {led} of {p['calls']} answers led by a neighbour, expected >= 80 %")
for f in failures:
    print("FAIL", f)
print("ok" if not failures else f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
