"""ktune's served GEMM winners against cuBLAS and torch.compile(mode="max-autotune") on one GPU
(issue 13's peer comparison). bench/gemm_peers/run_h200.sh runs every step in one device call:

    bash bench/gemm_peers/make_kit.sh              # dev box: binaries + libraries in .gpu/
    OUT=/tmp/out bash bench/gemm_peers/run_h200.sh # GPU node, repo root, .gpu/ carried along

Steps (subcommands; each writes one JSON document, `assemble` folds them into one):

  plan      the plan: shapes, steps, budgets and time estimates (no daemon, no torch; --dry-run)
  tune      each shape as a tuning job of a running ktuned (the `tune` op, as `ktune tune` sends
            it), one after the other, with each job's wall time (stdlib only)
  measure   per shape, in this one process: cuBLAS (torch.matmul with B stored as nn.Linear stores
            it, layout rc), torch.compile max-autotune of the same matmul (compile + autotune wall
            time), and ktune's served winner through ktune.torch on torch's stream; outputs checked
            (ktune against torch and an fp64 product on sampled rows, C NaN-poisoned); the three
            timed interleaved with triton.testing.do_bench over several rounds (median); then
            8192^3 sustained: ktune and cuBLAS back to back over input sets rotated through many
            times the L2, every launch event-timed, SM clock, power and the clock event
            reasons (power cap, slowdowns) read through NVML in this process every 5 ms (and
            by nvidia-smi beside it); and a burst of each (the first --min-runs runs after
            --burst-idle-s idle: before the power cap engages); the SM clock of both counted
            in-kernel too (ClockProbe: %clock64 over 100 us of %globaltimer between runs);
            then each of --sustain-shapes the same way (no burst), every kernel at the clock
            its own power sets under the cap
  sass      HGMMA, LDL, STL, UTMALDG, ... counted in each served cubin (cuobjdump -sass)
  assemble  one JSON from the pieces, with the summary (geomeans, minimum) printed as a table

Only the standard library, plus torch and triton in `measure`.
"""

import argparse
import base64
import ctypes
import datetime
import json
import math
import os
import re
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import threading
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

Shape = Tuple[int, int, int]

# issue 13's suite: `ktune-bench --suite tma` (bench/ktune_bench.cc), in its order.
TMA_SUITE: List[Shape] = [(8192, 8192, 8192), (4096, 4096, 4096), (2048, 2048, 2048),
                          (4096, 14336, 4096), (4096, 4096, 14336), (8192, 8192, 512),
                          (1024, 1024, 65536), (2048, 2048, 16384), (512, 1024, 32768),
                          (4000, 6000, 3000)]
SUSTAINED_SHAPE: Shape = (8192, 8192, 8192)
L2_BYTES = 60 * 1024 * 1024           # H200 (docs: /work/shared/docs/GPU.md)
DENSE_BF16_FLOP_PER_SM_CYCLE = 4096   # Hopper: 4 tensor cores x 512 bf16 FMA a cycle
BF16_TOLERANCE = 2e-2                 # templates/gemm_tma/gemm_tma.yaml, tolerance bf16
SASS_OPS = ("HGMMA", "LDL", "STL", "UTMALDG", "UTMASTG", "STSM", "SYNCS", "BAR")


# ---- shapes and problem keys -----------------------------------------------------------------

def parse_shapes(text: str) -> List[Shape]:
    """"tma" (the 10 shapes of the suite) or "MxNxK,MxNxK,..."; ValueError on anything else."""
    if text.strip() == "tma":
        return list(TMA_SUITE)
    shapes = []
    for item in text.split(","):
        parts = item.strip().lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"shape '{item}' is not MxNxK (e.g. 8192x8192x512)")
        shapes.append((int(parts[0]), int(parts[1]), int(parts[2])))
    if not shapes:
        raise ValueError("no shapes")
    return shapes


def shape_name(s: Shape) -> str:
    return f"{s[0]}x{s[1]}x{s[2]}"


def problem_key(s: Shape) -> str:
    """The daemon's key of a bf16 rc GEMM (docs/protocol.md, `problem_key`)."""
    return f"gemm|bf16|bf16|rc|M={s[0]},N={s[1]},K={s[2]}"


def shape_of_key(key: str) -> Optional[Shape]:
    found = re.search(r"M=(\d+),N=(\d+),K=(\d+)", key)
    return (int(found[1]), int(found[2]), int(found[3])) if found else None


def flops(s: Shape) -> float:
    return 2.0 * s[0] * s[1] * s[2]


