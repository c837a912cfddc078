"""ktune.Kernel and protocol v2 in the Python client, without a GPU: v2 lookups parsed, the
kernel op's cubin checked, arguments packed in the description's order, and a clear error where
there is no driver. (The launches themselves run in bench/launch on the H200.)"""

import ctypes
import os
import py_compile
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import ktune
from ktune.kernel import ArgPlan, arch_sm, buffer_address, buffer_bytes, cubin_info

from test_client import H200, start_daemon, stop_daemon

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(HERE, "..", "..", "..", "client", "python")

GEMM_LAUNCH = {
    "name_expression": "ktune_gemm<...>", "arch": "sm_90", "cubin_id": "0123456789abcdef",
    "grid": [64, 1, 2], "block": [128, 1, 1], "smem": 92160,
    "args": [
        {"name": "A", "kind": "in", "dtype": "bf16", "count": 65536, "bytes": 131072},
        {"name": "B", "kind": "in", "dtype": "bf16", "count": 16777216, "bytes": 33554432},
        {"name": "C", "kind": "out", "dtype": "bf16", "count": 65536, "bytes": 131072},
        {"name": "workspace", "kind": "workspace", "dtype": "fp32", "count": 131072, "bytes": 524288,
         "zero_before_first_use": False, "left_zeroed": False},
        {"name": "tile_counters", "kind": "workspace", "dtype": "i32", "count": 64, "bytes": 256,
         "zero_before_first_use": True, "left_zeroed": True},
        {"name": "M", "kind": "scalar", "dtype": "i32", "value": 16},
        {"name": "N", "kind": "scalar", "dtype": "i32", "value": 4096},
        {"name": "K", "kind": "scalar", "dtype": "i32", "value": 4096},
        {"name": "alpha", "kind": "scalar", "dtype": "f32", "value": 1.0},
        {"name": "beta", "kind": "scalar", "dtype": "f32", "value": 0.0},
        {"name": "n", "kind": "scalar", "dtype": "i64", "value": 1 << 40},
    ],
}


class FakeArray:
    """An object with __cuda_array_interface__ (as CuPy and Numba arrays have)."""

    def __init__(self, address, shape, typestr):
        self.__cuda_array_interface__ = {"data": (address, False), "shape": shape,
                                         "typestr": typestr, "version": 3}


class FakeTensor:
    """An object with data_ptr(), numel() and element_size(), as torch tensors have."""

    def __init__(self, address, numel, size):
        self._a, self._n, self._s = address, numel, size

    def data_ptr(self):
        return self._a

    def numel(self):
        return self._n

    def element_size(self):
        return self._s


