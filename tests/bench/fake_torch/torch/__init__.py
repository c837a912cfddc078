"""A stand-in for PyTorch on a machine without a GPU, for bench/gemm_peers's tests only.

Tensors carry a shape, dtype, strides and a fake device address, nothing else: arithmetic returns
tensors of the right shape, reductions convert to small numbers, timings are constant. Enough of
the API for bench/gemm_peers/peers.py `measure` and for ktune.torch's GEMM path to run their
control flow end to end. It also stands in for the GPU: importing it makes ktune.Kernel's
launches check their arguments (the kernel's buffer count, its scalars) and do nothing.
"""

import types

__version__ = "0.0+fake"


class dtype:
    def __init__(self, name: str, itemsize: int):
        self.name, self.itemsize = name, itemsize

    def __repr__(self) -> str:
        return "torch." + self.name


bfloat16, float16, float32 = dtype("bfloat16", 2), dtype("float16", 2), dtype("float32", 4)
float64, int64 = dtype("float64", 8), dtype("int64", 8)


class device:
    def __init__(self, spec: str = "cuda"):
        self.type, _, index = str(spec).partition(":")
        self.index = int(index) if index else 0

    def __eq__(self, other) -> bool:
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))


class Size(tuple):
    pass


_next_address = [1 << 32]


def _allocate(nbytes: int) -> int:
    address = _next_address[0]
    _next_address[0] += (nbytes + 255) // 256 * 256 + 256
    return address


def _contiguous(shape):
    strides, step = [], 1
    for d in reversed(shape):
        strides.insert(0, step)
        step *= d
    return tuple(strides)


class Tensor:
    def __init__(self, shape, dtype_=float32, strides=None, address=None):
        self.shape = Size(int(d) for d in shape)
        self.dtype = dtype_
        self._strides = tuple(strides) if strides is not None else _contiguous(self.shape)
        self._address = address if address is not None else _allocate(self.numel() * dtype_.itemsize)
        self.device = device("cuda:0")
        self.is_cuda = True
        self.requires_grad = False

    # ---- what a tensor says about itself
    def dim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def element_size(self) -> int:
        return self.dtype.itemsize

    def data_ptr(self) -> int:
        return self._address

    def stride(self):
        return self._strides

    def get_device(self) -> int:
        return self.device.index

    def is_contiguous(self) -> bool:
        return self._strides == _contiguous(self.shape)

    # ---- views and copies
    def t(self) -> "Tensor":
        return Tensor(self.shape[::-1], self.dtype, self._strides[::-1], self._address)

    def double(self) -> "Tensor":
        return Tensor(self.shape, float64)

    def float(self) -> "Tensor":
        return Tensor(self.shape, float32)

    def clone(self) -> "Tensor":
        return Tensor(self.shape, self.dtype)

    def new_empty(self, shape) -> "Tensor":
        return Tensor(shape, self.dtype)

    def sort(self):
        return types.SimpleNamespace(values=Tensor(self.shape, self.dtype), indices=self)

    def __getitem__(self, index) -> "Tensor":
        if isinstance(index, slice):
            return Tensor((len(range(*index.indices(self.shape[0]))),) + self.shape[1:], self.dtype)
        if isinstance(index, Tensor):
            return Tensor((index.numel(),) + self.shape[1:], self.dtype)
        if isinstance(index, int):
            return Tensor(self.shape[1:], self.dtype)
        raise TypeError(f"fake torch: index {index!r}")

    def __setitem__(self, index, value) -> None:
        pass

    # ---- arithmetic: shapes only
    def __matmul__(self, other: "Tensor") -> "Tensor":
        if self.dim() != 2 or other.dim() != 2 or self.shape[1] != other.shape[0]:
            raise RuntimeError(f"fake torch: mat1 {tuple(self.shape)} @ mat2 {tuple(other.shape)}")
        return Tensor((self.shape[0], other.shape[1]), self.dtype)

    def _same(self, other) -> "Tensor":
        if isinstance(other, Tensor) and other.shape != self.shape and other.dim() and self.dim():
            raise RuntimeError(f"fake torch: shapes {tuple(self.shape)} and {tuple(other.shape)}")
        return Tensor(self.shape, self.dtype)

    __sub__ = __add__ = __mul__ = __truediv__ = _same

    def __eq__(self, other) -> "Tensor":  # type: ignore[override]
        return self._same(other)

    __hash__ = object.__hash__

    def sum(self) -> "Tensor":
        return Tensor((), self.dtype)

    mean = sum

    def add_(self, other) -> "Tensor":
        return self

    def __float__(self) -> float:
        return 1e-3

    def __int__(self) -> int:
        return 0


