"""The Python client against a real ktuned (started here on a temporary socket)."""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import ktune

KTUNED = os.environ.get("KTUNED", "ktuned")
H200 = "nvidia-h200.sm90.132sm.140gib"


def start_daemon(tmp):
    sock = os.path.join(tmp, "ktuned.sock")
    log = open(os.path.join(tmp, "ktuned.log"), "ab")
    proc = subprocess.Popen(
        [KTUNED, "--socket", sock, "--data-dir", os.path.join(tmp, "data"),
         "--set", "server.metrics=127.0.0.1:0", "--set", "store.seed_tables="],
        stdout=log, stderr=log)
    log.close()  # the child holds its own descriptor
    with ktune.Client(socket_path=sock, timeout=1.0, cache_ttl=0) as client:
        for _ in range(200):
            try:
                if client.status()["pid"] == proc.pid:
                    return proc, sock
            except ktune.KtuneError:
                time.sleep(0.05)
    proc.kill()
    raise RuntimeError("ktuned did not start")


def stop_daemon(proc):
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=10)


def winner(gemm, m, median_us):
    """A winner record in the export format, for the template `gemm` (from the templates op)."""
    params = {p["name"]: p["values"][0] for p in gemm["params"]}
    # A valid config: take the daemon's own heuristic answer for this shape.
    return {
        "device": {"name": "NVIDIA H200", "cc": 90, "sm_count": 132, "memory_gib": 140},
        "problem": {"op": "gemm", "dtype": "bf16", "out_dtype": "bf16", "layout": "rc",
                    "dims": {"M": m, "N": 4096, "K": 4096}},
        "validators": {"driver": "580.159.03", "nvrtc": "13.0", "store_format": 1},
        "ranked": [{"template": "gemm", "template_hash": gemm["hash"], "params": params,
                    "median_us": median_us, "spread_pct": 1.0,
                    "tflops": 2.0 * m * 4096 * 4096 / (median_us * 1e6), "gbps": 0.0}],
        "ref_error": 0.003, "node_id": "h200-node", "timestamp": 1790000000, "trials": 300,
        "strategy": "model",
    }


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ktune-py-")
        self.proc, self.sock = start_daemon(self.tmp)
        self.client = ktune.Client(socket_path=self.sock, cache_ttl=0)

    def tearDown(self):
        self.client.close()
        if self.proc.poll() is None:
            stop_daemon(self.proc)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def write_table(self):
        gemm = next(t for t in self.client.templates()["templates"] if t["name"] == "gemm")
        records = []
        for m, us in ((4096, 190.0), (16, 22.0)):
            # Use the daemon's heuristic config of `gemm` for the shape, so the params are valid
            # (on the H200, gemm_tma's heuristic entry comes first: heuristic_rank).
            h = self.client.lookup("gemm", layout="rc", device=H200, M=m, N=4096, K=4096,
                                   limit=8)
            rec = winner(gemm, m, us)
            rec["ranked"][0]["params"] = next(e for e in h.entries if e.template == "gemm").params
            if m == 4096:
                rec["timing_l2"] = "flushed"  # the other record does not say
            records.append(rec)
        path = os.path.join(self.tmp, "h200.json")
        with open(path, "w") as f:
            json.dump({"ktune_table": 1, "count": len(records), "winners": records}, f)
        return path

    def lookups(self):
        return [self.client.lookup("gemm", dtype="bf16", layout="rc", device="nvidia-h200", M=m, N=4096, K=4096)
                for m in (4096, 8, 333)]

    def test_falls_back_to_the_node_wide_socket(self):
        # No per-user daemon (an empty XDG_RUNTIME_DIR, no KTUNE_SOCKET): the node-wide socket.
        env = {k: os.environ.get(k) for k in ("XDG_RUNTIME_DIR", "KTUNE_SOCKET")}
        os.environ["XDG_RUNTIME_DIR"] = os.path.join(self.tmp, "runtime")
        os.environ.pop("KTUNE_SOCKET", None)
        try:
            with ktune.Client(system_socket_path=self.sock, cache_ttl=0) as client:
                self.assertEqual(client.status()["pid"], self.proc.pid)
                self.assertEqual(client.socket_path, self.sock)
            missing = os.path.join(self.tmp, "none.sock")
            with ktune.Client(system_socket_path=missing, cache_ttl=0) as client:
                with self.assertRaises(ktune.KtuneError) as e:
                    client.status()
                self.assertIn(os.path.join(self.tmp, "runtime", "ktune", "ktuned.sock"), str(e.exception))
                self.assertIn("node-wide " + missing, str(e.exception))
        finally:
            for k, v in env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def test_import_lookup_restart(self):
        report = self.client.import_file(self.write_table())
        self.assertEqual(report["added"], 2)
        exact, near, heur = self.lookups()
        self.assertEqual(exact.best.provenance, "exact")
        self.assertEqual(exact.best.median_us, 190.0)
        self.assertEqual(exact.best.timing_l2, "flushed")
        self.assertGreater(exact.best.tflops, 0)
        self.assertTrue(exact.best.kernel["name_expression"].startswith("ktune_gemm<"))
        self.assertEqual(near.best.provenance, "nearest")
        self.assertEqual(near.best.source, "gemm|bf16|bf16|rc|M=16,N=4096,K=4096")
        self.assertEqual(near.best.distance, 1.0)
        self.assertEqual(near.best.timing_l2, "")
        self.assertEqual(heur.best.provenance, "heuristic")
        # No layout: gemm assumes rc (the tuned one) and the reply says so.
        assumed = self.client.lookup("gemm", device="h200", M=4096, N=4096, K=4096)
        self.assertEqual(assumed.assumed, {"layout": "rc"})
        self.assertEqual(assumed.best.provenance, "exact")
        self.assertEqual(exact.assumed, {})

        self.assertEqual(stop_daemon(self.proc), 0)
        self.proc, _ = start_daemon(self.tmp)
        again = self.lookups()  # the client reconnects by itself
        for before, after in zip((exact, near, heur), again):
            self.assertEqual([e.provenance for e in before.entries], [e.provenance for e in after.entries])
            self.assertEqual(before.best.params, after.best.params)

    def test_pinned_lookups(self):
        self.client.import_file(self.write_table())
        made = self.client.pin("run1", device="h200", op="gemm")
        self.assertEqual(made["count"], 2)
        self.assertEqual([p["name"] for p in self.client.pins()["pins"]], ["run1"])
        self.assertEqual(len(self.client.pins("run1")["winners"]), 2)
        pinned = self.client.lookup("gemm", layout="rc", device=H200, pin="run1",
                                    M=4096, N=4096, K=4096)
        self.assertEqual(pinned.pin, {"name": "run1", "id": made["id"]})
        self.assertEqual(pinned.best.provenance, "exact")
        self.assertEqual(self.client.lookup("gemm", layout="rc", device=H200,
                                            M=4096, N=4096, K=4096).pin, {})
        with self.assertRaises(ktune.KtuneError) as cm:
            self.client.pin("run1")
        self.assertEqual(cm.exception.code, "already_exists")
        self.client.unpin("run1")
        with self.assertRaises(ktune.KtuneError) as cm:
            self.client.lookup("gemm", layout="rc", device=H200, pin="run1", M=8, N=8, K=8)
        self.assertEqual(cm.exception.code, "not_found")
        self.assertIn("run1", cm.exception.message)

    def test_errors_carry_codes(self):
        with self.assertRaises(ktune.KtuneError) as cm:
            self.client.lookup("gemm", device=H200, M=0, N=8, K=8)
        self.assertEqual(cm.exception.code, "invalid_problem")
        with self.assertRaises(ktune.KtuneError) as cm:
            self.client.call("frobnicate")
        self.assertEqual(cm.exception.code, "unknown_op")
        with self.assertRaises(ktune.KtuneError) as cm:
            self.client.lookup("gemm", M=8, N=8, K=8)  # no GPU here and no device named
        self.assertEqual(cm.exception.code, "unavailable")
        self.assertEqual(self.client.status()["pid"], self.proc.pid)  # still serving

    def test_cache_returns_the_same_answer_without_a_round_trip(self):
        cached = ktune.Client(socket_path=self.sock, cache_ttl=60)
        first = cached.lookup("softmax", dtype="bf16", device=H200, rows=32768, cols=4096)
        requests = cached.status()["requests"]
        second = cached.lookup("softmax", dtype="bf16", device=H200, rows=32768, cols=4096)
        self.assertEqual(first, second)
        self.assertEqual(cached.status()["requests"], requests + 1)  # only the status call
        # Each caller gets a reply of its own: changing one changes nothing the cache holds.
        self.assertIsNot(first, second)
        first.entries.pop(0)
        second.entries[0].params["THREADS"] = -1
        third = cached.lookup("softmax", dtype="bf16", device=H200, rows=32768, cols=4096)
        self.assertEqual(len(third.entries), len(second.entries))
        self.assertNotEqual(third.entries[0].params["THREADS"], -1)
        cached.close()

    def test_a_call_left_midway_does_not_hand_its_reply_to_the_next(self):
        class Deadline(Exception):
            pass

        def expire(signum, frame):
            raise Deadline()
        old = signal.signal(signal.SIGALRM, expire)
        self.proc.send_signal(signal.SIGSTOP)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            with self.assertRaises(Deadline):  # an application's own deadline, or Ctrl-C
                self.client.lookup("softmax", device=H200, rows=4096, cols=4096)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
            self.proc.send_signal(signal.SIGCONT)
        reply = self.client.lookup("gemm", layout="rc", device=H200, M=4096, N=4096, K=4096)
        self.assertIn("M=4096,N=4096,K=4096", reply.problem_key)
        self.assertIn("pid", self.client.status())

    def test_bad_arguments_are_refused_before_anything_is_sent(self):
        with self.assertRaises(ktune.KtuneError) as e:
            self.client.lookup("gemm", device=H200, M=float("nan"), N=1, K=1)
        self.assertEqual(e.exception.code, "bad_request")
        self.assertIn("NaN", e.exception.message)
        for tcp in ("127.0.0.1", "127.0.0.1:http", ":80", "h:99999"):
            with self.assertRaises(ValueError):
                ktune.Client(tcp=tcp)
        with self.assertRaises(ValueError):
            ktune.Client(socket_path=self.sock, timeout=0)

    def test_an_ipv6_address_in_brackets_connects_without_them(self):
        # "[::1]:7781", as ktune status prints it, was handed to getaddrinfo with its brackets.
        import socket
        seen = []

        def create_connection(address, timeout=None):
            seen.append(address)
            raise ConnectionRefusedError("refused")
        real, socket.create_connection = socket.create_connection, create_connection
        try:
            with self.assertRaises(ktune.KtuneError) as e:
                ktune.Client(tcp="[::1]:17781").status()
        finally:
            socket.create_connection = real
        self.assertEqual(seen[0], ("::1", 17781))
        self.assertEqual(e.exception.code, "connection_failed")

    def test_a_table_whose_json_escapes_outgrow_a_line_is_attached(self):
        path = self.write_table()
        self.client.import_table(open(path).read())
        yaml_table = self.client.export_table("yaml")
        # Under 32 KiB of UTF-8, but every Cyrillic letter is six bytes as a JSON escape.
        comment = "\n".join("# таблица настроек для H200: " + "ж" * 60 for _ in range(120))
        self.assertLess(len((comment + yaml_table).encode()), 32 * 1024)
        result = self.client.import_table(comment + "\n" + yaml_table)
        self.assertEqual(result["kept"], 2)

    def test_a_parsed_table_is_imported_as_json_and_other_objects_are_refused(self):
        # str() of a dict is Python's repr, which the daemon refused as a damaged table.
        with open(self.write_table()) as f:
            table = json.load(f)
        self.assertEqual(self.client.import_table(table)["added"], 2)
        with self.assertRaises(TypeError):
            self.client.import_table(table["winners"])

    def test_export_formats(self):
        self.client.import_file(self.write_table())
        doc = json.loads(self.client.export_table("json"))
        self.assertEqual(doc["count"], 2)
        self.assertTrue(self.client.export_table("csv").startswith("device,op,dtype"))

    def test_jobs_misses_and_a_node_without_gpu(self):
        self.client.lookup("gemm", dtype="bf16", layout="rc", device=H200, M=1000, N=1000, K=1000)
        misses = self.client.misses(5)
        self.assertEqual(misses["top"][0]["problem"], "gemm|bf16|bf16|rc|M=1000,N=1000,K=1000")
        self.assertGreater(misses["top"][0]["worth_us"], 0)
        self.assertEqual(self.client.jobs(), [])
        with self.assertRaises(ktune.KtuneError) as e:  # no GPU here: nothing to tune on
            self.client.tune("gemm", dtype="bf16", layout="rc", M=1000, N=1000, K=1000)
        self.assertEqual(e.exception.code, "unavailable")
        with self.assertRaises(ktune.KtuneError) as e:
            self.client.job("000000000001")
        self.assertEqual(e.exception.code, "not_found")
        with self.assertRaises(ktune.KtuneError) as e:
            list(self.client.watch("000000000001"))
        self.assertEqual(e.exception.code, "not_found")

    def test_daemon_not_running(self):
        c = ktune.Client(socket_path=os.path.join(self.tmp, "nope.sock"))
        with self.assertRaises(ktune.KtuneError) as cm:
            c.status()
        self.assertEqual(cm.exception.code, "connection_failed")
        self.assertIn("is ktuned running?", cm.exception.message)


