"""bench/gemm_peers without a GPU: the pieces of peers.py that need no torch (shapes, SASS counts,
nvidia-smi samples, the report's summary), and run_h200.sh end to end with FAKE=1: ktuned with the
fake worker tunes a shape through the `tune` op; `measure` runs on a stand-in torch
(tests/bench/fake_torch) against that ktuned, so ktune.torch looks the shape up, fetches the cubin
and launches it (the launch checks its arguments and does nothing); the table is exported and
everything archived.

    KTUNED=build/daemon/ktuned KTUNE_CLI=build/client/cli/ktune FAKE_WORKER=build/tests/fake-worker \
      python3 -m unittest discover -s tests/bench -p '*_test.py' -v
"""

import ctypes
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import types
import unittest
from typing import Any, Dict, Set, Tuple

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "gemm_peers"))
import peers  # noqa: E402

# A cuobjdump -sass excerpt as the tool prints it for a gemm_tma cubin (trimmed), plus one spill
# pair and predicated forms.
SASS = """
	code for sm_90a
		Function : _Z14ktune_gemm_tmaI10ktune_bf16S0_Li128ELi256EEvv
	.headerflags	@"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                       /* 0x00000a00ff017b82 */
                                                                                /* 0x000fe40000000800 */
        /*0010*/                   UTMALDG.2D [UR8], [UR4] ;                    /* 0x00000008040075b4 */
        /*0020*/              @!P0 UTMALDG.2D [UR16], [UR6] ;                   /* 0x00000010060085b4 */
        /*0030*/                   HGMMA.64x256x16.F32.BF16 R24, gdesc[UR8], RZ, !UPT ; /* 0x0 */
        /*0040*/                   HGMMA.64x256x16.F32.BF16 R24, gdesc[UR12], R24 ;    /* 0x0 */
        /*0050*/              @UP0 HGMMA.64x256x16.F32.BF16 R24, gdesc[UR16], R24, gsb0 ;
        /*0060*/                   STL.64 [R1+0x8], R4 ;                        /* 0x0 */
        /*0070*/                   LDL.LU R4, [R1+0x8] ;                        /* 0x0 */
        /*0080*/                   STSM.16.M88.4 [R2], R8 ;                     /* 0x0 */
        /*0090*/                   BAR.SYNC.DEFER_BLOCKING 0x1, 0x100 ;         /* 0x0 */
        /*00a0*/                   EXIT ;                                       /* 0x0 */
        /*00b0*/                   BRA 0xb0;                                    /* 0x0 */
"""


class ShapesTest(unittest.TestCase):
    def test_tma_is_the_suite_of_ktune_bench(self):
        # peers.py's default shapes must stay ktune-bench --suite tma's, in its order.
        with open(os.path.join(ROOT, "bench", "ktune_bench.cc")) as f:
            source = f.read()
        block = source[source.index('if (name == "tma")'):]
        block = block[:block.index("if (name ==", 10)]
        suite = [tuple(int(v) for v in g) for g in re.findall(r"gemm\((\d+), (\d+), (\d+)\)", block)]
        self.assertEqual(len(suite), 10)
        self.assertEqual(peers.parse_shapes("tma"), suite)

    def test_lists_and_refusals(self):
        self.assertEqual(peers.parse_shapes("8192x8192x512, 4000X6000x3000"),
                         [(8192, 8192, 512), (4000, 6000, 3000)])
        for bad in ("8192x8192", "0x1x1", "axbxc", "", "1x2x3x4"):
            with self.assertRaises(ValueError, msg=bad):
                peers.parse_shapes(bad)

    def test_problem_keys_round_trip(self):
        s = (4000, 6000, 3000)
        self.assertEqual(peers.problem_key(s), "gemm|bf16|bf16|rc|M=4000,N=6000,K=3000")
        self.assertEqual(peers.shape_of_key(peers.problem_key(s)), s)
        self.assertIsNone(peers.shape_of_key("softmax|bf16|bf16||rows=8,cols=8"))


class TwinTest(unittest.TestCase):
    BASE = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "STAGES": 4, "CONSUMERS": 2, "GROUP_M": 8,
            "EPILOGUE": 1, "CLUSTER_M": 1, "PERSISTENT": 1, "SPLITS": 1, "SCHEDULE": 0, "STREAMK": 0}

    def test_flips_stream_k_and_keeps_the_rest(self):
        twin = peers.twin_params("gemm_tma", self.BASE)
        self.assertEqual(twin, dict(self.BASE, STREAMK=1))
        self.assertEqual(peers.twin_params("gemm_tma", twin), self.BASE)
        self.assertEqual(self.BASE["STREAMK"], 0, "the served params are not modified")

    def test_a_split_k_winner_is_compared_with_the_persistent_stream_k_config(self):
        split = dict(self.BASE, PERSISTENT=0, SPLITS=4)
        self.assertEqual(peers.twin_params("gemm_tma", split), dict(self.BASE, STREAMK=1))

    def test_no_twin_for_ping_pong_other_templates_or_old_params(self):
        self.assertIsNone(peers.twin_params("gemm_tma", dict(self.BASE, SCHEDULE=1)))
        self.assertIsNone(peers.twin_params("gemm_sm90", {"BLOCK_M": 128}))
        old = {k: v for k, v in self.BASE.items() if k != "STREAMK"}
        self.assertIsNone(peers.twin_params("gemm_tma", old))


