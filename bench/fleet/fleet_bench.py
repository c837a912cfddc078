#!/usr/bin/env python3
"""The fleet's figures (issue 14), on one machine, no GPU: a real redis-server on a Unix socket and
ktuned processes (fake workers where tuning is measured).

  bench/fleet/fleet_bench.py [--keys 60] [--winners 1000] [--count 20000] [--seconds 5]

  work         3 nodes miss the same KEYS keys (each in its own order): jobs tuned and trials
               measured with the fleet (claims) and without it (three independent nodes), and the
               time until every node answers every key exact.
  propagation  3 nodes; WINNERS winners committed on node 0 one at a time (imports, at each of
               --prop-rates per second): commit there -> merge on nodes 1 and 2, p50/p99/max from
               `ktune fleet status` (one machine, one clock: no skew).
  lookup       COUNT winners: ktune-lookup-load repeat:63 and zipf:64 (over --zipf-keys shapes,
               after --warmup s) against a node with the fleet off; with it on (node 1 of two,
               which received the table through Redis), idle; and while node 0 commits --rates
               winners/s that node 1 merges.
Writes bench/results/fleet-<host>-<date>.json and prints each point.
"""
import argparse, datetime, json, os, platform, shutil, signal, socket, subprocess, sys, tempfile
import threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
import ktune  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--build", default=os.environ.get("BUILD_DIR", "build"))
ap.add_argument("--keys", type=int, default=60)
ap.add_argument("--count", type=int, default=20_000)
ap.add_argument("--zipf-keys", type=int, default=1000)
ap.add_argument("--warmup", type=float, default=15)
ap.add_argument("--rates", default="2,100", help="winners/s node 0 commits while node 1 is loaded")
ap.add_argument("--seconds", type=float, default=5)
ap.add_argument("--winners", type=int, default=1000)
ap.add_argument("--prop-rates", default="10,100", help="winners/s committed for propagation")
ap.add_argument("--only", default="work,propagation,lookup")
a = ap.parse_args()
a.rates = [float(r) for r in a.rates.split(",")]
a.prop_rates = [float(r) for r in a.prop_rates.split(",")]
BUILD = os.path.join(ROOT, a.build)
KTUNED = os.path.join(BUILD, "daemon", "ktuned")
LOAD = os.path.join(BUILD, "bench", "ktune-lookup-load")
FAKE = os.path.join(BUILD, "tests", "fake-worker")
TEMPLATES = os.path.join(ROOT, "tests", "data", "templates")
TMP = tempfile.mkdtemp(prefix="ktune-fleet-bench-")
procs = []


def cleanup():
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
    shutil.rmtree(TMP, ignore_errors=True)


def wait_for(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.05)
    sys.exit(f"timed out waiting for {what}")


def redis(tag):
    sock = os.path.join(TMP, f"{tag}-redis.sock")
    p = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", sock, "--save", "",
                          "--appendonly", "no", "--loglevel", "warning"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(p)
    wait_for(lambda: os.path.exists(sock), 10, "redis-server")
    return sock


def node(tag, i, redis_sock=None, gpu=False, sets=()):
    sock = os.path.join(TMP, f"{tag}-n{i}.sock")
    args = [KTUNED, "--socket", sock, "--data-dir", os.path.join(TMP, f"{tag}-n{i}"),
            "--set", "server.metrics=", "--set", "store.seed_tables=", "--set", "log.level=warn"]
    env = dict(os.environ)
    if redis_sock:
        args += ["--set", f"fleet.redis={redis_sock}", "--set", f"fleet.node_name=node-{i}",
                 "--set", f"fleet.namespace={tag}"]
    if gpu:
        args += ["--set", f"templates.dirs={TEMPLATES}", "--set", f"tuning.worker={FAKE}",
                 "--set", "tuning.devices=0", "--set", "tuning.gpu_policy=always",
                 "--set", "tuning.strategy=exhaustive", "--set", "tuning.budget_trials=3",
                 "--set", "tuning.miss_threshold_us=0", "--set", "lookup.nearest_radius=0",
                 "--set", "templates.compile_threads=1"]
        env["FAKE_WORKER_DELAY_MS"] = "60"
        env["FAKE_WORKER_LOG"] = os.path.join(TMP, f"{tag}-worker-{i}.log")
        env["KTUNE_FAKE_NVML_DIR"] = TMP
    for s in sets:
        args += ["--set", s]
    log = open(os.path.join(TMP, f"{tag}-n{i}.log"), "w")
    p = subprocess.Popen(args, stdout=log, stderr=log, env=env)
    procs.append(p)
    c = ktune.Client(socket_path=sock, cache_ttl=0, timeout=600)

    def up():
        try:
            return c.status()["pid"] == p.pid
        except Exception:
            return False
    wait_for(up, 30, f"ktuned {tag}-{i}")
    return p, sock, c


def stop(*ps):
    for p in ps:
        p.send_signal(signal.SIGTERM)
    for p in ps:
        p.wait(30)


