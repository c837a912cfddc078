"""ktune.torch inside CUDA graphs against eager calls, and against torch's own linear, on decode
shapes where a kernel runs for microseconds and the host's launch cost decides the speed.

For each shape: 16 linears with distinct weights (together past the L2, so every call reads its
weight from memory), once through ktune.torch and once through torch.nn.functional.linear, each
run eagerly and captured into a CUDA graph (warm-up on a side stream, capture on the graph's
stream, as PyTorch documents). Every output is checked against torch's. Timed in one process,
interleaved: CUDA events around each eager sequence and each replay, 30 rounds, median per call.
Which config ktune serves is the daemon's answer on this GPU (the table shipped is the H200's: on
another GPU class the answers are heuristic). Writes one JSON document.

    python3 bench/launch/graph_torch.py --ktuned .gpu/ktuned --out graph-torch.json

--shapes MxNxK,... times other shapes; --borrow TABLE imports another GPU's table as this GPU's
own first (its configs served as exact), to ask whether that GPU's winners beat this one's
heuristics; --trace MxNxK,... adds each kernel's duration and the gaps between kernels (CUPTI).
"""

import argparse
import contextlib
import datetime
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))
import ktune  # noqa: E402
import ktune.torch as kt  # noqa: E402

SHAPES = ((1, 4096, 4096), (16, 4096, 4096), (16, 14336, 4096), (16, 4096, 14336),
          (64, 14336, 4096), (128, 4096, 4096), (128, 14336, 4096), (128, 4096, 14336),
          (1024, 4096, 4096))
CALLS = 16
ROUNDS = 30


def rel_l2(got: torch.Tensor, ref: torch.Tensor) -> float:
    g, r = got.double(), ref.double()
    return float(torch.linalg.vector_norm(g - r) / torch.linalg.vector_norm(r))


def smi(fields: str) -> list:
    out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    return [f.strip() for f in out.splitlines()[0].split(",")]


class ClockPoller:
    """Reads the SM clock through NVML about every millisecond on a thread while a timed sequence
    runs, under the tag of what runs (`with poller.running("ktune"): ...`), so that times that
    moved together across processes can be told (clocks under the 700 W cap) from a variant that
    got slower. A sample counts only if the same sequence (by generation, not tag) ran before and
    after the read; the thread sleeps while nothing is timed. A sequence under a millisecond gets
    a sample only now and then: short shapes have few. The GPU is found by its UUID (NVML and CUDA
    number devices differently); no pynvml or no match: no figures."""

    def __init__(self):
        self._tag, self._gen = None, 0
        self._active = threading.Event()
        self.samples = {}
        try:
            import pynvml
            pynvml.nvmlInit()
            uuid = torch.cuda.get_device_properties(torch.cuda.current_device()).uuid
            self._nvml = pynvml
            self._h = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
        except Exception:  # noqa: BLE001 - no NVML binding or no such GPU: the figures are null
            self._nvml = None
            return
        threading.Thread(target=self._poll, daemon=True).start()

    def _poll(self):
        n = self._nvml
        while True:
            self._active.wait()
            gen, tag = self._gen, self._tag
            if tag is not None:
                mhz = n.nvmlDeviceGetClockInfo(self._h, n.NVML_CLOCK_SM)
                if self._gen == gen and self._tag == tag:  # the read fell inside that sequence
                    self.samples.setdefault(tag, []).append(mhz)
            time.sleep(0.001)

    @contextlib.contextmanager
    def running(self, tag: str):
        self._gen += 1
        self._tag = tag
        self._active.set()
        try:
            yield
        finally:
            self._tag = None
            self._gen += 1
            self._active.clear()

    def take(self, tag: str):
        """Median and minimum SM clock (MHz) of the samples under `tag` (then drops them)."""
        got = self.samples.pop(tag, [])
        return {"median_mhz": statistics.median(got), "min_mhz": min(got), "samples": len(got)} if got else None


@functools.cache
def clock_poller() -> ClockPoller:
    return ClockPoller()


def events_us(fn) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3


def capture(fn) -> torch.cuda.CUDAGraph:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def kernel_trace(graph: torch.cuda.CUDAGraph, replays: int = 3) -> dict:
    """Replays the graph under the profiler (CUPTI) and says what its kernels did: how long each
    ran, and the gap from one kernel's end to the next one's start (negative: they overlapped,
    as a kernel launched with programmatic dependent launch may)."""
    from torch.profiler import ProfilerActivity, profile
    graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        with open(f.name) as t:
            trace = json.load(t)
    ks = sorted((e["ts"], e["dur"], e["name"]) for e in trace.get("traceEvents", [])
                if e.get("cat") == "kernel")
    gaps = [b[0] - (a[0] + a[1]) for a, b in zip(ks, ks[1:])]
    names = sorted({name[:120] for _, _, name in ks})
    return {"kernels": len(ks), "replays": replays, "names": names,
            "median_kernel_us": statistics.median(d for _, d, _ in ks) if ks else None,
            "median_gap_us": statistics.median(gaps) if gaps else None,
            "overlapping": sum(g < 0 for g in gaps),
            "span_us_per_call": (ks[-1][0] + ks[-1][1] - ks[0][0]) / (replays * CALLS) if ks else None}


