"""ktune.torch's launch against the stand-in torch (tests/bench/fake_torch): a kernel runs with
its tensor's device current, whichever device the caller left current."""
import os
import sys
import types
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "bench", "fake_torch"))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
import torch  # noqa: E402  (the stand-in)
import ktune.torch as kt  # noqa: E402


class Recorder:
    """A Kernel that records the device current at each launch."""

    def __init__(self):
        self.devices = []

    def launch_addresses(self, addresses, stream, scalars=None):
        self.devices.append(torch.cuda.current_device())


class DeviceTest(unittest.TestCase):
    def test_a_kernel_launches_with_its_tensors_device_current(self):
        self.assertTrue(torch.__file__.startswith(os.path.join(ROOT, "tests")), torch.__file__)
        on1 = torch.Tensor((4, 4), torch.bfloat16)
        on1.device = torch.device("cuda:1")
        on0 = torch.Tensor((4, 4), torch.bfloat16)
        kernel = Recorder()
        self.assertEqual(torch.cuda.current_device(), 0)
        self.assertTrue(kt._launch("linear", kernel, (1, 2, 3), on1))
        self.assertTrue(kt._launch("linear", kernel, (1, 2, 3), on0))
        # A model on cuda:1 without torch.cuda.set_device(1): the launch ran in GPU 0's context
        # with GPU 1's pointers (an illegal address, or an unordered read over peer access).
        self.assertEqual(kernel.devices, [1, 0])
        self.assertEqual(torch.cuda.current_device(), 0, "the caller's device is put back")


class RowOpsTest(unittest.TestCase):
    def test_a_weight_or_bias_of_another_length_falls_back(self):
        x = torch.Tensor((4, 8), torch.bfloat16)
        good = torch.Tensor((8,), torch.bfloat16)
        self.assertIsNone(kt._rows_reason(x, good, good))
        # The kernel reads 8 of each: a shorter one was read past its end, a longer one gave a
        # result where torch raises.
        for n in (3, 16):
            self.assertEqual(kt._rows_reason(x, torch.Tensor((n,), torch.bfloat16)),
                             "weight/bias not of shape (last dimension,)")
            self.assertEqual(kt._rows_reason(x, good, torch.Tensor((n,), torch.bfloat16)),
                             "weight/bias not of shape (last dimension,)")


class AutocastTest(unittest.TestCase):
    def tearDown(self):
        torch._autocast[0] = False

    def test_calls_under_autocast_run_torchs_op(self):
        x, w = torch.Tensor((4, 8), torch.bfloat16), torch.Tensor((16, 8), torch.bfloat16)
        self.assertIsNone(kt._gemm_reason(x, w))
        self.assertIsNone(kt._rows_reason(x))
        self.assertTrue(kt._no_grad(x))
        # Under autocast torch casts (linear to the autocast dtype, softmax and the norms to
        # fp32); ktune's kernels run the dtype they are given, so the results differed.
        torch._autocast[0] = True
        self.assertEqual(kt._gemm_reason(x, w), "torch.autocast (its casts are torch's)")
        self.assertEqual(kt._rows_reason(x), "torch.autocast (its casts are torch's)")
        self.assertFalse(kt._no_grad(x), "the fast path is not taken either")


class StubClient:
    """lookup answers one entry with a launch; kernel() raises the queued errors in turn."""

    def __init__(self, errors):
        self.errors, self.kernel_calls = list(errors), 0

    def lookup(self, op, **kw):
        entry = types.SimpleNamespace(launch={"grid": [1, 1, 1]}, template="gemm_tma")
        return types.SimpleNamespace(entries=[entry, entry], device="nvidia-h200.sm90.132sm.140gib")

    def kernel(self, op, **kw):
        self.kernel_calls += 1
        raise self.errors.pop(0)