class PackingTest(unittest.TestCase):
    def test_arguments_are_packed_in_order_with_their_ctypes(self):
        plan = ArgPlan(GEMM_LAUNCH)
        self.assertEqual([b["name"] for b in plan.buffers], ["A", "B", "C"])
        self.assertEqual([w["name"] for w in plan.workspaces], ["workspace", "tile_counters"])
        plan.pack([0x1000, 0x2000, 0x3000], [0x4000, 0x5000])
        self.assertEqual(plan.values(), [0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 16, 4096, 4096,
                                         1.0, 0.0, 1 << 40])
        # The parameter array points at each value, with the width the kernel reads.
        self.assertEqual(len(plan.params), 11)
        self.assertEqual(ctypes.c_uint64.from_address(plan.params[2]).value, 0x3000)
        self.assertEqual(ctypes.c_int32.from_address(plan.params[5]).value, 16)
        self.assertEqual(struct.unpack("<f", ctypes.string_at(plan.params[8], 4))[0], 1.0)
        self.assertEqual(ctypes.c_int64.from_address(plan.params[10]).value, 1 << 40)
        self.assertIsInstance(plan.slots[5], ctypes.c_int32)
        self.assertIsInstance(plan.slots[8], ctypes.c_float)

    def test_scalar_overrides_last_one_launch(self):
        plan = ArgPlan(GEMM_LAUNCH)
        plan.pack([1, 2, 3], [4, 5], {"alpha": 2.0, "beta": 0.5})
        self.assertEqual(plan.values()[8:10], [2.0, 0.5])
        plan.pack([1, 2, 3], [4, 5])
        self.assertEqual(plan.values()[8:10], [1.0, 0.0], "the description's values again")
        with self.assertRaises(ktune.KtuneError) as e:
            plan.pack([1, 2, 3], [4, 5], {"gamma": 1.0})
        self.assertIn("no scalar 'gamma'", e.exception.message)

    def test_wrong_buffer_count_and_unknown_kinds_are_refused(self):
        plan = ArgPlan(GEMM_LAUNCH)
        with self.assertRaises(ktune.KtuneError) as e:
            plan.pack([1, 2], [4, 5])
        self.assertIn("takes 3 buffers (A, B, C), 2 given", e.exception.message)
        for kind, says in (("tensor_map", "tensor_map"), ("texture", "unknown kind 'texture'")):
            launch = dict(GEMM_LAUNCH, args=GEMM_LAUNCH["args"] + [{"name": "t", "kind": kind, "dtype": ""}])
            with self.assertRaises(ktune.KtuneError) as e:
                ArgPlan(launch)
            self.assertIn(says, e.exception.message)
        # Memory that only a tensor map names is no parameter of its own.
        launch = dict(GEMM_LAUNCH, args=[dict(GEMM_LAUNCH["args"][0], **{"pass": False})] + GEMM_LAUNCH["args"][1:])
        self.assertEqual([b["name"] for b in ArgPlan(launch).buffers], ["B", "C"])

    def test_buffers_by_address_interface_or_data_ptr(self):
        self.assertEqual(buffer_address(0x7000), 0x7000)
        self.assertEqual(buffer_address(FakeArray(0x8000, (4, 8), "<f4")), 0x8000)
        self.assertEqual(buffer_bytes(FakeArray(0x8000, (4, 8), "<f4")), 128)
        self.assertEqual(buffer_address(FakeTensor(0x9000, 10, 2)), 0x9000)
        self.assertEqual(buffer_bytes(FakeTensor(0x9000, 10, 2)), 20)
        self.assertIsNone(buffer_bytes(0x7000))
        with self.assertRaises(TypeError):
            buffer_address("A")

    def test_arch_strings(self):
        self.assertEqual(arch_sm("sm_90a"), 90)
        self.assertEqual(arch_sm("sm_80"), 80)
        self.assertEqual(arch_sm("sm_100a"), 100)
        self.assertEqual(arch_sm("compute_90"), 0)
        self.assertEqual(arch_sm("sm_"), 0)


class ImportTest(unittest.TestCase):
    def test_import_needs_neither_libcuda_nor_torch(self):
        code = ("import sys, ktune; k = ktune.Kernel; "
                "assert 'torch' not in sys.modules, 'import ktune imported torch'; "
                "import ctypes; print('ok')")
        out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=PACKAGE),
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "ok")

    def test_torch_module_compiles(self):
        # ktune.torch is imported only where PyTorch is; here, at least, it must be valid Python.
        py_compile.compile(os.path.join(PACKAGE, "ktune", "torch.py"), doraise=True,
                           cfile=os.path.join(tempfile.mkdtemp(prefix="ktune-pyc-"), "torch.pyc"))