def borrow(client: "ktune.Client", path: str) -> dict:
    """Imports the table at `path` as this GPU's own: every winner's device becomes this node's
    class, so its lookups serve the other GPU's tuned configs as exact."""
    gpu = client.status()["gpus"][0]
    _, cc, sms, gib = gpu["device_class"].rsplit(".", 3)
    device = {"name": gpu["name"], "cc": int(cc[2:]), "sm_count": int(sms[:-2]),
              "memory_gib": int(gib[:-3])}
    with open(path) as f:
        table = json.load(f)
    for w in table["winners"]:
        w["device"] = device
    return client.import_table(table)


def host_profile(call, calls: int = 400, top: int = 12) -> dict:
    """cProfile over `calls` eager calls: where the host's time per call goes (us per call, by
    function, own time), the GPU left to queue behind."""
    import cProfile
    import pstats
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        call()
    prof.disable()
    torch.cuda.synchronize()
    stats = pstats.Stats(prof).stats
    rows = sorted(((tt, nc, f"{os.path.basename(fn)}:{line}:{name}")
                   for (fn, line, name), (_, nc, tt, _, _) in stats.items()), reverse=True)
    return {"calls": calls, "us_per_call_total": sum(r[0] for r in rows) / calls * 1e6,
            "top": [{"where": w, "us_per_call": tt / calls * 1e6, "calls_per_call": nc / calls}
                    for tt, nc, w in rows[:top]]}


def shape_run(m: int, n: int, k: int, trace: bool = False, profile: bool = False) -> dict:
    x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    ws = [torch.randn(n, k, dtype=torch.bfloat16, device="cuda") * 0.02 for _ in range(CALLS)]
    outs = {"ktune": [None] * CALLS, "torch": [None] * CALLS}

    def seq(impl: str):
        f = kt.linear if impl == "ktune" else F.linear
        def run():
            for i, w in enumerate(ws):
                outs[impl][i] = f(x, w)
        return run

    served_before = kt.stats()["ktune"].get("linear", 0)
    fallbacks_before = kt.stats()["fallback"]
    with torch.no_grad():
        seq("ktune")()  # the lookup, the kernel op and the module load: not timed
        graphs = {impl: capture(seq(impl)) for impl in ("ktune", "torch")}
        # The graphs' own outputs (captured tensors), after one replay each, against fp64-free
        # torch: the same inputs give the same products to bf16 rounding.
        for g in graphs.values():
            g.replay()
        torch.cuda.synchronize()
        worst = max(rel_l2(a, b) for a, b in zip(outs["ktune"], outs["torch"]))
        times = {f"{impl}_{mode}": [] for impl in ("ktune", "torch") for mode in ("eager", "graph")}
        for _ in range(ROUNDS):
            for impl in ("ktune", "torch"):
                times[f"{impl}_eager"].append(events_us(seq(impl)) / CALLS)
                with clock_poller().running(impl):
                    times[f"{impl}_graph"].append(events_us(graphs[impl].replay) / CALLS)
        # Counted before the profile's own eager calls.
        served = kt.stats()["ktune"].get("linear", 0) - served_before
        fallbacks = kt.stats()["fallback"] - fallbacks_before
        traced = {impl: kernel_trace(g) for impl, g in graphs.items()} if trace else None
        profiled = ({impl: host_profile(lambda impl=impl: (kt.linear if impl == "ktune" else
                                                            F.linear)(x, ws[0]))
                     for impl in ("ktune", "torch")} if profile else None)
    med = {key: statistics.median(v) for key, v in times.items()}
    return {"shape": [m, n, k], "calls": CALLS, "rounds": ROUNDS,
            "us_per_call": med,
            "sm_clock_during_graph_replays": {impl: clock_poller().take(impl) for impl in ("ktune", "torch")},
            "graph_speedup_ktune": med["ktune_eager"] / med["ktune_graph"],
            "graph_speedup_torch": med["torch_eager"] / med["torch_graph"],
            "torch_over_ktune_graph": med["torch_graph"] / med["ktune_graph"],
            "torch_over_ktune_eager": med["torch_eager"] / med["ktune_eager"],
            "worst_rel_l2_vs_torch": worst,
            "ktune_calls_served": served, "fallbacks": fallbacks,
            **({"kernel_trace": traced} if traced else {}),
            **({"host_profile": profiled} if profiled else {}),
            "explain": kt.explain()}