def work(fleet):
    tag = "work-fleet" if fleet else "work-alone"
    rs = redis(tag) if fleet else None
    nodes = [node(tag, i, rs, gpu=True) for i in range(3)]
    keys = [1024 + 8 * k for k in range(a.keys)]
    t0 = time.time()
    for i, (_, _, c) in enumerate(nodes):
        order = keys[i * len(keys) // 3:] + keys[:i * len(keys) // 3]
        for n in order:
            c.lookup("scale", dtype="fp32", n=n)
    wait_for(lambda: all(c.status()["winners"] >= len(keys) for _, _, c in nodes), 600,
             "every node has every winner")
    wall = time.time() - t0
    trials = 0
    for i in range(3):
        path = os.path.join(TMP, f"{tag}-worker-{i}.log")
        trials += sum(1 for _ in open(path)) if os.path.exists(path) else 0
    tuned = sum(1 for _, _, c in nodes for j in c.jobs(limit=1000)
                if j["state"] == "done" and not j["message"].startswith("tuned by node"))
    stop(*(p for p, _, _ in nodes))
    return {"fleet": fleet, "nodes": 3, "keys": len(keys), "jobs_tuned": tuned,
            "trials_measured": trials, "seconds_until_all_exact": round(wall, 2)}


def make_records(c, count):
    """Valid gemm winners on the H200 class (heuristic params, roofline times): make_table.py."""
    out = os.path.join(TMP, f"table-{count}.json")
    subprocess.run([sys.executable, os.path.join(ROOT, "bench", "lookup_traffic", "make_table.py"),
                    c.socket_path, out, "--count", str(count)], check=True,
                   stdout=subprocess.DEVNULL)
    return json.load(open(out))["winners"], out


def commit_paced(c, records, rate):
    for n, r in enumerate(records):
        due = time.time() + 1 / rate
        c.import_table(json.dumps({"ktune_table": 1, "winners": [r]}))
        time.sleep(max(0, due - time.time()))


def propagation():
    out = {}
    for rate in a.prop_rates:
        tag = f"prop{int(rate)}"
        rs = redis(tag)
        nodes = [node(tag, i, rs) for i in range(3)]
        records, _ = make_records(nodes[0][2], a.winners)
        commit_paced(nodes[0][2], records, rate)
        want = len(records)
        wait_for(lambda: all(c.status()["winners"] >= want for _, _, c in nodes), 300,
                 "propagation")
        out[f"{rate:g}/s"] = {
            "winners": want,
            "lag_ms": {f"node-{i}": {k: round(v, 2) for k, v in
                                     nodes[i][2].call("fleet")["lag_ms"].items()} for i in (1, 2)}}
        stop(*(p for p, _, _ in nodes))
    return out


def load(sock, mix):
    # zipf over --zipf-keys shapes, after a warm-up long enough to build their answers once:
    # what is measured is steady traffic, and what the fleet changes about it.
    out = subprocess.run([LOAD, "--socket", sock, "--json", "--mix", mix, "--seconds",
                          str(a.seconds), "--warmup", str(a.warmup), "--zipf-keys",
                          str(a.zipf_keys), "--device", "nvidia-h200.sm90.132sm.140gib"],
                         capture_output=True, text=True)
    r = json.loads(out.stdout)
    cls = next(iter(r["classes"].values()))
    return {k: cls[k] for k in ("rps", "p50_us", "p99_us", "p999_us", "errors")}


def lookups():
    points = []

    def measure(label, sock, mixes=("repeat:63", "zipf:64")):
        for mix in mixes:
            points.append({"fleet": label, "mix": mix, **load(sock, mix)})
            print(points[-1], flush=True)

    p, sock, c = node("look-off", 0)
    records, table = make_records(c, a.count)
    c.import_file(table)
    measure("off", sock)
    stop(p)
    rs = redis("look-on")
    (p0, s0, c0), (p1, s1, c1) = node("look-on", 0, rs), node("look-on", 1, rs)
    t0 = time.time()
    c0.import_file(table)
    wait_for(lambda: c1.status()["winners"] >= a.count, 900, "node 1 has the table")
    synced_s = time.time() - t0
    measure("on, idle (node 1, which received the table)", s1)
    extra = []  # shapes next to the table's (M + 1): each one a new key to commit and merge
    for r in records:
        r = json.loads(json.dumps(r))
        r["problem"]["dims"]["M"] += 1
        extra.append(r)
    for rate in a.rates:
        todo, extra = extra[:int(rate * 2.5 * (a.warmup + a.seconds))], \
            extra[int(rate * 2.5 * (a.warmup + a.seconds)):]
        committer = threading.Thread(target=commit_paced, args=(c0, todo, rate))
        committer.start()
        measure(f"on, node 0 commits {rate} winners/s, node 1 merges them (load on node 1)", s1)
        committer.join()
    merged = c1.call("fleet")["merged"]
    stop(p0, p1)
    return {"table": a.count, "fleet_sync_of_table_s": round(synced_s, 1),
            "node1_merged": merged, "points": points}


try:
    result = {}
    if "work" in a.only:
        result["work"] = [work(True), work(False)]
        print(result["work"], flush=True)
    if "propagation" in a.only:
        result["propagation"] = propagation()
        print(result["propagation"], flush=True)
    if "lookup" in a.only:
        result["lookup"] = lookups()
finally:
    cleanup()

os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
out = os.path.join(ROOT, "bench", "results",
                   f"fleet-{platform.node()}-{datetime.datetime.utcnow():%Y%m%d}.json")
commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                        text=True).stdout.strip()
redis_version = subprocess.run(["redis-server", "--version"], capture_output=True,
                               text=True).stdout.strip()
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if "model name" in l), "?")
json.dump({"benchmark": "fleet", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
              timespec="seconds"),
           "machine": f"{platform.node()}: {cpu}, {os.cpu_count()} cores, no GPU (fake workers)",
           "commit": commit, "redis": redis_version, "args": vars(a), **result},
          open(out, "w"), indent=2)
print("wrote", out)
