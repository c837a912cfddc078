"""ktune.Kernel: launch a kernel ktuned served, through ctypes on the CUDA driver.

Standard library only; ``libcuda.so.1`` is opened on the first launch, so importing ktune (and
creating a Kernel) works on a machine without a GPU driver. Example::

    import ktune
    client = ktune.Client()
    kernel = ktune.Kernel(client.kernel("softmax", dtype="fp32", rows=4096, cols=4096))
    kernel.launch(x, y, stream=0)      # device buffers in argument order: ints, objects with
                                       # __cuda_array_interface__, or with data_ptr() (torch)

Kernels of one cubin share what they load: a config serves every shape from one cubin (the launch
description's ``cubin_id``), so a model whose shapes vary (a batch of any size) holds one module
and one set of workspaces per config, not per shape, and ``Kernel.for_launch`` makes the Kernel of
a new shape from a lookup entry alone, without the ``kernel`` op, once its config was served.

- Each cubin is loaded once per CUDA context (the one current on the launching thread), after
  checking the device's compute capability against the cubin's arch, and never unloaded; the
  dynamic shared-memory limit is raised to what the largest launch so far asked.
- Workspaces are allocated and zeroed (on that stream) at a config's first launch per context and
  stream, and kept for the process: launches on two streams may run at once, and a split-K
  kernel's partials and tile tickets must not be shared by two launches in flight. Every shape of
  the config takes the same ones on that stream; a shape that needs more gets a new set of twice
  the size (the old stays allocated: a CUDA graph may hold it). Graphs captured on one stream share
  its workspaces, whatever their shapes (torch.cuda.graph captures every graph on one stream):
  replay them one at a time. Launches on the per-thread default stream (handle 2) from several
  threads share one set too, though they may run at once: give each thread a stream of its own.
- Modules and workspaces are keyed by the CUDA context's handle: a context destroyed while the
  process goes on must not be followed by one that reuses its handle (ktune's clients never
  destroy one; a primary context lives until the process ends).
- CUDA graphs: a first launch on a stream that is being captured (any capture mode) loads the
  module and allocates the workspaces with this thread's capture mode relaxed for those calls,
  and zeroes them on a private stream, so the graph holds only the kernel and replays correctly.

Launches run in the context current on the calling thread; their enqueueing is serialized on a
lock.
"""

import base64
import ctypes
import hashlib
import math
import struct
import threading
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .client import KtuneError

_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "i32": 4, "f32": 4, "i64": 8}
_ARG_KINDS = ("in", "out", "inout", "workspace", "scalar", "tensor_map")

# cuda.h constants used here.
_CC_MAJOR, _CC_MINOR = 75, 76                # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_*
_FUNC_MAX_DYNAMIC_SMEM = 8                   # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4      # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
_F32_MAX = 3.4028234663852886e38              # FLT_MAX
_CAPTURE_ACTIVE, _CAPTURE_INVALIDATED = 1, 2  # CU_STREAM_CAPTURE_STATUS_*
_CAPTURE_MODE_RELAXED = 2                     # CU_STREAM_CAPTURE_MODE_RELAXED
_STREAM_NON_BLOCKING = 1                      # CU_STREAM_NON_BLOCKING
# CUtensorMapDataType of the dtypes a tensor map can cover (as tuner/gpu_worker.cc maps them), and
# the wire strings of CUtensorMapSwizzle / CUtensorMapL2promotion in the driver's enum order.
_TENSOR_MAP_TYPES = {"bf16": 9, "fp16": 6, "fp32": 7, "i32": 3}
_SWIZZLES = ("none", "32B", "64B", "128B")
_L2_PROMOTIONS = ("none", "64B", "128B", "256B")
_OOB_FILLS = ("zeros", "nan")                # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE, ..._NAN_REQUEST_ZERO_FMA
_TENSOR_MAP_BYTES, _TENSOR_MAP_ALIGN = 128, 64  # sizeof / alignof(CUtensorMap)


# ---- the cubin ---------------------------------------------------------------------------------

def arch_sm(arch: str) -> int:
    """``"sm_90a"`` -> 90; 0 when ``arch`` is not of that form."""
    if not arch.startswith("sm_"):
        return 0
    digits = arch[3:].rstrip("af")
    return int(digits) if digits.isdigit() and len(arch[3:]) - len(digits) <= 1 else 0


