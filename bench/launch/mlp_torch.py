"""A PyTorch program running a transformer MLP block (bf16, nn.Linear weights) and the row ops
through ktune.torch, with answers served by a running ktuned (bench/launch/run_h200.sh starts one).

For every op: the output is checked against torch's, and both are timed in the same run
(triton.testing.do_bench, median, L2 flushed between runs). Also: the first-call cost (lookup +
kernel fetch + module load; cold = the daemon compiles, warm = the cubin is in its store), and the
steady host time per call of ktune.torch above a raw cuLaunchKernel of the same function through
ctypes with prepacked arguments. Writes one JSON document.

    python3 bench/launch/mlp_torch.py --socket $S --out launch-torch.json
"""

import argparse
import ctypes
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton.testing

import ktune
import ktune.torch as kt
from ktune.kernel import _Driver


def rel_l2(got: torch.Tensor, ref: torch.Tensor) -> float:
    g, r = got.double(), ref.double()
    return float(torch.linalg.vector_norm(g - r) / torch.linalg.vector_norm(r))


def vs_fp64(a: torch.Tensor, w: torch.Tensor, out: torch.Tensor, ref: torch.Tensor) -> dict:
    """ktune's and torch's output against an fp64 product on the first 64 rows, and how many
    elements of the whole output differ bitwise between the two."""
    exact = a[:64].double() @ w.double().t()
    return {"ktune_rel_l2_vs_fp64": rel_l2(out[:64], exact),
            "torch_rel_l2_vs_fp64": rel_l2(ref[:64], exact),
            "elements_differing_from_torch": int((out != ref).sum()),
            "elements": out.numel()}


def gpu_us(fn) -> float:
    return 1e3 * triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def host_compare(fns: dict, n: int = 200) -> dict:
    """host_us for several callables, interleaved (so drift of the host hits them alike)."""
    per = {name: [] for name in fns}
    for _ in range(9):
        for name, fn in fns.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            per[name].append((time.perf_counter() - t0) / n * 1e6)
            torch.cuda.synchronize()
    return {name: statistics.median(v) for name, v in per.items()}


def served(client: ktune.Client, op: str, **problem) -> dict:
    """What ktuned answers for a problem: provenance and template of the best entry."""
    reply = client.lookup(op, **problem)
    best = reply.best
    return {"provenance": best.provenance, "template": best.template, "params": best.params,
            "from": best.source}


def raw_launch(kernel: ktune.Kernel, stream: int):
    """A raw cuLaunchKernel of the kernel's own loaded function and packed arguments."""
    drv = _Driver.get()
    ctx = ctypes.c_void_p()
    drv.cuCtxGetCurrent(ctypes.byref(ctx))
    function, _ = kernel._loaded[ctx.value]
    g = kernel._geometry
    params = kernel.plan.params

    def launch():
        drv.cuLaunchKernel(function, g[0], g[1], g[2], g[3], g[4], g[5], g[6], stream, params, None)
    return launch