def listening_socket(backlog: int):
    """A Unix socket listening in a new temporary directory: (the directory, its path, it)."""
    import socket
    tmp = tempfile.mkdtemp(prefix="ktune-py-")
    path = os.path.join(tmp, "s.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(backlog)
    return tmp, path, server


class CloseNoticeTest(unittest.TestCase):
    """A daemon that closed an idle connection wrote a notice first (a timeout, id null); a request
    sent on that connection reads it. The client reconnects and sends again."""

    def test_the_notice_is_not_the_reply(self):
        import threading
        tmp, path, server = listening_socket(2)
        served = []

        def serve():
            for n in range(2):
                conn, _ = server.accept()
                with conn, conn.makefile("rb") as f:
                    request = json.loads(f.readline())
                    if n == 0:
                        reply = {"v": 1, "id": None, "ok": False,
                                 "error": {"code": "timeout", "message": "no complete request"}}
                    else:
                        reply = {"v": 1, "id": request["id"], "ok": True, "result": {"pid": 7}}
                    conn.sendall((json.dumps(reply) + "\n").encode())
                    served.append(n)
        t = threading.Thread(target=serve)
        t.start()
        try:
            with ktune.Client(socket_path=path, timeout=5) as c:
                self.assertEqual(c.status(), {"pid": 7})
        finally:
            t.join(timeout=10)
            server.close()
            shutil.rmtree(tmp, ignore_errors=True)
        self.assertEqual(served, [0, 1])


class StalledDaemonTest(unittest.TestCase):
    """Threads sharing a Client take turns on its connection; the turn they wait for is part of
    their timeout, so a daemon that reads requests and never answers fails all of them within
    about one timeout (it was one timeout per thread, in turn: 4 s for these four)."""

    def test_every_waiting_thread_times_out_within_one_timeout(self):
        import socket
        import threading
        tmp, path, server = listening_socket(8)
        held, stop = [], threading.Event()

        def accept():  # accepts and never answers
            server.settimeout(0.1)
            while not stop.is_set():
                try:
                    held.append(server.accept()[0])
                except socket.timeout:
                    pass
        acceptor = threading.Thread(target=accept)
        acceptor.start()
        errors = []
        try:
            with ktune.Client(socket_path=path, timeout=1.0, cache_ttl=0) as c:
                def one():
                    try:
                        c.status()
                        errors.append("answered")
                    except ktune.KtuneError as e:
                        errors.append(e.code)
                threads = [threading.Thread(target=one) for _ in range(4)]
                t0 = time.monotonic()
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(timeout=30)
                elapsed = time.monotonic() - t0
        finally:
            stop.set()
            acceptor.join(timeout=10)
            for conn in held:
                conn.close()
            server.close()
            shutil.rmtree(tmp, ignore_errors=True)
        self.assertEqual(errors, ["timeout"] * 4)
        self.assertLess(elapsed, 3.2)   # one timeout and scheduling; in turn it would be 4 s


class OpTableTest(unittest.TestCase):
    """The Python client covers every op of the protocol's one op table (client/protocol.h)."""

    # ops whose Python method is spelled differently (Python keywords, clearer names)
    METHOD = {"export": "export_table", "import": "import_table"}

    def test_every_op_has_a_method(self):
        import re
        here = os.path.dirname(os.path.abspath(__file__))
        header = os.path.join(here, "..", "..", "..", "client", "protocol.h")
        with open(header) as f:
            text = f.read()
        table = text[text.index("k_ops[] = {"):]
        table = table[:table.index("};")]
        ops = re.findall(r'\{"([a-z_]+)", op_', table)
        self.assertGreaterEqual(len(ops), 12)
        for op in ops:
            self.assertTrue(callable(getattr(ktune.Client, self.METHOD.get(op, op), None)),
                            f"ktune.Client has no method for op '{op}'")


if __name__ == "__main__":
    unittest.main()
