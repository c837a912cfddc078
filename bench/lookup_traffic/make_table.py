#!/usr/bin/env python3
"""Writes a ktune table of gemm winners on a grid of shapes, for lookup benchmarks at scale.

  make_table.py SOCKET OUT.json [--count 100000] [--device nvidia-h200]

Shapes: M = 64*i, N = 256*j, K = 256*k (bf16, layout rc) on the H200 device class, as many as
--count asks. Each record's params are the template heuristic the daemon answers for that shape (so
every record is valid for its problem; asked over one pipelined connection), and its median_us a
roofline estimate at 600 TFLOP/s. Not a measurement: the point is an index of realistic size.
"""
import argparse, json, socket, sys

ap = argparse.ArgumentParser()
ap.add_argument("socket")
ap.add_argument("out")
ap.add_argument("--count", type=int, default=100_000)
ap.add_argument("--device", default="nvidia-h200.sm90.132sm.140gib")
a = ap.parse_args()

shapes = []
side = 1
while side ** 3 * 2 < a.count:  # grid: 2*side M values x side N x side K, at least count shapes
    side += 1
for i in range(1, 2 * side + 1):
    for j in range(1, side + 1):
        for k in range(1, side + 1):
            if len(shapes) < a.count:
                shapes.append((64 * i, 256 * j, 256 * k))

s = socket.socket(socket.AF_UNIX)
s.connect(a.socket)
f = s.makefile("rwb")


def ask(batch):
    for n, (m, nn, k) in enumerate(batch):
        f.write(json.dumps({"v": 1, "id": n, "op": "lookup", "device": a.device, "limit": 16,
                            "problem": {"op": "gemm", "dtype": "bf16", "layout": "rc",
                                        "dims": {"M": m, "N": nn, "K": k}}}).encode() + b"\n")
    f.flush()
    return [json.loads(f.readline()) for _ in batch]


f.write(b'{"v":1,"id":0,"op":"status"}\n'); f.flush()
status = json.loads(f.readline())["result"]
records = []
for start in range(0, len(shapes), 200):
    batch = shapes[start:start + 200]
    for (m, n, k), r in zip(batch, ask(batch)):
        if not r.get("ok"):
            sys.exit(f"lookup {m}x{n}x{k} failed: {r}")
        e = next((e for e in r["result"]["entries"] if e["provenance"] == "heuristic"), None)
        if e is None:
            sys.exit(f"no heuristic entry for {m}x{n}x{k}: {r}")
        records.append({
            "device": {"name": "NVIDIA H200", "cc": 90, "sm_count": 132, "memory_gib": 140},
            "problem": {"op": "gemm", "dtype": "bf16", "out_dtype": "bf16", "layout": "rc",
                        "dims": {"M": m, "N": n, "K": k}},
            "validators": {"driver": "none", "nvrtc": status["validators"]["nvrtc"], "store_format": 1},
            "ranked": [{"template": e["template"], "template_hash": e["template_hash"],
                        "params": e["params"], "median_us": max(1.0, round(2 * m * n * k / 600e6, 3))}]})
json.dump({"ktune_table": 1, "winners": records}, open(a.out, "w"))
print(f"wrote {len(records)} winners to {a.out}")