def cubin_info(data: bytes) -> Tuple[int, List[str]]:
    """(SM, symbol names) of a CUDA ELF64 cubin; ValueError when it is not one."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a little-endian ELF64 image")
    machine, = struct.unpack_from("<H", data, 18)
    if machine != 190:
        raise ValueError(f"e_machine is {machine}, not EM_CUDA (190)")
    shoff, = struct.unpack_from("<Q", data, 40)
    flags, = struct.unpack_from("<I", data, 48)
    shentsize, shnum = struct.unpack_from("<HH", data, 58)
    sm = (flags >> 8) & 0xFF if data[8] >= 8 else flags & 0xFF  # ELF ABI 8+: bits 8..15
    symbols: List[str] = []

    def section(i: int) -> Tuple[int, int, int, int, int]:
        h = shoff + i * shentsize
        if h + 64 > len(data):
            raise ValueError("section header out of bounds")
        kind, = struct.unpack_from("<I", data, h + 4)
        off, size = struct.unpack_from("<QQ", data, h + 24)
        link, = struct.unpack_from("<I", data, h + 40)
        entsize, = struct.unpack_from("<Q", data, h + 56)
        return kind, off, size, link, entsize

    for i in range(shnum):
        kind, off, size, link, entsize = section(i)
        if kind != 2:  # SHT_SYMTAB
            continue
        _, str_off, str_size, _, _ = section(link)
        if entsize < 24 or off + size > len(data) or str_off + str_size > len(data):
            raise ValueError(".symtab out of bounds")
        for s in range(off, off + size - entsize + 1, entsize):
            name, = struct.unpack_from("<I", data, s)
            if 0 < name < str_size:
                end = data.index(b"\0", str_off + name)
                symbols.append(data[str_off + name:end].decode("ascii", "replace"))
    if not symbols:
        raise ValueError("no .symtab")
    return sm, symbols


# ---- arguments ---------------------------------------------------------------------------------

def buffer_address(obj: Any) -> int:
    """The device address of a buffer: an int, an object with __cuda_array_interface__, or one with
    data_ptr() (a torch tensor)."""
    if isinstance(obj, int):
        return obj
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        return int(cai["data"][0])
    data_ptr = getattr(obj, "data_ptr", None)
    if callable(data_ptr):
        return int(data_ptr())
    raise TypeError(f"{type(obj).__name__} is no device buffer (give an int address, an object with "
                    "__cuda_array_interface__, or one with data_ptr())")


def buffer_bytes(obj: Any) -> Optional[int]:
    """Bytes a buffer object says it holds, when it says (None for a bare address)."""
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        n = 1
        for d in cai["shape"]:
            n *= int(d)
        return n * int(cai["typestr"][2:])
    numel, element_size = getattr(obj, "numel", None), getattr(obj, "element_size", None)
    if callable(numel) and callable(element_size):
        return int(numel()) * int(element_size())
    return None


def buffer_layout_problem(obj: Any, address: int) -> Optional[str]:
    """Why a buffer cannot be handed to a ktune kernel as a dense array (None: it can): not
    16-byte aligned (the templates load 16 bytes at a time, TMA needs it), or an object that says
    it is not contiguous (a transposed view, a column slice: the kernel would read other
    elements)."""
    if address == 0:
        return "its address is 0 (a null pointer)"
    if address % 16:
        return f"its address 0x{address:x} is not 16-byte aligned"
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        strides = cai.get("strides")
        if strides is not None:
            step = int(cai["typestr"][2:])  # a dense row-major array's stride, innermost first
            for d, s in zip(reversed(cai["shape"]), reversed(strides)):
                if int(d) != 1 and int(s) != step:  # a dimension of one has any stride
                    return "it is not contiguous (strides " + str(tuple(strides)) + ")"
                step *= int(d)
        return None
    is_contiguous = getattr(obj, "is_contiguous", None)
    if callable(is_contiguous) and not is_contiguous():
        return "it is not contiguous"
    return None


class _TensorMap:
    """A tensor_map argument parsed once: cuTensorMapEncodeTiled's inputs but the base address
    (the mapped buffer's, per launch), and 64-byte-aligned storage for the encoded map."""

    def __init__(self, a: Dict[str, Any], args: Sequence[Dict[str, Any]], buffers: List[str]):
        name = a["name"]

        def fail(why: str) -> KtuneError:
            return KtuneError("bad_request", f"tensor_map argument '{name}': {why}")

        t = a.get("tensor_map")
        if not isinstance(t, dict):
            raise fail('no "tensor_map" object')
        try:
            buffer = str(t["buffer"])
            dims = [int(v) for v in t["dims"]]
            strides = [int(v) for v in t["strides"]]
            box = [int(v) for v in t["box"]]
            element_strides = [int(v) for v in t.get("element_strides", [1] * len(dims))]
        except (KeyError, TypeError, ValueError) as e:
            raise fail(f"malformed: {type(e).__name__} {e}") from None
        rank = len(dims)
        if not 1 <= rank <= 5:
            raise fail(f"rank {rank} (dims) is not 1 to 5")
        if len(strides) != rank - 1:
            raise fail(f"{len(strides)} strides for rank {rank} (needs rank - 1)")
        if len(box) != rank or len(element_strides) != rank:
            raise fail(f"box and element_strides need {rank} entries each (have {len(box)} and "
                       f"{len(element_strides)})")
        swizzle, l2, oob = t.get("swizzle", "none"), t.get("l2_promotion", "256B"), t.get("oob_fill", "zeros")
        if swizzle not in _SWIZZLES:
            raise fail(f"unknown swizzle '{swizzle}' (none, 32B, 64B, 128B)")
        if l2 not in _L2_PROMOTIONS:
            raise fail(f"unknown l2_promotion '{l2}' (none, 64B, 128B, 256B)")
        if oob not in _OOB_FILLS:
            raise fail(f"unknown oob_fill '{oob}' (zeros, nan)")
        target = next((b for b in args if b["name"] == buffer), None)
        if target is None:
            raise fail(f"maps '{buffer}', which is no argument")
        if target["kind"] not in ("in", "out", "inout"):
            raise fail(f"maps '{buffer}', which is not an in/out/inout buffer")
        dtype = target.get("dtype", "")
        if dtype not in _TENSOR_MAP_TYPES:
            raise fail(f"buffer '{buffer}' has dtype '{dtype}', which TMA cannot map here "
                       "(bf16, fp16, fp32, i32)")
        span = dims[0] * _DTYPE_BYTES[dtype] if rank == 1 else strides[-1] * dims[-1]
        if span > int(target.get("bytes", 0)):
            raise fail(f"spans {span} bytes but '{buffer}' holds {target.get('bytes', 0)}")
        self.name, self.buffer_name = name, buffer
        self.buffer = buffers.index(buffer)            # position among launch()'s buffers
        self.data_type, self.rank = _TENSOR_MAP_TYPES[dtype], rank
        self.dims = (ctypes.c_uint64 * rank)(*dims)
        self.strides = (ctypes.c_uint64 * max(rank - 1, 1))(*strides)
        self.box = (ctypes.c_uint32 * rank)(*box)
        self.element_strides = (ctypes.c_uint32 * rank)(*element_strides)
        self.interleave = 0                            # CU_TENSOR_MAP_INTERLEAVE_NONE
        self.swizzle, self.l2_promotion = _SWIZZLES.index(swizzle), _L2_PROMOTIONS.index(l2)
        self.oob_fill = _OOB_FILLS.index(oob)
        raw = ctypes.create_string_buffer(_TENSOR_MAP_BYTES + _TENSOR_MAP_ALIGN)
        offset = -ctypes.addressof(raw) % _TENSOR_MAP_ALIGN
        self.storage = (ctypes.c_ubyte * _TENSOR_MAP_BYTES).from_buffer(raw, offset)  # keeps raw
        self.address = ctypes.addressof(self.storage)
        self.base: Optional[int] = None                # the address the storage holds a map of
        self.encoded: "OrderedDict[int, bytes]" = OrderedDict()  # base -> map, latest last

    # Maps kept per argument: a model's layers of one shape share a Kernel, and each layer's
    # weight is a base of its own (128 bytes each).
    KEPT = 256

    def encode(self, drv: Any, base: int) -> None:
        """Puts the map over `base` into the storage. Every other input is fixed for a Kernel and
        a launch copies its parameters (a captured graph too), so a map is encoded once per base
        (~3 us through ctypes) and copied back after that (a few hundred ns)."""
        if base == self.base:
            return
        self.base = None
        kept = self.encoded.get(base)
        if kept is not None:
            ctypes.memmove(self.address, kept, _TENSOR_MAP_BYTES)
            self.encoded.move_to_end(base)
            self.base = base
            return
        rc = drv.cuTensorMapEncodeTiled(self.address, self.data_type, self.rank, base, self.dims,
                                        self.strides, self.box, self.element_strides,
                                        self.interleave, self.swizzle, self.l2_promotion,
                                        self.oob_fill)
        if rc:
            drv.check(rc, f"encoding tensor_map '{self.name}' over buffer '{self.buffer_name}' "
                          "(cuTensorMapEncodeTiled)")
        self.encoded[base] = bytes(self.storage)
        if len(self.encoded) > self.KEPT:
            self.encoded.popitem(last=False)
        self.base = base


class ArgPlan:
    """How each kernel parameter is filled at launch, and the ctypes storage it is packed into.

    Buffers (in/out/inout) come from launch()'s arguments in order — every one, passed or only
    reached through a tensor map (``"pass": false``; gemm_tma's A and B) — workspaces from the
    Kernel, scalars from the description unless a launch names them, tensor maps (128-byte
    CUtensorMaps passed by value) encoded from their buffer's address, once per address (_TensorMap). Built once per
    Kernel; pack() only writes the slots that change. Not thread-safe by itself (Kernel holds a
    lock around it).
    """

    def __init__(self, description: Dict[str, Any]):
        self.buffers: List[Dict[str, Any]] = []      # the args launch() takes, in order
        self.workspaces: List[Dict[str, Any]] = []
        self.maps: List[_TensorMap] = []
        self.slots: List[Any] = []                    # one ctypes value per parameter
        self._buffer_slots: List[int] = []            # slots of passed buffers ...
        self._buffer_positions: List[int] = []        # ... and their positions in launch()'s
        self._workspace_slots: List[int] = []
        self._scalars: Dict[str, Tuple[int, Any]] = {}  # name -> (slot, default value)
        args = description["args"]
        for a in args:
            if a["kind"] not in _ARG_KINDS:
                raise KtuneError("bad_request", f"argument '{a['name']}' has unknown kind '{a['kind']}'")
        names = [a["name"] for a in args if a["kind"] in ("in", "out", "inout")]
        for a in args:
            kind = a["kind"]
            if kind in ("in", "out", "inout"):
                self.buffers.append(a)
            if not a.get("pass", True):
                continue
            if kind == "tensor_map":
                m = _TensorMap(a, args, names)
                self.maps.append(m)
                self.slots.append(m.storage)
            elif kind == "scalar":
                ctype = {"i32": ctypes.c_int32, "i64": ctypes.c_int64, "f32": ctypes.c_float}.get(a["dtype"])
                if ctype is None:
                    raise KtuneError("bad_request", f"scalar '{a['name']}' has unknown dtype {a['dtype']}")
                value = float(a["value"]) if a["dtype"] == "f32" else int(a["value"])
                self._scalars[a["name"]] = (len(self.slots), value)
                self.slots.append(ctype(value))
            elif kind == "workspace":
                self._workspace_slots.append(len(self.slots))
                self.workspaces.append(a)
                self.slots.append(ctypes.c_uint64(0))
            else:
                self._buffer_slots.append(len(self.slots))
                self._buffer_positions.append(len(self.buffers) - 1)
                self.slots.append(ctypes.c_uint64(0))
        # Every buffer a parameter of its own and no maps: launch_addresses' direct path applies.
        self.direct = not self.maps and len(self._buffer_slots) == len(self.buffers)
        n = len(self.slots)
        self.params = (ctypes.c_void_p * n)(*[ctypes.addressof(v) for v in self.slots])
        self._overridden: List[str] = []

    def pack(self, addresses: Sequence[int], workspaces: Sequence[int],
             scalars: Optional[Dict[str, float]] = None) -> None:
        """Writes buffer and workspace addresses and scalar values into the parameter storage."""
        if len(addresses) != len(self.buffers):
            names = ", ".join(b["name"] for b in self.buffers)
            raise KtuneError("bad_request", f"the kernel takes {len(self.buffers)} buffers ({names}), "
                             f"{len(addresses)} given")
        slots = self.slots
        for i, position in zip(self._buffer_slots, self._buffer_positions):
            slots[i].value = addresses[position]
        for i, address in zip(self._workspace_slots, workspaces):
            slots[i].value = address
        for name in self._overridden:       # scalars a previous launch changed
            i, default = self._scalars[name]
            slots[i].value = default
        self._overridden = []
        if scalars:
            for name, value in scalars.items():
                if name not in self._scalars:
                    raise KtuneError("bad_request", f"the kernel has no scalar '{name}' (its "
                                                    f"scalars: {', '.join(self._scalars)})")
                i, default = self._scalars[name]
                if isinstance(default, int):  # the grid and workspaces were sized for it
                    raise KtuneError("bad_request", f"scalar '{name}' is a dimension the kernel "
                                                    f"was served for ({name}={default}); ask for "
                                                    "the kernel of the other shape")
                if math.isfinite(value) and abs(value) > _F32_MAX:  # ctypes would store inf
                    raise KtuneError("bad_request", f"scalar '{name}' = {value} does not fit the "
                                                    "kernel's f32")
                slots[i].value = value
                self._overridden.append(name)

    def encode_maps(self, drv: Any, addresses: Sequence[int]) -> None:
        """Encodes each tensor map from its buffer's address (after pack())."""
        for m in self.maps:
            m.encode(drv, addresses[m.buffer])

    def values(self) -> List[Any]:
        """The packed values, in parameter order (tensor maps as their 128 bytes; for tests and
        debugging)."""
        return [bytes(v) if isinstance(v, ctypes.Array) else v.value for v in self.slots]


# ---- the driver --------------------------------------------------------------------------------

class _Driver:
    """libcuda.so.1 through ctypes, loaded on first use."""

    _instance: Optional["_Driver"] = None
    _failure: Optional[str] = None
    _lock = threading.Lock()

    @classmethod
    def get(cls) -> "_Driver":
        with cls._lock:
            if cls._instance is None and cls._failure is None:
                try:
                    cls._instance = _Driver()
                except OSError as e:
                    cls._failure = f"no CUDA driver: {e}"
            if cls._instance is None:
                raise KtuneError("unavailable", cls._failure or "no CUDA driver")
            return cls._instance

    def __init__(self) -> None:
        lib = ctypes.CDLL("libcuda.so.1")
        vp, u32, i32 = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int
        self.lib = lib

        def fn(name: str, *argtypes: Any) -> Any:
            f = getattr(lib, name)
            f.argtypes = list(argtypes)
            f.restype = ctypes.c_int
            return f

        self.cuInit = fn("cuInit", u32)
        self.cuGetErrorName = fn("cuGetErrorName", i32, ctypes.POINTER(ctypes.c_char_p))
        self.cuCtxGetCurrent = fn("cuCtxGetCurrent", ctypes.POINTER(vp))
        self.cuCtxGetDevice = fn("cuCtxGetDevice", ctypes.POINTER(i32))
        self.cuDeviceGetAttribute = fn("cuDeviceGetAttribute", ctypes.POINTER(i32), i32, i32)
        self.cuModuleLoadData = fn("cuModuleLoadData", ctypes.POINTER(vp), ctypes.c_char_p)
        self.cuModuleUnload = fn("cuModuleUnload", vp)
        self.cuModuleGetFunction = fn("cuModuleGetFunction", ctypes.POINTER(vp), vp, ctypes.c_char_p)
        self.cuFuncSetAttribute = fn("cuFuncSetAttribute", vp, i32, i32)
        self.cuMemAlloc = fn("cuMemAlloc_v2", ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t)
        self.cuMemFree = fn("cuMemFree_v2", ctypes.c_uint64)
        self.cuMemsetD8Async = fn("cuMemsetD8Async", ctypes.c_uint64, ctypes.c_ubyte,
                                  ctypes.c_size_t, vp)
        self.cuStreamIsCapturing = fn("cuStreamIsCapturing", vp, ctypes.POINTER(i32))
        self.cuThreadExchangeStreamCaptureMode = fn("cuThreadExchangeStreamCaptureMode",
                                                    ctypes.POINTER(i32))
        self.cuStreamCreate = fn("cuStreamCreate", ctypes.POINTER(vp), u32)
        self.cuStreamSynchronize = fn("cuStreamSynchronize", vp)
        self.cuStreamDestroy = fn("cuStreamDestroy_v2", vp)
        self.cuLaunchKernel = fn("cuLaunchKernel", vp, u32, u32, u32, u32, u32, u32, u32, vp,
                                 ctypes.POINTER(vp), ctypes.POINTER(vp))
        self.cuLaunchKernelEx = fn("cuLaunchKernelEx", vp, vp, ctypes.POINTER(vp), ctypes.POINTER(vp))
        u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
        self.cuTensorMapEncodeTiled = fn("cuTensorMapEncodeTiled", vp, i32, u32, vp, u64p, u64p,
                                         u32p, u32p, i32, i32, i32, i32)
        self.check(self.cuInit(0), "cuInit")

    def check(self, result: int, what: str) -> None:
        if result != 0:
            name = ctypes.c_char_p()
            self.cuGetErrorName(result, ctypes.byref(name))
            raise KtuneError("unavailable", f"{what} failed: "
                                            f"{(name.value or b'CUDA_ERROR_%d' % result).decode()}")


class _RelaxedCapture:
    """This thread's stream-capture mode relaxed for a block: calls that a capture in global or
    thread-local mode forbids (allocations, module loads) are then allowed, as CUDA's documentation
    of cuThreadExchangeStreamCaptureMode advises. Harmless when nothing is being captured."""

    def __init__(self, drv: Any):
        self.drv, self.mode = drv, ctypes.c_int(_CAPTURE_MODE_RELAXED)

    def __enter__(self) -> None:
        self.drv.check(self.drv.cuThreadExchangeStreamCaptureMode(ctypes.byref(self.mode)),
                       "cuThreadExchangeStreamCaptureMode")

    def __exit__(self, *exc: Any) -> None:
        self.drv.cuThreadExchangeStreamCaptureMode(ctypes.byref(self.mode))  # the mode it had


class _LaunchConfig(ctypes.Structure):
    """CUlaunchConfig (cuda.h), for launches with a cluster attribute."""
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.c_void_p), ("numAttrs", ctypes.c_uint)]


