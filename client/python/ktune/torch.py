"""ktune.torch: PyTorch ops that run the kernel ktuned recommends, with torch's semantics.

Import it explicitly (``import ktune.torch as kt``); ``import ktune`` never imports torch.

    y = kt.linear(x, layer.weight)          # = torch.nn.functional.linear(x, layer.weight)
    p = kt.softmax(scores, dim=-1)
    h = kt.rms_norm(x, (4096,), weight, eps=1e-6)
    print(kt.explain())                     # what fell back to torch, and why

Each op looks its shape up once (protocol v2), fetches the best entry's cubin (the daemon compiles
it on first request; a config served before at another shape needs no fetch: its cubin, module
and workspaces are shared, ktune.Kernel.for_launch), and from then on launches it on torch's
current stream. A model whose shapes vary (a batch of any size) keeps the ``max_shapes`` most
recently added shapes per cache; one dropped is looked up again when it returns. Whenever ktune
cannot serve a call exactly as torch would — a dtype, layout, stride or alignment its templates do
not take, a CPU tensor, autograd or torch.autocast, an argument it does not implement, no daemon
answering — the call runs the torch op instead and the reason is recorded for :func:`explain`. A shape that cannot be served is
remembered, so it falls back at once the next time; a daemon that does not answer (or answers
late, is stopping, or cannot serve kernels now) is asked again after ``retry_s`` seconds, and the
shape is not remembered.

CUDA graphs: calls captured with ``torch.cuda.graph`` run ktune's kernels on replay, whether or
not they ran before the capture (ktune.Kernel allocates a kernel's workspaces for the capture stream
during the capture, with the capture mode relaxed for those calls). Graphs captured on one stream
share its workspaces: replay them one at a time.
"""

import os
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from .client import Client, KtuneError
from .kernel import Kernel

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
_GEMM_DTYPES = (torch.bfloat16, torch.float16)

# The global state: one client, the kernels by problem, the fallbacks.
_lock = threading.Lock()
_client: Optional[Client] = None
_device_class: Optional[str] = None
_kernels: Dict[Tuple[Any, ...], Any] = {}           # problem key -> Kernel, or a reason (str)
_fallbacks: Dict[Tuple[str, str], int] = {}         # (op, reason) -> calls
_launches: Dict[str, int] = {}                      # op -> calls served by ktune
_plans: Dict[Tuple[Any, ...], Tuple[Kernel, Any]] = {}  # fast path: call shape -> (kernel, out)
_down_until = 0.0                                   # no daemon: do not ask before this time
retry_s = 30.0
max_shapes = 4096  # shapes _kernels and _plans each keep; the oldest added go at the next insert
# Answers that say nothing about the shape (no daemon, a reply late, a daemon stopping): the
# shape is not remembered as unservable, and the daemon is asked again after retry_s.
_TRANSIENT = ("connection_failed", "timeout", "unavailable")
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def configure(client: Optional[Client] = None, socket_path: Optional[str] = None,
              device: Optional[str] = None) -> None:
    """Uses ``client`` (or one on ``socket_path``) and the device class ``device`` (default: the
    daemon's GPU); forgets the kernels and fallbacks recorded so far."""
    global _client, _device_class, _down_until
    with _lock:
        _client = client or Client(socket_path=socket_path, cache_ttl=0)
        _device_class = device
        _kernels.clear()
        _plans.clear()
        _fallbacks.clear()
        _launches.clear()
        _down_until = 0.0


def explain() -> List[Dict[str, Any]]:
    """Why calls ran torch's op instead of ktune's kernel: one item per (op, reason), most first."""
    with _lock:
        items = [{"op": op, "reason": reason, "calls": n} for (op, reason), n in _fallbacks.items()]
    return sorted(items, key=lambda i: -i["calls"])


def stats() -> Dict[str, Any]:
    """Calls served by ktune per op, and calls that fell back."""
    with _lock:
        return {"ktune": dict(_launches), "fallback": sum(_fallbacks.values())}


_MAX_REASONS = 256  # distinct (op, reason) kept; a reason may name its shape


def _fallback(op: str, reason: str) -> None:
    with _lock:
        key = (op, reason)
        if key not in _fallbacks and len(_fallbacks) >= _MAX_REASONS:
            key = (op, f"other reasons (more than {_MAX_REASONS} kinds recorded)")
        _fallbacks[key] = _fallbacks.get(key, 0) + 1


def _get_client() -> Client:
    global _client
    with _lock:
        if _client is None:
            _client = Client(socket_path=os.environ.get("KTUNE_SOCKET"), cache_ttl=0)
        return _client