def write_json(path: str, doc: Any) -> None:
    """Written whole or not at all (a step cut short by its timeout leaves the last complete
    version)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def read_json(path: Optional[str]) -> Any:
    if not path or not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def geomean(values: Sequence[float]) -> Optional[float]:
    v = [x for x in values if x and x > 0]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else None


# ---- plan ------------------------------------------------------------------------------------

def plan(args: argparse.Namespace) -> Dict[str, Any]:
    shapes = parse_shapes(args.shapes)
    m, n, k = SUSTAINED_SHAPE
    per_set = 2 * (m * k + n * k + m * n)  # A, B, C in bf16
    doc = {
        "shapes": [shape_name(s) for s in shapes],
        "tuning": {"path": args.tuner, "strategy": args.strategy, "trials": args.trials,
                   "seconds_per_job": args.job_seconds, "finalists": args.finalists,
                   "what": ("ktune tune per shape through ktuned (every gemm template, the "
                            "daemon's timing: 100 ms per candidate)" if args.tuner == "daemon" else
                            "ktune-bench --template gemm_tma --target-ms 30 into the store ktuned "
                            "then serves")},
        "measure": {"peers": ["cublas", "torch.compile max-autotune", "ktune (ktune.torch)",
                              "ktune (Kernel, preallocated C)"],
                    "rounds": args.rounds,
                    "do_bench": f"warmup 25 ms, rep {rep_ms(args.rounds):g} ms, median",
                    "checks": "ktune vs torch (rel L2), fp64 on 64 sampled rows, NaN-poisoned C"},
        "sustained": {"shape": shape_name(SUSTAINED_SHAPE), "input_sets": args.sets,
                      "bytes_rotated": args.sets * per_set,
                      "x_L2": round(args.sets * per_set / L2_BYTES, 1),
                      "seconds_per_phase": args.sustain_s, "phases": "ktune, cuBLAS, ktune, cuBLAS",
                      "burst": f"{args.min_runs} runs of each after {args.burst_idle_s:g} s idle",
                      "sampling": ("NVML in-process every 5 ms (SM clock, instantaneous "
                                   "power, clock event reasons), nvidia-smi every 50 ms beside "
                                   "it")},
        "sustained_shapes": {"shapes": [shape_name(x) for x in parse_shapes(args.sustain_shapes)]
                             if args.sustain_shapes else [],
                             "seconds_per_phase": args.sustain_more_s,
                             "ranked": args.sustain_ranked,
                             "phases": ("ktune, cuBLAS, ktune, cuBLAS (no burst)"
                                        if args.sustain_ranked <= 1 else
                                        f"the first {args.sustain_ranked} ranked configs, cuBLAS; "
                                        "twice (no burst)")},
        "estimate_s": {"tuning": [8 * len(shapes), 18 * len(shapes)],
                       "torch_compile": [2.4 * len(shapes), 28.5 * len(shapes)],
                       "timing": 3.0 * len(shapes),
                       "sustained": 4 * args.sustain_s + 2 * args.burst_idle_s + 9,
                       "sustained_shapes": (len(parse_shapes(args.sustain_shapes)) *
                                            sustained_cost_s(args.sustain_more_s, None,
                                                             args.sustain_ranked)
                                            if args.sustain_shapes else 0)},
    }
    return doc


# ---- tune (through ktuned) -------------------------------------------------------------------

def tune(args: argparse.Namespace) -> Dict[str, Any]:
    import ktune
    client = ktune.Client(socket_path=args.socket, cache_ttl=0, timeout=30)
    doc: Dict[str, Any] = {"path": "daemon", "strategy": args.strategy, "trials": args.trials,
                           "status": client.status(), "jobs": []}
    # Stopped by a timeout (SIGTERM) or not, no job may go on tuning into the measurements.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        tune_shapes(args, client, doc)
    finally:
        doc["cancelled_jobs"] = stop_jobs(client)
        write_json(args.out, doc)
    return doc


def stop_jobs(client: Any) -> List[str]:
    """Cancels every queued or running job and waits (30 s at most) until none runs."""
    cancelled = []
    for state in ("queued", "running"):
        for job in client.jobs(limit=500, state=state):
            client.cancel(job["id"])
            cancelled.append(job["id"])
    until = time.time() + 30
    while cancelled and time.time() < until and client.jobs(limit=10, state="running"):
        time.sleep(0.2)
    return cancelled


def params_text(params: Dict[str, int]) -> str:
    """{NAME: V} -> "NAME=V,NAME=V" in name order (what parse_config reads back)."""
    return ",".join(f"{name}={params[name]}" for name in sorted(params))


def parse_config(text: str) -> Dict[str, int]:
    """ "NAME=V,NAME=V" -> {NAME: V} (a seed, as ktune tune --seed takes it)."""
    out: Dict[str, int] = {}
    for part in text.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep or not name or not value.strip().lstrip("-").isdigit():
            raise ValueError(f"a config is NAME=V,...: got '{part}' in '{text}'")
        out[name] = int(value)
    return out


def tune_shapes(args: argparse.Namespace, client: Any, doc: Dict[str, Any]) -> None:
    import ktune
    for s in parse_shapes(args.shapes):
        left = args.deadline - time.time() if args.deadline else float("inf")
        row: Dict[str, Any] = {"shape": shape_name(s), "problem": problem_key(s)}
        if left < 5:
            row["skipped"] = "tuning time cap reached"
            doc["jobs"].append(row)
            print(f"{shape_name(s):>18} skipped: tuning time cap reached", flush=True)
            continue
        seconds = max(5.0, min(args.job_seconds, left))
        t0 = time.time()
        try:
            job = client.tune("gemm", dtype="bf16", layout="rc", strategy=args.strategy,
                              budget_trials=args.trials, budget_seconds=seconds,
                              templates=args.template or None,
                              seeds=[parse_config(c) for c in args.seed] or None,
                              M=s[0], N=s[1], K=s[2])
            for job in client.watch(job["id"], timeout=seconds + 120):
                pass
        except ktune.KtuneError as e:
            row.update({"wall_s": time.time() - t0, "error": f"{e.code}: {e.message}"})
            doc["jobs"].append(row)
            print(f"{shape_name(s):>18} error {e.code}: {e.message}", flush=True)
            continue
        row.update({"wall_s": time.time() - t0, "budget_seconds": seconds, "job": job})
        if job.get("started") and job.get("finished"):
            row["job_s"] = job["finished"] - job["started"]  # unix seconds: whole-second steps
        doc["jobs"].append(row)
        write_json(args.out, doc)
        print(f"{shape_name(s):>18} {job['state']:>9} {job['trials']:4d} trials "
              f"{row['wall_s']:6.1f} s  {job.get('best', '')}", flush=True)


# ---- served kernels --------------------------------------------------------------------------

def fetch_served(client: Any, s: Shape, cubin_dir: Optional[str],
                 ranked: int = 4) -> Tuple[Dict[str, Any], Any]:
    """(what ktuned serves for shape s, its ktune.Kernel, and up to `ranked` of its ranking);
    the cubin saved under cubin_dir."""
    import ktune
    m, n, k = s
    reply = client.lookup("gemm", dtype="bf16", layout="rc", limit=max(4, ranked), M=m, N=n, K=k)
    # As ktune.torch picks: the first entry that comes with a launch description.
    best = next((e for e in reply.entries if e.launch), reply.best)
    image = client.kernel("gemm", dtype="bf16", layout="rc", device=reply.device, entry=best,
                          M=m, N=n, K=k)
    kernel = ktune.Kernel(image)
    served = {"device": reply.device, "provenance": best.provenance, "template": best.template,
              "template_hash": best.template_hash, "params": best.params,
              "tuned_median_us": best.median_us, "tuned_tflops": best.tflops, "from": best.source,
              "ranked": [{"provenance": e.provenance, "template": e.template, "params": e.params,
                          "median_us": e.median_us} for e in reply.entries],
              "lowered_name": image["lowered_name"], "arch": image["arch"],
              "registers": image.get("registers"), "spill_bytes": image.get("spill_bytes"),
              "smem_static": image.get("smem_static"), "cubin_bytes": image["cubin_bytes"],
              "cubin_source": image.get("source"),
              "grid": kernel.description.get("grid"), "block": kernel.description.get("block"),
              "smem": kernel.description.get("smem"), "cluster": kernel.description.get("cluster"),
              "buffers": kernel.buffer_names,
              "tensor_maps": [a["name"] for a in kernel.description["args"]
                              if a["kind"] == "tensor_map"]}
    if cubin_dir:
        os.makedirs(cubin_dir, exist_ok=True)
        path = os.path.join(cubin_dir, shape_name(s) + ".cubin")
        with open(path, "wb") as f:
            f.write(base64.b64decode(image["cubin"]))
        served["cubin"] = path
    return served, kernel


# ---- SASS ------------------------------------------------------------------------------------

# One instruction of `cuobjdump -sass`: "/*0450*/  @!P0 HGMMA.64x256x16.F32.BF16 R24, ... ;"
_SASS_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P(?:T|\d+)\s+)?([A-Z][A-Z0-9_]*)[.\s;]")
_SASS_FUNCTION = re.compile(r"Function\s*:\s*(\S+)")


def count_sass(text: str) -> Dict[str, Any]:
    """Opcode counts of a cuobjdump -sass listing: every op of SASS_OPS, all instructions, and
    the functions listed."""
    counts: Dict[str, int] = {op: 0 for op in SASS_OPS}
    total = 0
    for line in text.splitlines():
        found = _SASS_LINE.search(line)
        if not found:
            continue
        total += 1
        op = found[1]
        if op in counts:
            counts[op] += 1
    return {"instructions": total, "ops": counts, "functions": _SASS_FUNCTION.findall(text),
            "hgmma": counts["HGMMA"] > 0, "local_memory": counts["LDL"] + counts["STL"] > 0}


def sass_step(args: argparse.Namespace) -> Dict[str, Any]:
    tool = args.cuobjdump or shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    doc: Dict[str, Any] = {"cuobjdump": tool, "cubins": []}
    if not args.cubins:
        raise SystemExit("sass needs --cubins DIR")
    if not os.path.exists(tool):
        doc["error"] = f"no cuobjdump at {tool}"
        return doc
    names = sorted(f for f in os.listdir(args.cubins) if f.endswith(".cubin")) \
        if os.path.isdir(args.cubins) else []
    for name in names:
        path = os.path.join(args.cubins, name)
        run = subprocess.run([tool, "-sass", path], capture_output=True, text=True, timeout=60)
        row: Dict[str, Any] = {"shape": name[:-len(".cubin")], "cubin": path}
        if run.returncode != 0:
            row["error"] = run.stderr.strip()[-500:]
        else:
            with open(path[:-len(".cubin")] + ".sass", "w") as f:
                f.write(run.stdout)
            row.update(count_sass(run.stdout))
        doc["cubins"].append(row)
        ops = row.get("ops", {})
        print(f"{row['shape']:>18} HGMMA {ops.get('HGMMA', '-'):>4} LDL {ops.get('LDL', '-'):>3} "
              f"STL {ops.get('STL', '-'):>3} UTMALDG {ops.get('UTMALDG', '-'):>3} "
              f"{row.get('error', '')}", flush=True)
    return doc


# ---- measure (torch) -------------------------------------------------------------------------

def rel_l2(got: Any, ref: Any) -> float:
    import torch
    g, r = got.double(), ref.double()
    return float(torch.linalg.vector_norm(g - r) / torch.linalg.vector_norm(r))


class Sampler:
    """nvidia-smi sampling SM clock, power, temperature and why the clock is held down, every `ms`
    into a file, in the background while the GPU works; samples() parses it, with local timestamps
    as time.time()."""

    FIELDS = "timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu"
    # Clock event reasons (nvidia-smi >= 535 names): the power cap, and the two slowdowns it could
    # be mistaken for. Left out where this nvidia-smi does not know them.
    REASONS = ("clocks_event_reasons.sw_power_cap,clocks_event_reasons.hw_slowdown,"
               "clocks_event_reasons.sw_thermal_slowdown")

    def __init__(self, path: str, ms: int = 100):
        self.path = path
        self.proc = None
        if shutil.which("nvidia-smi"):
            fields = f"{self.FIELDS},{self.REASONS}"
            try:
                probe = subprocess.run(["nvidia-smi", f"--query-gpu={fields}",
                                        "--format=csv,noheader"], capture_output=True, text=True,
                                       timeout=10)
                known = probe.returncode == 0
            except subprocess.TimeoutExpired:
                known = False
            if not known:
                fields = self.FIELDS
            self.file = open(path, "w")
            self.proc = subprocess.Popen(
                ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits",
                 f"--loop-ms={ms}"], stdout=self.file, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.file.close()

    def samples(self) -> List[Dict[str, float]]:
        if self.proc is None:
            return []
        with open(self.path) as f:
            return parse_samples(f.read())


REASON_KEYS = ("power_cap", "hw_slowdown", "thermal_slowdown")


class NvmlReader:
    """Reads GPU `index` through NVML in this process (ctypes, libnvidia-ml.so.1) every `ms` on a
    thread between start() and stop(): samples as parse_samples makes them, with the power
    instantaneous (NVML_FI_DEV_POWER_INSTANT) where the driver has it. nvidia-smi's samples lag
    a burst of 70 ms (bench/NOTES.md, 2026-12-05: idle power and clocks read inside it); these
    are read while it runs. `available` is False where NVML cannot be loaded; `lib` stands in
    for the library in tests."""

    POWER_INSTANT = 186                  # nvml.h field ids and clock event reason bits
    REASON_BITS = {"power_cap": 0x4, "hw_slowdown": 0x8, "thermal_slowdown": 0x20 | 0x40}

    class FieldValue(ctypes.Structure):
        """nvmlFieldValue_t (40 bytes); `value` is a union, read here by `value_type`."""
        _fields_ = [("field_id", ctypes.c_uint), ("scope_id", ctypes.c_uint),
                    ("timestamp", ctypes.c_longlong), ("latency_usec", ctypes.c_longlong),
                    ("value_type", ctypes.c_int), ("nvml_return", ctypes.c_int),
                    ("value", ctypes.c_ulonglong)]

    def __init__(self, index: int = 0, ms: float = 5.0, lib: Any = None):
        self.ms = ms
        self.reads: List[Dict[str, float]] = []
        self.thread: Optional[threading.Thread] = None
        self.stopping = threading.Event()
        self.available = False
        try:
            self.lib = lib if lib is not None else ctypes.CDLL("libnvidia-ml.so.1")
            self.handle = ctypes.c_void_p()
            if (self.lib.nvmlInit_v2() != 0 or
                    self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self.handle)) != 0):
                return
            self.reasons = (getattr(self.lib, "nvmlDeviceGetCurrentClocksEventReasons", None) or
                            getattr(self.lib, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
            self.available = True
        except OSError:
            return

    def read(self) -> Dict[str, float]:
        """One sample now (NVML calls that fail read 0; the reasons are left out if absent)."""
        lib, h = self.lib, self.handle
        u = ctypes.c_uint()

        def uint(call: Callable[..., int], *args: Any) -> float:
            return float(u.value) if call(h, *args, ctypes.byref(u)) == 0 else 0.0
        sample = {"sm_mhz": uint(lib.nvmlDeviceGetClockInfo, 1),
                  "mem_mhz": uint(lib.nvmlDeviceGetClockInfo, 2),
                  "temp_c": uint(lib.nvmlDeviceGetTemperature, 0)}
        f = self.FieldValue(field_id=self.POWER_INSTANT)
        if lib.nvmlDeviceGetFieldValues(h, 1, ctypes.byref(f)) == 0 and f.nvml_return == 0 and \
                f.value_type in (0, 1, 2, 3):
            raw = f.value
            mw = (struct.unpack("<d", struct.pack("<Q", raw))[0] if f.value_type == 0 else
                  float(raw & 0xFFFFFFFF if f.value_type == 1 else raw))
        else:
            mw = uint(lib.nvmlDeviceGetPowerUsage)
        sample["power_w"] = mw / 1000.0
        util = (ctypes.c_uint * 2)()
        sample["util_pct"] = float(util[0]) if lib.nvmlDeviceGetUtilizationRates(
            h, ctypes.byref(util)) == 0 else 0.0
        bits = ctypes.c_ulonglong()
        if self.reasons is not None and self.reasons(h, ctypes.byref(bits)) == 0:
            for key, mask in self.REASON_BITS.items():
                sample[key] = 1.0 if bits.value & mask else 0.0
        return sample

    def _run(self) -> None:
        while not self.stopping.is_set():
            before = time.time()
            sample = self.read()
            sample["t"] = (before + time.time()) / 2
            self.reads.append(sample)
            self.stopping.wait(self.ms / 1000.0)

    def start(self) -> None:
        if self.available and self.thread is None:
            self.stopping.clear()
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()

    def stop(self) -> List[Dict[str, float]]:
        """Stops reading; every sample so far."""
        if self.thread is not None:
            self.stopping.set()
            self.thread.join()
            self.thread = None
        return list(self.reads)


def parse_samples(text: str) -> List[Dict[str, float]]:
    """Sampler's lines ("2026/12/02 03:04:05.123, 1755, 2619, 612.40, 51, 100[, Active, Not
    Active, Not Active]"); the time as time.time() would have said it on this machine; the clock
    event reasons, where sampled, as 1 (active) or 0; lines that are not samples are skipped."""
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) not in (6, 6 + len(REASON_KEYS)):
            continue
        try:
            when = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            sample = {"t": when, "sm_mhz": float(parts[1]), "mem_mhz": float(parts[2]),
                      "power_w": float(parts[3]), "temp_c": float(parts[4]),
                      "util_pct": float(parts[5])}
            for key, value in zip(REASON_KEYS, parts[6:]):
                if value not in ("Active", "Not Active"):
                    raise ValueError(value)
                sample[key] = 1.0 if value == "Active" else 0.0
            out.append(sample)
        except ValueError:
            continue
    return out


# One thread spins WINDOW_NS of the GPU's own nanosecond timer (%globaltimer), from a tick's edge,
# and counts SM cycles (%clock64) over it: out[0] = ns (0 when the timer did not tick within 2^30
# cycles), out[1] = cycles, out[2] = the start (ns).
# `nvcc -arch=sm_90 -ptx` (CUDA 13.0) of ktune_clock_probe in tuner/device_kernels.h, where the
# worker compiles it for every measurement's counted clock; the same kernel, here as PTX so that
# this script needs no compiler.
CLOCK_PROBE_PTX = r"""
.version 9.0
.target sm_90
.address_size 64
.visible .entry ktune_clock_probe(
 .param .u64 ktune_clock_probe_param_0,
 .param .u64 ktune_clock_probe_param_1
)
{
 .reg .pred %p<8>;
 .reg .b64 %rd<21>;
 ld.param.u64 %rd11, [ktune_clock_probe_param_0];
 ld.param.u64 %rd8, [ktune_clock_probe_param_1];
 cvta.to.global.u64 %rd1, %rd11;
 mov.u64 %rd9, %clock64;
 mov.u64 %rd10, %globaltimer;
$L__BB0_1:
 mov.u64 %rd12, %globaltimer;
 mov.u64 %rd13, %clock64;
 setp.eq.s64 %p1, %rd12, %rd10;
 sub.s64 %rd14, %rd13, %rd9;
 setp.lt.u64 %p2, %rd14, 1073741824;
 and.pred %p3, %p1, %p2;
 @%p3 bra $L__BB0_1;
 mov.u64 %rd15, %clock64;
$L__BB0_3:
 mov.u64 %rd16, %globaltimer;
 mov.u64 %rd17, %clock64;
 sub.s64 %rd7, %rd16, %rd12;
 setp.lt.u64 %p4, %rd7, %rd8;
 sub.s64 %rd18, %rd17, %rd9;
 setp.lt.u64 %p5, %rd18, 2147483648;
 and.pred %p6, %p4, %p5;
 @%p6 bra $L__BB0_3;
 selp.b64 %rd19, 0, %rd7, %p4;
 st.global.u64 [%rd1], %rd19;
 sub.s64 %rd20, %rd17, %rd15;
 st.global.u64 [%rd1+8], %rd20;
 st.global.u64 [%rd1+16], %rd12;
 ret;
}
"""


class ClockProbe:
    """The SM clock as the GPU counts it, at chosen moments of a timed sequence: probe() launches
    CLOCK_PROBE_PTX (one thread, WINDOW_NS long) on the stream, between two timed runs and outside
    their events; results() reads every probe back after a synchronize. NVML's power,
    utilization and temperature did not refresh inside a 70-ms burst (bench/NOTES.md, 2026-12-05),
    so its clock read there is no evidence; this counts the cycles the SM actually ran. One SM
    for 100 us a probe: the caller keeps probes sparse (every 10th run of a burst)."""

    WINDOW_NS = 100_000

    def __init__(self, torch: Any, stream: int, slots: int = 4096, drv: Any = None):
        if drv is None:  # ktune.kernel's libcuda; raises KtuneError without a driver
            from ktune.kernel import _Driver
            drv = _Driver.get()
        self.drv = drv
        module, self.fn = ctypes.c_void_p(), ctypes.c_void_p()
        self.drv.check(self.drv.cuModuleLoadData(ctypes.byref(module), CLOCK_PROBE_PTX.encode()),
                       "cuModuleLoadData(clock probe)")
        self.drv.check(self.drv.cuModuleGetFunction(ctypes.byref(self.fn), module,
                                                    b"ktune_clock_probe"),
                       "cuModuleGetFunction(ktune_clock_probe)")
        self.buf = torch.zeros(3 * slots, dtype=torch.int64, device="cuda")
        self.stream, self.slots = stream, slots
        self.labels: List[Tuple[str, int]] = []

    def probe(self, impl: str, run: int) -> None:
        """A probe after `impl`'s run `run` (index within its sequence); ignored once full."""
        if len(self.labels) == self.slots:
            return
        out = ctypes.c_uint64(self.buf.data_ptr() + 24 * len(self.labels))
        window = ctypes.c_uint64(self.WINDOW_NS)
        params = (ctypes.c_void_p * 2)(ctypes.addressof(out), ctypes.addressof(window))
        self.drv.check(self.drv.cuLaunchKernel(self.fn, 1, 1, 1, 1, 1, 1, 0, self.stream, params,
                                               None), "cuLaunchKernel(ktune_clock_probe)")
        self.labels.append((impl, run))

    def results(self) -> List[Dict[str, Any]]:
        """Every probe so far: its label, window, cycles and clock in MHz. REQUIRES: synchronized."""
        flat = self.buf[:3 * len(self.labels)].tolist()
        rows = [flat[i:i + 3] for i in range(0, len(flat), 3)]
        return [{"impl": impl, "run": run, "ns": ns, "cycles": cycles, "t_ns": t0,
                 "sm_mhz": cycles * 1e3 / ns if ns > 0 else 0.0}
                for (impl, run), (ns, cycles, t0) in zip(self.labels, rows)]


