"""The ktuned client. See the package docstring for an example."""

import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Tuple

PROTOCOL_VERSION = 2  # v2: lookup entries carry a launch description (docs/protocol.md)
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
    timing_l2: str = ""  # how median_us was timed: flushed | rotated; "" if not said
    tflops: float = 0.0
    gbps: float = 0.0
    distance: float = 0.0
    source: str = ""  # nearest: the tuned shape answering; stale: why
    kernel: Dict[str, Any] = field(default_factory=dict)  # name_expression, arch, grid, block, smem[, cluster]
    launch: Dict[str, Any] = field(default_factory=dict)  # v2 launch description; {} if not served

    @staticmethod
    def from_json(j: Dict[str, Any]) -> "Entry":
        return Entry(
            provenance=j["provenance"],
            template=j["template"],
            template_hash=j.get("template_hash", ""),
            params=dict(j["params"]),
            median_us=j.get("median_us", 0.0),
            timing_l2=j.get("timing_l2", ""),
            tflops=j.get("tflops", 0.0),
            gbps=j.get("gbps", 0.0),
            distance=j.get("distance", 0.0),
            source=j.get("from", ""),
            kernel=dict(j.get("kernel", {})),
            launch=dict(j.get("launch", {})),
        )

    def to_json(self) -> Dict[str, Any]:
        """The entry as the daemon sent it (what the kernel op's ``entry`` field takes)."""
        j: Dict[str, Any] = {"provenance": self.provenance, "template": self.template,
                             "template_hash": self.template_hash, "params": dict(self.params),
                             "kernel": dict(self.kernel)}
        if self.launch:
            j["launch"] = self.launch
        return j


@dataclass
class LookupReply:
    device: str
    problem_key: str
    entries: List[Entry]
    # What the daemon filled in for fields the request left out, e.g. {"layout": "rc"}.
    assumed: Dict[str, str] = field(default_factory=dict)
    # The pin that answered ({"name", "id"}; the id is the same on every node), {} without one.
    pin: Dict[str, str] = field(default_factory=dict)

    @property
    def best(self) -> Entry:
        return self.entries[0]


#: Where a node-wide ktuned (the systemd unit) listens for every user; tried after the per-user
#: default when neither ``socket_path`` nor ``$KTUNE_SOCKET`` names a socket.
SYSTEM_SOCKET_PATH = "/run/ktune/ktuned.sock"


def _socket_group(path: str) -> Optional[str]:
    """The group that may open ``path``: the socket's, else the nearest enterable directory's."""
    import grp
    p = path
    while p and p != "/":
        try:
            gid = os.stat(p).st_gid
        except OSError:
            p = os.path.dirname(p)
            continue
        try:
            return grp.getgrgid(gid).gr_name
        except KeyError:
            return str(gid)
    return None


def _connect_failure(path: str, e: OSError, also_tried: Optional[str] = None) -> str:
    message = f"cannot connect to ktuned at {path}: {e.strerror or e}"
    if isinstance(e, PermissionError):
        group = _socket_group(path)
        who = f"group '{group}'" if group else "the daemon's group"
        message += (f" (the socket is for members of {who}: join it with "
                    f"`sudo usermod -aG {group or '<the daemon group>'} $USER` and log in again, "
                    f"or ask the node's admin; docs/operations.md)")
    elif isinstance(e, (FileNotFoundError, ConnectionRefusedError)):
        if also_tried:
            message += f"; nor at the node-wide {also_tried}"
        message += " (is ktuned running? start it with `ktuned`, or set KTUNE_SOCKET to its socket)"
    return message


def _dumps(obj: Any, **kwargs: Any) -> str:
    """json.dumps refusing NaN and infinities (JSON has neither; the daemon would read a request
    it cannot parse) with a KtuneError naming the problem."""
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError as e:
        raise KtuneError("bad_request", f"request not sent: {e} (NaN and infinity are not JSON)") \
            from None


def _lookup_reply(result: Dict[str, Any]) -> LookupReply:
    return LookupReply(result["device"], result["problem_key"],
                       [Entry.from_json(e) for e in result["entries"]],
                       dict(result.get("assumed", {})), dict(result.get("pin", {})))