class ReduceTwinTest(unittest.TestCase):
    SPLIT = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "STAGES": 6, "CONSUMERS": 2, "GROUP_M": 1,
             "EPILOGUE": 2, "CLUSTER_M": 2, "CLUSTER_N": 1, "PERSISTENT": 0, "SPLITS": 4,
             "SCHEDULE": 0, "STREAMK": 0, "REDUCE": 0, "RASTER": 1}

    def test_a_workspace_split_k_winner_gets_the_pair_that_differs_in_reduce_alone(self):
        one, zero = peers.twins_of("reduce", "gemm_tma", self.SPLIT)
        self.assertEqual(one, dict(self.SPLIT, REDUCE=1, EPILOGUE=0, CLUSTER_M=1, CLUSTER_N=1))
        self.assertEqual(zero, dict(one, REDUCE=0))
        self.assertEqual(self.SPLIT["REDUCE"], 0, "the served params are not modified")

    def test_a_cluster_reduce_winner_is_compared_with_its_workspace_twin(self):
        served = dict(self.SPLIT, REDUCE=1, EPILOGUE=0, CLUSTER_M=1)
        self.assertEqual(peers.twins_of("reduce", "gemm_tma", served), [dict(served, REDUCE=0)])

    def test_whole_tile_persistent_stream_k_and_old_winners_have_no_pair(self):
        for params in (dict(self.SPLIT, SPLITS=1), dict(self.SPLIT, PERSISTENT=1),
                       dict(self.SPLIT, STREAMK=1),
                       {k: v for k, v in self.SPLIT.items() if k != "REDUCE"}):
            self.assertEqual(peers.twins_of("reduce", "gemm_tma", params), [], params)
        self.assertEqual(peers.twins_of("reduce", "gemm_sm90", {"BLOCK_M": 128}), [])

    def test_stream_k_kind_is_the_single_stream_k_twin(self):
        self.assertEqual(peers.twins_of("streamk", "gemm_tma", self.SPLIT),
                         [peers.twin_params("gemm_tma", self.SPLIT)])
        self.assertEqual(peers.twins_of("streamk", "gemm_tma", dict(self.SPLIT, SCHEDULE=1)), [])


class ConfigTest(unittest.TestCase):
    def test_parses_seeds_as_the_cli_does(self):
        self.assertEqual(peers.parse_config("BLOCK_M=128, STAGES=4"), {"BLOCK_M": 128, "STAGES": 4})
        for bad in ("BLOCK_M", "BLOCK_M=x", "=4", "A=1,,B=2"):
            with self.assertRaises(ValueError, msg=bad):
                peers.parse_config(bad)


class SassTest(unittest.TestCase):
    def test_counts_opcodes_with_predicates_and_suffixes(self):
        c = peers.count_sass(SASS)
        self.assertEqual(c["ops"]["HGMMA"], 3)
        self.assertEqual(c["ops"]["UTMALDG"], 2)
        self.assertEqual(c["ops"]["LDL"], 1)
        self.assertEqual(c["ops"]["STL"], 1)
        self.assertEqual(c["ops"]["STSM"], 1)
        self.assertEqual(c["ops"]["BAR"], 1)
        self.assertEqual(c["instructions"], 12)  # the encoding-only lines are not instructions
        self.assertEqual(c["functions"], ["_Z14ktune_gemm_tmaI10ktune_bf16S0_Li128ELi256EEvv"])
        self.assertTrue(c["hgmma"])
        self.assertTrue(c["local_memory"])

    def test_no_spills_and_no_hgmma(self):
        c = peers.count_sass("\n".join(l for l in SASS.splitlines()
                                       if "LDL" not in l and "STL" not in l and "HGMMA" not in l))
        self.assertFalse(c["local_memory"])
        self.assertFalse(c["hgmma"])
        self.assertEqual(c["instructions"], 7)


# Inductor's autotuning tables on stderr (torch 2.x), around other log lines.
AUTOTUNE = """W1202 05:01:02.123 torch/_inductor/utils.py: some warning
AUTOTUNE mm(8192x512, 512x8192)
strides: [512, 1], [1, 512]
dtypes: torch.bfloat16, torch.bfloat16
  triton_mm_7 0.1301 ms 100.0% ACC_TYPE='tl.float32', BLOCK_K=64, BLOCK_M=128, BLOCK_N=256
  mm 0.1350 ms 96.4%
  triton_mm_3 0.1402 ms 92.8% ACC_TYPE='tl.float32', BLOCK_K=32, BLOCK_M=128, BLOCK_N=128
SingleProcess AUTOTUNE benchmarking takes 1.2345 seconds and 6.5000 seconds precompiling for 21 choices
AUTOTUNE mm(8192x8192, 8192x8192)
  mm 1.5420 ms 100.0%
  triton_mm_1 1.6000 ms 96.4% ACC_TYPE='tl.float32'
AUTOTUNE addmm(64x64, 64x64)
  bias_addmm 0.0100 ms 100.0%
"""


