"""The ktuned client. See the package docstring for an example."""

import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

PROTOCOL_VERSION = 1
MAX_FRAME = 64 * 1024


class KtuneError(Exception):
    """An error reply from ktuned, or a failure to reach it.

    ``code`` is the protocol's error code (``invalid_problem``, ``not_found``, ...) or
    ``connection_failed`` / ``timeout`` for transport failures.
    """

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass
class Entry:
    """One ranked answer of a lookup."""

    provenance: str  # exact | nearest | heuristic | stale
    template: str
    template_hash: str
    params: Dict[str, int]
    median_us: float = 0.0
    tflops: float = 0.0
    gbps: float = 0.0
    distance: float = 0.0
    source: str = ""  # nearest: the tuned shape answering; stale: why
    kernel: Dict[str, Any] = field(default_factory=dict)  # name_expression, arch, grid, block, smem

    @staticmethod
    def from_json(j: Dict[str, Any]) -> "Entry":
        return Entry(
            provenance=j["provenance"],
            template=j["template"],
            template_hash=j.get("template_hash", ""),
            params=dict(j["params"]),
            median_us=j.get("median_us", 0.0),
            tflops=j.get("tflops", 0.0),
            gbps=j.get("gbps", 0.0),
            distance=j.get("distance", 0.0),
            source=j.get("from", ""),
            kernel=dict(j.get("kernel", {})),
        )


@dataclass
class LookupReply:
    device: str
    problem_key: str
    entries: List[Entry]

    @property
    def best(self) -> Entry:
        return self.entries[0]


def default_socket_path() -> str:
    """The socket ktuned listens on by default ($KTUNE_SOCKET overrides)."""
    if os.environ.get("KTUNE_SOCKET"):
        return os.environ["KTUNE_SOCKET"]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "ktune", "ktuned.sock")
    return f"/tmp/ktune-{os.getuid()}/ktuned.sock"


class Client:
    """A synchronous client of ktuned.

    :param socket_path: Unix socket of the daemon (default: :func:`default_socket_path`).
    :param tcp: ``"host:port"`` to use TCP instead.
    :param token: token sent with TCP requests.
    :param timeout: seconds per request.
    :param cache_ttl: seconds a lookup answer is reused in process (0 disables the cache).
    """

    def __init__(self, socket_path: Optional[str] = None, tcp: Optional[str] = None,
                 token: Optional[str] = None, timeout: float = 2.0, cache_ttl: float = 60.0):
        self.socket_path = socket_path or (None if tcp else default_socket_path())
        self.tcp = tcp
        self.token = token
        self.timeout = timeout
        self.cache_ttl = cache_ttl
        self._sock: Optional[socket.socket] = None
        self._pending = b""
        self._next_id = 1
        self._lock = threading.Lock()
        self._cache: Dict[str, Tuple[float, LookupReply]] = {}

    # ---- public API --------------------------------------------------------------------------

    def lookup(self, op: str, dtype: str = "bf16", out_dtype: Optional[str] = None,
               layout: Optional[str] = None, device: Optional[str] = None, limit: int = 4,
               **dims: int) -> LookupReply:
        """Best kernels for ``op`` on ``dims`` (keyword arguments: ``M=4096, N=4096, K=4096``)."""
        if not dims:
            raise ValueError("give the problem's dims as keyword arguments, e.g. M=4096")
        problem: Dict[str, Any] = {"op": op, "dtype": dtype}
        if out_dtype:
            problem["out_dtype"] = out_dtype
        if layout:
            problem["layout"] = layout
        problem["dims"] = dict(dims)
        body: Dict[str, Any] = {"problem": problem, "limit": limit}
        if device:
            body["device"] = device
        key = json.dumps(body, sort_keys=True)
        now = time.monotonic()
        if self.cache_ttl > 0:
            hit = self._cache.get(key)
            if hit and hit[0] > now:
                return hit[1]
        result = self.call("lookup", **body)
        reply = LookupReply(result["device"], result["problem_key"],
                            [Entry.from_json(e) for e in result["entries"]])
        if self.cache_ttl > 0:
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[key] = (now + self.cache_ttl, reply)
        return reply

    def status(self) -> Dict[str, Any]:
        return self.call("status")

    def templates(self) -> Dict[str, Any]:
        return self.call("templates")

    def export_table(self, fmt: str = "json", device: Optional[str] = None) -> str:
        body: Dict[str, Any] = {"format": fmt}
        if device:
            body["device"] = device
        return self.call("export", **body)["content"]

    def import_file(self, path: str) -> Dict[str, Any]:
        return self.call("import", path=os.path.abspath(path))

    def call(self, op: str, **body: Any) -> Any:
        """Sends one request and returns its ``result``; raises :class:`KtuneError` on error."""
        with self._lock:
            request = {"v": PROTOCOL_VERSION, "id": self._next_id, "op": op}
            self._next_id += 1
            request.update(body)
            if self.tcp and self.token:
                request["token"] = self.token
            line = (json.dumps(request, separators=(",", ":")) + "\n").encode()
            for attempt in (0, 1):  # one retry if the daemon restarted since the last call
                try:
                    self._connect()
                    reply = self._roundtrip(line)
                    break
                except (ConnectionError, BrokenPipeError) as e:
                    self._close()
                    if attempt == 1:
                        raise KtuneError("connection_failed", str(e)) from None
                except socket.timeout:
                    self._close()
                    raise KtuneError("timeout", f"no reply from ktuned within {self.timeout} s") from None
            if not reply.get("ok"):
                err = reply.get("error", {})
                raise KtuneError(err.get("code", "internal"), err.get("message", ""))
            return reply.get("result")

    def close(self) -> None:
        with self._lock:
            self._close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- transport ---------------------------------------------------------------------------

    def _connect(self) -> None:
        if self._sock is not None:
            return
        try:
            if self.tcp:
                host, _, port = self.tcp.rpartition(":")
                sock = socket.create_connection((host, int(port)), timeout=self.timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            else:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    sock.settimeout(self.timeout)
                    sock.connect(self.socket_path)
                except OSError:
                    sock.close()
                    raise
        except (FileNotFoundError, ConnectionRefusedError) as e:
            where = self.tcp or self.socket_path
            raise KtuneError("connection_failed",
                             f"cannot connect to ktuned at {where}: {e.strerror} (is ktuned running?)") from None
        except OSError as e:
            raise KtuneError("connection_failed", f"cannot connect to ktuned: {e}") from None
        sock.settimeout(self.timeout)
        self._sock = sock
        self._pending = b""

    def _roundtrip(self, line: bytes) -> Dict[str, Any]:
        assert self._sock is not None
        self._sock.sendall(line)
        while b"\n" not in self._pending:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ConnectionError("ktuned closed the connection")
            self._pending += chunk
        raw, _, self._pending = self._pending.partition(b"\n")
        try:
            return json.loads(raw)
        except ValueError as e:
            raise KtuneError("parse_error", f"daemon reply is not JSON: {e}") from None

    def _close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None
                self._pending = b""