def summarize_probes(probes: List[Dict[str, Any]], impl: str, tflops: float,
                     sms: int) -> Dict[str, Any]:
    """One label's probes: the clock's median and range, and the share of the dense bf16 peak at
    that clock (sms x 4096 FLOP a cycle) that `tflops` is. Probes that counted no clock (0: the
    timer did not tick) are left out, as the worker's summary leaves them out."""
    mhz = sorted(p["sm_mhz"] for p in probes if p["impl"] == impl and p["sm_mhz"] > 0)
    if not mhz:
        return {"probes": 0}
    med = statistics.median(mhz)
    peak = sms * DENSE_BF16_FLOP_PER_SM_CYCLE * med * 1e6 / 1e12
    return {"probes": len(mhz), "sm_mhz": {"min": mhz[0], "median": med, "max": mhz[-1]},
            "dense_peak_tflops": peak, "share_of_peak": tflops / peak}


def summarize_samples(samples: List[Dict[str, float]], windows: List[Tuple[float, float]]) -> Dict:
    """SM clock and power over the samples that fall inside the windows, and the share of them in
    which each clock event reason was active (where sampled)."""
    inside = [x for x in samples if any(a <= x["t"] <= b for a, b in windows)]
    if not inside:
        return {"samples": 0}

    def stats(key: str) -> Dict[str, float]:
        v = sorted(x[key] for x in inside)
        return {"min": v[0], "median": statistics.median(v), "max": v[-1]}
    doc: Dict[str, Any] = {"samples": len(inside), "sm_mhz": stats("sm_mhz"),
                           "power_w": stats("power_w"), "temp_c": stats("temp_c"),
                           "util_pct": stats("util_pct")}
    if all(REASON_KEYS[0] in x for x in inside):
        doc["active_share"] = {k: sum(x[k] for x in inside) / len(inside) for k in REASON_KEYS}
    return doc