# ---- functions
def manual_seed(seed: int) -> None:
    pass


def is_grad_enabled() -> bool:
    return True


_autocast = [False]  # whether torch.autocast("cuda") is on


def is_autocast_enabled(device_type: str = "cuda") -> bool:
    return _autocast[0]


def _shape(args):
    return tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else args


def randn(*shape, dtype=float32, device=None) -> Tensor:
    return Tensor(_shape(shape), dtype)


def empty(*shape, dtype=float32, device=None) -> Tensor:
    return Tensor(_shape(shape), dtype)


def full(shape, value, dtype=float32, device=None) -> Tensor:
    return Tensor(shape, dtype)


def empty_like(t: Tensor) -> Tensor:
    return Tensor(t.shape, t.dtype)


def randperm(n: int, device=None) -> Tensor:
    return Tensor((n,), int64)


def isnan(t: Tensor) -> Tensor:
    return Tensor(t.shape, t.dtype)


def matmul(a: Tensor, b: Tensor, out=None) -> Tensor:
    result = a @ b
    if out is not None and out.shape != result.shape:
        raise RuntimeError("fake torch: out has the wrong shape")
    return out if out is not None else result


def compile(fn, mode=None, dynamic=None):
    return fn


class _Namespace(types.SimpleNamespace):
    pass


class _Event:
    def __init__(self, enable_timing: bool = False):
        pass

    def record(self) -> None:
        pass

    def elapsed_time(self, end: "_Event") -> float:
        return 1.6  # ms


_stream = _Namespace(cuda_stream=0)
_current_device = [0]  # torch.cuda's current device, as torch.cuda.device sets it


class _DeviceGuard:
    """torch.cuda.device(i): device i current inside the with block."""

    def __init__(self, index: int):
        self.index = index

    def __enter__(self):
        self.saved = _current_device[0]
        _current_device[0] = self.index

    def __exit__(self, *exc):
        _current_device[0] = self.saved


cuda = _Namespace(get_device_name=lambda *a: "Fake H200", synchronize=lambda *a: None,
                  current_stream=lambda *a: _stream, Event=_Event, is_available=lambda: True,
                  current_device=lambda: _current_device[0], device=_DeviceGuard)
version = _Namespace(cuda="13.0")
backends = _Namespace(cuda=_Namespace(matmul=_Namespace(
    allow_bf16_reduced_precision_reduction=True)))
_dynamo = _Namespace(config=_Namespace(recompile_limit=8, cache_size_limit=8),
                     reset=lambda: None)
linalg = _Namespace(vector_norm=lambda t: Tensor((), t.dtype))
_C = _Namespace()


def finfo(t: dtype):
    return _Namespace(eps=2 ** -7)


# The GPU: a served kernel's launch checks its arguments and does nothing.
def _launch_addresses(self, addresses, stream, scalars=None):
    self.plan.pack(addresses, [0] * len(self.plan.workspaces), scalars)


import ktune.kernel  # noqa: E402  (after torch's names: ktune.torch imports this module)

ktune.kernel.Kernel.launch_addresses = _launch_addresses

from . import nn  # noqa: E402,F401
