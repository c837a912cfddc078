"""Cold against repeated lookups through the Python client, end to end (one process, one
connection): starts the given ktuned on a temporary socket with the shipped tables, asks 400
gemm shapes nobody asked before, then the same 400 again.
    python3 bench/cold_lookup.py build/daemon/ktuned
"""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "client", "python"))
import ktune  # noqa: E402


def main() -> None:
    d = tempfile.mkdtemp()
    sock = d + "/k.sock"
    p = subprocess.Popen([sys.argv[1], "--socket", sock, "--data-dir", d + "/s",
                          "--set", "server.metrics=127.0.0.1:0"], stderr=subprocess.DEVNULL)
    c = ktune.Client(sock, cache_ttl=0)
    for _ in range(200):
        try:
            c.status()
            break
        except ktune.KtuneError:
            time.sleep(0.05)
    runs = {"cold": [], "repeated": []}
    for kind in runs:
        for m in range(1, 401):
            t = time.perf_counter()
            c.lookup("gemm", dtype="bf16", layout="rc", device="nvidia-h200", M=m * 7, N=4096, K=4096)
            runs[kind].append((time.perf_counter() - t) * 1e6)
    p.terminate()
    p.wait()
    for kind, v in runs.items():
        v.sort()
        print(f"{kind}: p50 {v[len(v) // 2]:.0f} us, p99 {v[len(v) * 99 // 100]:.0f} us over {len(v)}")


if __name__ == "__main__":
    main()