def rotated(names: Sequence[str], r: int) -> List[str]:
    """Round r's order of the peers: rotated by r, so that none always runs first (clocks drift)."""
    return list(names[r % len(names):]) + list(names[:r % len(names)])


def launcher(kernel: Any, a: Any, w: Any, out: Any, stream: int) -> Callable[[], None]:
    """A call that launches a GEMM Kernel on (a, w) into out on the stream."""
    return lambda: kernel.launch_addresses((a.data_ptr(), w.data_ptr(), out.data_ptr()), stream)


def rep_ms(rounds: int) -> float:
    """do_bench's rep per peer and round: 500 ms of timing per peer in all, however many rounds
    (more, shorter rounds put every peer through the same clock drift of a GPU at its power cap)."""
    return max(20.0, 500.0 / max(1, rounds))


def measure(args: argparse.Namespace) -> Dict[str, Any]:
    import torch
    import triton
    import triton.testing
    import ktune
    import ktune.torch as kt

    deadline = args.deadline or float("inf")
    more = parse_shapes(args.sustain_shapes) if args.sustain_shapes else []
    args.reserve_s += len(more) * sustained_cost_s(args.sustain_more_s, None, args.sustain_ranked)
    torch.manual_seed(0)
    dev = torch.device("cuda")
    client = ktune.Client(socket_path=args.socket, cache_ttl=0, kernel_timeout=120)
    kt.configure(client=ktune.Client(socket_path=args.socket, cache_ttl=0, kernel_timeout=120))
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit"):
        try:  # one compile per shape (reset between shapes), so never an eager fallback anyway
            setattr(torch._dynamo.config, name, max(256, getattr(torch._dynamo.config, name)))
        except (AttributeError, TypeError):
            pass
    doc: Dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
        "triton": triton.__version__, "torch_cuda": torch.version.cuda,
        "allow_bf16_reduced_precision_reduction":
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        "rounds": args.rounds, "shapes": []}
    # Inductor's one-time costs (its imports, the compile workers) on a small matmul first, so
    # each shape's compile_s is that shape's compile + autotune; the one-time part is reported.
    if deadline - time.time() - args.reserve_s > 2 * args.compile_reserve_s:
        try:
            x = torch.randn(256, 256, dtype=torch.bfloat16, device=dev)
            t0 = time.perf_counter()
            torch.compile(_matmul, mode="max-autotune", dynamic=False)(x, x.t())
            torch.cuda.synchronize()
            doc["compile_warmup_s"] = time.perf_counter() - t0
        except Exception as e:
            doc["compile_warmup_error"] = f"{type(e).__name__}: {e}"[-2000:]
    for s in parse_shapes(args.shapes):
        left = deadline - time.time() - args.reserve_s
        if left < 8:
            doc["shapes"].append({"shape": shape_name(s), "skipped": "deadline"})
            print(f"{shape_name(s):>18} skipped: deadline", flush=True)
            continue
        try:
            row = measure_shape(args, s, client, kt, torch, triton.testing, dev,
                                compile_allowed=left > args.compile_reserve_s)
        except Exception as e:  # one shape's failure is that shape's result; the others go on
            row = {"shape": shape_name(s), "error": f"{type(e).__name__}: {e}",
                   "traceback": traceback.format_exc()[-3000:]}
            print(f"{shape_name(s):>18} FAILED: {row['error']}", flush=True)
        doc["shapes"].append(row)
        write_json(args.out, doc)
    doc["sustained"] = sustained_or_why(args, client, torch, dev, deadline, SUSTAINED_SHAPE,
                                        args.sustain_s, burst_too=True)
    # More shapes in phases of their own (--sustain-shapes): each kernel at the clock its own
    # power sets, where the interleaved rounds above read the clock that the mix of both sets.
    if more:
        doc["sustained_shapes"] = [
            sustained_or_why(args, client, torch, dev, deadline, s, args.sustain_more_s,
                             burst_too=False, ranked=args.sustain_ranked) for s in more]
    doc["ktune_torch"] = {"stats": kt.stats(), "explain": kt.explain()}
    write_json(args.out, doc)
    return doc


def sustained_cost_s(seconds: float, burst_idle_s: Optional[float], ranked: int = 1) -> float:
    """What one sustained() run takes at most: two phases of each of `ranked` ktune configs and of
    cuBLAS, the warm-up and set-up (3 s more per config past the served one: its kernel fetched,
    maybe compiled), and, with a burst_idle_s, two bursts after as long an idle."""
    ranked = max(1, ranked)
    return (2 * (ranked + 1) * seconds + 7 + 3 * (ranked - 1)
            + (0 if burst_idle_s is None else 2 * burst_idle_s))


def sustained_or_why(args, client, torch, dev, deadline: float, s: Shape, seconds: float,
                     burst_too: bool, ranked: int = 1) -> Dict[str, Any]:
    """sustained() of one shape, or why not: {"skipped": "deadline"} or the error it raised."""
    if args.deadline and deadline - time.time() <= sustained_cost_s(
            seconds, args.burst_idle_s if burst_too else None, ranked):
        return {"shape": shape_name(s), "skipped": "deadline"}
    try:
        return sustained(args, client, torch, dev, s, seconds, burst_too, ranked)
    except Exception as e:  # noqa: BLE001  (one shape's failure is its result; the run goes on)
        print(f"sustained {shape_name(s)} FAILED: {type(e).__name__}: {e}", flush=True)
        return {"shape": shape_name(s), "error": f"{type(e).__name__}: {e}",
                "traceback": traceback.format_exc()[-3000:]}


def twin_params(template: str, params: Dict[str, int]) -> Optional[Dict[str, int]]:
    """The served gemm_tma config's stream-K twin (or, served stream-K, its whole-tile twin): the
    same tile, ring and raster, the persistent grid's last wave walked the other way. A split-K
    winner's twin is the persistent stream-K config of its tile; ping-pong has none."""
    if template != "gemm_tma" or "STREAMK" not in params or params.get("SCHEDULE") != 0:
        return None
    twin = dict(params)
    if params["STREAMK"] == 1:
        twin["STREAMK"] = 0
    else:
        twin.update(STREAMK=1, SPLITS=1, PERSISTENT=1)
    return twin


def twin_name(i: int) -> str:
    """The timing peer of the i-th twin: ktune_twin, ktune_twin2, ..."""
    return "ktune_twin" if i == 0 else f"ktune_twin{i + 1}"


def reduce_twins(template: str, params: Dict[str, int]) -> List[Dict[str, int]]:
    """A non-persistent split-K gemm_tma winner's cluster-reduction pair: the same tile, ring and
    slices summed through DSMEM (REDUCE 1, which needs EPILOGUE 0 and no multicast pair), and the
    same config with the workspace hand-off (REDUCE 0), so the two differ in REDUCE alone. A
    REDUCE 1 winner's pair is its REDUCE 0 twin. Whole-tile and stream-K winners have none."""
    if (template != "gemm_tma" or "REDUCE" not in params or params.get("SPLITS", 1) < 2
            or params.get("PERSISTENT") != 0 or params.get("STREAMK") != 0):
        return []
    if params["REDUCE"] == 1:
        return [dict(params, REDUCE=0)]
    cluster = dict(params, EPILOGUE=0, CLUSTER_M=1, CLUSTER_N=1)
    return [dict(cluster, REDUCE=1), dict(cluster, REDUCE=0)]


def twins_of(kind: str, template: str, params: Dict[str, int]) -> List[Dict[str, int]]:
    """The configs --twins KIND times beside the served one: "streamk" (twin_params) or "reduce"."""
    if kind == "reduce":
        return reduce_twins(template, params)
    twin = twin_params(template, params)
    return [] if twin is None else [twin]


def fetch_twins(client: Any, s: Shape, served: Dict[str, Any],
                kind: str) -> List[Tuple[Dict[str, Any], Any]]:
    """Per twin: ({params, lowered_name} or {params, error} or {none}, its ktune.Kernel or None)."""
    all_params = twins_of(kind, served["template"], served["params"])
    if not all_params:
        return [({"none": f"no {kind} twin for {served['template']} {served['params']}"}, None)]
    return [kernel_for(client, s, served["device"], served["template"], params)
            for params in all_params]