def _remember(cache: Dict[Tuple[Any, ...], Any], key: Tuple[Any, ...], value: Any) -> None:
    """cache[key] = value, then the oldest entries dropped past max_shapes. Dropping costs little:
    a Kernel owns no module or workspace (ktune.Kernel shares them per config)."""
    with _lock:
        cache[key] = value
        while len(cache) > max(1, max_shapes):
            del cache[next(iter(cache))]


def _kernel(key: Tuple[Any, ...], op: str, dtype: str, layout: Optional[str],
            dims: Dict[str, int]) -> Any:
    """The Kernel for a problem, or the reason there is none (a str). Cached either way, except
    that a daemon not answering is retried after retry_s."""
    global _down_until
    found = _kernels.get(key)
    if found is not None:
        return found
    if time.monotonic() < _down_until:
        return "no ktuned answered (retrying later)"
    client = _get_client()
    try:
        reply = client.lookup(op, dtype=dtype, layout=layout, device=_device_class, limit=4, **dims)
        result: Any = "no entry of the lookup could be served"
        for entry in reply.entries:
            if not entry.launch:
                continue
            try:
                kernel = Kernel.for_launch(entry.launch)  # a config this process holds already
                if kernel is None:
                    kernel = Kernel(client.kernel(op, dtype=dtype, layout=layout,
                                                  device=reply.device, entry=entry, **dims))
                result = kernel
                break
            except KtuneError as e:
                if e.code in _TRANSIENT:
                    raise  # not this entry's fault: the next would wait as long
                result = f"{entry.template}: {e.code}: {e.message}"
    except KtuneError as e:
        if e.code in _TRANSIENT:
            _down_until = time.monotonic() + retry_s
            return f"ktuned could not serve it now ({e.code}: {e.message}); asked again later"
        result = f"{e.code}: {e.message}"
    _remember(_kernels, key, result)
    return result


def _stream(t: torch.Tensor) -> int:
    """torch's current stream on t's device, as a raw handle (without making a Stream object)."""
    if _raw_stream is not None:
        return _raw_stream(t.get_device())
    return torch.cuda.current_stream(t.device).cuda_stream


def _run(kernel: Kernel, addresses: Sequence[int], x: torch.Tensor,
         scalars: Optional[Dict[str, float]]) -> None:
    """Launches on x's device and its current stream. Kernel launches in the context current on
    the thread, so another device's is swapped in for the launch when it is not the current one
    (a model on cuda:1 without torch.cuda.set_device(1) launched in GPU 0's context)."""
    dev = x.get_device()
    if dev == torch.cuda.current_device():
        kernel.launch_addresses(addresses, _stream(x), scalars)
        return
    with torch.cuda.device(dev):
        kernel.launch_addresses(addresses, _stream(x), scalars)


def _fast(op: str, plan: Tuple[Kernel, Any], x: torch.Tensor, addresses: Tuple[int, ...],
          scalars: Optional[Dict[str, float]] = None) -> Optional[torch.Tensor]:
    """The fast path's launch, for a call shape whose static checks passed before: allocate the
    output, launch; None (after recording why) if the launch fails."""
    kernel, out_shape = plan
    out = x.new_empty(out_shape)
    return out if _launch(op, kernel, (*addresses, out.data_ptr()), x, scalars) else None


def _no_grad(*tensors: Optional[torch.Tensor]) -> bool:
    """No autograd to record and no autocast to apply: what a fast-path call needs."""
    if _autocast():
        return False
    return not torch.is_grad_enabled() or not any(t is not None and t.requires_grad for t in tensors)


def _autocast() -> bool:
    """torch.autocast on CUDA: torch's ops then cast (linear to the autocast dtype, softmax and the
    norms to fp32), which ktune's kernels, running the dtype they are given, would not."""
    try:
        return bool(torch.is_autocast_enabled("cuda"))
    except TypeError:  # torch before 2.4: no device argument (CUDA's)
        return bool(torch.is_autocast_enabled())


def _launch(op: str, kernel: Kernel, addresses: Sequence[int], x: torch.Tensor,
            scalars: Optional[Dict[str, float]] = None) -> bool:
    """Launches on x's device and stream (_run); False, after recording why, if it failed."""
    try:
        _run(kernel, addresses, x, scalars)
    except KtuneError as e:
        _fallback(op, f"launch failed: {e.message}")
        return False
    _launches[op] = _launches.get(op, 0) + 1
    return True


def _aligned(*tensors: torch.Tensor) -> bool:
    return all(t.data_ptr() % 16 == 0 for t in tensors)


# ---- GEMM ------------------------------------------------------------------------------------

def _gemm_layout(a: torch.Tensor, b: torch.Tensor) -> Optional[str]:
    """ktune's layout letters for 2-D a [M,K] and b [K,N] as strided, or None."""
    def letter(t: torch.Tensor) -> Optional[str]:
        rows, cols = t.shape
        if t.stride() == (cols, 1):
            return "r"
        if t.stride() == (1, rows):
            return "c"
        return None
    la, lb = letter(a), letter(b)
    return la + lb if la and lb else None


