"""Does the in-kernel clock probe read the SM clock right over its 100-us window?

bench/NOTES.md (2026-12-06): one counted clock read 2,055 MHz on an H100 whose maximum is
1,980 MHz. The probe (peers.ClockProbe; the worker's ktune_clock_probe in tuner/device_kernels.h)
counts %clock64 between two ticks of %globaltimer WINDOW_NS apart. Here it runs back to back with
windows of 100 us, 1 ms and 10 ms — at idle, between 8192^3 bf16 matmuls, and right after the GPU
idled for 0.3 s — and every reading is kept with its window and round, so windows can be compared
where the clock is the same. `ns` above the window says how coarse the timer's ticks are.

    python3 bench/clock_probe/windows.py --out clock-probe.json [--rounds 150]
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "gemm_peers"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))  # ktune.kernel's libcuda
from peers import ClockProbe  # noqa: E402  (needs the path above)

WINDOWS = (100_000, 1_000_000, 10_000_000)


def smi(fields: str) -> list:
    out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    return [f.strip() for f in out.splitlines()[0].split(",")]


def summarize(rows: list, max_mhz: float) -> dict:
    out = {}
    for phase in sorted({r["phase"] for r in rows}):
        for w in WINDOWS:
            mhz = sorted(r["sm_mhz"] for r in rows if r["phase"] == phase and r["window_ns"] == w
                         and r["sm_mhz"] > 0)
            ns = [r["ns"] - w for r in rows if r["phase"] == phase and r["window_ns"] == w
                  and r["ns"] > 0]
            if not mhz:
                continue
            out[f"{phase}/{w // 1000}us"] = {
                "probes": len(mhz), "median_mhz": statistics.median(mhz), "min_mhz": mhz[0],
                "max_mhz": mhz[-1], "above_max_clock": sum(m > max_mhz * 1.001 for m in mhz),
                "excess_ns_median": statistics.median(ns), "excess_ns_max": max(ns)}
        # Adjacent probes of one round (same clock, give or take): 100 us over 1 ms.
        by_round = {}
        for r in rows:
            if r["phase"] == phase and r["sm_mhz"] > 0:
                by_round.setdefault(r["round"], {}).setdefault(r["window_ns"], []).append(r["sm_mhz"])
        ratios = sorted(v[WINDOWS[0]][0] / v[WINDOWS[1]][0] for v in by_round.values()
                        if WINDOWS[0] in v and WINDOWS[1] in v)
        if ratios:
            out[f"{phase}/100us_over_1ms"] = {"rounds": len(ratios),
                                              "median": statistics.median(ratios),
                                              "min": ratios[0], "max": ratios[-1]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=150)
    args = ap.parse_args()
    name, driver, max_sm, power_limit = smi("name,driver_version,clocks.max.sm,power.limit")
    max_mhz = float(max_sm)
    stream = torch.cuda.current_stream()
    phases = (("idle", args.rounds), ("matmul", args.rounds), ("after_idle", 20))
    slots = sum(n * (len(WINDOWS) + 1) for _, n in phases)
    probe = ClockProbe(torch, stream.cuda_stream, slots=slots)
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    c = a @ b
    torch.cuda.synchronize()
    labels = []

    def probes(phase: str, r: int, windows) -> None:
        for w in windows:
            probe.WINDOW_NS = w
            probe.probe(phase, r)
            labels.append((phase, r, w))

    t0 = time.time()
    for r in range(args.rounds):
        probes("idle", r, WINDOWS)
    torch.cuda.synchronize()
    for r in range(args.rounds):
        torch.matmul(a, b, out=c)
        probes("matmul", r, WINDOWS)
    torch.cuda.synchronize()
    for r in range(20):
        time.sleep(0.3)  # the GPU idles; the reading of 2,055 MHz followed an idle GPU
        probes("after_idle", r, (WINDOWS[0], WINDOWS[1], WINDOWS[0]))
        torch.cuda.synchronize()
    torch.cuda.synchronize()
    rows = []
    for (phase, r, w), res in zip(labels, probe.results()):
        rows.append({"phase": phase, "round": r, "window_ns": w, "ns": res["ns"],
                     "cycles": res["cycles"], "sm_mhz": res["sm_mhz"]})
    doc = {"benchmark": "clock_probe_windows", "date": datetime.datetime.utcnow().isoformat() + "Z",
           "gpu": name, "driver": driver, "max_sm_clock_mhz": max_mhz,
           "power_limit_w": float(power_limit), "torch": torch.__version__,
           "seconds": time.time() - t0, "summary": summarize(rows, max_mhz), "probes": rows}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps(doc["summary"], indent=1))


if __name__ == "__main__":
    main()