def kernel_for(client: Any, s: Shape, device: str, template: str,
               params: Dict[str, int]) -> Tuple[Dict[str, Any], Any]:
    """One named config of shape s as ktuned compiles it: ({params, lowered_name, grid}, its
    ktune.Kernel), or ({params, error}, None) where ktuned refused it."""
    import ktune
    m, n, k = s
    try:
        image = client.kernel("gemm", dtype="bf16", layout="rc", device=device, template=template,
                              params=params, M=m, N=n, K=k)
    except Exception as e:  # e.g. the config breaks a constraint for this shape
        return {"params": params, "error": f"{type(e).__name__}: {e}"[-1000:]}, None
    kernel = ktune.Kernel(image)
    return ({"params": params, "lowered_name": image["lowered_name"],
             "grid": kernel.description.get("grid")}, kernel)


def ranked_kernels(client: Any, s: Shape, served: Dict[str, Any],
                   ranked: int) -> List[Tuple[str, Dict[str, Any], Any]]:
    """The lookup's ranked configs after the served one, up to `ranked` in all (the tuner's
    re-timed finalists, best first): (peer name "ktune_r2", ..., kernel_for's info with the
    template and the tuner's median, its ktune.Kernel or None)."""
    out = []
    for e in served["ranked"]:
        if len(out) + 1 >= ranked:
            break
        if (e["template"], e["params"]) == (served["template"], served["params"]):
            continue
        info, kernel = kernel_for(client, s, served["device"], e["template"], e["params"])
        info.update(template=e["template"], tuned_median_us=e.get("median_us"))
        out.append((f"ktune_r{len(out) + 2}", info, kernel))
    return out


def measure_shape(args, s: Shape, client, kt, torch, testing, dev, compile_allowed: bool) -> Dict:
    m, n, k = s
    bf16 = torch.bfloat16
    row: Dict[str, Any] = {"shape": shape_name(s), "problem": problem_key(s)}
    a = torch.randn(m, k, dtype=bf16, device=dev)
    w = torch.randn(n, k, dtype=bf16, device=dev)   # stored as nn.Linear stores its weight
    b = w.t()                                        # [K, N], column-major: layout rc
    served, kernel = fetch_served(client, s, args.cubins)
    row["served"] = served
    # Twins (--twins): row["twin"] and the peer "ktune_twin" are the first, "ktune_twin2"... the
    # rest, each also in row["twins"] with its time relative to the served kernel.
    twins = fetch_twins(client, s, served, args.twins) if args.twins else []
    if twins:
        row["twin"] = twins[0][0]
        row["twins"] = [info for info, _ in twins]
    timed_twins = [(twin_name(i), info, kern) for i, (info, kern) in enumerate(twins)
                   if kern is not None]
    stream = torch.cuda.current_stream().cuda_stream

    # Outputs. ktune through ktune.torch (linear: x @ weight^T, the nn.Linear call, whose fast
    # path a model takes), and the served Kernel into a NaN-poisoned C.
    calls = kt.stats()["ktune"].get("linear", 0)
    out_k = kt.linear(a, w)
    torch.cuda.synchronize()
    row["ktune_torch_served"] = kt.stats()["ktune"].get("linear", 0) == calls + 1
    picked = kt._kernels.get(("linear", bf16, "rc", m, n, k, a.get_device()))
    if picked is not None and not isinstance(picked, str):
        row["ktune_torch_kernel"] = {"template": picked.image["template"],
                                     "params": picked.image["params"],
                                     "same_as_served": picked.lowered_name == kernel.lowered_name}
    else:
        row["ktune_torch_kernel"] = {"fallback": picked}
    c = torch.full((m, n), float("nan"), dtype=bf16, device=dev)
    kernel.launch_addresses((a.data_ptr(), w.data_ptr(), c.data_ptr()), stream)
    out_t = torch.matmul(a, b)
    c_twins = {}
    for name, _, twin in timed_twins:
        c_twins[name] = torch.full((m, n), float("nan"), dtype=bf16, device=dev)
        twin.launch_addresses((a.data_ptr(), w.data_ptr(), c_twins[name].data_ptr()), stream)
    torch.cuda.synchronize()

    compiled, out_c = None, None
    if compile_allowed:
        torch._dynamo.reset()
        try:
            compiled = torch.compile(_matmul, mode="max-autotune", dynamic=False)
            t0 = time.perf_counter()
            out_c = compiled(a, b).clone()
            torch.cuda.synchronize()
            row["compile_s"] = time.perf_counter() - t0   # compile + autotune, first call
            t0 = time.perf_counter()
            compiled(a, b)
            torch.cuda.synchronize()
            row["compile_second_call_s"] = time.perf_counter() - t0
        except Exception as e:  # cuBLAS and ktune are still measured
            compiled, out_c = None, None
            row["compile_error"] = f"{type(e).__name__}: {e}"[-2000:]
    else:
        row["compile_skipped"] = "deadline"

    # Checks: against torch on the whole output, against fp64 on sampled rows.
    rows = torch.randperm(m, device=dev)[:64].sort().values
    rows[0], rows[-1] = 0, m - 1
    exact = a[rows].double() @ w.double().t()
    check = {"ktune_vs_torch_rel_l2": rel_l2(out_k, out_t),
             "ktune_kernel_vs_torch_rel_l2": rel_l2(c, out_t),
             "ktune_nan": int(torch.isnan(c).sum()),
             "ktune_bitwise_equal_to_torch": float((c == out_t).float().mean()),
             "fp64_rows": int(rows.numel()),
             "ktune_vs_fp64_rel_l2": rel_l2(c[rows], exact),
             "ktune_torch_vs_fp64_rel_l2": rel_l2(out_k[rows], exact),
             "cublas_vs_fp64_rel_l2": rel_l2(out_t[rows], exact)}
    if out_c is not None:
        check["compile_vs_fp64_rel_l2"] = rel_l2(out_c[rows], exact)
    check["ok"] = (check["ktune_nan"] == 0 and check["ktune_vs_fp64_rel_l2"] < BF16_TOLERANCE
                   and check["ktune_vs_torch_rel_l2"] < BF16_TOLERANCE)
    for name, info, _ in timed_twins:
        key = name[len("ktune_"):]           # twin, twin2, ...
        c_twin = c_twins[name]
        check[f"{key}_vs_torch_rel_l2"] = rel_l2(c_twin, out_t)
        check[f"{key}_vs_fp64_rel_l2"] = rel_l2(c_twin[rows], exact)
        check[f"{key}_nan"] = int(torch.isnan(c_twin).sum())
        check[f"{key}_ok"] = (check[f"{key}_nan"] == 0
                              and check[f"{key}_vs_fp64_rel_l2"] < BF16_TOLERANCE)
        info["ok"] = check[f"{key}_ok"]
    row["check"] = check
    del exact, out_k, out_c

    # Timing: each peer with do_bench (L2 flushed between runs), in rounds that rotate the order.
    peers = {"cublas": lambda: torch.matmul(a, b),
             "ktune": lambda: kt.linear(a, w),
             "ktune_kernel": launcher(kernel, a, w, c, stream)}
    if compiled is not None:
        peers["compile"] = lambda: compiled(a, b)
    for name, _, twin in timed_twins:
        peers[name] = launcher(twin, a, w, c_twins[name], stream)
    names = list(peers)
    per: Dict[str, List[float]] = {p: [] for p in names}
    for r in range(args.rounds):
        for p in rotated(names, r):
            per[p].append(testing.do_bench(peers[p], warmup=25, rep=rep_ms(args.rounds),
                                           return_mode="median"))
    timing = {}
    for p in names:
        ms = statistics.median(per[p])
        timing[p] = {"median_us": ms * 1e3, "rounds_us": [v * 1e3 for v in per[p]],
                     "tflops": flops(s) / (ms * 1e-3) / 1e12}
    row["timing"] = timing
    tk = timing["ktune"]["tflops"]
    row["ktune_vs_cublas"] = tk / timing["cublas"]["tflops"]     # > 1: ktune faster
    # The same ratio taken round by round (each round's neighbours share its clock), then the
    # median: a second reading of the comparison, less moved by drift between rounds.
    row["ktune_vs_cublas_paired"] = statistics.median(
        c / k for c, k in zip(per["cublas"], per["ktune"]))
    for name, info, _ in timed_twins:
        info["vs_served"] = timing[name]["tflops"] / timing["ktune_kernel"]["tflops"]
    if "ktune_twin" in timing:
        row["twin_vs_served"] = timing["ktune_twin"]["tflops"] / timing["ktune_kernel"]["tflops"]
    if "compile" in timing:
        row["ktune_vs_compile"] = tk / timing["compile"]["tflops"]
        row["compile_vs_cublas"] = timing["compile"]["tflops"] / timing["cublas"]["tflops"]
    print(f"{shape_name(s):>18} cuBLAS {timing['cublas']['tflops']:6.1f}  compile "
          f"{timing.get('compile', {}).get('tflops', float('nan')):6.1f} "
          f"({row.get('compile_s', float('nan')):5.1f} s)  ktune {tk:6.1f} "
          f"x{row['ktune_vs_cublas']:.3f}  {served['provenance']} {served['template']} "
          f"check {'ok' if check['ok'] else 'FAILED'}", flush=True)
    for info in row.get("twins", []):
        if "vs_served" in info:
            p = info["params"]
            print(f"{'':>18} {args.twins} twin STREAMK={p.get('STREAMK')} REDUCE={p.get('REDUCE')} "
                  f"EPILOGUE={p.get('EPILOGUE')} SPLITS={p.get('SPLITS')} "
                  f"x{info['vs_served']:.3f} of the served kernel "
                  f"check {'ok' if info.get('ok') else 'FAILED'}", flush=True)
        else:
            print(f"{'':>18} no twin timed: {info.get('error') or info.get('none')}"[:300],
                  flush=True)
    return row


