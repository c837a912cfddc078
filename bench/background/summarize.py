"""Folds one background-tuning run (app.json, foreign JSONs, ktune-bench JSON, GPU facts) into
bench/results/background-*.json and prints the table bench/NOTES.md quotes."""
import argparse
import json


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--app", required=True)
    ap.add_argument("--foreign-alone", required=True)
    ap.add_argument("--foreign-paused", required=True)
    ap.add_argument("--bench", help="ktune-bench --out JSON on the same problems")
    ap.add_argument("--gpu", help="nvidia-smi CSV")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    app = json.load(open(args.app))
    alone = json.load(open(args.foreign_alone))
    paused = json.load(open(args.foreign_paused))
    t0 = app["t0"]
    f_start, f_end = paused["start"] - t0, paused["end"] - t0
    # The process can be on the GPU from the moment it starts creating its CUDA context.
    f_gpu = paused.get("cuda_begin", paused["start"]) - t0
    lanes = app["lane_transitions"]
    pause = next((t for t in lanes if t["t"] >= f_gpu and t["state"] == "paused"), None)
    resume = next((t for t in lanes if t["t"] >= f_end and t["state"] == "tuning"), None)
    result = {
        "what": "ktuned background tuning on one GPU: untuned problems asked by an application, "
                "a foreign PyTorch matmul loop midway (gpu_policy idle)",
        "problems": app["problems"],
        "all_exact_s": app["all_exact_s"],
        "foreign": {"alone_per_s": alone["per_s"], "with_ktuned_paused_per_s": paused["per_s"],
                    "ratio": paused["per_s"] / alone["per_s"], "seconds": paused["end"] - paused["start"],
                    "cuda_begin_s": f_gpu, "first_matmul_done_s": f_start, "ended_s": f_end},
        "pause_latency_s": None if pause is None else pause["t"] - f_gpu,
        "pause_latency_note": "from the foreign process starting to create its CUDA context (an "
                              "upper bound: the context exists some time after that) to the first "
                              "status sample showing the lane paused (50 ms sampling)",
        "resume_after_end_s": None if resume is None else resume["t"] - f_end,
        "lookup_load_while_tuning": app["lookup_load_while_tuning"],
        "lookup_load_idle": app["lookup_load_idle"],
        "lane_transitions": lanes,
        "jobs": app["jobs"],
    }
    if args.bench:
        bench = json.load(open(args.bench))
        by_key = {}
        for row in bench.get("results", bench.get("problems", [])):
            key = row.get("problem")
            if key:
                by_key[key] = row
        cmp = []
        for p in app["problems"]:
            b = by_key.get(p["problem"])
            if not b or "winner" not in p:
                continue
            ours = p["winner"]["median_us"]
            theirs = b.get("median_us") or b.get("best", {}).get("median_us")
            if theirs:
                cmp.append({"problem": p["problem"], "daemon_us": ours, "bench_us": theirs,
                            "daemon_over_bench": ours / theirs})
        result["vs_ktune_bench"] = cmp
    if args.gpu:
        result["gpu"] = open(args.gpu).read()
    json.dump(result, open(args.out, "w"), indent=1)
    print(f"all exact after {result['all_exact_s']} s")
    for p in app["problems"]:
        w = p.get("winner", {})
        print(f"  {p['problem']:<42} {p['first']:<9} -> exact at {p['t_exact_s']} s  "
              f"{w.get('template', '-')} {w.get('median_us', 0):.1f} us")
    print(f"foreign matmul/s alone {alone['per_s']:.2f}, with ktuned {paused['per_s']:.2f} "
          f"-> {result['foreign']['ratio']:.3f}x")
    print(f"pause latency {result['pause_latency_s']} s, resumed {result['resume_after_end_s']} s after")
    for name in ("lookup_load_while_tuning", "lookup_load_idle"):
        l = result[name] or {}
        print(f"  {name}: p50 {l.get('p50_us')} us p99 {l.get('p99_us')} us, {l.get('rps')} /s")
    for c in result.get("vs_ktune_bench", []):
        print(f"  vs ktune-bench {c['problem']}: {c['daemon_over_bench']:.3f}")


if __name__ == "__main__":
    main()
