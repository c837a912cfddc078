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


# What the daemon describes for a gemm_tma config (daemon/launch.cc describe_arg), M=200 N=300
# K=136 bf16, BLOCK_M 128, BLOCK_N 128: A and B reach the kernel only through tmA and tmB.
def _tmap(buffer, rows, box_rows):
    return {"buffer": buffer, "dims": [136, rows], "strides": [272], "box": [64, box_rows],
            "element_strides": [1, 1], "swizzle": "128B", "l2_promotion": "256B", "oob_fill": "zeros"}


TMA_LAUNCH = {
    "name_expression": "ktune_gemm_tma<...>", "arch": "sm_90a", "cubin_id": "0123456789abcdef",
    "grid": [6, 1, 1], "block": [384, 1, 1], "smem": 99376,
    "args": [
        {"name": "A", "kind": "in", "dtype": "bf16", "count": 27200, "bytes": 54400, "pass": False},
        {"name": "B", "kind": "in", "dtype": "bf16", "count": 40800, "bytes": 81600, "pass": False},
        {"name": "tmA", "kind": "tensor_map", "dtype": "bf16", "tensor_map": _tmap("A", 200, 128)},
        {"name": "tmB", "kind": "tensor_map", "dtype": "bf16", "tensor_map": _tmap("B", 300, 128)},
        {"name": "C", "kind": "out", "dtype": "bf16", "count": 60000, "bytes": 120000},
        {"name": "workspace", "kind": "workspace", "dtype": "fp32", "count": 1, "bytes": 4,
         "zero_before_first_use": False, "left_zeroed": False},
        {"name": "tile_counters", "kind": "workspace", "dtype": "i32", "count": 6, "bytes": 24,
         "zero_before_first_use": True, "left_zeroed": True},
        {"name": "M", "kind": "scalar", "dtype": "i32", "value": 200},
        {"name": "N", "kind": "scalar", "dtype": "i32", "value": 300},
        {"name": "K", "kind": "scalar", "dtype": "i32", "value": 136},
        {"name": "alpha", "kind": "scalar", "dtype": "f32", "value": 1.0},
        {"name": "beta", "kind": "scalar", "dtype": "f32", "value": 0.0},
    ],
}


def tma_launch(edit):
    """TMA_LAUNCH with edit(args by name) applied to a deep copy."""
    import copy
    launch = copy.deepcopy(TMA_LAUNCH)
    edit({a["name"]: a for a in launch["args"]})
    return launch