def profile(args: argparse.Namespace) -> Dict[str, Any]:
    """Per shape, launches ktune's served kernel and torch.matmul (cuBLAS) once each on the same
    inputs, for a profiler to capture (run_ncu.sh runs this step under ncu)."""
    import torch
    import ktune
    dev = torch.device("cuda")
    client = ktune.Client(socket_path=args.socket, cache_ttl=0, kernel_timeout=120)
    doc: Dict[str, Any] = {"shapes": []}
    for s in parse_shapes(args.shapes):
        m, n, k = s
        a = torch.randn(m, k, dtype=torch.bfloat16, device=dev)
        w = torch.randn(n, k, dtype=torch.bfloat16, device=dev)
        c = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
        try:
            served, kernel = fetch_served(client, s, None)
        except Exception as e:  # e.g. a stale entry (the template changed since the table)
            doc["shapes"].append({"shape": shape_name(s), "error": f"{type(e).__name__}: {e}"})
            print(f"{shape_name(s)}: not profiled: {type(e).__name__}: {e}", flush=True)
            continue
        torch.cuda.synchronize()
        kernel.launch_addresses((a.data_ptr(), w.data_ptr(), c.data_ptr()),
                                torch.cuda.current_stream().cuda_stream)
        torch.matmul(a, w.t())
        torch.cuda.synchronize()
        doc["shapes"].append({"shape": shape_name(s), "served": served})
        print(f"{shape_name(s)}: {served['template']} {served['params']} ({served['lowered_name']})",
              flush=True)
    return doc


def _matmul(a, b):
    import torch
    return torch.matmul(a, b)