def _gemm_reason(a: torch.Tensor, b: torch.Tensor) -> Optional[str]:
    if not (a.is_cuda and b.is_cuda) or a.device != b.device:
        return "tensors not on one CUDA device"
    if a.dtype != b.dtype:
        return f"mixed dtypes {a.dtype} and {b.dtype}"
    if a.dtype not in _GEMM_DTYPES:
        return f"dtype {a.dtype} (ktune's GEMMs take bfloat16 and float16)"
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
        return "autograd (ktune kernels have no backward; call under torch.no_grad())"
    if _autocast():
        return "torch.autocast (its casts are torch's)"
    if not _aligned(a, b):
        return "a buffer not 16-byte aligned"
    return None


def _gemm(op: str, a: torch.Tensor, b: torch.Tensor, layout: str, m: int, n: int, k: int,
          out_shape: Sequence[int]) -> Optional[Tuple[torch.Tensor, Kernel]]:
    """The product by ktune's kernel, and that kernel; None (after recording why) if it cannot."""
    dtype = _DTYPES[a.dtype]
    kernel = _kernel((op, a.dtype, layout, m, n, k, a.get_device()), "gemm", dtype, layout,
                     {"M": m, "N": n, "K": k})
    if isinstance(kernel, str):
        _fallback(op, kernel)
        return None
    out = a.new_empty(out_shape)
    if not _launch(op, kernel, (a.data_ptr(), b.data_ptr(), out.data_ptr()), a):
        return None
    return out, kernel


def linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """torch.nn.functional.linear: x [..., K] @ weight[N, K]^T (+ bias)."""
    # Fast path: a call shape served before; only what can change between calls is checked.
    dev = x.get_device()
    plan = _plans.get(("linear", x.shape, weight.shape, x.dtype, weight.dtype, dev))
    if (plan is not None and bias is None and weight.get_device() == dev and x.is_contiguous()
            and weight.is_contiguous() and _no_grad(x, weight)):
        px, pw = x.data_ptr(), weight.data_ptr()
        if not (px | pw) & 15:
            out = _fast("linear", plan, x, (px, pw))
            return out if out is not None else F.linear(x, weight, bias)
    return _linear(x, weight, bias)


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """linear's first call for a shape (and every call the fast path does not take)."""
    reason = _gemm_reason(x, weight)
    if reason is None:
        if weight.dim() != 2 or x.dim() < 1 or x.shape[-1] != weight.shape[1]:
            reason = "shapes torch would refuse"
        elif not x.is_contiguous() or not weight.is_contiguous():
            reason = "non-contiguous input or weight"
        elif x.numel() == 0:
            reason = "empty input"
        elif bias is not None and (bias.dtype != x.dtype or bias.shape != (weight.shape[0],)):
            reason = "bias of another dtype or shape"
    if reason is None:
        k = x.shape[-1]
        n = weight.shape[0]
        m = x.numel() // k
        served = _gemm("linear", x, weight, "rc", m, n, k, (*x.shape[:-1], n))
        if served is not None:
            out, kernel = served
            _remember(_plans, ("linear", x.shape, weight.shape, x.dtype, weight.dtype,
                               x.get_device()), (kernel, out.shape))
            return out.add_(bias) if bias is not None else out
    else:
        _fallback("linear", reason)
    return F.linear(x, weight, bias)


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch.matmul for 2-D operands, each row- or column-major (a transposed view is fine)."""
    reason = _gemm_reason(a, b)
    if reason is None:
        if a.dim() != 2 or b.dim() != 2:
            reason = f"{a.dim()}-D @ {b.dim()}-D (ktune takes 2-D operands)"
        elif a.shape[1] != b.shape[0]:
            reason = "shapes torch would refuse"
        elif a.numel() == 0 or b.numel() == 0:
            reason = "empty operand"
    layout = _gemm_layout(a, b) if reason is None else None
    if reason is None and layout is None:
        reason = "strides that are neither row- nor column-major"
    if reason is None:
        m, k = a.shape
        n = b.shape[1]
        served = _gemm("matmul", a, b, layout, m, n, k, (m, n))
        if served is not None:
            return served[0]
    else:
        _fallback("matmul", reason)
    return torch.matmul(a, b)


# ---- row ops ---------------------------------------------------------------------------------

def _rows_reason(x: torch.Tensor, *params: Optional[torch.Tensor]) -> Optional[str]:
    if not x.is_cuda:
        return "tensor not on a CUDA device"
    if x.dtype not in _DTYPES:
        return f"dtype {x.dtype}"
    if torch.is_grad_enabled() and (x.requires_grad or
                                    any(p is not None and p.requires_grad for p in params)):
        return "autograd (ktune kernels have no backward; call under torch.no_grad())"
    if _autocast():
        return "torch.autocast (its casts are torch's)"
    if not x.is_contiguous():
        return "non-contiguous input"
    if x.dim() == 0 or x.numel() == 0:
        return "empty or 0-d input"
    for p in params:
        if p is None:
            continue
        if p.dtype != x.dtype or p.device != x.device or not p.is_contiguous():
            return "weight/bias of another dtype or device, or non-contiguous"
        if tuple(p.shape) != (x.shape[-1],):  # the kernel reads cols of each, no more, no less
            return "weight/bias not of shape (last dimension,)"
    if not _aligned(x, *[p for p in params if p is not None]):
        return "a buffer not 16-byte aligned"
    return None


def _rows(op: str, template_op: str, x: torch.Tensor, params: Sequence[torch.Tensor],
          scalars: Optional[Dict[str, float]]) -> Optional[Tuple[torch.Tensor, Kernel]]:
    """The op by ktune's kernel, and that kernel; None (after recording why) if it cannot."""
    cols = x.shape[-1]
    rows = x.numel() // cols
    kernel = _kernel((op, x.dtype, rows, cols, x.get_device()), template_op, _DTYPES[x.dtype], None,
                     {"rows": rows, "cols": cols})
    if isinstance(kernel, str):
        _fallback(op, kernel)
        return None
    out = torch.empty_like(x)
    addresses = (x.data_ptr(), *[p.data_ptr() for p in params], out.data_ptr())
    if not _launch(op, kernel, addresses, x, scalars):
        return None
    return out, kernel


