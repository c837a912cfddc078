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


class DynamicShapesTest(unittest.TestCase):
    """A model whose batch varies: every shape's call is ktune's kernel and right, the caches stay
    within max_shapes, a config's cubin is fetched and loaded once for all its shapes, and a graph
    captured before its shape left the caches still replays correctly."""

    def setUp(self):
        import ktune.torch as kt
        self.kt = kt
        kt.configure(client=DAEMON["client"])
        self.addCleanup(setattr, kt, "max_shapes", kt.max_shapes)
        kt.max_shapes = 6
        self.fetched = []
        kernel = DAEMON["client"].kernel

        def counting(*args, **kwargs):
            image = kernel(*args, **kwargs)
            self.fetched.append(image["launch"]["cubin_id"])
            return image
        DAEMON["client"].kernel = counting
        self.addCleanup(delattr, DAEMON["client"], "kernel")
        torch.manual_seed(0)

    def test_batch_sizes_share_their_configs_kernels(self):
        from ktune.kernel import _Driver, _Loaded
        n, k = 4096, 4096
        drv = _Driver.get()
        loaded = _Loaded.of(drv)
        load = drv.cuModuleLoadData
        loads = []

        def counting_load(*args):
            loads.append(1)
            return load(*args)
        drv.cuModuleLoadData = counting_load
        self.addCleanup(setattr, drv, "cuModuleLoadData", load)
        functions_before = set(loaded.functions)
        w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda") * 0.02
        key16 = ("linear", torch.Size([16, k]), w.shape, torch.bfloat16, torch.bfloat16, 0)
        with torch.no_grad():
            x16 = torch.randn(16, k, dtype=torch.bfloat16, device="cuda")
            graph = torch.cuda.CUDAGraph()
            self.kt.linear(x16, w)  # warm-up outside the capture: this shape's Kernel, made
            first16 = self.kt._plans[key16][0]
            with torch.cuda.graph(graph):
                y16 = self.kt.linear(x16, w)
            ids = set()
            for m in list(range(1, 25)) + [40, 96, 100, 128, 200, 257, 1000, 16]:
                x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
                y = self.kt.linear(x, w)
                self.assertLess(rel_l2(y, F.linear(x, w)), 1e-2, f"M = {m}")
                ids.add(self.kt._plans[("linear", x.shape, w.shape, x.dtype, w.dtype, 0)][0]
                        .description["cubin_id"])
                self.assertLessEqual(len(self.kt._kernels), 6)
                self.assertLessEqual(len(self.kt._plans), 6)
            self.assertEqual(self.kt.stats()["fallback"], 0, self.kt.explain())
            self.assertEqual(len(self.fetched), len(set(self.fetched)),
                             "no config's cubin fetched twice")
            self.assertLessEqual(len(loads), len(ids), "one module per config, not per shape")
            self.assertEqual(len(loads), len(set(loaded.functions) - functions_before))
            # M = 16 left the caches and came back as a new Kernel of the held config; the
            # graph's kernel, module and workspaces are still there.
            again16 = self.kt._plans[key16][0]
            self.assertIsNot(again16, first16)
            self.assertIs(again16.cubin, first16.cubin)
            x16.copy_(torch.randn_like(x16))
            graph.replay()
            torch.cuda.synchronize()
            self.assertLess(rel_l2(y16, F.linear(x16, w)), 1e-2)
            print(f"{len(ids)} configs served 33 shapes; {len(self.fetched)} cubins fetched, "
                  f"{len(loads)} modules loaded")


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