class AutotuneLogTest(unittest.TestCase):
    def test_winner_and_cublas_per_shape(self):
        found = peers.parse_autotune(AUTOTUNE)
        self.assertEqual(sorted(found), ["8192x8192x512", "8192x8192x8192"])
        short = found["8192x8192x512"]
        self.assertEqual((short["best"], short["best_ms"], short["aten_mm_ms"]),
                         ("triton_mm_7", 0.1301, 0.135))
        self.assertEqual((short["choices_shown"], short["choices"]), (3, 21))
        self.assertEqual((short["benchmark_s"], short["precompile_s"]), (1.2345, 6.5))
        big = found["8192x8192x8192"]
        self.assertEqual((big["best"], big["aten_mm_ms"], big["choices_shown"]), ("mm", 1.542, 2))
        self.assertNotIn("choices", big)  # no summary line followed it


class SamplesTest(unittest.TestCase):
    def test_parses_and_keeps_the_windows_samples(self):
        t0 = datetime.datetime(2026, 12, 2, 3, 4, 5, 100000)
        lines = ["garbage line", "2026/12/02 03:04:05.100, 1755, 2619, 612.40, 51, 100",
                 "2026/12/02 03:04:05.200, 1410, 2619, 699.10, 53, 100",
                 "2026/12/02 03:04:06.300, 1980, 2619, 90.00, 45, 0",
                 "2026/12/02 03:04:06.400, [N/A], 2619, 90.00, 45, 0"]
        samples = peers.parse_samples("\n".join(lines))
        self.assertEqual(len(samples), 3)
        self.assertAlmostEqual(samples[0]["t"], t0.timestamp(), places=3)
        self.assertEqual(samples[1]["power_w"], 699.1)
        window = [(t0.timestamp(), t0.timestamp() + 0.15)]
        s = peers.summarize_samples(samples, window)
        self.assertEqual(s["samples"], 2)
        self.assertEqual(s["sm_mhz"], {"min": 1410.0, "median": 1582.5, "max": 1755.0})
        self.assertEqual(peers.summarize_samples(samples, [(0, 1)]), {"samples": 0})
        self.assertNotIn("active_share", s)  # sampled without the clock event reasons

    def test_clock_event_reasons_counted_where_sampled(self):
        lines = ["2026/12/02 03:04:05.100, 1485, 3201, 692.10, 63, 100, Active, Not Active, "
                 "Not Active",
                 "2026/12/02 03:04:05.150, 1980, 3201, 420.00, 60, 100, Not Active, Not Active, "
                 "Not Active",
                 "2026/12/02 03:04:05.200, 1440, 3201, 693.00, 63, 100, Active, Not Active, [N/A]"]
        samples = peers.parse_samples("\n".join(lines))
        self.assertEqual(len(samples), 2)  # the [N/A] reason is not a sample
        self.assertEqual((samples[0]["power_cap"], samples[1]["power_cap"]), (1.0, 0.0))
        s = peers.summarize_samples(samples, [(0, 2e9)])
        self.assertEqual(s["active_share"],
                         {"power_cap": 0.5, "hw_slowdown": 0.0, "thermal_slowdown": 0.0})


class FakeNvml:
    """Stands in for libnvidia-ml.so.1 as ctypes calls it: writes through the byref()s. Power is
    reported as the instantaneous field unless `field` is False; `reasons` is the clock event
    bitmask (None: the driver lacks the call)."""

    def __init__(self, sm=1485, power_mw=692_500, reasons=0x4, field=True):
        self.sm, self.power_mw, self.field = sm, power_mw, field
        self.calls = 0
        if reasons is not None:
            self.nvmlDeviceGetCurrentClocksEventReasons = \
                lambda h, out: self._set(out, reasons)

    @staticmethod
    def _set(ref, value):
        ref._obj.value = value
        return 0

    def nvmlInit_v2(self):
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, index, out):
        return self._set(out, 1 + index)

    def nvmlDeviceGetClockInfo(self, h, kind, out):
        self.calls += 1
        return self._set(out, self.sm if kind == 1 else 3201)

    def nvmlDeviceGetTemperature(self, h, kind, out):
        return self._set(out, 63)

    def nvmlDeviceGetFieldValues(self, h, n, out):
        f = out._obj
        if not self.field or f.field_id != peers.NvmlReader.POWER_INSTANT:
            return 3  # not supported
        f.value_type, f.nvml_return, f.value = 1, 0, self.power_mw
        return 0

    def nvmlDeviceGetPowerUsage(self, h, out):
        return self._set(out, 150_000)  # the lagging 1-s average

    def nvmlDeviceGetUtilizationRates(self, h, out):
        out._obj[0] = 100
        return 0