@contextlib.contextmanager
def serving(ktuned: str):
    """A ktuned started in a temporary directory that serves and never tunes, and a client of it;
    both gone on exit. Exits with the daemon's log if it does not answer within 30 s."""
    with tempfile.TemporaryDirectory(prefix="ktune-graph-bench-") as d:
        sock = os.path.join(d, "ktuned.sock")
        log = open(os.path.join(d, "ktuned.log"), "w")
        daemon = subprocess.Popen([ktuned, "--socket", sock, "--data-dir", os.path.join(d, "data"),
                                   "--set", "tuning.gpu_policy=never", "--set",
                                   "tuning.on_miss=false"], stdout=log, stderr=subprocess.STDOUT)
        client = ktune.Client(socket_path=sock, cache_ttl=0)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    client.status()
                    break
                except ktune.KtuneError:
                    if daemon.poll() is not None or time.monotonic() > deadline:
                        sys.exit(open(log.name).read())
                    time.sleep(0.05)
            yield client
        finally:
            client.close()
            daemon.terminate()
            try:
                daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
            log.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ktuned", required=True, help="the ktuned to start (it serves, never tunes)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", default="", help="MxNxK,... : these shapes instead of the built-in list")
    ap.add_argument("--borrow", default="",
                    help="a table (JSON export) imported as this GPU's own before timing")
    ap.add_argument("--profile", default="",
                    help="MxNxK,... : also profile these shapes' eager calls on the host (cProfile)")
    ap.add_argument("--trace", default="",
                    help="MxNxK,... : also replay these shapes' graphs under the profiler")
    args = ap.parse_args()
    torch.manual_seed(0)
    name, driver, sm, max_sm, power, limit = smi(
        "name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit")
    with serving(args.ktuned) as client:
        borrowed = borrow(client, args.borrow) if args.borrow else None
        status = client.status()
        if borrowed:
            print(f"borrowed {args.borrow}: {borrowed}", flush=True)
        kt.configure(client=client)
        rows = []
        traced = {tuple(int(d) for d in s.split("x")) for s in args.trace.split(",") if s}
        shapes = ([tuple(int(d) for d in s.split("x")) for s in args.shapes.split(",")]
                  if args.shapes else SHAPES)
        profiled = {tuple(int(d) for d in s.split("x")) for s in args.profile.split(",") if s}
        if not (traced | profiled) <= set(shapes):
            sys.exit(f"--trace/--profile name shapes that are not timed: "
                     f"{sorted((traced | profiled) - set(shapes))}")
        for m, n, k in shapes:
            rows.append(shape_run(m, n, k, (m, n, k) in traced, (m, n, k) in profiled))
            r = rows[-1]
            print(f"{m}x{n}x{k}: us/call ktune eager {r['us_per_call']['ktune_eager']:.2f} "
                  f"graph {r['us_per_call']['ktune_graph']:.2f} | torch eager "
                  f"{r['us_per_call']['torch_eager']:.2f} graph "
                  f"{r['us_per_call']['torch_graph']:.2f} | torch/ktune graph "
                  f"{r['torch_over_ktune_graph']:.3f} rel_l2 {r['worst_rel_l2_vs_torch']:.1e} "
                  f"served {r['ktune_calls_served']} fallbacks {r['fallbacks']}", flush=True)
            for impl, hp in r.get("host_profile", {}).items():
                print(f"  {impl} host: {hp['us_per_call_total']:.1f} us/call profiled; " +
                      "; ".join(f"{t['where']} {t['us_per_call']:.2f}" for t in hp["top"][:8]),
                      flush=True)
            for impl, t in r.get("kernel_trace", {}).items():
                print(f"  {impl}: {t['kernels']} kernels, median {t['median_kernel_us']} us, "
                      f"gap {t['median_gap_us']} us, {t['overlapping']} overlapping, "
                      f"{t['names']}", flush=True)
    doc = {"benchmark": "graph_torch", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
           "gpu": name, "driver": driver, "sm_clock_mhz_at_start": float(sm),
           "max_sm_clock_mhz": float(max_sm), "power_w_at_start": float(power),
           "power_limit_w": float(limit), "torch": torch.__version__,
           "ktuned": {k: status.get(k) for k in ("version", "protocol", "winners", "device_classes")},
           "borrowed": {"table": args.borrow, "import": borrowed} if args.borrow else None,
           "shapes": rows}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
