#!/usr/bin/env python3
"""Asks a ktuned a fixed set of lookups and hashes its replies: the check that a change to how
answers are built left every answer byte-identical (run it on the binary before and after).

  python3 bench/lookup_answers.py KTUNED [--out replies.txt]

Starts KTUNED on a temporary socket and store (no seeded tables, no GPU needed), then:
  1. cold lookups with an empty index: gemm on an H200 and an A100 device class over a grid of
     M/N/K (limits 1..16, v1 and v2, layouts named or not), the row ops and reduce_sum;
  2. imports a table built from phase 1's heuristic entries (every 7th record's template hash
     changed: stale; every 11th with an unknown NVRTC: stale; imports refuse invalid configs, so
     none is), so that:
  3. lookups on the grid (exact, stale), beside it (nearest) and far from it (heuristic), again
     with limits 1..16 and v1/v2;
  4. the `misses` op (every recorded miss with its expected time and gain).
Prints one digest (sha256) over all replies in order, and the count; --out writes the
replies one per line (request, then reply) for a diff. Request ids are fixed, so replies compare
byte for byte.
"""
import argparse
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

H200 = "nvidia-h200.sm90.132sm.140gib"
A100 = "nvidia-a100.sm80.108sm.80gib"


def gemm(m, n, k, layout="rc", dtype="bf16"):
    p = {"op": "gemm", "dtype": dtype, "dims": {"M": m, "N": n, "K": k}}
    if layout:
        p["layout"] = layout
    return p


def phase1():
    reqs = []
    for dev in (H200, A100):
        for m in (1, 7, 64, 128, 333, 1024, 4096, 8192):
            for n in (64, 256, 768, 4096):
                for k in (64, 128, 256, 1024, 12288):
                    limit = 1 + (m + n + k) % 16
                    reqs.append((1, {"device": dev, "limit": limit, "problem": gemm(m, n, k)}))
        for m in (3, 96, 2048):
            for v in (1, 2):
                for layout in ("rc", "rr", None):
                    reqs.append((v, {"device": dev, "limit": 16,
                                     "problem": gemm(m, 512, 2048, layout)}))
        for op in ("softmax", "rmsnorm", "layernorm", "transpose"):
            for rows, cols in ((1, 8), (4096, 4096), (65536, 128), (17, 12288)):
                for v in (1, 2):
                    reqs.append((v, {"device": dev, "limit": 4, "problem": {
                        "op": op, "dtype": "bf16", "dims": {"rows": rows, "cols": cols}}}))
        for n in (1, 1000, 1 << 20, 1 << 28):
            for v in (1, 2):
                reqs.append((v, {"device": dev, "limit": 3, "problem": {
                    "op": "reduce_sum", "dtype": "fp32", "dims": {"n": n}}}))
    return reqs


def grid():
    return [(64 * i, 256 * j, 256 * k) for i in (1, 2, 4, 8, 16, 32)
            for j in (1, 2, 4, 8, 16) for k in (1, 2, 4, 8, 16)]


class Daemon:
    def __init__(self, binary):
        self.dir = tempfile.mkdtemp(prefix="ktune-answers-")
        self.sock = os.path.join(self.dir, "k.sock")
        self.proc = subprocess.Popen(
            [binary, "--socket", self.sock, "--data-dir", os.path.join(self.dir, "data"),
             "--set", "server.metrics=", "--set", "log.level=warn", "--set", "store.seed_tables=",
             "--set", "tuning.on_miss=false"],  # no jobs: misses' "queued" would follow timing
            stderr=open(os.path.join(self.dir, "ktuned.log"), "w"))
        for _ in range(300):
            if os.path.exists(self.sock):
                break
            time.sleep(0.05)
        self.s = socket.socket(socket.AF_UNIX)
        self.s.connect(self.sock)
        self.f = self.s.makefile("rwb")
        self.next_id = 0

    def ask_lines(self, lines):
        for line in lines:
            self.f.write(line.encode() + b"\n")
        self.f.flush()
        return [self.f.readline().decode() for _ in lines]

    def close(self):
        self.s.close()
        self.proc.terminate()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def line_of(rid, version, op, body):
    return json.dumps({"v": version, "id": rid, "op": op, **body}, separators=(",", ":"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ktuned")
    ap.add_argument("--out")
    a = ap.parse_args()
    d = Daemon(a.ktuned)
    transcript = []

    def run(reqs, op="lookup"):
        lines = [line_of(len(transcript) + i, v, op, body) for i, (v, body) in enumerate(reqs)]
        replies = d.ask_lines(lines)
        transcript.extend(zip(lines, replies))
        return [json.loads(r) for r in replies]

    try:
        run(phase1())
        # The table: phase-1-style heuristic answers for the grid, ranked across templates.
        status = json.loads(d.ask_lines([line_of(0, 1, "status", {})])[0])["result"]  # not kept
        shapes = grid()
        answers = run([(1, {"device": H200, "limit": 3, "problem": gemm(m, n, k)})
                       for m, n, k in shapes])
        records = []
        for i, ((m, n, k), r) in enumerate(zip(shapes, answers)):
            ranked = [{"template": e["template"], "template_hash": e["template_hash"],
                       "params": dict(e["params"]), "median_us": 1.0 + i + j}
                      for j, e in enumerate(r["result"]["entries"])]
            nvrtc = status["validators"]["nvrtc"]
            if i % 7 == 3:
                ranked[0]["template_hash"] = "0123456789abcdef"
            elif i % 11 == 5:
                nvrtc = "0.1"
            records.append({
                "device": {"name": "NVIDIA H200", "cc": 90, "sm_count": 132, "memory_gib": 140},
                "problem": {"op": "gemm", "dtype": "bf16", "out_dtype": "bf16", "layout": "rc",
                            "dims": {"M": m, "N": n, "K": k}},
                "validators": {"driver": "none", "nvrtc": nvrtc, "store_format": 1},
                "ranked": ranked})
        table = os.path.join(d.dir, "table.json")
        json.dump({"ktune_table": 1, "winners": records}, open(table, "w"))
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                        "client", "python"))
        import ktune  # noqa: E402
        imported = ktune.Client(socket_path=d.sock, cache_ttl=0, timeout=600).import_file(table)
        transcript.append(("import", json.dumps(
            {k: v for k, v in imported.items() if k != "rejected"}, sort_keys=True) + "\n"))
        # Exact and stale (on the grid), nearest (beside it), heuristic (far from it).
        reqs = []
        for i, (m, n, k) in enumerate(shapes):
            for v in (1, 2):
                reqs.append((v, {"device": H200, "limit": 1 + i % 16, "problem": gemm(m, n, k)}))
            reqs.append((1 + i % 2, {"device": H200, "limit": 1 + (i * 5) % 16,
                                     "problem": gemm(m + 1 + i % 40, n + 64, k)}))
        for m in (100000, 200000):
            for v in (1, 2):
                reqs.append((v, {"device": H200, "limit": 16,
                                 "problem": gemm(m, 8192, 8192)}))
        run(reqs)
        run([(1, {"limit": 1000}), (2, {"limit": 1000})], op="misses")
    finally:
        d.close()
    digest = hashlib.sha256()
    for req, rep in transcript:
        digest.update(req.encode() + b"\n" + rep.encode())
    if a.out:
        with open(a.out, "w") as out:
            for req, rep in transcript:
                out.write(req + "\n" + rep)
    errors = sum('"ok":false' in rep for _, rep in transcript)
    print(f"{len(transcript)} requests, {errors} answered with an error, sha256 {digest.hexdigest()}")


if __name__ == "__main__":
    main()
