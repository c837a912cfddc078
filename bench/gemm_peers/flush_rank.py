#!/usr/bin/env python3
"""Does the tuner's timing rank configs as the peers' timing does? (issue 13, H200)

The worker times a candidate with launches back to back, inputs rotated through 3x L2 but never an
L2 flush (docs/worker-protocol.md, "Timing"); bench/gemm_peers/peers.py times the served kernel
and cuBLAS with triton.testing.do_bench, which zeroes a 256 MB buffer before every run. For each
shape this takes the top configs of a `ktune export` (what the tuner ranked best) and times each,
and cuBLAS, both ways in one process, in rounds that rotate the order:
  flush: do_bench (L2 flushed before every run, one event pair per run, median);
  hot:   launches back to back, one event pair per launch, median (the worker's way). From
         Python a launch takes longer to enqueue than a kernel under ~60 us takes to run, so for
         those the hot times include the enqueue gap (the worker, C++ and CUDA graphs, does not).
It reports, per shape, each config's time both ways, the rank both ways, and how much faster the
best config under `flush` is than the tuner's first under `flush`: what a tuner timing with an
L2 flush could gain in the peers' comparison.

  # GPU node, ktuned running (any gpu_policy; the kernels are compiled through it):
  python3 bench/gemm_peers/flush_rank.py --socket S --table EXPORT.json --out OUT.json
"""

import argparse
import datetime
import json
import os
import statistics
import sys
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402


def hot_ms(fn, torch, runs: int) -> float:
    """Median of `runs` launches back to back, one event pair around each (after 3 warm-ups)."""
    for _ in range(3):
        fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(runs)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events)


def configs_of(table: Dict[str, Any], top: int) -> Dict[peers.Shape, List[Dict[str, Any]]]:
    """Per gemm bf16 rc shape of the export: its first `top` ranked entries, in the tuner's order."""
    out: Dict[peers.Shape, List[Dict[str, Any]]] = {}
    for w in table["winners"]:
        p = w["problem"]
        if (p["op"], p["dtype"], p["layout"]) != ("gemm", "bf16", "rc"):
            continue
        d = p["dims"]
        out[(d["M"], d["N"], d["K"])] = w["ranked"][:top]
    return out