def softmax(x: torch.Tensor, dim: int = -1, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """torch.softmax over the last dimension (fp32 math; the output has x's dtype)."""
    plan = _plans.get(("softmax", x.shape, x.dtype, x.get_device()))
    if (plan is not None and dtype is None and (dim == -1 or dim == x.dim() - 1)
            and x.is_contiguous() and _no_grad(x)):
        px = x.data_ptr()
        if not px & 15:
            out = _fast("softmax", plan, x, (px,))
            return out if out is not None else torch.softmax(x, dim=dim, dtype=dtype)
    reason = _rows_reason(x)
    if reason is None and dtype is not None and dtype != x.dtype:
        reason = "dtype= conversion"
    if reason is None and dim not in (-1, x.dim() - 1):
        reason = "softmax over a dimension other than the last"
    if reason is None:
        served = _rows("softmax", "softmax", x, (), None)
        if served is not None:
            out, kernel = served
            _remember(_plans, ("softmax", x.shape, x.dtype, x.get_device()), (kernel, out.shape))
            return out
    else:
        _fallback("softmax", reason)
    return torch.softmax(x, dim=dim, dtype=dtype)


def _normalized_reason(x: torch.Tensor, normalized_shape: Sequence[int]) -> Optional[str]:
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if len(shape) != 1 or x.dim() == 0 or x.shape[-1] != shape[0]:
        return "normalized_shape other than the last dimension"
    return None


def rms_norm(x: torch.Tensor, normalized_shape: Sequence[int], weight: Optional[torch.Tensor] = None,
             eps: Optional[float] = None) -> torch.Tensor:
    """torch.nn.functional.rms_norm over the last dimension (eps None: torch.finfo(x.dtype).eps)."""
    reason = _rows_reason(x, weight) or _normalized_reason(x, normalized_shape)
    if reason is None and weight is None:
        reason = "weight=None (ktune's rmsnorm takes a weight)"
    if reason is None:
        e = torch.finfo(x.dtype).eps if eps is None else eps
        served = _rows("rms_norm", "rmsnorm", x, (weight,), {"eps": e})
        if served is not None:
            return served[0]
    else:
        _fallback("rms_norm", reason)
    return F.rms_norm(x, normalized_shape, weight, eps)


def layer_norm(x: torch.Tensor, normalized_shape: Sequence[int], weight: Optional[torch.Tensor] = None,
               bias: Optional[torch.Tensor] = None, eps: float = 1e-5) -> torch.Tensor:
    """torch.nn.functional.layer_norm over the last dimension, with weight and bias."""
    reason = _rows_reason(x, weight, bias) or _normalized_reason(x, normalized_shape)
    if reason is None and (weight is None or bias is None):
        reason = "weight or bias None (ktune's layernorm takes both)"
    if reason is None:
        served = _rows("layer_norm", "layernorm", x, (weight, bias), {"eps": eps})
        if served is not None:
            return served[0]
    else:
        _fallback("layer_norm", reason)
    return F.layer_norm(x, normalized_shape, weight, bias, eps)