def first_call_breakdown(client: ktune.Client, x, w) -> dict:
    """Cold first call of a shape nobody asked for yet, step by step."""
    m, k = x.shape
    n = w.shape[0]
    t0 = time.perf_counter()
    reply = client.lookup("gemm", dtype="bf16", layout="rc", M=m, N=n, K=k)
    t1 = time.perf_counter()
    image = client.kernel("gemm", dtype="bf16", layout="rc", entry=reply.best, device=reply.device,
                          M=m, N=n, K=k)
    t2 = time.perf_counter()
    kernel = ktune.Kernel(image)
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    stream = torch.cuda.current_stream().cuda_stream
    t3 = time.perf_counter()
    kernel.launch_addresses((x.data_ptr(), w.data_ptr(), out.data_ptr()), stream)
    t4 = time.perf_counter()
    torch.cuda.synchronize()
    return {"shape": [m, n, k], "lookup_ms": (t1 - t0) * 1e3, "kernel_op_ms": (t2 - t1) * 1e3,
            "kernel_source": image["source"], "compile_ms": image["compile_ms"],
            "cubin_bytes": image["cubin_bytes"], "check_ms": (t3 - t2) * 1e3,
            "load_and_launch_ms": (t4 - t3) * 1e3, "total_ms": (t4 - t0) * 1e3,
            "rel_l2_vs_torch": rel_l2(out, F.linear(x, w))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--out", default="launch-torch.json")
    args = ap.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    bf16 = torch.bfloat16
    client = ktune.Client(socket_path=args.socket, cache_ttl=0)
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "ktune_status": {k: client.status()[k] for k in ("version", "protocol", "templates",
                                                               "winners", "device_classes")}}

    # --- first call, cold: a decode shape nobody asked for (the daemon compiles) ---
    x16 = torch.randn(16, 4096, dtype=bf16, device=dev)
    wd = torch.randn(4096, 4096, dtype=bf16, device=dev) * 0.02
    result["first_call_cold"] = first_call_breakdown(client, x16, wd)

    # --- the MLP block: gate, up, down (LLaMA-style, no bias) ---
    hidden, inter, tokens = 4096, 14336, 4096
    gate = nn.Linear(hidden, inter, bias=False, device=dev, dtype=bf16)
    up = nn.Linear(hidden, inter, bias=False, device=dev, dtype=bf16)
    down = nn.Linear(inter, hidden, bias=False, device=dev, dtype=bf16)
    x = torch.randn(tokens, hidden, dtype=bf16, device=dev)
    kt.configure(client=ktune.Client(socket_path=args.socket, cache_ttl=0))
    with torch.no_grad():
        t0 = time.perf_counter()
        g = kt.linear(x, gate.weight)
        torch.cuda.synchronize()
        first_gate_ms = (time.perf_counter() - t0) * 1e3
        u = kt.linear(x, up.weight)
        h = F.silu(g) * u
        t0 = time.perf_counter()
        y = kt.linear(h, down.weight)
        torch.cuda.synchronize()
        first_down_ms = (time.perf_counter() - t0) * 1e3
        ref_g, ref_u = F.linear(x, gate.weight), F.linear(x, up.weight)
        ref_h = F.silu(ref_g) * ref_u
        ref_y = F.linear(ref_h, down.weight)
        gemms = []
        for role, a, w, out, ref, first in (
                ("gate", x, gate.weight, g, ref_g, first_gate_ms),
                ("up", x, up.weight, u, ref_u, None),
                ("down", h, down.weight, y, ref_y, first_down_ms)):
            m, k = a.shape
            n = w.shape[0]
            k_us = gpu_us(lambda: kt.linear(a, w))
            t_us = gpu_us(lambda: F.linear(a, w))
            gemms.append({"role": role, "M": m, "N": n, "K": k,
                          "served": served(client, "gemm", dtype="bf16", layout="rc", M=m, N=n, K=k),
                          "rel_l2_vs_torch": rel_l2(out, ref), **vs_fp64(a, w, out, ref),
                          "ktune_us": k_us, "torch_us": t_us,
                          "ktune_tflops": 2 * m * n * k / k_us / 1e6,
                          "torch_tflops": 2 * m * n * k / t_us / 1e6,
                          "speed_vs_torch": t_us / k_us, "first_call_ms": first})
        result["mlp_gemms"] = gemms
        result["mlp_output_rel_l2_vs_torch"] = rel_l2(y, ref_y)

        def block_ktune():
            return kt.linear(F.silu(kt.linear(x, gate.weight)) * kt.linear(x, up.weight), down.weight)

        def block_torch():
            return F.linear(F.silu(F.linear(x, gate.weight)) * F.linear(x, up.weight), down.weight)
        kb, tb = gpu_us(block_ktune), gpu_us(block_torch)
        result["mlp_block"] = {"ktune_us": kb, "torch_us": tb, "speed_vs_torch": tb / kb,
                               "note": "ktune.torch GEMMs; SiLU and the product are torch's in both"}

        # --- first call with the daemon's cubin cache warm: forget the process's kernels ---
        kt.configure(client=ktune.Client(socket_path=args.socket, cache_ttl=0))
        t0 = time.perf_counter()
        kt.linear(x, gate.weight)
        torch.cuda.synchronize()
        result["first_call_warm_daemon_ms"] = (time.perf_counter() - t0) * 1e3

        # --- row ops ---
        rows_out = []
        for r, c in ((32768, 4096), (4096, 4096)):
            xr = torch.randn(r, c, dtype=bf16, device=dev) * 2
            wgt = torch.rand(c, dtype=bf16, device=dev) + 0.5
            bias = torch.rand(c, dtype=bf16, device=dev) - 0.5
            for op, k_fn, t_fn, tmpl in (
                    ("softmax", lambda: kt.softmax(xr, dim=-1), lambda: torch.softmax(xr, dim=-1), "softmax"),
                    ("rms_norm", lambda: kt.rms_norm(xr, (c,), wgt, eps=1e-6),
                     lambda: F.rms_norm(xr, (c,), wgt, eps=1e-6), "rmsnorm"),
                    ("layer_norm", lambda: kt.layer_norm(xr, (c,), wgt, bias, eps=1e-5),
                     lambda: F.layer_norm(xr, (c,), wgt, bias, eps=1e-5), "layernorm")):
                t0 = time.perf_counter()
                out = k_fn()
                torch.cuda.synchronize()
                first = (time.perf_counter() - t0) * 1e3
                k_us, t_us = gpu_us(k_fn), gpu_us(t_fn)
                rows_out.append({"op": op, "rows": r, "cols": c,
                                 "served": served(client, tmpl, dtype="bf16", rows=r, cols=c),
                                 "rel_l2_vs_torch": rel_l2(out, t_fn()), "ktune_us": k_us,
                                 "torch_us": t_us, "speed_vs_torch": t_us / k_us,
                                 "ktune_gbps": 4 * r * c / k_us / 1e3, "first_call_ms": first})
        result["row_ops"] = rows_out

        # --- steady host time per call ---
        stream = torch.cuda.current_stream().cuda_stream
        overhead = {}
        for name, a, w in (("linear 4096x14336x4096", x, gate.weight),):
            kernel = kt._kernels[("linear", a.dtype, "rc", a.shape[0], w.shape[0], a.shape[1], a.device.index)]
            out = torch.empty(a.shape[0], w.shape[0], dtype=bf16, device=dev)
            raw = raw_launch(kernel, stream)
            ptrs = (a.data_ptr(), w.data_ptr(), out.data_ptr())
            shape = out.shape
            overhead[name] = host_compare({
                "raw_cuLaunchKernel_ctypes": raw,
                # What any out-of-place launch pays too: the output tensor torch allocates.
                "raw_cuLaunchKernel_ctypes_plus_output_alloc": lambda: (a.new_empty(shape), raw()),
                "ktune_Kernel_launch_addresses": lambda: kernel.launch_addresses(ptrs, stream),
                "ktune_torch_linear": lambda: kt.linear(a, w),
                "torch_F_linear": lambda: F.linear(a, w),
            })
        xs = torch.randn(64, 4096, dtype=bf16, device=dev)
        kt.softmax(xs)
        kernel = kt._kernels[("softmax", bf16, 64, 4096, xs.device.index)]
        ys = torch.empty_like(xs)
        raw = raw_launch(kernel, stream)
        ptrs = (xs.data_ptr(), ys.data_ptr())
        overhead["softmax 64x4096"] = host_compare({
            "raw_cuLaunchKernel_ctypes": raw,
            "raw_cuLaunchKernel_ctypes_plus_output_alloc": lambda: (torch.empty_like(xs), raw()),
            "ktune_Kernel_launch_addresses": lambda: kernel.launch_addresses(ptrs, stream),
            "ktune_torch_softmax": lambda: kt.softmax(xs),
            "torch_softmax": lambda: torch.softmax(xs, dim=-1),
        }, 1000)
        for v in overhead.values():
            ktune_key = next(k for k in v if k.startswith("ktune_torch"))
            v["overhead_above_raw_us"] = v[ktune_key] - v["raw_cuLaunchKernel_ctypes"]
            v["overhead_above_raw_plus_alloc_us"] = (
                v[ktune_key] - v["raw_cuLaunchKernel_ctypes_plus_output_alloc"])
        # Where the host time of one ktune.torch call goes (the pieces, each alone).
        drv = _Driver.get()
        ctx = ctypes.c_void_p()
        overhead["pieces"] = host_compare({
            "new_empty_4096x14336": lambda: x.new_empty((4096, 14336)),
            "raw_stream": lambda: kt._stream(x),
            "cuCtxGetCurrent_ctypes": lambda: drv.cuCtxGetCurrent(ctypes.byref(ctx)),
            "three_data_ptr": lambda: (x.data_ptr(), gate.weight.data_ptr(), xs.data_ptr()),
        }, 1000)
        result["host_us_per_call"] = overhead

        # --- a fallback, to show explain() ---
        kt.linear(x.float()[:64], gate.weight.float())
    result["stats"] = kt.stats()
    result["explain"] = kt.explain()
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