class KernelOpTest(unittest.TestCase):
    """Against a real ktuned: v2 lookups, the kernel op, and ktune.Kernel's checks."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ktune-py-")
        self.proc, self.sock = start_daemon(self.tmp)
        self.client = ktune.Client(socket_path=self.sock, cache_ttl=0)

    def tearDown(self):
        self.client.close()
        if self.proc.poll() is None:
            stop_daemon(self.proc)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_v2_lookup_entries_carry_their_launch(self):
        reply = self.client.lookup("rmsnorm", dtype="bf16", device=H200, rows=8192, cols=4096)
        launch = reply.best.launch
        self.assertEqual(launch["arch"], "sm_90")
        self.assertEqual([a["name"] for a in launch["args"]], ["x", "gamma", "y", "rows", "cols", "eps"])
        self.assertEqual(launch["args"][1]["count"], 4096)
        self.assertEqual(launch["args"][0]["bytes"], 8192 * 4096 * 2)
        self.assertEqual(len(launch["cubin_id"]), 16)
        self.assertEqual(launch["grid"], reply.best.kernel["grid"])

    def test_kernel_of_the_best_entry_is_checked_and_packed(self):
        image = self.client.kernel("softmax", dtype="fp32", device=H200, rows=64, cols=4096)
        self.assertEqual(image["source"], "compiled")
        kernel = ktune.Kernel(image)
        self.assertEqual(kernel.buffer_names, ["x", "y"])
        sm, symbols = cubin_info(kernel.cubin)
        self.assertEqual(sm, 90)
        self.assertIn(image["lowered_name"], symbols)
        again = self.client.kernel("softmax", dtype="fp32", device=H200, rows=64, cols=4096)
        self.assertEqual(again["source"], "cache")
        self.assertEqual(again["cubin"], image["cubin"])
        # A cubin that is not what its description says is refused before any driver call.
        wrong = dict(image, launch=dict(image["launch"], arch="sm_80"))
        with self.assertRaises(ktune.KtuneError) as e:
            ktune.Kernel(wrong)
        self.assertIn("compiled for sm_90 but its description says sm_80", e.exception.message)
        with self.assertRaises(ktune.KtuneError) as e:
            ktune.Kernel(dict(image, lowered_name="_Z3nopev"))
        self.assertIn("has no entry", e.exception.message)
        try:
            ctypes.CDLL("libcuda.so.1")
            return  # a driver: the launch itself is the GPU benchmark's business
        except OSError:
            pass
        with self.assertRaises(ktune.KtuneError) as e:
            kernel.launch(FakeArray(0x1000, (64, 4096), "<f4"), FakeArray(0x2000, (64, 4096), "<f4"))
        self.assertEqual(e.exception.code, "unavailable")
        self.assertIn("no CUDA driver", e.exception.message)

    def test_kernel_errors_and_an_explicit_config(self):
        best = self.client.lookup("gemm", dtype="bf16", layout="rc", device=H200, M=64, N=64, K=64).best
        with self.assertRaises(ktune.KtuneError) as e:
            self.client.kernel("gemm", layout="rc", device=H200, template="gemm",
                               params=dict(best.params, BLOCK_M=48), M=64, N=64, K=64)
        self.assertEqual(e.exception.code, "bad_request")
        self.assertIn("BLOCK_M = 48 is outside", e.exception.message)
        with self.assertRaises(ktune.KtuneError) as e:
            self.client.kernel("gemm", layout="rc", device=H200, template="nope", params={}, M=64, N=64, K=64)
        self.assertEqual(e.exception.code, "not_found")
        image = self.client.kernel("gemm", layout="rc", device=H200, template=best.template,
                                   params=best.params, M=64, N=64, K=64)
        self.assertEqual(image["launch"]["cubin_id"], best.launch["cubin_id"])


class FakeDriver:
    """libcuda's calls that Kernel makes, recorded; a launch records the packed values."""

    def __init__(self, kernel):
        self.kernel, self.ctx, self.fail_launch = kernel, 0xC0, 0
        self.loads, self.launches, self.allocs, self.memsets = [], [], [], []

    def cuCtxGetCurrent(self, out):
        out.contents.value = self.ctx
        return 0

    def cuCtxGetDevice(self, out):
        out._obj.value = 0
        return 0

    def cuDeviceGetAttribute(self, out, attr, dev):
        out._obj.value = 9 if attr == 75 else 0
        return 0

    def cuModuleLoadData(self, out, cubin):
        self.loads.append(self.ctx)
        out._obj.value = 0x1000 + len(self.loads)
        return 0

    def cuModuleGetFunction(self, out, module, name):
        out._obj.value = getattr(module, "value", module) + 0x100
        return 0

    def cuFuncSetAttribute(self, function, attr, value):
        return 0

    def cuMemAlloc(self, out, size):
        self.allocs.append(size)
        out._obj.value = 0x70000 + 0x1000 * len(self.allocs)
        return 0

    def cuMemsetD8(self, address, value, size):
        self.memsets.append((address, size))
        return 0

    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        self.launches.append({"function": function, "grid": (gx, gy, gz), "block": (bx, by, bz),
                              "smem": smem, "stream": stream, "values": self.kernel.plan.values()})
        return self.fail_launch

    def cuGetErrorName(self, result, out):
        out._obj.value = b"CUDA_ERROR_INVALID_VALUE"
        return 0

    def check(self, result, what):
        from ktune.kernel import _Driver
        _Driver.check(self, result, what)


