#!/usr/bin/env python3
"""Imports a table into ktuned back to back until told to stop: the import side of run.sh's
cached+import point (what a `ktune import` or a fleet sync costs the lookups beside it).

  import_loop.py SOCKET TABLE.json READY STOP [--copies 4]

Before the first import it makes --copies documents of TABLE, the i-th with every median_us
scaled by 0.99**i (and a stated tflops or gbps by 1/0.99**i, as import checks them against the
time), so that each import is faster than the one before and replaces (writes) every record; then
it creates the file READY and imports the copies in turn until the file STOP exists. Once the
copies are used up it imports the last one again (parsed and checked, every record kept: less
work) and counts those imports in "repeated_last_copy". Prints one JSON object: each import's
seconds and counts.
"""
import argparse, json, os, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("socket")
ap.add_argument("table")
ap.add_argument("ready")
ap.add_argument("stop")
ap.add_argument("--copies", type=int, default=4)
a = ap.parse_args()
if a.copies < 1:
    sys.exit("--copies: at least 1")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "client", "python"))
import ktune  # noqa: E402

table = json.load(open(a.table))
docs = []
for i in range(1, a.copies + 1):
    for w in table["winners"]:
        for c in w["ranked"]:
            c["median_us"] *= 0.99
            for rate in ("tflops", "gbps"):
                if c.get(rate):
                    c[rate] /= 0.99
    docs.append(json.dumps(table))
del table

client = ktune.Client(socket_path=a.socket, cache_ttl=0, timeout=600)
open(a.ready, "w").close()
imports = []
while not os.path.exists(a.stop):
    n = len(imports)
    t0 = time.monotonic()
    r = client.import_table(docs[min(n, len(docs) - 1)])
    imports.append({"seconds": round(time.monotonic() - t0, 3),
                    **{k: r.get(k) for k in ("total", "added", "replaced", "kept")}})
json.dump({"imports": imports, "copies": a.copies,
           "repeated_last_copy": max(0, len(imports) - len(docs))}, sys.stdout)
print()