class _LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute: an id, padding to 8 bytes, a 64-byte value union."""
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint * 16)]


# ---- what the Kernels of a process share --------------------------------------------------------

# Cubins by key (the launch description's cubin_id; a digest of the bytes from a daemon that sends
# none): the bytes, the entry's lowered name, the arch and the first image's other fields (the
# config: template, params, ...), for Kernel.for_launch.
_cubins_lock = threading.Lock()
_cubins: Dict[str, Tuple[bytes, str, str, Dict[str, Any]]] = {}


class _Loaded:
    """What one driver's contexts hold for every Kernel of the process (one per driver: the
    process's libcuda, or a test's fake): each cubin's function per context, and each config's
    workspaces per context and stream. Nothing here is ever freed: a CUDA graph may launch it."""

    _create_lock = threading.Lock()

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.functions: Dict[Tuple[int, str], List[int]] = {}  # (ctx, cubin key) -> [fn, smem set]
        # (ctx, stream, cubin key, workspace index) -> (address, bytes)
        self.workspaces: Dict[Tuple[int, int, str, int], Tuple[int, int]] = {}

    @classmethod
    def of(cls, drv: Any) -> "_Loaded":
        loaded = getattr(drv, "_ktune_loaded", None)
        if loaded is None:
            with cls._create_lock:
                loaded = getattr(drv, "_ktune_loaded", None)
                if loaded is None:
                    loaded = drv._ktune_loaded = _Loaded()
        return loaded


def _digest(cubin: bytes) -> str:
    return "sha256:" + hashlib.sha256(cubin).hexdigest()


def _shared_workspace(w: Dict[str, Any]) -> bool:
    """Whether launches of a config at other shapes may share this workspace on one stream: it
    reads zero after every launch (tile tickets) or needs no zeroing at all (partials; also a
    description without the flags, as the C++ client reads one). One that must read zero but is
    left dirty (no template declares that) gets a set per Kernel, kept for the process."""
    return bool(w.get("left_zeroed")) or not w.get("zero_before_first_use")


# ---- Kernel ------------------------------------------------------------------------------------

class Kernel:
    """A served kernel: the kernel op's result (``Client.kernel(...)``), ready to launch."""

    def __init__(self, image: Dict[str, Any]):
        """``image``: the kernel op's reply (``Client.kernel(...)``). ``self.image`` keeps it less
        its base64 text; the bytes are ``self.cubin``."""
        try:
            self._read(image)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:  # binascii too
            raise KtuneError("bad_request", f"kernel reply: malformed image "
                                            f"({type(e).__name__}: {e})") from None

    @classmethod
    def for_launch(cls, launch: Dict[str, Any]) -> Optional["Kernel"]:
        """The Kernel of a lookup entry's launch description (``entry.launch``) when this process
        already holds its cubin (a Kernel of the same ``cubin_id``, the same config at any shape,
        was made before): no ``kernel`` op, no module load. None when it does not. Its ``image``
        is the first Kernel's of the config (template, params, ...) with this ``launch`` and no
        ``problem_key``."""
        key = launch.get("cubin_id") if isinstance(launch, dict) else None
        if not key:
            return None
        with _cubins_lock:
            known = _cubins.get(key)
        if (known is None or known[2] != launch.get("arch")
                or known[3].get("name_expression", launch.get("name_expression"))
                != launch.get("name_expression")):
            return None
        kernel = cls.__new__(cls)
        try:
            kernel._setup(dict(known[3], launch=launch), known[0], key)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
            raise KtuneError("bad_request", f"launch description: malformed "
                                            f"({type(e).__name__}: {e})") from None
        return kernel

    def _read(self, image: Dict[str, Any]) -> None:
        description, lowered_name = image["launch"], image["lowered_name"]
        if image.get("encoding") != "base64":
            raise KtuneError("bad_request", "kernel reply: unknown cubin encoding")
        cubin = base64.b64decode(image["cubin"], validate=True)
        if len(cubin) != image["cubin_bytes"]:
            raise KtuneError("bad_request", "kernel reply: the cubin is not the size it says")
        try:
            sm, symbols = cubin_info(cubin)
        except ValueError as e:
            raise KtuneError("bad_request", f"not a CUDA cubin: {e}") from None
        arch = description["arch"]
        if sm != arch_sm(arch):
            raise KtuneError("bad_request", f"the cubin is compiled for sm_{sm} but its description "
                                            f"says {arch}; refusing to load it")
        if lowered_name not in symbols:
            raise KtuneError("bad_request", f"the cubin has no entry '{lowered_name}'")
        # One cubin per id in the process: the id covers all that makes the kernel (template,
        # config, arch, NVRTC and its options), and the first bytes served under it are kept (two
        # compiles of one config differ in bytes that do not matter). A daemon that sends no id:
        # the bytes' digest; an id whose entry or arch differs from the one held: kept apart.
        key = description.get("cubin_id") or _digest(cubin)
        fields = {k: v for k, v in image.items() if k not in ("cubin", "launch", "problem_key")}
        with _cubins_lock:
            known = _cubins.setdefault(key, (cubin, lowered_name, arch, fields))
            if known[1] != lowered_name or known[2] != arch:
                key = _digest(cubin)
                known = _cubins.setdefault(key, (cubin, lowered_name, arch, fields))
        self._setup({k: v for k, v in image.items() if k != "cubin"}, known[0], key)

    def _setup(self, image: Dict[str, Any], cubin: bytes, key: str) -> None:
        self.image = image
        self.description: Dict[str, Any] = image["launch"]
        self.lowered_name: str = image["lowered_name"]
        self.arch: str = self.description["arch"]
        self.cubin = cubin
        self._key = key  # the cubin's key in _cubins and in the driver's _Loaded
        self.plan = ArgPlan(self.description)
        d = self.description
        self._geometry = (*d["grid"], *d["block"], d["smem"])
        self._cluster = d.get("cluster")
        self._loaded: Dict[int, int] = {}  # context -> function (the driver's _Loaded holds it)
        # (context, stream) -> workspaces: launches on two streams may run at once, and a split-K
        # kernel's partials and tile tickets must not be shared by two of its launches in flight.
        # Those of a shared kind come from the driver's _Loaded; this Kernel owns the others.
        self._workspaces: Dict[Tuple[int, int], List[int]] = {}
        self._lock = threading.Lock()
        self._ctx = ctypes.c_void_p()                  # cuCtxGetCurrent's output, under _lock
        self._ctx_out = ctypes.pointer(self._ctx)

    @property
    def buffer_names(self) -> List[str]:
        """The buffers launch() takes, in order."""
        return [b["name"] for b in self.plan.buffers]

    def launch(self, *buffers: Any, stream: Any = 0, check: bool = True,
               **scalars: float) -> None:
        """Launches on ``stream`` (a CUstream handle as an int, 0 = the legacy default stream, or
        an object with ``cuda_stream``) with the in/out buffers in argument order. Scalars named
        as keywords (``alpha=2.0``, ``eps=1e-5``) replace the description's values for this launch.
        With ``check``, buffers that say their size must hold what the description asks, be
        contiguous when they say their layout, and every address must be 16-byte aligned.
        """
        addresses = [buffer_address(b) for b in buffers]
        if check:
            for spec, obj, address in zip(self.plan.buffers, buffers, addresses):
                have = buffer_bytes(obj)
                if have is not None and have < spec["bytes"]:
                    raise KtuneError("bad_request", f"buffer '{spec['name']}' holds {have} bytes, the "
                                                    f"kernel needs {spec['bytes']}")
                problem = buffer_layout_problem(obj, address)
                if problem:
                    raise KtuneError("bad_request", f"buffer '{spec['name']}': {problem}")
        handle = getattr(stream, "cuda_stream", stream) or 0
        self.launch_addresses(addresses, int(handle), scalars or None)

    def launch_addresses(self, addresses: Sequence[int], stream: int,
                         scalars: Optional[Dict[str, float]] = None) -> None:
        """launch() for callers that already hold int addresses and a raw stream (ktune.torch).

        The per-call path: one cuCtxGetCurrent into a buffer kept under the lock, the changed slots
        written, one launch whose other arguments were bound at load; error text is built only
        when the driver returns an error (bench/NOTES.md § Launching served kernels).
        """
        drv = _Driver._instance or _Driver.get()
        if not all(addresses):  # a null pointer faults and ends the context (as in launch())
            i = next(i for i, a in enumerate(addresses) if not a)
            name = self.plan.buffers[i]["name"] if i < len(self.plan.buffers) else f"#{i}"
            raise KtuneError("bad_request", f"buffer '{name}': its address is 0 (a null pointer)")
        with self._lock:
            rc = drv.cuCtxGetCurrent(self._ctx_out)
            if rc:
                drv.check(rc, "cuCtxGetCurrent")
            ctx = self._ctx.value
            if not ctx:
                raise KtuneError("unavailable", "no CUDA context is current on this thread (create "
                                                "one or make the device current first)")
            function = self._loaded.get(ctx)
            if function is None:
                function = self._load(drv, ctx)
            plan = self.plan
            workspaces: List[int] = []
            if plan.workspaces:
                workspaces = self._workspaces.get((ctx, stream)) or self._allocate(drv, ctx, stream)
            if (plan.direct and scalars is None and not plan._overridden
                    and len(addresses) == len(plan._buffer_slots)):
                slots = plan.slots
                for i, address in zip(plan._buffer_slots, addresses):
                    slots[i].value = address
                if workspaces:
                    for i, address in zip(plan._workspace_slots, workspaces):
                        slots[i].value = address
            else:
                plan.pack(addresses, workspaces, scalars)
                if plan.maps:
                    plan.encode_maps(drv, addresses)
            if self._cluster:
                self._launch_ex(drv, function, stream)
                return
            g = self._geometry
            rc = drv.cuLaunchKernel(function, g[0], g[1], g[2], g[3], g[4], g[5], g[6], stream,
                                    plan.params, None)
            if rc:
                drv.check(rc, f"cuLaunchKernel({self.lowered_name})")

    def _load(self, drv: _Driver, ctx: int) -> int:
        with _RelaxedCapture(drv):  # a module load is one of the calls a capture forbids
            return self._load_relaxed(drv, ctx)

    def _load_relaxed(self, drv: _Driver, ctx: int) -> int:
        dev = ctypes.c_int()
        drv.check(drv.cuCtxGetDevice(ctypes.byref(dev)), "cuCtxGetDevice")
        major, minor = ctypes.c_int(), ctypes.c_int()
        drv.cuDeviceGetAttribute(ctypes.byref(major), _CC_MAJOR, dev.value)
        drv.cuDeviceGetAttribute(ctypes.byref(minor), _CC_MINOR, dev.value)
        cc = major.value * 10 + minor.value
        if cc != arch_sm(self.arch):
            raise KtuneError("bad_request", f"the kernel is compiled for {self.arch} but the current "
                                            f"device {dev.value} is sm_{cc} (it was served for "
                                            f"{self.image.get('device', '?')}; ask ktune for this "
                                            "device's class)")
        loaded = _Loaded.of(drv)
        smem = self.description["smem"]
        with loaded.lock:
            held = loaded.functions.get((ctx, self._key))
            if held is None:
                module, function = ctypes.c_void_p(), ctypes.c_void_p()
                drv.check(drv.cuModuleLoadData(ctypes.byref(module), self.cubin), "cuModuleLoadData")
                try:
                    drv.check(drv.cuModuleGetFunction(ctypes.byref(function), module,
                                                      self.lowered_name.encode()),
                              "cuModuleGetFunction")
                    self._raise_smem(drv, function.value, smem)
                except KtuneError:
                    drv.cuModuleUnload(module)  # or each retried launch leaks a module
                    raise
                held = loaded.functions[(ctx, self._key)] = [function.value, smem]
            elif smem > held[1]:  # another shape of the config asked for less
                self._raise_smem(drv, held[0], smem)
                held[1] = smem
        self._loaded[ctx] = held[0]
        return held[0]

    @staticmethod
    def _raise_smem(drv: _Driver, function: int, smem: int) -> None:
        if smem > 0:
            drv.check(drv.cuFuncSetAttribute(function, _FUNC_MAX_DYNAMIC_SMEM, smem),
                      f"raising the dynamic shared memory limit to {smem} bytes")

    def _allocate(self, drv: _Driver, ctx: int, stream: int) -> List[int]:
        """This kernel's workspaces for launches on `stream` in context `ctx`, zeroed before the
        first launch there whatever other streams do. Those a config's launches at every shape
        may share (_shared_workspace) come from the driver's _Loaded, grown to twice the size when
        this shape needs more; the others are this Kernel's. Outside capture new ones are zeroed
        on `stream`. While `stream` is being captured into a CUDA graph they are allocated with
        this thread's capture mode relaxed (as CUDA advises for calls a capture forbids) and
        zeroed on a private stream, waited for, so the graph holds only the kernel."""
        status = ctypes.c_int()
        drv.check(drv.cuStreamIsCapturing(stream, ctypes.byref(status)), "cuStreamIsCapturing")
        if status.value == _CAPTURE_INVALIDATED:
            raise KtuneError("unavailable", f"{self.lowered_name}: the CUDA graph capture on this "
                                            "stream has been invalidated (an earlier call broke it)")
        capturing = status.value == _CAPTURE_ACTIVE
        loaded = _Loaded.of(drv)
        workspaces: List[int] = []
        new: Dict[Tuple[int, int, str, int], Tuple[int, int]] = {}  # shared ones made here
        fresh: List[int] = []                                     # every allocation made here
        zeroing = ctypes.c_void_p(None if capturing else stream)  # capturing: a private stream
        with _RelaxedCapture(drv), loaded.lock:
            try:
                for i, w in enumerate(self.plan.workspaces):
                    key = (ctx, stream, self._key, i)
                    shared = _shared_workspace(w)
                    held = loaded.workspaces.get(key) if shared else None
                    if held is not None and held[1] >= w["bytes"]:
                        workspaces.append(held[0])
                        continue
                    size = max(w["bytes"], 2 * held[1]) if held is not None else w["bytes"]
                    if capturing and not zeroing.value:
                        drv.check(drv.cuStreamCreate(ctypes.byref(zeroing), _STREAM_NON_BLOCKING),
                                  "creating a stream to zero workspaces on")
                    p = ctypes.c_uint64()
                    drv.check(drv.cuMemAlloc(ctypes.byref(p), size),
                              f"allocating workspace '{w['name']}'")
                    fresh.append(p.value)
                    drv.check(drv.cuMemsetD8Async(p.value, 0, size, zeroing.value or 0),
                              f"zeroing workspace '{w['name']}'")
                    workspaces.append(p.value)
                    if shared:
                        new[key] = (p.value, size)
                if capturing and zeroing.value:
                    drv.check(drv.cuStreamSynchronize(zeroing), "zeroing workspaces")
            except KtuneError:
                for address in fresh:
                    drv.cuMemFree(address)
                raise
            finally:
                if capturing and zeroing.value:
                    drv.cuStreamDestroy(zeroing)
            loaded.workspaces.update(new)
        self._workspaces[(ctx, stream)] = workspaces
        return workspaces

    def _launch_ex(self, drv: _Driver, function: int, stream: int) -> None:
        g = self._geometry
        attr = _LaunchAttribute()
        attr.id = _LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value[0], attr.value[1], attr.value[2] = self._cluster
        config = _LaunchConfig((ctypes.c_uint * 3)(*g[0:3]), (ctypes.c_uint * 3)(*g[3:6]), g[6],
                               stream, ctypes.addressof(attr), 1)
        drv.check(drv.cuLaunchKernelEx(ctypes.byref(config), function, self.plan.params, None),
                  f"cuLaunchKernelEx({self.lowered_name})")
