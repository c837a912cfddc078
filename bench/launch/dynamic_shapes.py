"""A model whose batch varies, through ktune.torch: what each new shape costs, this client against
another (the previous version), side by side against one ktuned.

An inference server's prefill sees a new M (tokens in the batch) on most calls. Each distinct
shape is a new problem for ktune.torch: a lookup, then (before 2026-12-06) the kernel op's cubin
and a module load per shape, and workspaces per shape and stream. This bench calls
``kt.linear(x[M, K], w[N, K])`` for --count distinct M drawn from 1..--max-m (fixed seed), each
M once cold then --warm times more, and records per client:

- the first call's host-to-done time per shape (synchronized; median, p90, p99, max), the warm
  calls' time for the same shapes, and how many cubins the client fetched;
- device memory outside torch's allocator that the calls left allocated (modules, workspaces):
  the drop in cuMemGetInfo's free bytes less the growth of torch's reserved bytes;
- every output checked against F.linear (rel. L2 < 1e-2), and fallbacks (must be 0).

The daemon (started here, serving, never tuning) compiles every config once in a warm-up pass
first, so both clients find its cubin cache warm. The clients then run in turn, A B A B, each in a
process of its own (ktune imported from its --client path):

    python3 bench/launch/dynamic_shapes.py --ktuned .gpu/ktuned --a .gpu/oldpy --b client/python \
        --out dynamic-shapes.json
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def shapes(count: int, max_m: int, seed: int) -> list:
    return random.Random(seed).sample(range(1, max_m + 1), count)


def pct(values: list, q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def summary(values: list) -> dict:
    return {"median": statistics.median(values), "p90": pct(values, 0.9), "p99": pct(values, 0.99),
            "max": max(values), "mean": statistics.fmean(values)}


def child(args) -> None:
    """One client's pass, in this process: ktune from sys.path[0] (set by the parent)."""
    import torch
    import torch.nn.functional as F
    import ktune
    import ktune.torch as kt

    client = ktune.Client(socket_path=args.socket, cache_ttl=0)
    fetched = []
    kernel = client.kernel

    def counting(*a, **kw):
        image = kernel(*a, **kw)
        fetched.append(image["launch"].get("cubin_id"))
        return image
    client.kernel = counting
    kt.configure(client=client)
    n, k = args.n, args.k
    torch.manual_seed(0)
    w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda") * 0.02
    xs = {m: torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
          for m in shapes(args.count, args.max_m, args.seed)}
    F.linear(xs[next(iter(xs))], w)  # torch's own first call (cuBLAS handle) outside the timing
    torch.cuda.synchronize()
    reserved0 = torch.cuda.memory_reserved()
    free0 = torch.cuda.mem_get_info()[0]
    cold, warm, worst = [], [], 0.0
    for m, x in xs.items():
        t0 = time.perf_counter()
        y = kt.linear(x, w)
        torch.cuda.synchronize()
        cold.append((time.perf_counter() - t0) * 1e6)
        for _ in range(args.warm):
            t0 = time.perf_counter()
            y = kt.linear(x, w)
            torch.cuda.synchronize()
            warm.append((time.perf_counter() - t0) * 1e6)
        ref = F.linear(x, w).float()
        worst = max(worst, float((y.float() - ref).norm() / ref.norm()))
    torch.cuda.synchronize()
    outside = (free0 - torch.cuda.mem_get_info()[0]) - (torch.cuda.memory_reserved() - reserved0)
    doc = {"label": args.label, "client": args.client, "shapes": len(xs),
           "first_call_us": summary(cold), "warm_call_us": summary(warm),
           "cubins_fetched": len(fetched), "distinct_cubins": len(set(fetched)),
           "kernels_cached": len(kt._kernels), "device_mib_outside_torch": outside / 2**20,
           "fallbacks": kt.stats()["fallback"], "explain": kt.explain()[:5],
           "worst_rel_l2": worst}
    json.dump(doc, sys.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ktuned", help="the ktuned to start (it serves, never tunes)")
    ap.add_argument("--a", help="client A's package dir (holds ktune/)")
    ap.add_argument("--b", help="client B's package dir")
    ap.add_argument("--out")
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--max-m", type=int, default=4096)
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--socket", help=argparse.SUPPRESS)
    ap.add_argument("--label", help=argparse.SUPPRESS)
    ap.add_argument("--client", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        sys.path.insert(0, args.client)
        child(args)
        return
    if not (args.ktuned and args.a and args.b):
        ap.error("--ktuned, --a and --b are required")
    sys.path.insert(0, os.path.abspath(args.b))
    sys.path.insert(0, HERE)
    import graph_torch as gt  # noqa: E402  (its daemon start, smi)

    def run(label: str, path: str, socket: str) -> dict:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", "--socket", socket, "--label",
               label, "--client", os.path.abspath(path)]
        for flag in ("count", "max_m", "warm", "n", "k", "seed"):
            cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"{label} failed:\n{out.stderr[-4000:]}")
        doc = json.loads(out.stdout)
        print(json.dumps({k: doc[k] for k in ("label", "first_call_us", "cubins_fetched",
                                              "device_mib_outside_torch", "fallbacks")}))
        return doc

    with gt.serving(args.ktuned) as client:
        socket = client.socket_path
        t0 = time.time()
        warmup = run("warm-up (compiles every config)", args.b, socket)
        runs = [warmup]
        for _ in range(args.rounds):
            runs += [run("A", args.a, socket), run("B", args.b, socket)]
    name, driver, sm, mem = gt.smi("name,driver_version,clocks.sm,clocks.mem")
    doc = {"benchmark": "dynamic_shapes", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0)),
           "gpu": name, "driver": driver, "clocks_mhz": {"sm": sm, "mem": mem},
           "problem": {"op": "linear", "N": args.n, "K": args.k, "M": f"{args.count} distinct in "
                       f"1..{args.max_m} (seed {args.seed})"},
           "a": os.path.abspath(args.a), "b": os.path.abspath(args.b), "runs": runs}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