class TransientErrorTest(unittest.TestCase):
    def tearDown(self):
        kt.configure(client=StubClient([]))

    def test_a_late_or_stopping_daemon_is_asked_again_a_bad_entry_is_remembered(self):
        from ktune import KtuneError
        for code in ("timeout", "unavailable", "connection_failed"):
            bad = KtuneError("bad_request", "no such config")
            stub = StubClient([KtuneError(code, "slow"), bad, bad])
            kt.configure(client=stub)
            key = ("linear", "k", code)
            first = kt._kernel(key, "gemm", "bf16", "rc", {"M": 1, "N": 2, "K": 3})
            self.assertIn(f"ktuned could not serve it now ({code}: slow); asked again later", first)
            # Not remembered (it was, for good: a cold compile that outlasted the call's timeout
            # made the shape fall back forever), and the second entry was not asked to wait too.
            self.assertNotIn(key, kt._kernels, code)
            self.assertEqual(stub.kernel_calls, 1, code)
            self.assertEqual(kt._kernel(key, "gemm", "bf16", "rc", {"M": 1, "N": 2, "K": 3}),
                             "no ktuned answered (retrying later)")
            kt._down_until = 0.0  # retry_s later
            second = kt._kernel(key, "gemm", "bf16", "rc", {"M": 1, "N": 2, "K": 3})
            self.assertIn("bad_request", second)
            self.assertEqual(kt._kernels[key], second, "an answer about the entry is remembered")


class HeldConfigClient:
    """lookup answers one entry of config `cubin_id`; kernel() counts and refuses."""

    def __init__(self):
        self.kernel_calls, self.cubin_id = 0, "a"

    def lookup(self, op, **kw):
        entry = types.SimpleNamespace(launch={"cubin_id": self.cubin_id, "grid": [kw["M"], 1, 1]},
                                      template="gemm")
        return types.SimpleNamespace(entries=[entry], device="nvidia-h200.sm90.132sm.140gib")

    def kernel(self, op, **kw):
        self.kernel_calls += 1
        from ktune import KtuneError
        raise KtuneError("bad_request", f"no such config at M={kw['M']}")


class DynamicShapesTest(unittest.TestCase):
    """A model whose batch varies: a shape whose config the process holds needs no kernel op,
    and the caches keep the newest max_shapes shapes."""

    def setUp(self):
        self.client = HeldConfigClient()
        kt.configure(client=self.client)
        saved = (kt.max_shapes, kt.Kernel.for_launch)
        self.addCleanup(lambda: (setattr(kt, "max_shapes", saved[0]),
                                 setattr(kt.Kernel, "for_launch", saved[1]),
                                 kt.configure(client=StubClient([]))))
        self.made = []

        def for_launch(launch):  # the held config "a": a Kernel per launch, as Kernel's own
            if launch["cubin_id"] != "a":
                return None
            self.made.append(launch["grid"][0])
            return types.SimpleNamespace(description=launch)
        kt.Kernel.for_launch = staticmethod(for_launch)

    def test_a_held_config_is_not_fetched_and_the_oldest_shapes_go(self):
        kt.max_shapes = 4
        for m in range(1, 11):
            k = kt._kernel(("linear", m), "gemm", "bf16", "rc", {"M": m, "N": 8, "K": 8})
            self.assertEqual(k.description["grid"][0], m, "the launch of this shape")
        self.assertEqual(self.client.kernel_calls, 0)
        self.assertEqual(self.made, list(range(1, 11)))
        self.assertEqual(sorted(kt._kernels), [("linear", m) for m in range(7, 11)])
        # Another config: fetched (here refused), and the refusal remembered like a Kernel.
        self.client.cubin_id = "b"
        reason = kt._kernel(("linear", 99), "gemm", "bf16", "rc", {"M": 99, "N": 8, "K": 8})
        self.assertEqual(self.client.kernel_calls, 1)
        self.assertIn("no such config at M=99", reason)
        self.assertEqual(len(kt._kernels), 4)
        self.assertIn(("linear", 99), kt._kernels)

    def test_fallback_reasons_are_bounded(self):
        for m in range(kt._MAX_REASONS + 50):
            kt._fallback("linear", f"refused at M={m}")
        items = kt.explain()
        self.assertEqual(len(items), kt._MAX_REASONS + 1)
        self.assertEqual(sum(i["calls"] for i in items), kt._MAX_REASONS + 50)
        self.assertEqual(items[0]["calls"], 50)
        self.assertIn("other reasons", items[0]["reason"])


if __name__ == "__main__":
    unittest.main()