def default_socket_path() -> str:
    """The socket ktuned listens on by default ($KTUNE_SOCKET overrides)."""
    if os.environ.get("KTUNE_SOCKET"):
        return os.environ["KTUNE_SOCKET"]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "ktune", "ktuned.sock")
    return f"/tmp/ktune-{os.getuid()}/ktuned.sock"


def _no_reply_within(budget: float, why: str = "") -> KtuneError:
    """The timeout error of a call given `budget` seconds; `why`, when given, follows."""
    return KtuneError("timeout", f"no reply from ktuned within {budget} s" +
                      (f": {why}" if why else ""))


class Client:
    """A synchronous client of ktuned.

    :param socket_path: Unix socket of the daemon (default: :func:`default_socket_path`).
    :param tcp: ``"host:port"`` to use TCP instead.
    :param token: token sent with TCP requests.
    :param timeout: seconds per request, counted from the call: threads sharing a Client take
        turns on its connection, and the time one waits for its turn is part of its timeout (a
        stalled daemon fails every waiting thread within one timeout, not one after another).
    :param cache_ttl: seconds a lookup answer is reused in process (0 disables the cache).
    :param kernel_timeout: seconds a kernel request may take (it may wait for an NVRTC compile).
    :param system_socket_path: the node-wide daemon's socket, tried when neither ``socket_path``
        nor ``$KTUNE_SOCKET`` is given and no daemon listens at the per-user default (None: never).
    """

    def __init__(self, socket_path: Optional[str] = None, tcp: Optional[str] = None,
                 token: Optional[str] = None, timeout: float = 2.0, cache_ttl: float = 60.0,
                 kernel_timeout: float = 60.0,
                 system_socket_path: Optional[str] = SYSTEM_SOCKET_PATH):
        self.socket_path = socket_path or (None if tcp else default_socket_path())
        # The node-wide daemon's socket, tried when the per-user default has no daemon.
        self._fallback_socket: Optional[str] = None
        if not socket_path and not tcp and not os.environ.get("KTUNE_SOCKET"):
            if system_socket_path and self.socket_path != system_socket_path:
                self._fallback_socket = system_socket_path
        if tcp is not None:
            host, _, port = tcp.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"tcp must be 'host:port' with a port 1..65535, got {tcp!r}")
        if not timeout > 0 or not kernel_timeout > 0:
            raise ValueError("timeout and kernel_timeout are seconds > 0")
        self.tcp = tcp
        self.token = token
        self.timeout = timeout
        self.cache_ttl = cache_ttl
        self.kernel_timeout = kernel_timeout
        self._sock: Optional[socket.socket] = None
        self._pending = b""
        self._next_id = 1
        self._lock = threading.Lock()
        # Lookup answers by request, as JSON text: each hit builds a reply of its own, so a caller
        # that changes the one it got changes nothing another caller gets.
        self._cache: Dict[str, Tuple[float, str]] = {}

    # ---- public API --------------------------------------------------------------------------

    def lookup(self, op: str, dtype: str = "bf16", out_dtype: Optional[str] = None,
               layout: Optional[str] = None, device: Optional[str] = None, limit: int = 4,
               pin: Optional[str] = None, **dims: int) -> LookupReply:
        """Best kernels for ``op`` on ``dims`` (keyword arguments: ``M=4096, N=4096, K=4096``).

        ``pin``: answer from that pin only (:meth:`pin`), so every rank of a distributed job gets
        the same kernels whatever is tuned meanwhile.
        """
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
        if pin:
            body["pin"] = pin
        key = _dumps(body, sort_keys=True)
        now = time.monotonic()
        if self.cache_ttl > 0:
            hit = self._cache.get(key)
            if hit and hit[0] > now:
                return _lookup_reply(json.loads(hit[1]))
        result = self.call("lookup", **body)
        if self.cache_ttl > 0:
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[key] = (now + self.cache_ttl, json.dumps(result))
        return _lookup_reply(result)

    def kernel(self, op: str, dtype: str = "bf16", out_dtype: Optional[str] = None,
               layout: Optional[str] = None, device: Optional[str] = None,
               entry: Optional[Entry] = None, template: Optional[str] = None,
               params: Optional[Dict[str, int]] = None, **dims: int) -> Dict[str, Any]:
        """The compiled cubin of a config for ``op`` on ``dims``: ``entry`` (a lookup entry), or
        ``template`` + ``params``, or (neither) the best entry of a lookup.

        Returns the kernel op's result: ``cubin`` (base64), ``lowered_name``, ``launch``, ...; give
        it to :class:`ktune.Kernel` to launch it.
        """
        if not dims:
            raise ValueError("give the problem's dims as keyword arguments, e.g. M=4096")
        problem: Dict[str, Any] = {"op": op, "dtype": dtype}
        if out_dtype:
            problem["out_dtype"] = out_dtype
        if layout:
            problem["layout"] = layout
        problem["dims"] = dict(dims)
        body: Dict[str, Any] = {"problem": problem}
        if template is None and entry is None:
            reply = self.lookup(op, dtype=dtype, out_dtype=out_dtype, layout=layout, device=device,
                                limit=1, **dims)
            entry, device = reply.best, reply.device
        if device:
            body["device"] = device
        if entry is not None:
            body["entry"] = entry.to_json()
        else:
            body["template"] = template
            body["params"] = dict(params or {})
        return self._call("kernel", body, b"", timeout=self.kernel_timeout)

    def status(self) -> Dict[str, Any]:
        return self.call("status")

    def templates(self) -> Dict[str, Any]:
        return self.call("templates")

    def export_table(self, fmt: str = "json", device: Optional[str] = None) -> str:
        body: Dict[str, Any] = {"format": fmt}
        if device:
            body["device"] = device
        return self.call("export", **body)["content"]

    def import_table(self, table: Any) -> Dict[str, Any]:
        """Merges a tuning table (JSON, YAML or CSV, as export writes them) given as text or UTF-8
        bytes, or a JSON table already parsed (a dict, as json.load gives it). The daemon never
        opens a client's path. This client's cached lookups are dropped.

        Tables larger than a request line travel as the request's attachment.
        """
        if isinstance(table, dict):
            table = json.dumps(table)
        elif not isinstance(table, (str, bytes, bytearray)):
            raise TypeError(f"import_table takes text, bytes or a dict, not {type(table).__name__}")
        try:
            text = table.decode() if isinstance(table, (bytes, bytearray)) else table
            data = text.encode()
        except UnicodeError as e:
            raise KtuneError("bad_request", f"the table is not valid UTF-8 text: {e}") from None
        # Inline, the table is a JSON string: escapes can make it several times its UTF-8 size.
        if len(json.dumps(text)) < 32 * 1024:
            result = self.call("import", table=text)
        else:
            result = self._call("import", {"attach": len(data)}, data)
        with self._lock:
            self._cache.clear()
        return result

    def import_file(self, path: str) -> Dict[str, Any]:
        """Reads a table file here and imports its content."""
        with open(path, "r", encoding="utf-8") as f:
            return self.import_table(f.read())

    # ---- background tuning -------------------------------------------------------------------

    def tune(self, op: str, dtype: str = "bf16", out_dtype: Optional[str] = None,
             layout: Optional[str] = None, device: Optional[str] = None,
             strategy: Optional[str] = None, budget_trials: Optional[int] = None,
             budget_seconds: Optional[float] = None, templates: Optional[List[str]] = None,
             seeds: Optional[List[Dict[str, int]]] = None, **dims: int) -> Dict[str, Any]:
        """Queues a tuning job (or finds the one queued for the same problem); returns its job.

        ``templates`` restricts the search to those templates; ``seeds`` are whole configs
        ({NAME: value}) measured right after the heuristics' configs."""
        if not dims:
            raise ValueError("give the problem's dims as keyword arguments, e.g. M=4096")
        problem: Dict[str, Any] = {"op": op, "dtype": dtype, "dims": dict(dims)}
        if out_dtype:
            problem["out_dtype"] = out_dtype
        if layout:
            problem["layout"] = layout
        body: Dict[str, Any] = {"problem": problem}
        for k, v in (("device", device), ("strategy", strategy), ("budget_trials", budget_trials),
                     ("budget_seconds", budget_seconds), ("templates", templates),
                     ("seeds", seeds)):
            if v is not None:
                body[k] = v
        return self.call("tune", **body)["job"]

    def plan(self, plan_text: str, device: Optional[str] = None) -> Dict[str, Any]:
        """Queues a job per problem of a YAML/JSON plan, all or none."""
        body: Dict[str, Any] = {"plan": plan_text}
        if device:
            body["device"] = device
        return self.call("plan", **body)

    def jobs(self, limit: int = 50, state: Optional[str] = None) -> List[Dict[str, Any]]:
        body: Dict[str, Any] = {"limit": limit}
        if state:
            body["state"] = state
        return self.call("jobs", **body)["jobs"]

    def job(self, job_id: str) -> Dict[str, Any]:
        return self.call("job", job=job_id)

    def cancel(self, job_id: str) -> Dict[str, Any]:
        return self.call("cancel", job=job_id)

    def fleet(self) -> Dict[str, Any]:
        """The fleet as this daemon sees it (docs/protocol.md `fleet`): Redis link, nodes, claims."""
        return self.call("fleet")

    def pin(self, name: str, device: Optional[str] = None,
            op: Optional[str] = None) -> Dict[str, Any]:
        """Snapshots the daemon's winners (all, or one device class / op) as pin ``name``:
        immutable, fleet-wide with a fleet. Returns the pin (``name``, ``id``, ``count``, ...)."""
        body: Dict[str, Any] = {"name": name}
        if device:
            body["device"] = device
        if op:
            body["problem_op"] = op
        return self.call("pin", **body)

    def unpin(self, name: str) -> Dict[str, Any]:
        """Deletes pin ``name`` (fleet-wide with a fleet)."""
        return self.call("unpin", name=name)

    def pins(self, name: Optional[str] = None) -> Dict[str, Any]:
        """The pins (``{"pins": [...]}``), or with ``name`` that pin and its ``winners``."""
        return self.call("pins", **({"name": name} if name else {}))

    def misses(self, limit: int = 20) -> Dict[str, Any]:
        return self.call("misses", limit=limit)

    def watch(self, job_id: str, timeout: float = 1800.0) -> Iterator[Dict[str, Any]]:
        """Yields the job after each change, the last time as it ended (done/failed/cancelled).

        Uses its own connection, so the client stays usable from other threads meanwhile.
        """
        watcher = Client(self.socket_path, tcp=self.tcp, token=self.token, timeout=timeout,
                         cache_ttl=0)
        try:
            with watcher._lock:
                request = {"v": PROTOCOL_VERSION, "id": 1, "op": "watch", "job": job_id}
                if watcher.tcp and watcher.token:
                    request["token"] = watcher.token
                watcher._connect()
                assert watcher._sock is not None
                watcher._sock.sendall((json.dumps(request) + "\n").encode())
                while True:
                    reply = watcher._read_reply()
                    if not reply.get("ok"):
                        err = reply.get("error", {})
                        raise KtuneError(err.get("code", "internal"), err.get("message", ""))
                    if "event" in reply:
                        yield reply["event"]
                        continue
                    yield reply["result"]
                    return
        except socket.timeout:
            raise KtuneError("timeout", f"no progress from ktuned within {timeout} s") from None
        finally:
            watcher.close()

    def call(self, op: str, **body: Any) -> Any:
        """Sends one request and returns its ``result``; raises :class:`KtuneError` on error."""
        return self._call(op, body, b"")

    def _call(self, op: str, body: Dict[str, Any], attachment: bytes,
              timeout: Optional[float] = None) -> Any:
        budget = timeout or self.timeout
        deadline = time.monotonic() + budget
        if not self._lock.acquire(timeout=budget):
            raise _no_reply_within(budget, "the connection was busy with another thread's request")
        try:
            return self._call_locked(op, body, attachment, budget, deadline)
        finally:
            self._lock.release()

    def _call_locked(self, op: str, body: Dict[str, Any], attachment: bytes, budget: float,
                     deadline: float) -> Any:
        """The request and its reply. REQUIRES: self._lock held."""
        request = {"v": PROTOCOL_VERSION, "id": self._next_id, "op": op}
        self._next_id += 1
        request.update(body)
        if self.tcp and self.token:
            request["token"] = self.token
        line = (_dumps(request, separators=(",", ":")) + "\n").encode() + attachment
        for attempt in (0, 1):  # one retry if the daemon restarted since the last call
            if deadline - time.monotonic() <= 0:  # nothing sent: the connection stays as it is
                why = ("the connection was busy with another thread's request" if attempt == 0
                       else "the request was not sent again")
                raise _no_reply_within(budget, why)
            try:
                self._connect()
                if self._sock is not None:
                    self._sock.settimeout(max(deadline - time.monotonic(), 1e-3))
                try:
                    reply = self._roundtrip(line, deadline)
                finally:
                    if self._sock is not None:
                        self._sock.settimeout(self.timeout)
            except (ConnectionError, BrokenPipeError) as e:
                self._close()
                if attempt == 1:
                    raise KtuneError("connection_failed", str(e)) from None
                continue
            except socket.timeout:
                self._close()
                raise _no_reply_within(budget) from None
            except BaseException:
                # Left mid-request (Ctrl-C, a signal handler's exception): its reply may still
                # come, and the next request must not read it as its own.
                self._close()
                raise
            # The daemon's notice that it closed an idle connection (a timeout, id null),
            # written before this request arrived: reconnect and send again. Other replies
            # without an id (frame_too_large) are this request's.
            if (reply.get("id") is None and not reply.get("ok")
                    and reply.get("error", {}).get("code") == "timeout" and attempt == 0):
                self._close()
                continue
            if reply.get("id") is not None and reply.get("id") != request["id"]:
                self._close()
                raise KtuneError("connection_failed",
                                 f"ktuned answered another request (id {reply.get('id')})")
            break
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
                if host.startswith("[") and host.endswith("]"):  # [::1]:7781, as ktune prints it
                    host = host[1:-1]
                sock = socket.create_connection((host, int(port)), timeout=self.timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            else:
                sock = self._connect_unix()
        except (FileNotFoundError, ConnectionRefusedError) as e:
            where = self.tcp or self.socket_path
            raise KtuneError("connection_failed",
                             f"cannot connect to ktuned at {where}: {e.strerror} (is ktuned running?)") from None
        except OSError as e:
            raise KtuneError("connection_failed", f"cannot connect to ktuned: {e}") from None
        sock.settimeout(self.timeout)
        self._sock = sock
        self._pending = b""

    def _connect_unix_path(self, path: str) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(path)
        except OSError:
            sock.close()
            raise
        return sock

    def _connect_unix(self) -> socket.socket:
        assert self.socket_path is not None
        try:
            return self._connect_unix_path(self.socket_path)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            if not self._fallback_socket:
                raise KtuneError("connection_failed", _connect_failure(self.socket_path, e)) from None
            first = e
        except OSError as e:
            raise KtuneError("connection_failed", _connect_failure(self.socket_path, e)) from None
        fallback = self._fallback_socket
        try:
            sock = self._connect_unix_path(fallback)
        except (FileNotFoundError, ConnectionRefusedError):
            raise KtuneError("connection_failed",
                             _connect_failure(self.socket_path, first, fallback)) from None
        except OSError as e:
            raise KtuneError("connection_failed", _connect_failure(fallback, e)) from None
        self.socket_path, self._fallback_socket = fallback, None
        return sock

    def _roundtrip(self, line: bytes, deadline: Optional[float] = None) -> Dict[str, Any]:
        assert self._sock is not None
        self._sock.sendall(line)
        return self._read_reply(deadline)

    def _read_reply(self, deadline: Optional[float] = None) -> Dict[str, Any]:
        """One reply line; with a deadline (time.monotonic()), socket.timeout once it passes,
        however the reply trickles in."""
        assert self._sock is not None
        # Pieces are searched as they come and joined once: a 70 MB export is thousands of them.
        chunks = [self._pending]
        while b"\n" not in chunks[-1]:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout()
                self._sock.settimeout(left)
            chunk = self._sock.recv(1 << 18)
            if not chunk:
                self._pending = b"".join(chunks)
                raise ConnectionError("ktuned closed the connection")
            chunks.append(chunk)
        raw, _, self._pending = b"".join(chunks).partition(b"\n")
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
