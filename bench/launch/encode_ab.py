"""A/B in one process: the Python Kernel's launch with its tensor maps kept (since 2026-12-06)
against the same launch encoding every map again (as before), on one served gemm_tma kernel.

Times launch_addresses alone (torch's current stream), 2000 calls a round, the two ways
interleaved over 7 rounds; the GPU queue is drained between rounds. --weights N cycles the calls
over N weights of the shape (a model's layers sharing one Kernel), so the weight's map changes
every call. Needs a GPU, torch and a ktuned (started here, serving heuristics):

    python3 bench/launch/encode_ab.py --ktuned .gpu/ktuned --out encode-ab.json
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import graph_torch as gt  # noqa: E402  (its daemon start, smi)
import ktune.torch as kt  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ktuned", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--shape", default="1024x2048x1024")
    ap.add_argument("--weights", type=int, default=1)
    args = ap.parse_args()
    m, n, k = (int(d) for d in args.shape.split("x"))
    with gt.serving(args.ktuned) as client:
        kt.configure(client=client)
        x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        ws = [torch.randn(n, k, dtype=torch.bfloat16, device="cuda") for _ in range(args.weights)]
        y = kt.linear(x, ws[0])
        kernel = next((v for v in kt._kernels.values() if not isinstance(v, str)), None)
        if kernel is None:
            sys.exit(f"ktune did not serve {args.shape}: {kt.explain()}")
        maps = kernel.plan.maps
        if not maps:
            sys.exit(f"{args.shape} is served by {kernel.image.get('template')}, which has no "
                     "tensor maps: pick a shape gemm_tma serves (1024x2048x1024)")
        cycle = [(x.data_ptr(), w.data_ptr(), y.data_ptr()) for w in ws]
        stream = torch.cuda.current_stream().cuda_stream
        calls = 2000

        def round_us(reencode: bool) -> float:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for i in range(calls):
                if reencode:
                    for mp in maps:
                        mp.base = None
                        mp.encoded.clear()
                kernel.launch_addresses(cycle[i % len(cycle)], stream)
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            return (t1 - t0) / calls * 1e6

        times = {"kept": [], "encoded_every_launch": []}
        for _ in range(7):
            times["encoded_every_launch"].append(round_us(True))
            times["kept"].append(round_us(False))
    med = {key: statistics.median(v) for key, v in times.items()}
    name, driver = gt.smi("name,driver_version")
    doc = {"benchmark": "encode_ab", "gpu": name, "driver": driver, "shape": [m, n, k],
           "weights": args.weights,
           "template": kernel.image.get("template"), "maps": len(maps), "calls_per_round": calls,
           "us_per_launch": times, "median_us": med,
           "saved_us": med["encoded_every_launch"] - med["kept"]}
    print(json.dumps({k2: doc[k2] for k2 in ("gpu", "template", "maps", "median_us", "saved_us")}))
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