class NvmlReaderTest(unittest.TestCase):
    def test_reads_clock_instant_power_and_the_reasons(self):
        r = peers.NvmlReader(lib=FakeNvml())
        self.assertTrue(r.available)
        x = r.read()
        self.assertEqual((x["sm_mhz"], x["mem_mhz"], x["temp_c"], x["util_pct"]),
                         (1485.0, 3201.0, 63.0, 100.0))
        self.assertEqual(x["power_w"], 692.5)
        self.assertEqual((x["power_cap"], x["hw_slowdown"], x["thermal_slowdown"]),
                         (1.0, 0.0, 0.0))

    def test_falls_back_to_the_average_power_and_leaves_out_unknown_reasons(self):
        x = peers.NvmlReader(lib=FakeNvml(field=False, reasons=None)).read()
        self.assertEqual(x["power_w"], 150.0)
        self.assertNotIn("power_cap", x)

    def test_reads_on_a_thread_until_stopped_in_the_samples_format(self):
        lib = FakeNvml(sm=1755)
        r = peers.NvmlReader(ms=1, lib=lib)
        t0 = time.time()
        r.start()
        deadline = time.time() + 30
        while lib.calls < 2 * 5 and time.time() < deadline:  # five reads, two clock calls each
            time.sleep(0.001)
        reads = r.stop()
        self.assertGreaterEqual(len(reads), 5)
        self.assertIsNone(r.thread)
        s = peers.summarize_samples(reads, [(t0, time.time())])
        self.assertEqual(s["samples"], len(reads))
        self.assertEqual(s["sm_mhz"]["median"], 1755.0)
        self.assertEqual(s["active_share"]["power_cap"], 1.0)

    def test_unavailable_without_the_library(self):
        class NoDevice(FakeNvml):
            def nvmlDeviceGetHandleByIndex_v2(self, index, out):
                return 6  # not found
        r = peers.NvmlReader(lib=NoDevice())
        self.assertFalse(r.available)
        r.start()
        self.assertEqual(r.stop(), [])


class FakeProbeBuffer:
    """torch.zeros(n, dtype=int64) as ClockProbe uses it: an address, a slice, tolist()."""

    def __init__(self, n: int):
        self.base, self.words = 0x7f0000000000, [0] * n

    def data_ptr(self) -> int:
        return self.base

    def __getitem__(self, s: slice) -> "FakeProbeBuffer":
        view = FakeProbeBuffer(0)
        view.words = self.words[s]
        return view

    def tolist(self):
        return list(self.words)


class FakeProbeDriver:
    """libcuda as ClockProbe calls it: the launch reads its two parameters back through their
    addresses and writes what the PTX would, as if the SM ran at `mhz`."""

    def __init__(self, buffer: FakeProbeBuffer, mhz: float):
        self.buffer, self.mhz, self.launches, self.now = buffer, mhz, [], 1_000_000

    def check(self, rc: int, what: str) -> None:
        assert rc == 0, what

    def cuModuleLoadData(self, module, image):
        self.image = image
        return 0

    def cuModuleGetFunction(self, fn, module, name):
        self.name = name
        return 0

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        out = ctypes.c_uint64.from_address(params[0]).value
        window = ctypes.c_uint64.from_address(params[1]).value
        self.launches.append(((gx, gy, gz, bx, by, bz), stream))
        i = (out - self.buffer.base) // 8
        self.buffer.words[i:i + 3] = [window, round(window * self.mhz / 1e3), self.now]
        self.now += 2 * window
        return 0