def sustained(args, client, torch, dev, s: Shape = SUSTAINED_SHAPE,
              seconds: Optional[float] = None, burst_too: bool = True,
              ranked: int = 1) -> Dict[str, Any]:
    """One shape back to back (8192^3 by default): ktune's served winner and cuBLAS in
    alternating phases of `seconds` (args.sustain_s if None), every launch timed with events,
    A/B/C rotated over args.sets sets; then, with burst_too, a burst of each after an idle.
    With ranked > 1 the lookup's next ranked configs (the tuner's finalists) run phases of
    their own between the served one's and cuBLAS's: whether they rank at the clock their own
    power sets as the tuner's short interleaved re-time ranked them."""
    seconds = args.sustain_s if seconds is None else seconds
    m, n, k = s
    bf16 = torch.bfloat16
    served, kernel = fetch_served(client, s, None, ranked)
    others = ranked_kernels(client, s, served, ranked) if ranked > 1 else []
    sets = [(torch.randn(m, k, dtype=bf16, device=dev), torch.randn(n, k, dtype=bf16, device=dev),
             torch.empty(m, n, dtype=bf16, device=dev)) for _ in range(args.sets)]
    stream = torch.cuda.current_stream().cuda_stream

    def ktune_launch(kern: Any) -> Callable[[int], None]:
        return lambda i: kern.launch_addresses(
            (sets[i][0].data_ptr(), sets[i][1].data_ptr(), sets[i][2].data_ptr()), stream)
    launch = {"ktune": ktune_launch(kernel)}
    launch.update((name, ktune_launch(kern)) for name, _, kern in others if kern is not None)
    launch["cublas"] = lambda i: torch.matmul(sets[i][0], sets[i][1].t(), out=sets[i][2])
    names = list(launch)
    per_set = sum(t.numel() * t.element_size() for t in sets[0])

    # Warm up for a second, every peer in turn (untimed); then estimate one run.
    until = time.perf_counter() + 1.0
    i = 0
    while time.perf_counter() < until:
        launch[names[i % len(names)]](i % args.sets)
        i += 1
        if i % 64 == 0:
            torch.cuda.synchronize()  # keep the queue short, so the second is a second of work
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(10):
        launch["cublas"](i % args.sets)
    torch.cuda.synchronize()
    est = max((time.perf_counter() - t0) / 10, 1e-4)
    runs = max(args.min_runs, int(seconds / est))

    sampler = Sampler(os.path.join(args.logs, f"nvidia-smi-sustained-{shape_name(s)}.csv"), ms=50)
    reader = NvmlReader(ms=5)
    reader.start()
    times: Dict[str, List[float]] = {name: [] for name in names}
    windows: Dict[str, List[Tuple[float, float]]] = {name: [] for name in names}
    phases = []
    # The clock each phase ran at, counted by the SMs (ClockProbe): a probe after every
    # (runs // 10)th run of a phase and every 10th of a burst, outside the timed events.
    try:
        probe: Optional[ClockProbe] = ClockProbe(torch, stream)
        probe_error = None
    except Exception as e:  # noqa: BLE001  (no driver, or the PTX refused: the run goes on)
        probe, probe_error = None, f"{type(e).__name__}: {e}"

    def timed(impl: str, n: int, label: str, every: int) -> Tuple[List[float], float, float]:
        """n launches of impl back to back, each event-timed: (us per run, wall start, end);
        a clock probe labelled `label` after every `every`th run and the last."""
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        w0 = time.time()
        for j in range(n):
            starts[j].record()
            launch[impl](j % args.sets)
            ends[j].record()
            if probe is not None and (j % every == 0 or j == n - 1):
                probe.probe(label, j)
        torch.cuda.synchronize()
        return [st.elapsed_time(en) * 1e3 for st, en in zip(starts, ends)], w0, time.time()

    for phase in names + names:
        us, w0, w1 = timed(phase, runs, phase, max(1, runs // 10))
        times[phase] += us
        windows[phase].append((w0, w1))
        phases.append({"impl": phase, "runs": runs, "wall_s": w1 - w0,
                       "median_us": statistics.median(us),
                       "tflops": flops(s) / (statistics.median(us) * 1e-6) / 1e12})
    # A burst after the GPU idled: the first args.min_runs runs, before the power cap holds the
    # clock down (what a short benchmark of one kernel reports, beside the sustained figure).
    burst: Dict[str, Any] = {"idle_s": args.burst_idle_s, "runs": args.min_runs}
    for impl in ("ktune", "cublas") if burst_too else ():
        time.sleep(args.burst_idle_s)
        us, w0, w1 = timed(impl, args.min_runs, impl + "_burst", 10)
        med = statistics.median(us)
        burst[impl] = {"median_us": med, "median_tflops": flops(s) / (med * 1e-6) / 1e12,
                       "wall_s": w1 - w0, "window": (w0, w1)}
    sampler.stop()
    reads = reader.stop()
    samples = sampler.samples()
    # What the clock and power figures are made of: NVML's reads where this process could make
    # them, else nvidia-smi's samples (which lag a burst); nvidia-smi's kept beside as a check.
    source = "nvml, every 5 ms" if reader.available else "nvidia-smi, every 50 ms"

    def gpu(windows: List[Tuple[float, float]]) -> Dict[str, Any]:
        doc = summarize_samples(reads if reader.available else samples, windows)
        if reader.available:
            doc["nvidia_smi"] = summarize_samples(samples, windows)
        return doc
    c_k, c_b = torch.empty_like(sets[0][2]), torch.empty_like(sets[0][2])
    kernel.launch_addresses((sets[0][0].data_ptr(), sets[0][1].data_ptr(), c_k.data_ptr()), stream)
    torch.matmul(sets[0][0], sets[0][1].t(), out=c_b)
    for name, info, kern in others:
        if kern is not None:
            c_r = torch.empty_like(sets[0][2])
            kern.launch_addresses((sets[0][0].data_ptr(), sets[0][1].data_ptr(), c_r.data_ptr()),
                                  stream)
            torch.cuda.synchronize()
            info["vs_cublas_rel_l2"] = rel_l2(c_r, c_b)
    torch.cuda.synchronize()
    doc: Dict[str, Any] = {"shape": shape_name(s), "served": served, "input_sets": args.sets,
                           "bytes_rotated": per_set * args.sets,
                           "x_L2": per_set * args.sets / L2_BYTES, "runs_per_phase": runs,
                           "phases": phases, "ktune_vs_cublas_rel_l2": rel_l2(c_k, c_b),
                           "samples": len(samples), "gpu_source": source}
    for impl, us in times.items():
        v = sorted(us)
        tf = sorted(flops(s) / (x * 1e-6) / 1e12 for x in v)
        doc[impl] = {"runs": len(v), "median_us": statistics.median(v),
                     "median_tflops": statistics.median(tf), "p10_tflops": tf[len(tf) // 10],
                     "p90_tflops": tf[(9 * len(tf)) // 10], "gpu": gpu(windows[impl])}
    doc["ktune_vs_cublas"] = doc["ktune"]["median_tflops"] / doc["cublas"]["median_tflops"]
    doc["seconds_per_phase"] = seconds
    if ranked > 1:  # the served config first, then the others in the lookup's order
        doc["ranked"] = [{"impl": "ktune", "template": served["template"],
                          "params": served["params"], "tuned_median_us": served["tuned_median_us"],
                          "median_us": doc["ktune"]["median_us"], "vs_served": 1.0}]
        for name, info, _ in others:
            row = dict(info, impl=name)
            if name in doc:
                row.update(median_us=doc[name]["median_us"],
                           vs_served=doc["ktune"]["median_us"] / doc[name]["median_us"])
            doc["ranked"].append(row)
    if burst_too:
        for impl in ("ktune", "cublas"):
            burst[impl]["gpu"] = gpu([burst[impl].pop("window")])
        doc["burst"] = burst
    doc["clock_probe"] = clock_probe_doc(probe, probe_error, doc, torch, dev, names)
    print(f"{'sustained ' + shape_name(s):>18} ktune {doc['ktune']['median_tflops']:6.1f} TF/s "
          f"cuBLAS {doc['cublas']['median_tflops']:6.1f} TF/s over {2 * runs} runs each; SM "
          f"{doc['ktune']['gpu'].get('sm_mhz', {}).get('median', '?')} MHz, "
          f"{doc['ktune']['gpu'].get('power_w', {}).get('median', '?')} W (ktune's phases; "
          f"{source})",
          flush=True)
    for r in doc.get("ranked", [])[1:]:
        print(f"{'ranked ' + r['impl']:>18} {r['template']} {params_text(r['params'])}: tuned "
              f"{r.get('tuned_median_us') or float('nan'):.1f} us, sustained "
              f"{r.get('median_us', float('nan')):.1f} us = x{r.get('vs_served', float('nan')):.3f} "
              f"of the served config's speed{'; ' + r['error'] if 'error' in r else ''}",
              flush=True)
    if not burst_too:
        print_clock_probe(doc["clock_probe"])
        return doc
    print(f"{'burst ' + shape_name(s):>18} ktune {burst['ktune']['median_tflops']:6.1f} TF/s "
          f"cuBLAS {burst['cublas']['median_tflops']:6.1f} TF/s, median of the first "
          f"{args.min_runs} runs after {args.burst_idle_s:g} s idle; SM "
          f"{burst['ktune']['gpu'].get('sm_mhz', {}).get('median', '?')} MHz, "
          f"{burst['ktune']['gpu'].get('power_w', {}).get('median', '?')} W (ktune's; {source})",
          flush=True)
    print_clock_probe(doc["clock_probe"])
    return doc


def clock_probe_doc(probe: Optional[ClockProbe], error: Optional[str], doc: Dict[str, Any],
                    torch: Any, dev: Any,
                    impls: Sequence[str] = ("ktune", "cublas")) -> Dict[str, Any]:
    """The sustained run's clock probes (REQUIRES: synchronized): per phase kind and burst, the
    clock and the share of the dense peak at it that the phase's median TFLOP/s is; every probe."""
    if probe is None:
        return {"error": error}
    probes = probe.results()
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    out: Dict[str, Any] = {"source": f"in-kernel %clock64 over {ClockProbe.WINDOW_NS // 1000} us "
                                     "of %globaltimer, one thread, between runs",
                           "sms": sms, "probes": probes}
    for impl in impls:
        out[impl] = summarize_probes(probes, impl, doc[impl]["median_tflops"], sms)
        if "burst" in doc and impl in doc["burst"]:
            out[impl + "_burst"] = summarize_probes(probes, impl + "_burst",
                                                    doc["burst"][impl]["median_tflops"], sms)
    return out


def print_clock_probe(c: Dict[str, Any]) -> None:
    if "error" in c:
        print(f"{'clock probe':>18} not run: {c['error']}", flush=True)
        return

    def one(key: str) -> str:
        x = c.get(key, {})
        if not x.get("probes"):
            return f"{key} -"
        m = x["sm_mhz"]
        return (f"{key} {m['median']:.0f} MHz ({m['min']:.0f}-{m['max']:.0f}, {x['probes']} probes)"
                f" = {100 * x['share_of_peak']:.1f} % of {x['dense_peak_tflops']:.0f} TF/s")
    keys = [k for k, v in c.items() if isinstance(v, dict)]  # every phase kind and burst
    print(f"{'clock probe':>18} " + "; ".join(one(k) for k in keys), flush=True)


# ---- meta ------------------------------------------------------------------------------------

GPU_FIELDS = ("name", "driver_version", "power.limit", "power.default_limit", "power.max_limit",
              "clocks.max.sm", "clocks.sm", "clocks.mem", "temperature.gpu", "memory.total",
              "pstate")


def meta(args: argparse.Namespace) -> Dict[str, Any]:
    """Where and what ran: date, commit, ktuned's version, the GPU as nvidia-smi sees it."""
    doc: Dict[str, Any] = {"date": datetime.datetime.now(datetime.timezone.utc)
                           .strftime("%Y-%m-%dT%H:%M:%SZ"), "cpus": os.cpu_count()}
    if args.commit_file and os.path.exists(args.commit_file):
        with open(args.commit_file) as f:
            doc["commit"] = f.read().strip()
    if args.ktuned:
        run = subprocess.run([args.ktuned, "--version"], capture_output=True, text=True)
        doc["ktuned_version"] = (run.stdout or run.stderr).strip()
    doc.update(gpu_info())
    return doc


def gpu_info() -> Dict[str, Any]:
    """{"gpu": GPU_FIELDS as nvidia-smi reports them now} or {"gpu_error": why not}."""
    if not shutil.which("nvidia-smi"):
        return {"gpu_error": "no nvidia-smi"}
    run = subprocess.run(["nvidia-smi", "--query-gpu=" + ",".join(GPU_FIELDS),
                          "--format=csv,noheader"], capture_output=True, text=True)
    first = run.stdout.strip().splitlines()[:1]
    if run.returncode == 0 and first:
        return {"gpu": dict(zip(GPU_FIELDS, (v.strip() for v in first[0].split(","))))}
    return {"gpu_error": (run.stdout + run.stderr).strip()[-300:]}


# ---- Inductor's autotuning log ----------------------------------------------------------------

_AUTOTUNE_HEAD = re.compile(r"^AUTOTUNE (\w+)\((\d+)x(\d+), (\d+)x(\d+)\)")
_AUTOTUNE_CHOICE = re.compile(r"^\s+(\S+) ([0-9.]+) ms ([0-9.]+)%")
_AUTOTUNE_TAIL = re.compile(r"AUTOTUNE benchmarking takes ([0-9.]+) seconds and ([0-9.]+) seconds "
                            r"precompiling for (\d+) choices")


def parse_autotune(text: str) -> Dict[str, Dict[str, Any]]:
    """What torch.compile max-autotune chose per GEMM shape, from the AUTOTUNE tables Inductor
    prints on stderr ("AUTOTUNE mm(MxK, KxN)", then its fastest choices, fastest first): the
    winner, its time, aten's mm (cuBLAS) time when listed, and the benchmarking summary line."""
    found: Dict[str, Dict[str, Any]] = {}
    current: Optional[Dict[str, Any]] = None
    for line in text.splitlines():
        if line.startswith("AUTOTUNE "):  # a table starts: ours (mm) or another op's
            head = _AUTOTUNE_HEAD.match(line)
            current = None
            if head and head[1] == "mm" and head[3] == head[4]:
                m, k, n = int(head[2]), int(head[3]), int(head[5])
                current = found.setdefault(shape_name((m, n, k)), {"choices_shown": 0})
            continue
        choice = _AUTOTUNE_CHOICE.match(line) if current is not None else None
        if choice:
            if current["choices_shown"] == 0:
                current.update({"best": choice[1], "best_ms": float(choice[2])})
            if choice[1] == "mm":
                current["aten_mm_ms"] = float(choice[2])
            current["choices_shown"] += 1
            continue
        tail = _AUTOTUNE_TAIL.search(line)
        if tail and current is not None:
            current.update({"benchmark_s": float(tail[1]), "precompile_s": float(tail[2]),
                            "choices": int(tail[3])})
            current = None
    return found


# ---- assemble --------------------------------------------------------------------------------

def tuning_rows(doc: Any) -> Dict[str, Dict[str, Any]]:
    """Per shape: the tuning wall time and what the job ended with, from `tune`'s document or
    ktune-bench's --out."""
    rows: Dict[str, Dict[str, Any]] = {}
    if not doc:
        return rows
    for j in doc.get("jobs", []):              # peers.py tune (the daemon)
        job = j.get("job", {})
        rows[j["shape"]] = {"path": "daemon", "wall_s": j.get("wall_s"), "job_s": j.get("job_s"),
                            "state": job.get("state", j.get("skipped")),
                            "trials": job.get("trials"), "best": job.get("best"),
                            "message": job.get("message")}
    for r in doc.get("results", []):           # ktune-bench --out
        s = shape_of_key(r.get("problem", ""))
        if not s:
            continue
        t = r.get("tuning", {})
        rows[shape_name(s)] = {"path": "ktune-bench", "wall_s": t.get("wall_s"),
                               "trials": t.get("trials"), "compile_s": t.get("compile_s"),
                               "measure_s": t.get("measure_s"), "vs_cublas_in_worker":
                                   r.get("vs_cublas"), "error": r.get("error")}
    return rows


def assemble(args: argparse.Namespace) -> Dict[str, Any]:
    meta = read_json(args.meta) or {}
    tuned = read_json(args.tuning)
    measured = read_json(args.measured) or {}
    sass = read_json(args.sass) or {}
    tuning = tuning_rows(tuned)
    sass_by_shape = {c["shape"]: c for c in sass.get("cubins", [])}
    autotune: Dict[str, Dict[str, Any]] = {}
    if args.autotune_log and os.path.exists(args.autotune_log):
        with open(args.autotune_log, errors="replace") as f:
            autotune = parse_autotune(f.read())
    shapes = []
    rows = measured.get("shapes") or []
    for r in rows:
        name = r["shape"]
        row = dict(r)
        row["tuning"] = tuning.get(name)
        if name in autotune:
            row["compile_choice"] = autotune[name]
        c = sass_by_shape.get(name)
        if c:
            row["sass"] = {k: c.get(k) for k in ("ops", "instructions", "hgmma", "local_memory",
                                                 "error")}
        shapes.append(row)
    timed = [r for r in shapes if "ktune_vs_cublas" in r]
    vs_cublas = [r["ktune_vs_cublas"] for r in timed]
    vs_compile = [r["ktune_vs_compile"] for r in timed if "ktune_vs_compile" in r]
    summary = {
        "shapes_timed": len(timed),
        "geomean_ktune_vs_cublas": geomean(vs_cublas),
        "min_ktune_vs_cublas": min(vs_cublas) if vs_cublas else None,
        "geomean_ktune_vs_cublas_paired": geomean(
            [r["ktune_vs_cublas_paired"] for r in timed if "ktune_vs_cublas_paired" in r]),
        "geomean_ktune_vs_compile": geomean(vs_compile),
        "min_ktune_vs_compile": min(vs_compile) if vs_compile else None,
        "checks_ok": sum(1 for r in timed if r.get("check", {}).get("ok")),
        "served_exact": sum(1 for r in shapes if r.get("served", {}).get("provenance") == "exact"),
        "tuning_total_s": sum(t["wall_s"] or 0 for t in tuning.values() if t.get("wall_s")),
        "compile_total_s": sum(r.get("compile_s", 0) for r in shapes),
        "winners_with_hgmma": sum(1 for c in sass.get("cubins", []) if c.get("hgmma")),
        "winners_with_local_memory": sum(1 for c in sass.get("cubins", []) if c.get("local_memory")),
        "sustained": {k: measured.get("sustained", {}).get(k, {}).get("median_tflops")
                      for k in ("ktune", "cublas")},
        "sustained_shapes_ktune_vs_cublas": {
            d["shape"]: d.get("ktune_vs_cublas") for d in measured.get("sustained_shapes", [])},
    }
    doc = {"benchmark": "gemm_peers", "issue": 13, **meta, "plan": read_json(args.plan),
           "torch": measured.get("torch"), "triton": measured.get("triton"),
           "torch_cuda": measured.get("torch_cuda"),
           "compile_warmup_s": measured.get("compile_warmup_s"),
           "allow_bf16_reduced_precision_reduction":
               measured.get("allow_bf16_reduced_precision_reduction"),
           "summary": summary, "shapes": shapes, "sustained": measured.get("sustained"),
           "sustained_shapes": measured.get("sustained_shapes"),
           "ktune_torch": measured.get("ktune_torch"),
           "tuning_path": (tuned or {}).get("path", "ktune-bench" if tuned else None),
           "sass_tool": sass.get("cuobjdump"), "sass_error": sass.get("error")}
    print_table(doc)
    return doc


def print_table(doc: Dict[str, Any]) -> None:
    print(f"{'shape':>18} {'served':>24} {'tune_s':>6} {'cuBLAS':>7} {'compile':>7} "
          f"{'comp_s':>6} {'ktune':>7} {'x cuB':>6} {'x comp':>6} {'HGMMA':>5} {'LDL/STL':>7} check")
    for r in doc["shapes"]:
        t = r.get("timing", {})
        sv = r.get("served", {})
        tn = r.get("tuning") or {}
        ops = (r.get("sass") or {}).get("ops") or {}

        def f(v: Any, fmt: str) -> str:
            return format(v, fmt) if isinstance(v, (int, float)) else "-"
        print(f"{r['shape']:>18} {(sv.get('provenance', '-') + ' ' + sv.get('template', ''))[:24]:>24} "
              f"{f(tn.get('wall_s'), '6.1f'):>6} {f(t.get('cublas', {}).get('tflops'), '7.1f'):>7} "
              f"{f(t.get('compile', {}).get('tflops'), '7.1f'):>7} {f(r.get('compile_s'), '6.1f'):>6} "
              f"{f(t.get('ktune', {}).get('tflops'), '7.1f'):>7} {f(r.get('ktune_vs_cublas'), '6.3f'):>6} "
              f"{f(r.get('ktune_vs_compile'), '6.3f'):>6} {f(ops.get('HGMMA'), 'd'):>5} "
              f"{f(ops.get('LDL', 0) + ops.get('STL', 0) if ops else None, 'd'):>7} "
              f"{({True: 'ok', False: 'FAILED'}).get(r.get('check', {}).get('ok'), r.get('skipped', '-'))}")
    print(json.dumps(doc["summary"], indent=1))


# ---- main ------------------------------------------------------------------------------------

def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("step", nargs="?", default="plan",
                    choices=["plan", "meta", "tune", "measure", "sass", "assemble", "profile"])
    ap.add_argument("--dry-run", action="store_true", help="print the plan only (= step plan)")
    ap.add_argument("--socket", help="ktuned's socket (tune, measure)")
    ap.add_argument("--shapes", default="tma", help='"tma" (the 10 of the suite) or MxNxK,...')
    ap.add_argument("--out", help="this step's JSON document")
    ap.add_argument("--deadline", type=float, default=0,
                    help="unix time this step must end by (tune: no job starts after it; "
                         "measure: shapes, torch.compile and the sustained run are skipped to fit)")
    ap.add_argument("--tuner", default="daemon", choices=["daemon", "bench"], help="plan: how it tunes")
    ap.add_argument("--strategy", default="model")
    ap.add_argument("--trials", type=int, default=120, help="tune: trials per job")
    ap.add_argument("--job-seconds", type=float, default=45, help="tune: seconds per job at most")
    ap.add_argument("--finalists", type=int, default=5,
                    help="plan: configs each job re-times before its winner (ktuned's tuning.finalists)")
    ap.add_argument("--template", action="append", default=[],
                    help="tune: search only this template (repeatable; default: every one)")
    ap.add_argument("--seed", action="append", default=[],
                    help="tune: a config NAME=V,... measured first in every job (repeatable)")
    ap.add_argument("--cubins", help="measure: write each served cubin here; sass: read them")
    ap.add_argument("--logs", default=".", help="measure: where the nvidia-smi samples go")
    ap.add_argument("--rounds", type=int, default=15,
                    help="measure: interleaved do_bench rounds (500 ms per peer in all)")
    ap.add_argument("--twins", nargs="?", const="streamk", choices=["streamk", "reduce"],
                    help="measure: also time each served gemm_tma config's stream-K twin, or "
                         "(reduce) a split-K winner's REDUCE 1 / REDUCE 0 pair")
    ap.add_argument("--reserve-s", type=float, default=30,
                    help="measure: seconds kept for the sustained run at the end")
    ap.add_argument("--compile-reserve-s", type=float, default=40,
                    help="measure: torch.compile a shape only with this much time left")
    ap.add_argument("--sets", type=int, default=3, help="measure: rotated A/B/C sets at 8192^3")
    ap.add_argument("--sustain-s", type=float, default=4, help="measure: seconds per phase")
    ap.add_argument("--sustain-shapes", default="",
                    help="measure: MxNxK,... also sustained, ktune and cuBLAS in phases of their "
                         "own (no burst), each shape tuned and served like the others")
    ap.add_argument("--sustain-more-s", type=float, default=2,
                    help="measure: seconds per phase for --sustain-shapes")
    ap.add_argument("--sustain-ranked", type=int, default=1,
                    help="measure: the first N configs of the lookup's ranking (the tuner's "
                         "re-timed finalists, served first) each in phases of its own in "
                         "--sustain-shapes (1: the served config alone)")
    ap.add_argument("--min-runs", type=int, default=50,
                    help="measure: runs per sustained phase at least, and per burst")
    ap.add_argument("--burst-idle-s", type=float, default=3,
                    help="measure: seconds the GPU idles before each 8192^3 burst")
    ap.add_argument("--cuobjdump", help="sass: the tool (default: PATH, /usr/local/cuda/bin)")
    ap.add_argument("--autotune-log", help="assemble: measure's stderr (Inductor's AUTOTUNE tables)")
    ap.add_argument("--commit-file", help="meta: a file holding the commit the kit was built at")
    ap.add_argument("--ktuned", help="meta: the ktuned binary (its --version)")
    for name in ("meta", "plan", "tuning", "measured", "sass"):
        ap.add_argument(f"--{name}-json", dest=name, help=f"assemble: the {name} document")
    args = ap.parse_args(argv)
    step = "plan" if args.dry_run else args.step
    try:
        parse_shapes(args.shapes)
        if args.sustain_shapes:
            parse_shapes(args.sustain_shapes)
    except ValueError as e:
        ap.error(str(e))
    if step in ("tune", "measure", "profile") and not args.socket:
        ap.error(f"{step} needs --socket")
    doc = {"plan": plan, "meta": meta, "tune": tune, "measure": measure, "profile": profile,
           "sass": sass_step, "assemble": assemble}[step](args)
    if step == "plan":
        print(json.dumps(doc, indent=1))
    if args.out:
        write_json(args.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
