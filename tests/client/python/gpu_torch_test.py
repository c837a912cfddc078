"""ktune.torch under CUDA graphs, on a real GPU with real PyTorch (ctest label gpu).

Starts a ktuned that serves and does not tune (KTUNED=<ktuned>, KTUNE_HOME=<checkout>), then
captures ktune.torch calls with torch.cuda.graph as PyTorch's documentation shows it: warm-up on a
side stream, capture on the graph's own stream (so each kernel's first launch on that stream is
inside the capture). Each captured call must be ktune's kernel, not a fallback, and every replay on
new inputs must match torch. Exits 77 (skipped) without torch, a GPU or KTUNED.

On the GPU machine: bench/gpu_session.sh torchgpu
"""

import os
import subprocess
import sys
import tempfile
import time
import unittest

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the dev machine and CI
    torch = None

import ktune

SKIP = 77
DAEMON = {}


def rel_l2(got, ref) -> float:
    got, ref = got.float(), ref.float()
    return float((got - ref).norm() / ref.norm().clamp_min(1e-30))


class GraphCaptureTest(unittest.TestCase):
    """ktune.torch calls captured into CUDA graphs replay ktune's kernels correctly."""

    def setUp(self):
        import ktune.torch as kt
        self.kt = kt
        kt.configure(client=DAEMON["client"])  # one client for all tests: configure forgets state
        torch.manual_seed(0)

    def served(self, op: str) -> int:
        return self.kt.stats()["ktune"].get(op, 0)

    def capture(self, fn, warmup: bool):
        """fn() captured into a graph, after `warmup` calls on a side stream (the documented
        pattern); returns the graph, fn's output and how many calls ktune served in the capture."""
        if warmup:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    fn()
            torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        before, fallbacks = sum(self.kt.stats()["ktune"].values()), self.kt.stats()["fallback"]
        with torch.cuda.graph(graph):
            out = fn()
        self.assertEqual(self.kt.stats()["fallback"], fallbacks, self.kt.explain())
        return graph, out, sum(self.kt.stats()["ktune"].values()) - before

    def check_linear(self, m: int, n: int, k: int, warmup: bool):
        x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda") * 0.02
        with torch.no_grad():
            graph, y, served = self.capture(lambda: self.kt.linear(x, w), warmup)
            self.assertEqual(served, 1, "the captured linear is ktune's kernel")
            for _ in range(3):
                x.copy_(torch.randn_like(x))
                graph.replay()
                torch.cuda.synchronize()
                self.assertLess(rel_l2(y, F.linear(x, w)), 1e-2, f"{m}x{n}x{k}")

    def test_a_split_k_linear_warmed_up_on_a_side_stream_replays_correctly(self):
        # 16x4096x4096: the served config splits K (workspaces: fp32 partials, tile tickets).
        self.check_linear(16, 4096, 4096, warmup=True)

    def test_a_linear_first_called_inside_the_capture_replays_correctly(self):
        # Nothing before the capture: the kernel op, module load and workspaces all happen in it.
        self.check_linear(32, 4096, 4096, warmup=False)
        self.check_linear(512, 1024, 2048, warmup=False)

    def test_rms_norm_and_softmax_replay_correctly(self):
        x = torch.randn(64, 4096, dtype=torch.bfloat16, device="cuda")
        g = torch.rand(4096, dtype=torch.bfloat16, device="cuda") + 0.5
        with torch.no_grad():
            graph, (h, p), served = self.capture(
                lambda: (self.kt.rms_norm(x, (4096,), g, eps=1e-6), self.kt.softmax(x, dim=-1)),
                warmup=False)
            self.assertEqual(served, 2)
            x.copy_(torch.randn_like(x))
            graph.replay()
            torch.cuda.synchronize()
            self.assertLess(rel_l2(h, F.rms_norm(x, (4096,), g, eps=1e-6)), 1e-2)
            self.assertLess(rel_l2(p, torch.softmax(x, dim=-1)), 1e-2)


def main() -> int:
    if torch is None:
        print("skipped: PyTorch is not installed")
        return SKIP
    if not torch.cuda.is_available():
        print("skipped: no GPU")
        return SKIP
    if not os.environ.get("KTUNED"):
        print("skipped: KTUNED (the ktuned to start) is not set")
        return SKIP
    with tempfile.TemporaryDirectory(prefix="ktune-torch-gpu-") as d:
        DAEMON["socket"] = os.path.join(d, "ktuned.sock")
        log = open(os.path.join(d, "ktuned.log"), "w")
        daemon = subprocess.Popen([os.environ["KTUNED"], "--socket", DAEMON["socket"], "--data-dir",
                                   os.path.join(d, "data"), "--set", "tuning.gpu_policy=never",
                                   "--set", "tuning.on_miss=false"],
                                  stdout=log, stderr=subprocess.STDOUT)
        client = ktune.Client(socket_path=DAEMON["socket"], cache_ttl=0)
        try:
            deadline = time.monotonic() + 30
            while True:  # ready when it answers (not a sleep: each try is a real request)
                try:
                    client.status()
                    break
                except ktune.KtuneError:
                    if daemon.poll() is not None or time.monotonic() > deadline:
                        print(open(log.name).read())
                        return 1
                    time.sleep(0.05)
            DAEMON["client"] = client
            result = unittest.main(module=__name__, argv=[sys.argv[0], "-v"], exit=False).result
            return 0 if result.wasSuccessful() else 1
        finally:
            client.close()
            daemon.terminate()
            daemon.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
