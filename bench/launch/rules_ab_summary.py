#!/usr/bin/env python3
"""Sums up bench/launch/rules_ab.sh: torch/ktune (graphed) per shape and variant, the mean over the
rounds, with the spread of the rounds and each variant's ratio to the first one named.

  python3 bench/launch/rules_ab_summary.py OUT [--variants head,new,...] [--json FILE]

OUT holds rules_ab.sh's graph-torch-NAME-ROUND.json files. Variants come in the order given (default:
by name; rules_ab.sh passes its own order). A shape a variant's round did not time, or timed with an
output that did not match torch's (worst_rel_l2_vs_torch > 1e-2) or with fallbacks, is left out of
that mean and counted under "dropped". Writes the table to stdout and, with --json, every figure.
"""
import argparse
import glob
import json
import math
import os
import re
import sys

FILE = re.compile(r"graph-torch-(?P<name>.+)-(?P<round>\d+)\.json$")
MAX_REL_L2 = 1e-2


def load(out_dir):
    """{variant: {round: parsed file}} from OUT."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(out_dir, "graph-torch-*-*.json"))):
        m = FILE.search(os.path.basename(path))
        if not m:
            continue
        with open(path) as f:
            runs.setdefault(m["name"], {})[int(m["round"])] = json.load(f)
    return runs


def summarize(runs, variants):
    """Per shape ("MxNxK", in the first variant's order): per variant the rounds' ratios, their
    mean and spread, and the mean over the first variant's."""
    shapes, table, dropped = [], {}, {}
    for v in variants:
        for r in sorted(runs.get(v, {})):
            for s in runs[v][r].get("shapes", []):
                key = "x".join(str(d) for d in s["shape"])
                if key not in table:
                    shapes.append(key)
                    table[key] = {}
                ratio = s.get("torch_over_ktune_graph")
                ok = (isinstance(ratio, (int, float)) and math.isfinite(ratio) and ratio > 0
                      and s.get("worst_rel_l2_vs_torch", 1.0) <= MAX_REL_L2
                      and s.get("fallbacks", 1) == 0)
                if ok:
                    table[key].setdefault(v, []).append(ratio)
                else:
                    dropped.setdefault(v, []).append(f"{key} round {r}")
    rows = []
    for key in shapes:
        row = {"shape": key, "variants": {}}
        base = None
        for v in variants:
            rs = table[key].get(v)
            if not rs:
                continue
            mean = sum(rs) / len(rs)
            cell = {"rounds": rs, "mean": mean, "spread": max(rs) - min(rs)}
            if v == variants[0]:
                base = mean
            if base:
                cell["over_first"] = mean / base
            row["variants"][v] = cell
        rows.append(row)
    return {"variants": variants, "shapes": rows, "dropped": dropped}


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def render(summary):
    variants = summary["variants"]
    lines = ["torch/ktune (graphed), mean of the rounds (spread); x: over " + variants[0]]
    lines.append("%-18s" % "shape" + "".join("%22s" % v for v in variants))
    for row in summary["shapes"]:
        cells = []
        for v in variants:
            c = row["variants"].get(v)
            if not c:
                cells.append("%22s" % "-")
                continue
            text = "%.3f (%.3f)" % (c["mean"], c["spread"])
            if v != variants[0] and "over_first" in c:
                text += " x%.3f" % c["over_first"]
            cells.append("%22s" % text)
        lines.append("%-18s" % row["shape"] + "".join(cells))
    gm = []
    for v in variants:
        means = [r["variants"][v]["mean"] for r in summary["shapes"] if v in r["variants"]]
        gm.append("%22s" % ("%.3f (%d)" % (geomean(means), len(means))))
    lines.append("%-18s" % "geomean (shapes)" + "".join(gm))
    for v, what in summary["dropped"].items():
        lines.append("dropped for %s: %s" % (v, ", ".join(what)))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="rules_ab.sh's OUT directory")
    ap.add_argument("--variants", help="comma-separated, the first is the baseline")
    ap.add_argument("--json", help="write every figure here")
    args = ap.parse_args(argv)
    runs = load(args.out)
    if not runs:
        print("no graph-torch-NAME-ROUND.json in " + args.out, file=sys.stderr)
        return 1
    variants = args.variants.split(",") if args.variants else list(runs)
    missing = [v for v in variants if v not in runs]
    if missing:
        print("no files for variant(s) " + ", ".join(missing) + " in " + args.out, file=sys.stderr)
        return 1
    summary = summarize(runs, variants)
    print(render(summary))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