def rank_shape(s: peers.Shape, entries: List[Dict[str, Any]], client, torch, testing, dev,
               rounds: int) -> Dict[str, Any]:
    import ktune
    m, n, k = s
    bf16 = torch.bfloat16
    a = torch.randn(m, k, dtype=bf16, device=dev)
    w = torch.randn(n, k, dtype=bf16, device=dev)
    b = w.t()
    stream = torch.cuda.current_stream().cuda_stream
    device = client.lookup("gemm", dtype="bf16", layout="rc", M=m, N=n, K=k).device
    ref = torch.matmul(a, b)
    rows = torch.randperm(m, device=dev)[:32].sort().values
    exact = a[rows].double() @ w.double().t()
    runs: Dict[str, Any] = {"cublas": lambda: torch.matmul(a, b)}
    configs: List[Dict[str, Any]] = []
    for i, e in enumerate(entries):
        row: Dict[str, Any] = {"name": f"tuned#{i + 1}", "template": e["template"],
                               "params": e["params"], "tuned_us": e["median_us"]}
        configs.append(row)
        try:
            image = client.kernel("gemm", dtype="bf16", layout="rc", device=device,
                                  template=e["template"], params=e["params"], M=m, N=n, K=k)
        except Exception as err:  # a config the template no longer offers
            row["error"] = f"{type(err).__name__}: {err}"[-500:]
            continue
        kernel = ktune.Kernel(image)
        c = torch.full((m, n), float("nan"), dtype=bf16, device=dev)
        fn = peers.launcher(kernel, a, w, c, stream)
        fn()
        torch.cuda.synchronize()
        row["vs_fp64_rel_l2"] = peers.rel_l2(c[rows], exact)
        row["vs_torch_rel_l2"] = peers.rel_l2(c, ref)
        row["ok"] = (not bool(torch.isnan(c).any())
                     and row["vs_fp64_rel_l2"] < peers.BF16_TOLERANCE)
        if row["ok"]:
            runs[row["name"]] = fn
    names = list(runs)
    flush: Dict[str, List[float]] = {p: [] for p in names}
    hot: Dict[str, List[float]] = {p: [] for p in names}
    for r in range(rounds):
        for p in peers.rotated(names, r):
            flush[p].append(testing.do_bench(runs[p], warmup=10, rep=40, return_mode="median"))
            hot[p].append(hot_ms(runs[p], torch, 30))
    med = {p: (statistics.median(flush[p]) * 1e3, statistics.median(hot[p]) * 1e3) for p in names}
    timed = [c for c in configs if c["name"] in med]
    for c in timed:
        c["flush_us"], c["hot_us"] = med[c["name"]]
    by_flush = sorted(timed, key=lambda c: c["flush_us"])
    by_hot = sorted(timed, key=lambda c: c["hot_us"])
    for i, c in enumerate(by_flush):
        c["rank_flush"] = i + 1
    for i, c in enumerate(by_hot):
        c["rank_hot"] = i + 1
    row = {"shape": peers.shape_name(s), "rounds": rounds,
           "cublas_flush_us": med["cublas"][0], "cublas_hot_us": med["cublas"][1],
           "configs": configs}
    if timed:
        first = timed[0]   # the tuner's winner, if it was timed
        row["tuner_first_flush_us"] = first["flush_us"]
        row["best_flush"] = by_flush[0]["name"]
        row["best_hot"] = by_hot[0]["name"]
        row["gain_flush"] = first["flush_us"] / by_flush[0]["flush_us"]   # >= 1
        row["tuner_first_vs_cublas_flush"] = med["cublas"][0] / first["flush_us"]
        row["best_vs_cublas_flush"] = med["cublas"][0] / by_flush[0]["flush_us"]
        row["tuner_first_vs_cublas_hot"] = med["cublas"][1] / first["hot_us"]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--table", required=True, help="a `ktune export` JSON (ranked lists)")
    ap.add_argument("--top", type=int, default=5, help="configs per shape, the tuner's first N")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--shapes", default="", help="MxNxK,... (default: every gemm of the table)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    import triton.testing as testing
    import ktune
    torch.manual_seed(0)
    dev = torch.device("cuda")
    client = ktune.Client(socket_path=args.socket, cache_ttl=0, kernel_timeout=120)
    with open(args.table) as f:
        table = configs_of(json.load(f), args.top)
    wanted = peers.parse_shapes(args.shapes) if args.shapes else sorted(table)
    doc: Dict[str, Any] = {"benchmark": "flush_rank", "date": datetime.datetime.now(
                               datetime.timezone.utc).isoformat(timespec="seconds"),
                           "gpu": torch.cuda.get_device_name(), "nvidia_smi": peers.gpu_info(),
                           "table": os.path.basename(args.table), "top": args.top, "shapes": []}
    for s in wanted:
        if s not in table:
            continue
        row = rank_shape(s, table[s], client, torch, testing, dev, args.rounds)
        doc["shapes"].append(row)
        print(f"{row['shape']:>16} cuBLAS flush {row['cublas_flush_us']:8.1f} hot "
              f"{row['cublas_hot_us']:8.1f}", flush=True)
        for c in row["configs"]:
            if "flush_us" in c:
                print(f"{'':>16} {c['name']:>8} tuned {c['tuned_us']:8.1f} flush {c['flush_us']:8.1f} "
                      f"(#{c['rank_flush']}) hot {c['hot_us']:8.1f} (#{c['rank_hot']})", flush=True)
            else:
                print(f"{'':>16} {c['name']:>8} {c.get('error', 'wrong result')}"[:200], flush=True)
        if "gain_flush" in row:
            print(f"{'':>16} best under flush {row['best_flush']}: {row['gain_flush']:.3f}x the "
                  f"tuner's first; vs cuBLAS {row['tuner_first_vs_cublas_flush']:.3f} -> "
                  f"{row['best_vs_cublas_flush']:.3f} (hot: {row['tuner_first_vs_cublas_hot']:.3f})",
                  flush=True)
    scored = [r for r in doc["shapes"] if "gain_flush" in r]   # at least one config timed
    doc["summary"] = {"shapes": len(doc["shapes"]),
                      "shapes_where_tuner_first_is_best_flush": sum(
                          1 for r in scored if r["best_flush"] == "tuned#1")}
    for key in ("gain_flush", "tuner_first_vs_cublas_flush", "best_vs_cublas_flush",
                "tuner_first_vs_cublas_hot"):
        doc["summary"]["geomean_" + key] = peers.geomean([r[key] for r in scored])
    peers.write_json(args.out, doc)
    print(json.dumps(doc["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