class LaunchPathTest(unittest.TestCase):
    """Kernel.launch_addresses (ktune.torch's per-call path) against a recording fake driver: the
    packed values each launch sees, one module load per context, scalars overridden for one launch
    only, and errors that name the kernel."""

    tearDown = KernelOpTest.tearDown

    def setUp(self):
        KernelOpTest.setUp(self)
        from ktune.kernel import _Driver
        self._saved = _Driver._instance
        self.addCleanup(setattr, _Driver, "_instance", self._saved)

    def fake(self, kernel):
        from ktune.kernel import _Driver
        drv = FakeDriver(kernel)
        _Driver._instance = drv
        return drv

    def test_each_launch_sees_its_addresses_and_scalars(self):
        image = self.client.kernel("softmax", dtype="fp32", device=H200, rows=64, cols=4096)
        kernel = ktune.Kernel(image)
        drv = self.fake(kernel)
        rows, cols = kernel.description["args"][2]["value"], kernel.description["args"][3]["value"]
        kernel.launch_addresses((0xA000, 0xB000), 7)
        kernel.launch_addresses((0xA100, 0xB100), 8, {"rows": 3})
        kernel.launch_addresses((0xA200, 0xB200), 9)
        self.assertEqual([l["values"][:2] for l in drv.launches],
                         [[0xA000, 0xB000], [0xA100, 0xB100], [0xA200, 0xB200]])
        self.assertEqual([l["values"][2] for l in drv.launches], [rows, 3, rows])
        self.assertEqual([l["values"][3] for l in drv.launches], [cols] * 3)
        self.assertEqual([l["stream"] for l in drv.launches], [7, 8, 9])
        d = kernel.description
        self.assertEqual(drv.launches[0]["grid"], tuple(d["grid"]))
        self.assertEqual(drv.launches[0]["block"], tuple(d["block"]))
        self.assertEqual(drv.loads, [0xC0])
        drv.ctx = 0xC1                               # another context: its own module
        kernel.launch_addresses((0xA300, 0xB300), 0)
        self.assertEqual(drv.loads, [0xC0, 0xC1])
        self.assertNotEqual(drv.launches[-1]["function"], drv.launches[0]["function"])
        with self.assertRaises(ktune.KtuneError) as e:
            kernel.launch_addresses((0xA000,), 0)
        self.assertIn("2 buffers", e.exception.message)
        drv.fail_launch = 1
        with self.assertRaises(ktune.KtuneError) as e:
            kernel.launch_addresses((0xA000, 0xB000), 0)
        self.assertIn(image["lowered_name"], e.exception.message)
        self.assertIn("CUDA_ERROR_INVALID_VALUE", e.exception.message)
        drv.ctx = 0
        with self.assertRaises(ktune.KtuneError) as e:
            kernel.launch_addresses((0xA000, 0xB000), 0)
        self.assertIn("no CUDA context", e.exception.message)

    def test_workspaces_are_allocated_zeroed_once_per_context_and_passed(self):
        best = self.client.lookup("gemm", dtype="bf16", layout="rc", device=H200, M=64, N=64, K=64).best
        image = self.client.kernel("gemm", layout="rc", device=H200, template=best.template,
                                   params=best.params, M=64, N=64, K=64)
        kernel = ktune.Kernel(image)
        drv = self.fake(kernel)
        spaces = [a for a in kernel.description["args"] if a["kind"] == "workspace" and a.get("pass", True)]
        buffers = [0xA000 + 0x100 * i for i in range(len(kernel.buffer_names))]
        kernel.launch_addresses(buffers, 0)
        kernel.launch_addresses(buffers, 0)
        self.assertEqual(drv.allocs, [w["bytes"] for w in spaces])
        self.assertEqual(len(drv.memsets), len(spaces))
        values = drv.launches[1]["values"]
        for address in [0x70000 + 0x1000 * (i + 1) for i in range(len(spaces))] + buffers:
            self.assertIn(address, values)


if __name__ == "__main__":
    unittest.main()