class FakeArray:
    """An object with __cuda_array_interface__ (as CuPy and Numba arrays have)."""

    def __init__(self, address, shape, typestr, strides=None):
        self.__cuda_array_interface__ = {"data": (address, False), "shape": shape,
                                         "typestr": typestr, "strides": strides, "version": 3}


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
        with self.assertRaises(ktune.KtuneError) as e:  # ctypes stored inf; C++ refused it
            plan.pack([1, 2, 3], [4, 5], {"alpha": 1e39})
        self.assertIn("does not fit the kernel's f32", e.exception.message)

    def test_wrong_buffer_count_and_unknown_kinds_are_refused(self):
        plan = ArgPlan(GEMM_LAUNCH)
        with self.assertRaises(ktune.KtuneError) as e:
            plan.pack([1, 2], [4, 5])
        self.assertIn("takes 3 buffers (A, B, C), 2 given", e.exception.message)
        launch = dict(GEMM_LAUNCH, args=GEMM_LAUNCH["args"] + [{"name": "t", "kind": "texture", "dtype": ""}])
        with self.assertRaises(ktune.KtuneError) as e:
            ArgPlan(launch)
        self.assertIn("unknown kind 'texture'", e.exception.message)

    def test_tensor_map_buffers_are_launch_buffers_and_maps_are_aligned_parameters(self):
        plan = ArgPlan(TMA_LAUNCH)
        self.assertEqual([b["name"] for b in plan.buffers], ["A", "B", "C"],
                         "A and B are no parameters, but the maps are encoded from their addresses")
        self.assertEqual(len(plan.params), 10, "tmA tmB C workspace tile_counters M N K alpha beta")
        self.assertFalse(plan.direct)
        self.assertEqual([m.name for m in plan.maps], ["tmA", "tmB"])
        for i, m in enumerate(plan.maps):
            self.assertEqual(plan.params[i], m.address)
            self.assertEqual(m.address % 64, 0, "CUtensorMap is alignas(64)")
            self.assertEqual(ctypes.sizeof(m.storage), 128)
        self.assertEqual(plan.maps[1].buffer, 1)
        plan.pack([0xA000, 0xB000, 0xC000], [0xD000, 0xE000])
        self.assertEqual(plan.values()[2:], [0xC000, 0xD000, 0xE000, 200, 300, 136, 1.0, 0.0])
        self.assertEqual(plan.values()[0], bytes(128))
        with self.assertRaises(ktune.KtuneError) as e:
            plan.pack([0xA000, 0xC000], [0xD000, 0xE000])
        self.assertIn("takes 3 buffers (A, B, C), 2 given", e.exception.message)
        # A plain template keeps the direct path.
        self.assertTrue(ArgPlan(GEMM_LAUNCH).direct)

    def test_malformed_tensor_maps_are_refused_naming_the_argument(self):
        def tm(field, value):
            return lambda args: args["tmB"]["tensor_map"].__setitem__(field, value)

        cases = [
            (lambda args: args["tmB"].pop("tensor_map"), "'tmB': no \"tensor_map\" object"),
            (lambda args: args["tmB"]["tensor_map"].pop("dims"), "'tmB': malformed"),
            (tm("dims", ["K", "N"]), "'tmB': malformed"),
            (tm("dims", [1] * 6), "'tmB': rank 6 (dims) is not 1 to 5"),
            (tm("strides", [272, 272]), "'tmB': 2 strides for rank 2 (needs rank - 1)"),
            (tm("box", [64]), "'tmB': box and element_strides need 2 entries each (have 1 and 2)"),
            (tm("swizzle", "256B"), "'tmB': unknown swizzle '256B'"),
            (tm("l2_promotion", "1K"), "'tmB': unknown l2_promotion '1K'"),
            (tm("oob_fill", "ones"), "'tmB': unknown oob_fill 'ones'"),
            (tm("buffer", "Z"), "'tmB': maps 'Z', which is no argument"),
            (tm("buffer", "K"), "'tmB': maps 'K', which is not an in/out/inout buffer"),
            (tm("buffer", "tile_counters"), "maps 'tile_counters', which is not an in/out/inout"),
            (lambda args: args["B"].__setitem__("dtype", "i64"), "buffer 'B' has dtype 'i64'"),
            (lambda args: args["B"].__setitem__("bytes", 81598), "'tmB': spans 81600 bytes but 'B' holds 81598"),
        ]
        for edit, says in cases:
            with self.assertRaises(ktune.KtuneError, msg=says) as e:
                ArgPlan(tma_launch(edit))
            self.assertEqual(e.exception.code, "bad_request")
            self.assertIn(says, e.exception.message)
            self.assertIn("tensor_map argument 'tmB'", e.exception.message)

    def test_buffers_by_address_interface_or_data_ptr(self):
        self.assertEqual(buffer_address(0x7000), 0x7000)
        self.assertEqual(buffer_address(FakeArray(0x8000, (4, 8), "<f4")), 0x8000)
        self.assertEqual(buffer_bytes(FakeArray(0x8000, (4, 8), "<f4")), 128)
        self.assertEqual(buffer_address(FakeTensor(0x9000, 10, 2)), 0x9000)
        self.assertEqual(buffer_bytes(FakeTensor(0x9000, 10, 2)), 20)
        self.assertIsNone(buffer_bytes(0x7000))
        with self.assertRaises(TypeError):
            buffer_address("A")

    def test_unaligned_or_strided_buffers_are_refused_before_the_launch(self):
        from ktune.kernel import buffer_layout_problem
        dense = FakeArray(0x8000, (4, 8), "<f4")
        self.assertIsNone(buffer_layout_problem(dense, 0x8000))
        self.assertIsNone(buffer_layout_problem(FakeArray(0x8000, (4, 8), "<f4", (32, 4)), 0x8000))
        # A dimension of one may carry any stride (as torch gives a column of shape (n, 1)).
        self.assertIsNone(buffer_layout_problem(FakeArray(0x8000, (1024, 1), "<f4", (4, 4096)),
                                                0x8000))
        # A transposed view and a column slice read other elements; an odd offset faults (and
        # the fault ends the CUDA context).
        self.assertIn("not contiguous", buffer_layout_problem(
            FakeArray(0x8000, (8, 4), "<f4", (4, 32)), 0x8000))
        self.assertIn("not contiguous", buffer_layout_problem(
            FakeArray(0x8000, (4, 4), "<f4", (32, 4)), 0x8000))
        self.assertIn("not 16-byte aligned", buffer_layout_problem(0x8002, 0x8002))

        class Strided(FakeTensor):
            def is_contiguous(self):
                return False
        self.assertIn("not contiguous", buffer_layout_problem(Strided(0x9000, 10, 2), 0x9000))

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
        self.kernel, self.ctx, self.fail_launch, self.fail_encode = kernel, 0xC0, 0, 0
        self.capturing = 0  # cuStreamIsCapturing's answer: 0 none, 1 active, 2 invalidated
        self.mode = 0       # this thread's capture mode: 0 global (the default), 2 relaxed
        self.loads, self.launches, self.allocs, self.memsets, self.encodes = [], [], [], [], []
        self.frees, self.streams, self.unloads = [], [], []  # streams: (event, handle)
        self.fail_smem = 0  # cuFuncSetAttribute's answer
        self.smem_sets = []  # (function, bytes) of each limit raised

    def forbidden(self):
        """What a capture in global mode answers an allocation or a module load: refused (and the
        capture invalidated), unless this thread's mode is relaxed."""
        return self.capturing == 1 and self.mode != 2

    def cuThreadExchangeStreamCaptureMode(self, mode):
        mode._obj.value, self.mode = self.mode, mode._obj.value
        return 0

    def cuStreamCreate(self, out, flags):
        out._obj.value = 0x5000 + len(self.streams)
        self.streams.append(("create", out._obj.value, flags))
        return 0

    def cuStreamSynchronize(self, stream):
        self.streams.append(("sync", stream.value))
        return 0

    def cuStreamDestroy(self, stream):
        self.streams.append(("destroy", stream.value))
        return 0

    def cuMemFree(self, address):
        self.frees.append(address)
        return 0

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
        if self.forbidden():
            return 900  # CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
        self.loads.append(self.ctx)
        out._obj.value = 0x1000 + len(self.loads)
        return 0

    def cuModuleUnload(self, module):
        self.unloads.append(getattr(module, "value", module))
        return 0

    def cuModuleGetFunction(self, out, module, name):
        out._obj.value = getattr(module, "value", module) + 0x100
        return 0

    def cuFuncSetAttribute(self, function, attr, value):
        if not self.fail_smem:
            self.smem_sets.append((getattr(function, "value", function), value))
        return self.fail_smem

    def cuMemAlloc(self, out, size):
        if self.forbidden():
            return 900  # CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
        self.allocs.append(size)
        out._obj.value = 0x70000 + 0x1000 * len(self.allocs)
        return 0

    def cuMemsetD8Async(self, address, value, size, stream):
        self.memsets.append((address, value, size, stream))
        return 0

    def cuStreamIsCapturing(self, stream, out):
        out._obj.value = self.capturing
        return 0

    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        self.launches.append({"function": function, "grid": (gx, gy, gz), "block": (bx, by, bz),
                              "smem": smem, "stream": stream, "values": self.kernel.plan.values()})
        return self.fail_launch

    def cuTensorMapEncodeTiled(self, address, dtype, rank, base, dims, strides, box,
                               element_strides, interleave, swizzle, l2, oob):
        self.encodes.append({"address": address, "dtype": dtype, "rank": rank, "base": base,
                             "dims": list(dims[:rank]), "strides": list(strides[:rank - 1]),
                             "box": list(box[:rank]), "element_strides": list(element_strides[:rank]),
                             "interleave": interleave, "swizzle": swizzle, "l2": l2, "oob": oob})
        ctypes.memmove(address, struct.pack("<Q", base) * 16, 128)  # a "map" that names its base
        return self.fail_encode

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
        # Only f32 coefficients may change at launch: rows is a dimension the grid was sized for
        # (a larger value wrote out of bounds), and a misspelt name is not silently ignored.
        for override, says in (({"rows": 3}, "dimension the kernel was served for (rows=64)"),
                               ({"Rows": 3}, "has no scalar 'Rows' (its scalars: rows, cols)")):
            with self.assertRaises(ktune.KtuneError) as e:
                kernel.launch_addresses((0xA100, 0xB100), 8, override)
            self.assertIn(says, e.exception.message)
        kernel.launch_addresses((0xA200, 0xB200), 9)
        self.assertEqual([l["values"][:2] for l in drv.launches],
                         [[0xA000, 0xB000], [0xA200, 0xB200]])
        self.assertEqual([l["values"][2] for l in drv.launches], [rows, rows])
        self.assertEqual([l["values"][3] for l in drv.launches], [cols] * 2)
        self.assertEqual([l["stream"] for l in drv.launches], [7, 9])
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

    def test_a_module_whose_setup_failed_is_unloaded(self):
        # A shared-memory limit the device refuses: the launch fails, the module is unloaded (each
        # retry leaked one), and a later launch loads it again.
        image = self.client.kernel("gemm", dtype="bf16", layout="rc", device=H200, M=256, N=256,
                                   K=256)
        kernel = ktune.Kernel(image)
        self.assertGreater(kernel.description["smem"], 0)
        drv = self.fake(kernel)
        drv.fail_smem = 1
        for _ in range(2):
            with self.assertRaises(ktune.KtuneError) as e:
                kernel.launch_addresses((0xA000, 0xB000, 0xC000), 7)
            self.assertIn("dynamic shared memory", e.exception.message)
        self.assertEqual(len(drv.unloads), 2)
        self.assertEqual(drv.unloads, [0x1001, 0x1002])
        drv.fail_smem = 0
        kernel.launch_addresses((0xA000, 0xB000, 0xC000), 7)
        self.assertEqual(len(drv.launches), 1)

    def test_a_malformed_image_is_a_ktune_error(self):
        # ktune.torch falls back on a KtuneError; anything else reached the user's model.
        image = self.client.kernel("softmax", dtype="fp32", device=H200, rows=64, cols=1024)
        for broken in ({}, dict(image, cubin="not base64!"), dict(image, launch={"arch": 90}),
                       dict(image, cubin_bytes=None)):
            with self.assertRaises(ktune.KtuneError) as e:
                ktune.Kernel(broken)
            self.assertEqual(e.exception.code, "bad_request")

    def test_launch_refuses_a_strided_or_unaligned_buffer_before_the_driver(self):
        image = self.client.kernel("softmax", dtype="fp32", device=H200, rows=64, cols=1024)
        kernel = ktune.Kernel(image)
        drv = self.fake(kernel)
        x, y = kernel.buffer_names
        with self.assertRaises(ktune.KtuneError) as e:  # x transposed
            kernel.launch(FakeArray(0x8000, (1024, 64), "<f4", (4, 4096)),
                          FakeArray(0x9000000, (64, 1024), "<f4"))
        self.assertIn(f"buffer '{x}': it is not contiguous", e.exception.message)
        with self.assertRaises(ktune.KtuneError) as e:
            kernel.launch(0x8000, 0x9000004)
        self.assertIn(f"buffer '{y}': its address 0x9000004 is not 16-byte aligned",
                      e.exception.message)
        self.assertEqual(drv.launches, [])
        with self.assertRaises(ktune.KtuneError) as e:  # a null pointer faults like the others
            kernel.launch(0, 0x9000000)
        self.assertIn(f"buffer '{x}': its address is 0", e.exception.message)
        kernel.launch(FakeArray(0x8000, (64, 1024), "<f4"), 0x9000000)
        self.assertEqual(len(drv.launches), 1)
        with self.assertRaises(ktune.KtuneError) as e:  # the path ktune.torch takes, too
            kernel.launch_addresses((0x8000, 0), 7)
        self.assertIn(f"buffer '{y}': its address is 0", e.exception.message)
        self.assertEqual(len(drv.launches), 1)

    def test_workspaces_are_allocated_zeroed_once_per_context_and_stream_and_passed(self):
        # gemm's (mma.sync) heuristic: its buffers are parameters (gemm_tma's A and B are reached
        # only through tensor maps, and its entry comes first on the H200: heuristic_rank).
        reply = self.client.lookup("gemm", dtype="bf16", layout="rc", device=H200, M=64, N=64, K=64,
                                   limit=8)
        best = next(e for e in reply.entries if e.template == "gemm")
        image = self.client.kernel("gemm", layout="rc", device=H200, template=best.template,
                                   params=best.params, M=64, N=64, K=64)
        kernel = ktune.Kernel(image)
        drv = self.fake(kernel)
        spaces = [a for a in kernel.description["args"] if a["kind"] == "workspace" and a.get("pass", True)]
        buffers = [0xA000 + 0x100 * i for i in range(len(kernel.buffer_names))]
        kernel.launch_addresses(buffers, 7)
        kernel.launch_addresses(buffers, 7)
        self.assertGreater(len(spaces), 0)
        self.assertEqual(drv.allocs, [w["bytes"] for w in spaces])
        addresses = [0x70000 + 0x1000 * (i + 1) for i in range(len(spaces))]
        # Zeroed on the launch's stream, so before its first launch there.
        self.assertEqual(drv.memsets, [(a, 0, w["bytes"], 7) for a, w in zip(addresses, spaces)])
        values = drv.launches[1]["values"]
        for address in addresses + buffers:
            self.assertIn(address, values)
        # Another stream gets workspaces of its own: two launches in flight at once never share
        # partials or tile tickets (they did: wrong results from concurrent streams).
        kernel.launch_addresses(buffers, 8)
        self.assertEqual(drv.allocs, [w["bytes"] for w in spaces] * 2)
        self.assertEqual([m[3] for m in drv.memsets], [7] * len(spaces) + [8] * len(spaces))
        other = [m[0] for m in drv.memsets[len(spaces):]]
        self.assertFalse(set(other) & set(addresses))
        for address in other:
            self.assertIn(address, drv.launches[2]["values"])
        # Another context too; the first context's are reused.
        drv.ctx = 0xC1
        kernel.launch_addresses(buffers, 7)
        self.assertEqual(drv.allocs, [w["bytes"] for w in spaces] * 3)
        self.assertEqual(len(drv.memsets), 3 * len(spaces))
        self.assertTrue(all(value == 0 for _, value, _, _ in drv.memsets))
        drv.ctx = 0xC0
        kernel.launch_addresses(buffers, 7)
        kernel.launch_addresses(buffers, 8)
        self.assertEqual(len(drv.allocs), 3 * len(spaces))
        # A first launch on a stream under CUDA graph capture (global mode, as torch.cuda.graph
        # captures) allocates with this thread's mode relaxed and zeroes on a private stream,
        # waited for: the captured stream gets only the kernel. The mode is restored after.
        # (It was refused, and ktune.torch fell back to torch's op inside every graph.)
        drv.capturing = 1
        kernel.launch_addresses(buffers, 9)
        self.assertEqual(drv.mode, 0)
        self.assertEqual(drv.allocs, [w["bytes"] for w in spaces] * 4)
        private = drv.streams[0][1]
        self.assertEqual(drv.streams, [("create", private, 1), ("sync", private),
                                       ("destroy", private)])
        self.assertEqual([m[3] for m in drv.memsets[3 * len(spaces):]], [private] * len(spaces))
        self.assertEqual(drv.launches[-1]["stream"], 9)
        launches = len(drv.launches)
        kernel.launch_addresses(buffers, 7)
        self.assertEqual(len(drv.launches), launches + 1)
        # A capture already invalidated is refused before anything is allocated.
        drv.capturing = 2
        with self.assertRaises(ktune.KtuneError) as e:
            kernel.launch_addresses(buffers, 10)
        self.assertIn("invalidated", e.exception.message)
        self.assertEqual(len(drv.allocs), 4 * len(spaces))

    def split_k_config(self):
        """gemm's (mma.sync) split-K heuristic at 16x4096x4096: its template and params."""
        reply = self.client.lookup("gemm", dtype="bf16", layout="rc", device=H200, M=16, N=4096,
                                   K=4096, limit=8)
        best = next(e for e in reply.entries if e.template == "gemm")
        self.assertGreater(best.params["SPLIT_K"], 1)
        return best.template, best.params

    def test_shapes_of_one_config_share_its_module_and_workspaces(self):
        # A model whose batch varies asks for a kernel per shape. Each Kernel loaded a module of
        # its own and allocated its own workspaces, so memory grew with every new batch size.
        template, params = self.split_k_config()
        kernels = [ktune.Kernel(self.client.kernel("gemm", layout="rc", device=H200, template=template,
                                                   params=params, M=m, N=4096, K=4096))
                   for m in (16, 8, 64)]
        ids = {k.description["cubin_id"] for k in kernels}
        self.assertEqual(len(ids), 1, "one config, one cubin at every shape")
        self.assertIs(kernels[1].cubin, kernels[0].cubin, "one copy of the cubin's bytes")
        self.assertNotIn("cubin", kernels[0].image, "the base64 text is not kept beside the bytes")
        drv = self.fake(kernels[0])
        sizes = [[w["bytes"] for w in k.plan.workspaces] for k in kernels]
        self.assertTrue(all(len(s) >= 2 for s in sizes), "split-K: partials and tickets")
        self.assertTrue(all(b <= a for a, b in zip(sizes[0], sizes[1])), "M = 8 needs no more")
        self.assertTrue(any(c > a for a, c in zip(sizes[0], sizes[2])), "M = 64 needs more")
        buffers = (0xA000, 0xB000, 0xC000)

        def launch(kernel, stream):
            kernel.launch_addresses(buffers, stream)
            return [v for v in kernel.plan.values() if v not in buffers][:len(kernel.plan.workspaces)]

        first = launch(kernels[0], 7)
        self.assertEqual(drv.loads, [0xC0])
        self.assertEqual(drv.allocs, sizes[0])
        # The smaller shape takes the same module and workspaces on that stream.
        self.assertEqual(launch(kernels[1], 7), first)
        self.assertEqual(drv.loads, [0xC0])
        self.assertEqual(drv.allocs, sizes[0])
        self.assertEqual(drv.launches[1]["function"], drv.launches[0]["function"])
        # The larger one gets, where it needs more, a new one of twice the size (zeroed on its
        # stream); the first shape keeps what it had (a graph may hold it).
        grown = launch(kernels[2], 7)
        expect = [max(c, 2 * a) if c > a else a for a, c in zip(sizes[0], sizes[2])]
        self.assertEqual(drv.allocs, sizes[0] + [e for e, a, c in zip(expect, sizes[0], sizes[2])
                                                 if c > a])
        for i, (a, c) in enumerate(zip(sizes[0], sizes[2])):
            (self.assertNotEqual if c > a else self.assertEqual)(grown[i], first[i])
        self.assertEqual(drv.memsets[-1][1:], (0, drv.allocs[-1], 7))
        self.assertEqual(launch(kernels[0], 7), first)
        self.assertEqual(len(drv.loads), 1)
        self.assertEqual(drv.frees, [])
        # Another stream: workspaces of its own for the config (launches there may overlap).
        other = launch(kernels[1], 8)
        self.assertFalse(set(other) & set(first + grown))
        self.assertEqual(len(drv.loads), 1)
        # A new Kernel of the config (the next batch size) allocates nothing it fits in.
        allocs = len(drv.allocs)
        again = ktune.Kernel(self.client.kernel("gemm", layout="rc", device=H200, template=template,
                                                params=params, M=32, N=4096, K=4096))
        self.assertEqual(launch(again, 7), grown)
        self.assertEqual(len(drv.allocs), allocs)

    def test_for_launch_makes_a_kernel_from_a_lookup_entry_of_a_config_held(self):
        template, params = self.split_k_config()
        reply = self.client.lookup("gemm", dtype="bf16", layout="rc", device=H200, M=16, N=4096,
                                   K=4096, limit=8)
        entry = next(e for e in reply.entries if e.template == template and e.params == params)
        from ktune.kernel import _cubins
        _cubins.pop(entry.launch["cubin_id"], None)  # another test of this process may hold it
        self.assertIsNone(ktune.Kernel.for_launch(entry.launch), "no Kernel of the config yet")
        held = ktune.Kernel(self.client.kernel("gemm", layout="rc", device=H200, template=template,
                                               params=params, M=64, N=4096, K=4096))
        kernel = ktune.Kernel.for_launch(entry.launch)
        self.assertIsNotNone(kernel)
        self.assertIs(kernel.cubin, held.cubin)
        self.assertEqual(kernel.lowered_name, held.lowered_name)
        self.assertEqual(kernel.description, entry.launch)
        self.assertEqual((kernel.image["template"], kernel.image["params"]), (template, params))
        self.assertNotIn("problem_key", kernel.image, "the held Kernel's shape is not this one")
        drv = self.fake(kernel)
        held.launch_addresses((0xA000, 0xB000, 0xC000), 7)
        kernel.launch_addresses((0xA100, 0xB100, 0xC100), 7)
        self.assertEqual(drv.loads, [0xC0], "the module held is used")
        self.assertEqual(drv.launches[-1]["grid"], tuple(entry.launch["grid"]))
        self.assertEqual(drv.launches[-1]["values"][:3], [0xA100, 0xB100, 0xC100])
        # No cubin id (a daemon before 2026-12-01), another arch or entry, an unknown id: not
        # held.
        for launch in ({k: v for k, v in entry.launch.items() if k != "cubin_id"},
                       dict(entry.launch, arch="sm_80"), dict(entry.launch, cubin_id="0" * 16),
                       dict(entry.launch, name_expression="ktune_other<1>")):
            self.assertIsNone(ktune.Kernel.for_launch(launch))
        with self.assertRaises(ktune.KtuneError) as e:  # malformed: a ktune error, as Kernel()'s
            ktune.Kernel.for_launch(dict(entry.launch, args=None))
        self.assertEqual(e.exception.code, "bad_request")

    def test_the_shared_module_takes_the_largest_shared_memory_asked(self):
        image = self.client.kernel("gemm", dtype="bf16", layout="rc", device=H200, M=256, N=256,
                                   K=256)
        kernel = ktune.Kernel(image)
        smem = kernel.description["smem"]
        drv = self.fake(kernel)
        kernel.launch_addresses((0xA000, 0xB000, 0xC000), 7)
        function = kernel._loaded[0xC0]
        self.assertEqual(drv.smem_sets, [(function, smem)])
        for asked, sets in ((smem - 16, 1), (smem + 1024, 2), (smem, 2)):
            ktune.Kernel.for_launch(dict(image["launch"], smem=asked)).launch_addresses(
                (0xA000, 0xB000, 0xC000), 7)
            self.assertEqual(len(drv.smem_sets), sets, (asked, smem, drv.smem_sets, drv.loads))
        self.assertEqual(drv.smem_sets[-1], (function, smem + 1024))
        self.assertEqual(drv.loads, [0xC0])

    def test_a_workspace_left_dirty_is_not_shared(self):
        # zero_before_first_use without left_zeroed (no template declares it): another shape's
        # launch would read what this one left, so each Kernel keeps its own.
        template, params = self.split_k_config()
        image = self.client.kernel("gemm", layout="rc", device=H200, template=template,
                                   params=params, M=16, N=4096, K=4096)
        args = [dict(a, left_zeroed=False) if a["kind"] == "workspace" and a["zero_before_first_use"]
                else a for a in image["launch"]["args"]]
        dirty = [i for i, a in enumerate(a for a in args if a["kind"] == "workspace")
                 if not a["left_zeroed"] and a["zero_before_first_use"]]
        self.assertTrue(dirty, "the tickets")
        kernels = [ktune.Kernel(dict(image, launch=dict(image["launch"], args=args))) for _ in range(2)]
        drv = self.fake(kernels[0])
        got = []
        for k in kernels:
            k.launch_addresses((0xA000, 0xB000, 0xC000), 7)
            got.append(k._workspaces[(0xC0, 7)])
        for i in range(len(got[0])):
            (self.assertNotEqual if i in dirty else self.assertEqual)(got[0][i], got[1][i])

    def test_a_first_launch_inside_a_capture_loads_the_module_in_relaxed_mode(self):
        kernel = ktune.Kernel(self.client.kernel("gemm", dtype="bf16", layout="rc", device=H200,
                                                 M=16, N=4096, K=4096))
        drv = self.fake(kernel)
        drv.capturing = 1
        kernel.launch_addresses((0xA000, 0xB000, 0xC000), 9)
        self.assertEqual(drv.loads, [0xC0])
        self.assertEqual(drv.mode, 0)
        self.assertEqual(len(drv.launches), 1)

    def test_a_failed_allocation_frees_what_it_allocated_and_restores_the_mode(self):
        kernel = ktune.Kernel(self.client.kernel("gemm", dtype="bf16", layout="rc", device=H200,
                                                 M=16, N=4096, K=4096))
        self.assertGreaterEqual(len(kernel.plan.workspaces), 2, "split-K: partials and tickets")
        drv = self.fake(kernel)
        allocate = drv.cuMemAlloc
        drv.cuMemAlloc = lambda out, size: allocate(out, size) if not drv.allocs else 2
        drv.capturing = 1
        with self.assertRaises(ktune.KtuneError):
            kernel.launch_addresses((0xA000, 0xB000, 0xC000), 9)
        self.assertEqual(drv.frees, [0x71000])
        self.assertEqual(drv.mode, 0)
        self.assertEqual([e[0] for e in drv.streams], ["create", "destroy"])
        self.assertEqual(drv.launches, [])
        # A private stream that could not be created is not destroyed, nor is the caller's.
        drv.cuMemAlloc, drv.streams = allocate, []
        drv.cuStreamCreate = lambda out, flags: 2
        with self.assertRaises(ktune.KtuneError):
            kernel.launch_addresses((0xA000, 0xB000, 0xC000), 9)
        self.assertEqual(drv.streams, [])

    def test_tensor_maps_are_encoded_from_their_buffers_when_they_move(self):
        # The served softmax cubin (sm_90) under gemm_tma's description: Kernel checks the cubin's
        # arch and entry, the arguments only against the description.
        image = self.client.kernel("softmax", dtype="fp32", device=H200, rows=64, cols=4096)
        kernel = ktune.Kernel(dict(image, launch=dict(TMA_LAUNCH, arch=image["launch"]["arch"])))
        self.assertEqual(kernel.buffer_names, ["A", "B", "C"])
        drv = self.fake(kernel)
        kernel.launch_addresses((0xA000, 0xB000, 0xC000), 7)
        kernel.launch_addresses((0xA100, 0xB100, 0xC100), 7, {"alpha": 2.0})
        self.assertEqual(len(drv.encodes), 4, "both maps, both buffers moved")
        a, b = drv.encodes[0], drv.encodes[1]
        for e, base, rows in ((a, 0xA000, 200), (b, 0xB000, 300)):
            self.assertEqual(e["base"], base)
            self.assertEqual(e["dtype"], 9, "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16")
            self.assertEqual(e["rank"], 2)
            self.assertEqual(e["dims"], [136, rows])
            self.assertEqual(e["strides"], [272])
            self.assertEqual(e["box"], [64, 128])
            self.assertEqual(e["element_strides"], [1, 1])
            self.assertEqual((e["interleave"], e["swizzle"], e["l2"], e["oob"]), (0, 3, 3, 0),
                             "INTERLEAVE_NONE, SWIZZLE_128B, L2_PROMOTION_L2_256B, OOB_FILL_NONE")
            self.assertEqual(e["address"] % 64, 0)
        self.assertEqual([e["base"] for e in drv.encodes[2:]], [0xA100, 0xB100])
        # The kernel's parameters: the two 128-byte maps (as encoded), then C, workspaces, scalars.
        first, second = drv.launches[0]["values"], drv.launches[1]["values"]
        self.assertEqual(first[0], struct.pack("<Q", 0xA000) * 16)
        self.assertEqual(first[1], struct.pack("<Q", 0xB000) * 16)
        self.assertEqual(first[2], 0xC000)
        self.assertEqual(second[:3], [struct.pack("<Q", 0xA100) * 16, struct.pack("<Q", 0xB100) * 16, 0xC100])
        self.assertEqual(second[-2:], [2.0, 0.0])
        self.assertEqual(kernel.plan.params[0], drv.encodes[0]["address"])
        # Only a map whose buffer moved is encoded again; the other keeps its bytes.
        kernel.launch_addresses((0xA100, 0xB200, 0xC200), 7)
        self.assertEqual([e["base"] for e in drv.encodes[4:]], [0xB200])
        self.assertEqual(drv.launches[2]["values"][:3],
                         [struct.pack("<Q", 0xA100) * 16, struct.pack("<Q", 0xB200) * 16, 0xC200])
        drv.fail_encode = 1
        with self.assertRaises(ktune.KtuneError) as e:
            kernel.launch_addresses((0xA300, 0xB200, 0xC000), 7)
        self.assertIn("encoding tensor_map 'tmA' over buffer 'A'", e.exception.message)
        self.assertIn("CUDA_ERROR_INVALID_VALUE", e.exception.message)
        self.assertEqual(len(drv.launches), 3, "no launch with a map that did not encode")
        # A map whose encoding failed is neither kept nor taken for its storage's: it is encoded
        # again (the fake wrote A300's bytes before failing), and the storage holds A100's again.
        drv.fail_encode = 0
        kernel.launch_addresses((0xA300, 0xB200, 0xC000), 7)
        self.assertEqual(drv.encodes[-1]["base"], 0xA300)
        kernel.launch_addresses((0xA100, 0xB200, 0xC000), 7)
        self.assertEqual(drv.launches[4]["values"][0], struct.pack("<Q", 0xA100) * 16)
        # A base encoded before (a layer's weight, back again) is copied, not encoded again.
        encodes = len(drv.encodes)
        kernel.launch_addresses((0xA000, 0xB000, 0xC000), 7)
        self.assertEqual(len(drv.encodes), encodes, "A000 and B000 were encoded at the start")
        self.assertEqual(drv.launches[5]["values"][:3],
                         [struct.pack("<Q", 0xA000) * 16, struct.pack("<Q", 0xB000) * 16, 0xC000])
        # At most KEPT maps are kept per argument: the oldest is encoded again.
        tm_b = kernel.plan.maps[1]
        for i in range(tm_b.KEPT):
            kernel.launch_addresses((0xA000, 0x100000 + 0x100 * i, 0xC000), 7)
        self.assertEqual(len(tm_b.encoded), tm_b.KEPT)
        encodes = len(drv.encodes)
        kernel.launch_addresses((0xA000, 0xB000, 0xC000), 7)
        self.assertEqual([e["base"] for e in drv.encodes[encodes:]], [0xB000])


if __name__ == "__main__":
    unittest.main()
