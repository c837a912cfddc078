"""A foreign GPU workload for the background-tuning benchmark: a PyTorch bf16 matmul loop.

Runs for --seconds, counts matmuls, and writes {start, end, matmuls, per_s} as JSON. With --fake
(no GPU: the CI dry run) it writes a fake-NVML file showing itself on GPU 0 instead of using torch.
"""
import argparse
import json
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--fake", metavar="NVML_DIR", help="no GPU: appear in a fake NVML directory")
    args = ap.parse_args()
    count = 0
    if args.fake:
        path = os.path.join(args.fake, "gpu0.json")
        start = time.time()
        cuda_begin = start
        with open(path + ".tmp", "w") as f:
            json.dump({"utilization": 99, "pids": [os.getpid()]}, f)
        os.rename(path + ".tmp", path)
        while time.time() - start < args.seconds:
            time.sleep(0.01)
            count += 1
        os.remove(path)
    else:
        cuda_begin = None
        import torch
        cuda_begin = time.time()  # the CUDA context is created from here on: NVML may see us
        a = torch.randn(args.n, args.n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(args.n, args.n, device="cuda", dtype=torch.bfloat16)
        c = a @ b
        torch.cuda.synchronize()
        start = time.time()  # the context exists and a kernel ran: NVML can see us from here
        while time.time() - start < args.seconds:
            for _ in range(8):
                c = a @ b
            torch.cuda.synchronize()
            count += 8
        del c
    end = time.time()
    with open(args.out, "w") as f:
        json.dump({"cuda_begin": cuda_begin, "start": start, "end": end, "matmuls": count, "per_s": count / (end - start),
                   "n": args.n, "flops_per": 2 * args.n ** 3}, f)


if __name__ == "__main__":
    main()