class ClockProbeTest(unittest.TestCase):
    def probe(self, slots: int, mhz: float) -> Tuple[Any, FakeProbeDriver]:
        buffer = FakeProbeBuffer(3 * slots)
        drv = FakeProbeDriver(buffer, mhz)
        fake_torch = types.SimpleNamespace(int64="int64",
                                           zeros=lambda n, dtype, device: buffer)
        return peers.ClockProbe(fake_torch, 42, slots=slots, drv=drv), drv

    def test_each_probe_reads_its_own_slot_back_as_a_clock(self):
        p, drv = self.probe(slots=8, mhz=1455.0)
        self.assertEqual(drv.name, b"ktune_clock_probe")
        self.assertIn(b".entry ktune_clock_probe", drv.image)
        for j in (0, 10, 20):
            p.probe("ktune_burst", j)
        p.probe("cublas", 0)
        rows = p.results()
        self.assertEqual([(r["impl"], r["run"]) for r in rows],
                         [("ktune_burst", 0), ("ktune_burst", 10), ("ktune_burst", 20),
                          ("cublas", 0)])
        self.assertEqual({r["ns"] for r in rows}, {peers.ClockProbe.WINDOW_NS})
        for r in rows:
            self.assertAlmostEqual(r["sm_mhz"], 1455.0)
        self.assertEqual(len({r["t_ns"] for r in rows}), 4)  # four slots, not one written over
        self.assertEqual(drv.launches, [((1, 1, 1, 1, 1, 1), 42)] * 4)

    def test_ignores_probes_past_its_slots(self):
        p, drv = self.probe(slots=2, mhz=1980.0)
        for j in range(5):
            p.probe("ktune", j)
        self.assertEqual(len(drv.launches), 2)
        self.assertEqual([r["run"] for r in p.results()], [0, 1])

    def test_share_of_the_dense_peak_at_the_probed_clock(self):
        probes = [{"impl": "ktune", "sm_mhz": m} for m in (1440.0, 1455.0, 1470.0, 0.0)] + \
                 [{"impl": "cublas", "sm_mhz": 1980.0}]   # 0.0: a probe that counted no clock
        s = peers.summarize_probes(probes, "ktune", 670.0, sms=132)
        self.assertEqual(s["probes"], 3)
        self.assertEqual(s["sm_mhz"], {"min": 1440.0, "median": 1455.0, "max": 1470.0})
        peak = 132 * 4096 * 1455e6 / 1e12   # 786.7 TF/s
        self.assertAlmostEqual(s["dense_peak_tflops"], peak)
        self.assertAlmostEqual(s["share_of_peak"], 670.0 / peak)
        self.assertEqual(peers.summarize_probes(probes, "ktune_burst", 800.0, sms=132),
                         {"probes": 0})

    @unittest.skipUnless(os.environ.get("PTXAS"), "needs PTXAS (the ctest sets it)")
    def test_the_ptx_is_the_workers_kernel(self):
        """CLOCK_PROBE_PTX is nvcc's PTX of ktune_clock_probe in tuner/device_kernels.h (the
        worker's copy): a change to one that is not made to the other fails here."""
        with open(os.path.join(ROOT, "tuner", "device_kernels.h")) as f:
            header = f.read()
        start = header.index('extern "C" __global__ void ktune_clock_probe(')
        end = header.index("\n}\n", start) + 3
        nvcc = os.path.join(os.path.dirname(os.environ["PTXAS"]), "nvcc")
        with tempfile.TemporaryDirectory() as d:
            src, ptx = os.path.join(d, "probe.cu"), os.path.join(d, "probe.ptx")
            with open(src, "w") as f:
                f.write("typedef unsigned long long u64;\n" + header[start:end])
            run = subprocess.run([nvcc, "-arch=sm_90", "-ptx", src, "-o", ptx],
                                 capture_output=True, text=True, timeout=120)
            self.assertEqual(run.returncode, 0, run.stderr)
            with open(ptx) as f:
                generated = f.read()

        def instructions(text: str):
            return [" ".join(line.split()) for line in text.splitlines()
                    if line.strip() and not line.strip().startswith("//")]
        self.assertEqual(instructions(peers.CLOCK_PROBE_PTX), instructions(generated))

    @unittest.skipUnless(os.environ.get("PTXAS"), "needs PTXAS (the ctest sets it)")
    def test_the_ptx_assembles_for_sm_90(self):
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "probe.ptx")
            with open(src, "w") as f:
                f.write(peers.CLOCK_PROBE_PTX)
            run = subprocess.run([os.environ["PTXAS"], "-arch=sm_90", "-o",
                                  os.path.join(d, "probe.cubin"), src],
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(run.returncode, 0, run.stderr)
            self.assertGreater(os.path.getsize(os.path.join(d, "probe.cubin")), 0)


class AssembleTest(unittest.TestCase):
    def test_summary_of_measured_shapes(self):
        with tempfile.TemporaryDirectory() as d:
            measured = {"torch": "2.11", "shapes": [
                {"shape": "8192x8192x8192", "served": {"provenance": "exact", "template": "gemm_tma"},
                 "ktune_vs_cublas": 1.02, "ktune_vs_compile": 1.01, "compile_s": 20.0,
                 "check": {"ok": True}},
                {"shape": "8192x8192x512", "served": {"provenance": "nearest", "template": "gemm"},
                 "ktune_vs_cublas": 0.81, "ktune_vs_compile": 0.9, "compile_s": 5.0,
                 "check": {"ok": False}},
                {"shape": "4000x6000x3000", "skipped": "deadline"}],
                "sustained": {"ktune": {"median_tflops": 701.0}, "cublas": {"median_tflops": 690.0}}}
            tuning = {"results": [{"problem": "gemm|bf16|bf16|rc|M=8192,N=8192,K=8192",
                                   "tuning": {"wall_s": 12.5, "trials": 120}},
                                  {"problem": "gemm|bf16|bf16|rc|M=8192,N=8192,K=512",
                                   "tuning": {"wall_s": 7.5, "trials": 120}}]}
            sass = {"cubins": [{"shape": "8192x8192x8192", "ops": {"HGMMA": 4, "LDL": 0, "STL": 0},
                                "hgmma": True, "local_memory": False},
                               {"shape": "8192x8192x512", "ops": {"HGMMA": 0, "LDL": 2, "STL": 2},
                                "hgmma": False, "local_memory": True}]}
            paths = {}
            for name, doc in (("measured", measured), ("tuning", tuning), ("sass", sass)):
                paths[name] = os.path.join(d, name + ".json")
                peers.write_json(paths[name], doc)
            log = os.path.join(d, "measure.err")
            with open(log, "w") as f:
                f.write(AUTOTUNE)
            out = os.path.join(d, "all.json")
            with open(os.devnull, "w") as null:
                stdout, sys.stdout = sys.stdout, null
                try:
                    peers.main(["assemble", "--measured-json", paths["measured"], "--tuning-json",
                                paths["tuning"], "--sass-json", paths["sass"],
                                "--autotune-log", log, "--out", out])
                finally:
                    sys.stdout = stdout
            with open(out) as f:
                doc = json.load(f)
        s = doc["summary"]
        self.assertEqual(s["shapes_timed"], 2)
        self.assertAlmostEqual(s["geomean_ktune_vs_cublas"], (1.02 * 0.81) ** 0.5)
        self.assertEqual(s["min_ktune_vs_cublas"], 0.81)
        self.assertEqual(s["min_ktune_vs_compile"], 0.9)
        self.assertEqual(s["checks_ok"], 1)
        self.assertEqual(s["served_exact"], 1)
        self.assertEqual(s["tuning_total_s"], 20.0)
        self.assertEqual(s["compile_total_s"], 25.0)
        self.assertEqual(s["winners_with_hgmma"], 1)
        self.assertEqual(s["winners_with_local_memory"], 1)
        self.assertEqual(s["sustained"], {"ktune": 701.0, "cublas": 690.0})
        self.assertEqual(doc["tuning_path"], "ktune-bench")
        self.assertEqual(doc["shapes"][0]["tuning"]["wall_s"], 12.5)
        self.assertEqual(doc["shapes"][1]["sass"]["ops"]["LDL"], 2)
        self.assertEqual(doc["shapes"][1]["compile_choice"]["best"], "triton_mm_7")
        self.assertNotIn("compile_choice", doc["shapes"][2])


@unittest.skipUnless(os.environ.get("KTUNED") and os.environ.get("FAKE_WORKER"),
                     "needs KTUNED, KTUNE_CLI and FAKE_WORKER (the ctest sets them)")
class FakeRunTest(unittest.TestCase):
    """run_h200.sh with FAKE=1: every step, `measure` on the stand-in torch."""

    def run_flow(self, **knobs: str) -> Tuple[Dict[str, Any], Dict[str, Any], Set[str]]:
        """run_h200.sh FAKE=1 with these knobs: (the report, the exported table, the archive)."""
        with tempfile.TemporaryDirectory() as d:
            kit, out = os.path.join(d, "kit"), os.path.join(d, "out")
            os.makedirs(kit)
            for name, env in (("ktuned", "KTUNED"), ("ktune", "KTUNE_CLI"),
                              ("fake-worker", "FAKE_WORKER")):
                os.symlink(os.environ[env], os.path.join(kit, name))
            with open(os.path.join(kit, "COMMIT"), "w") as f:
                f.write("abc123-test\n")
            env = dict(os.environ, FAKE="1", K=kit, OUT=out, COMPILE_THREADS="2", ROUNDS="2",
                       SUSTAIN_S="0.01", BURST_IDLE_S="0", **knobs)
            run = subprocess.run(["bash", os.path.join(ROOT, "bench", "gemm_peers", "run_h200.sh")],
                                 env=env, capture_output=True, text=True, timeout=240)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            self.assertEqual(sorted(os.listdir(out)), ["gemm-peers-h200.json", "h200.json",
                                                       "logs.tar.gz"])
            with open(os.path.join(out, "gemm-peers-h200.json")) as f:
                doc = json.load(f)
            with open(os.path.join(out, "h200.json")) as f:
                table = json.load(f)
            with tarfile.open(os.path.join(out, "logs.tar.gz")) as t:
                archived = set(t.getnames())
        return doc, table, archived

    def test_a_split_k_winner_is_timed_beside_its_reduce_pair(self):
        seed = ("BLOCK_K=64,BLOCK_M=128,BLOCK_N=128,CLUSTER_M=1,CLUSTER_N=1,CONSUMERS=2,EPILOGUE=1,"
                "GROUP_M=8,PERSISTENT=0,RASTER=0,REDUCE=0,SCHEDULE=0,SPLITS=2,STAGES=5,STREAMK=0")
        doc, _, _ = self.run_flow(SHAPES="1024x1024x65536", TRIALS="1", TEMPLATES="gemm_tma",
                                  SEEDS=seed, TWINS="reduce")
        (row,) = doc["shapes"]
        # The fake worker ties every config of a thread count; whichever split-K config won,
        # its pair is timed beside it.
        served = row["served"]
        pair = peers.twins_of("reduce", served["template"], served["params"])
        self.assertEqual(len(pair), 2, served)
        self.assertEqual([t.get("params") for t in row["twins"]], pair)
        one, zero = row["twins"]
        self.assertEqual(row["twin"], one)
        self.assertEqual((one["params"]["REDUCE"], one["params"]["EPILOGUE"]), (1, 0))
        self.assertEqual(zero["params"], dict(one["params"], REDUCE=0))
        for twin in (one, zero):
            self.assertIn("lowered_name", twin, twin)   # compiled: the pair fits this shape
            self.assertTrue(twin["ok"])
            self.assertGreater(twin["vs_served"], 0)
        self.assertEqual(sorted(row["timing"]), ["compile", "cublas", "ktune", "ktune_kernel",
                                                 "ktune_twin", "ktune_twin2"])
        self.assertEqual(row["twin_vs_served"], one["vs_served"])

    def test_the_tuners_ranked_configs_sustain_in_phases_of_their_own(self):
        doc, _, _ = self.run_flow(SHAPES="8192x8192x512", TRIALS="6", TEMPLATES="gemm_tma",
                                  SUSTAIN_SHAPES="8192x8192x512", SUSTAIN_MORE_S="0.01",
                                  SUSTAIN_RANKED="3")
        (row,) = doc["shapes"]
        ranked = row["served"]["ranked"]
        self.assertGreaterEqual(len(ranked), 3, ranked)   # the lookup's top 4 of 6 trials
        (more,) = doc["sustained_shapes"]
        # The served config, the lookup's next two in its order, then cuBLAS; twice.
        names = ["ktune", "ktune_r2", "ktune_r3", "cublas"]
        self.assertEqual([p["impl"] for p in more["phases"]], names + names)
        self.assertEqual([r["impl"] for r in more["ranked"]], names[:3])
        self.assertEqual([r["params"] for r in more["ranked"]], [e["params"] for e in ranked[:3]])
        self.assertEqual([r["tuned_median_us"] for r in more["ranked"]],
                         [e["median_us"] for e in ranked[:3]])
        for r in more["ranked"]:
            self.assertNotIn("error", r)
            self.assertGreater(more[r["impl"]]["runs"], 0)
            self.assertEqual(r["median_us"], more[r["impl"]]["median_us"])
            self.assertAlmostEqual(r["vs_served"], more["ktune"]["median_us"] / r["median_us"])
        for r in more["ranked"][1:]:
            self.assertIn("lowered_name", r)     # compiled by ktuned for this shape
            self.assertIn("vs_cublas_rel_l2", r)  # and its output checked against cuBLAS's
        self.assertEqual(doc["plan"]["sustained_shapes"]["ranked"], 3)
        # 8192^3's own sustained run is unchanged: the served config and cuBLAS only.
        self.assertEqual([p["impl"] for p in doc["sustained"]["phases"]],
                         ["ktune", "cublas", "ktune", "cublas"])
        self.assertNotIn("ranked", doc["sustained"])

    def test_tunes_serves_exports_and_archives(self):
        doc, table, archived = self.run_flow(SHAPES="8192x8192x512", TRIALS="2",
                                             SUSTAIN_SHAPES="8192x8192x512", SUSTAIN_MORE_S="0.01")
        self.assertEqual(doc["commit"], "abc123-test")
        self.assertEqual(doc["tuning_path"], "daemon")
        self.assertEqual(doc["plan"]["shapes"], ["8192x8192x512"])
        self.assertEqual(doc["summary"]["served_exact"], 1)
        self.assertEqual(doc["summary"]["shapes_timed"], 1)
        self.assertEqual(doc["summary"]["checks_ok"], 1)
        (row,) = doc["shapes"]
        self.assertEqual(row["served"]["provenance"], "exact")
        self.assertGreater(row["served"]["cubin_bytes"], 0)
        self.assertEqual(row["tuning"]["state"], "done")
        self.assertEqual(row["tuning"]["trials"], 2)
        self.assertGreater(row["tuning"]["wall_s"], 0)
        # ktune.torch served the call (no fallback to torch) with the kernel the lookup ranked first.
        self.assertTrue(row["ktune_torch_served"])
        self.assertTrue(row["ktune_torch_kernel"]["same_as_served"])
        self.assertEqual(doc["ktune_torch"]["stats"]["fallback"], 0)
        self.assertIn("compile_s", row)
        self.assertIn("compile_warmup_s", doc)
        self.assertEqual(sorted(row["timing"]), ["compile", "cublas", "ktune", "ktune_kernel"])
        for peer in row["timing"].values():
            self.assertEqual(len(peer["rounds_us"]), 2)
        # The paired reading: the median over rounds of each round's cuBLAS / ktune time.
        t = row["timing"]
        self.assertAlmostEqual(row["ktune_vs_cublas_paired"], statistics.median(
            c / k for c, k in zip(t["cublas"]["rounds_us"], t["ktune"]["rounds_us"])))
        self.assertAlmostEqual(doc["summary"]["geomean_ktune_vs_cublas_paired"],
                               row["ktune_vs_cublas_paired"])
        self.assertIn("ktune_vs_compile", row)
        sustained = doc["sustained"]
        self.assertGreaterEqual(sustained["x_L2"], 3)
        self.assertGreaterEqual(sustained["ktune"]["runs"], 2 * 50)
        self.assertGreaterEqual(sustained["cublas"]["runs"], 2 * 50)
        self.assertEqual([p["impl"] for p in sustained["phases"]],
                         ["ktune", "cublas", "ktune", "cublas"])
        self.assertEqual(sustained["burst"]["runs"], 50)
        # No NVML where the tests run: the figures say they are nvidia-smi's (or none).
        self.assertEqual(sustained["gpu_source"], "nvidia-smi, every 50 ms")
        for impl in ("ktune", "cublas"):
            self.assertGreater(sustained["burst"][impl]["median_us"], 0)
            self.assertNotIn("window", sustained["burst"][impl])
        # No GPU here (fake torch made no CUDA context): the clock probe says why it did not run,
        # and the run went on.
        self.assertTrue(sustained["clock_probe"].get("error"), sustained["clock_probe"])
        # The tuned shape sustained in phases of its own too, without a burst; the summary
        # carries its ratio.
        (more,) = doc["sustained_shapes"]
        self.assertEqual(more["shape"], "8192x8192x512")
        self.assertEqual([p["impl"] for p in more["phases"]], ["ktune", "cublas", "ktune", "cublas"])
        self.assertEqual(more["seconds_per_phase"], 0.01)
        self.assertNotIn("burst", more)
        self.assertGreater(more["ktune"]["runs"], 0)
        self.assertEqual(doc["summary"]["sustained_shapes_ktune_vs_cublas"],
                         {"8192x8192x512": more["ktune_vs_cublas"]})
        self.assertEqual(doc["plan"]["sustained_shapes"]["shapes"], ["8192x8192x512"])
        # The table ktuned exports holds the winner it served.
        (winner,) = table["winners"]
        self.assertEqual(winner["problem"]["dims"], {"M": 8192, "N": 8192, "K": 512})
        self.assertEqual(winner["ranked"][0]["template"], row["served"]["template"])
        self.assertEqual(winner["ranked"][0]["params"], row["served"]["params"])
        for name in ("logs/ktuned.log", "logs/tune.json", "logs/measure.json", "logs/measure.log",
                     "logs/meta.json", "logs/cubins/8192x8192x512.cubin"):
            self.assertIn(name, archived)


@unittest.skipUnless(os.environ.get("KTUNED") and os.environ.get("FAKE_WORKER"),
                     "needs KTUNED and FAKE_WORKER (the ctest sets them)")
class TuneStopTest(unittest.TestCase):
    """`peers.py tune` stopped by its timeout (SIGTERM) cancels the job it was following, so no
    tuning runs on into the measurements."""

    def test_sigterm_cancels_the_running_job(self):
        import ktune
        with tempfile.TemporaryDirectory() as d:
            sock = os.path.join(d, "s")
            env = dict(os.environ, KTUNE_HOME=ROOT, FAKE_WORKER_DELAY_MS="200")
            daemon = subprocess.Popen(
                [os.environ["KTUNED"], "--socket", sock, "--data-dir", os.path.join(d, "data"),
                 "--set", "tuning.worker=" + os.environ["FAKE_WORKER"], "--set", "tuning.devices=0",
                 "--set", "tuning.gpu_policy=always", "--set", "tuning.on_miss=false",
                 "--set", "store.seed_tables=", "--set", "server.metrics=",
                 "--set", "templates.compile_threads=2"],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                client = ktune.Client(socket_path=sock, cache_ttl=0)
                wait_for(lambda: os.path.exists(sock) and client.status())
                out = os.path.join(d, "tune.json")
                tune = subprocess.Popen(
                    [sys.executable, os.path.join(ROOT, "bench", "gemm_peers", "peers.py"), "tune",
                     "--socket", sock, "--shapes", "8192x8192x512,4096x4096x4096", "--trials", "200",
                     "--job-seconds", "120", "--out", out], env=env, stdout=subprocess.DEVNULL)
                running = wait_for(lambda: client.jobs(state="running"))
                tune.terminate()
                self.assertEqual(tune.wait(timeout=60), 143)
                with open(out) as f:
                    doc = json.load(f)
                self.assertEqual(doc["cancelled_jobs"], [running[0]["id"]])
                self.assertEqual(client.jobs(state="running"), [])
                self.assertEqual(client.jobs(state="queued"), [])
                self.assertEqual(client.job(running[0]["id"])["state"], "cancelled")
                client.close()
            finally:
                daemon.terminate()
                daemon.wait(timeout=30)


def wait_for(condition, seconds: float = 60):
    """condition()'s first truthy value, polled until `seconds` pass (then the test fails)."""
    import time
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        try:
            value = condition()
        except Exception:  # the daemon not up yet
            value = None
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not true within {seconds} s")


if __name__ == "__main__":
    unittest.main()
