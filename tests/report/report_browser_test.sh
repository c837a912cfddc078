#!/usr/bin/env bash
# The tuning report in a real browser (Debian's chromium, headless): rendered by `ktune report`
# from the committed H200 results, then served live by ktuned at /report. For each page: it
# fetches nothing, the script ran with no console output and no error, every plot has one SVG
# mark per datum (counted in the DOM after scripts ran, against counts computed here from the
# input files), and a screenshot is not blank.
#   report_browser_test.sh SOURCE_DIR KTUNE KTUNED
# Exit 77 (skipped) without chromium; 1 under .ci/run (KTUNE_REQUIRE_TEST_TOOLS).
set -euo pipefail
src=$1 ktune=$2 ktuned=$3
chromium_bin=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chromium_bin" ]; then
  [ "${KTUNE_REQUIRE_TEST_TOOLS:-0}" != 0 ] && { echo "chromium is not installed, and KTUNE_REQUIRE_TEST_TOOLS is set" >&2; exit 1; }
  echo "chromium is not installed (.ci/bootstrap installs it): skipped"
  exit 77
fi
work=$(mktemp -d /tmp/ktune-report-browser-XXXXXX)
daemon_pid=""
tail_pid=""
cleanup() {
  [ -n "$tail_pid" ] && kill "$tail_pid" 2>/dev/null || true
  if [ -n "$daemon_pid" ]; then
    kill "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Loads a page: the DOM after scripts ran, chromium's log (console messages included) and a
# screenshot. Each run gets a fresh profile.
browse() {  # URL NAME
  local flags=(--headless=new --no-sandbox --disable-gpu --hide-scrollbars --no-first-run
               --enable-logging=stderr --v=0 --window-size=1280,2400)
  timeout 120 "$chromium_bin" "${flags[@]}" --user-data-dir="$work/profile-$2-dom" \
    --dump-dom "$1" >"$work/$2.dom" 2>"$work/$2.log"
  timeout 120 "$chromium_bin" "${flags[@]}" --user-data-dir="$work/profile-$2-png" \
    --screenshot="$work/$2.png" "$1" >/dev/null 2>>"$work/$2.log"
}

# Checks a loaded page against the expected mark counts (JSON: class -> count, -1 = any > 0).
check_page() {  # NAME EXPECTED_JSON
  python3 - "$work/$1.dom" "$work/$1.log" "$work/$1.png" "$2" <<'EOF'
import json, re, struct, sys, zlib
dom_path, log_path, png_path, expected = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
dom = open(dom_path, encoding="utf-8").read()
log = open(log_path, encoding="utf-8", errors="replace").read()
problems = []
console = [l for l in log.splitlines() if ":CONSOLE" in l]
if console: problems.append("console output: " + " | ".join(console[:5]))
m = re.search(r'<div id="report-errors">(.*?)</div>', dom, re.S)
if m is None: problems.append("no #report-errors element")
elif m.group(1).strip(): problems.append("script errors: " + m.group(1).strip())
if 'data-script="ran"' not in dom: problems.append("the page's script did not run")
for cls, want in expected.items():
    got = len(re.findall(r'<(?:rect|circle|text|path|svg|section)\b[^>]*class="' + cls + r'[" ]', dom))
    if (want < 0 and got == 0) or (want >= 0 and got != want):
        problems.append(f"{cls}: {got} marks in the DOM, expected {'some' if want < 0 else want}")
# The script's own count of each mark, taken in the browser, agrees with the DOM's.
marks = re.search(r'data-marks="([^"]*)"', dom)
if marks:
    counted = json.loads(marks.group(1).replace("&quot;", '"'))
    for cls in ("cell", "point", "improve", "bw"):
        if cls in expected and expected[cls] >= 0 and counted.get(cls) != expected[cls]:
            problems.append(f"in-page count of {cls}: {counted.get(cls)}, expected {expected[cls]}")
else:
    problems.append("no data-marks on <body>")
# The screenshot: decode the PNG (8-bit RGB/RGBA) and count pixels that are not background.
data = open(png_path, "rb").read()
if data[:8] != b"\x89PNG\r\n\x1a\n": problems.append("screenshot is not a PNG")
else:
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR": w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
        if kind == b"IDAT": idat += body
        pos += 12 + n
    bpp = {2: 3, 6: 4}.get(ctype, 0)
    if depth != 8 or bpp == 0: problems.append(f"unexpected PNG format {depth}/{ctype}")
    else:
        raw, stride, prev, ink, colours = zlib.decompress(idat), w * bpp, bytearray(w * bpp), 0, set()
        for y in range(h):
            f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], prev[i - bpp] if i >= bpp else 0
                if f == 1: line[i] = (line[i] + a) & 255
                elif f == 2: line[i] = (line[i] + b) & 255
                elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
                elif f == 4:
                    p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            if y % 4 == 0:
                for x in range(0, w, 4):
                    px = bytes(line[x * bpp:x * bpp + 3]); colours.add(px)
                    ink += px != b"\xff\xff\xff"
            prev = line
        share = ink / ((h // 4 + 1) * (w // 4 + 1))
        if share < 0.02 or len(colours) < 16:
            problems.append(f"screenshot looks blank: {share:.1%} non-white, {len(colours)} colours")
print(f"{dom_path}: {len(dom)} bytes of DOM, " + ", ".join(f"{k}={v}" for k, v in expected.items()))
if problems:
    print("\n".join(problems)); sys.exit(1)
EOF
}

# A page that fetches nothing: no src/href to another origin, no CSS import or url().
self_contained() {  # FILE
  if grep -Eq '(src|href)="(https?:)?//|@import|url\(' "$1"; then
    fail "$1 refers to something outside itself"
  fi
}

# --- the check itself can fail: a page with a console error and a blank page are caught ---
printf '<!DOCTYPE html><html><body><div id="report-errors"></div><script>console.error("x")</script></body></html>' \
  >"$work/bad.html"
browse "file://$work/bad.html" bad
if check_page bad '{}' >/dev/null; then fail "a page with a console error passed the check"; fi

# --- 1. ktune report from the committed H200 results ---
trials=("$src/bench/data/h200_gemm_sweep.json"
        "$src/bench/results/gemm-tma-pingpong-h200-20261201-run1-trials.json"
        "$src/bench/results/gemm-tma-template-h200-20261201-b120-run3-trials.json")
replay="$src/bench/results/replay-h200-gemm-20261129.json"
"$ktune" report -o "$work/file.html" --table "$src/tables/h200.json" --trials "${trials[@]}" "$replay"
self_contained "$work/file.html"
expected=$(python3 - "$src/tables/h200.json" "$replay" "${trials[@]}" <<'EOF'
import json, sys
table = json.load(open(sys.argv[1]))
replay = json.load(open(sys.argv[2]))
winners = {w["problem"]["op"] + "|" + w["problem"]["dtype"] + "|" + w["problem"]["out_dtype"] + "|" +
           w["problem"]["layout"] + "|" + ",".join(f"{k}={v}" for k, v in w["problem"]["dims"].items()): w
           for w in table["winners"]}
cells, improve, trial_problems = set(), 0, {}
for path in sys.argv[3:]:
    for p in json.load(open(path))["problems"]:
        best = float("inf")
        for t in p["trials"]:
            if t["outcome"] != "ok": continue
            pr = t["params"]
            cells.add((p["problem"], t["template"], pr.get("STAGES"), pr["BLOCK_M"], pr["BLOCK_N"]))
            if t["median_us"] < best: best, improve = t["median_us"], improve + 1
        trial_problems[p["problem"]] = True
only_trials = [k for k in trial_problems if k not in winners]
memory = [w for w in winners.values() if w["problem"]["op"] != "gemm"]
points = (len(winners) - sum(w["problem"]["op"] == "transpose" for w in memory)) + len(only_trials)
print(json.dumps({"cell": len(cells), "improve": improve, "point": points, "plabel": points,
                  "bw": len(memory), "problem": len(set(winners) | set(trial_problems)),
                  "replaycurve": sum(len(p["strategies"]) for p in replay["problems"])}))
EOF
)
browse "file://$work/file.html" file
check_page file "$expected"

# --- 2. /report from a running ktuned holding the H200 table, with one miss counted ---
# The log exists before tail follows it: the background child opens it only when it runs, and a
# tail started first gave up on the missing file (seen once in CI under load).
: >"$work/ktuned.log"
"$ktuned" --socket "$work/ktuned.sock" --data-dir "$work/data" --set server.metrics=127.0.0.1:0 --set server.report=true \
  --set store.seed_tables= >"$work/ktuned.log" 2>&1 &
daemon_pid=$!
# The ready line names the metrics port; wait for it by reading the log as it grows.
ready=$(timeout 30 grep -m1 ' ready ' <(tail -n +1 -f "$work/ktuned.log" & echo "$!" >"$work/tail.pid"; wait) || true)
tail_pid=$(cat "$work/tail.pid" 2>/dev/null || true)
metrics=$(sed -n 's/.* metrics=\([^ ]*\).*/\1/p' <<<"$ready")
[ -n "$metrics" ] || { cat "$work/ktuned.log" >&2; fail "ktuned did not log a ready line with metrics="; }
"$ktune" --socket "$work/ktuned.sock" import "$src/tables/h200.json" >/dev/null
"$ktune" --socket "$work/ktuned.sock" lookup gemm --layout rc --shape M=4096,N=4096,K=2048 \
  --device nvidia-h200 >/dev/null
python3 - "$metrics" "$work/live.html" <<'EOF'
import sys, urllib.request
body = urllib.request.urlopen(f"http://{sys.argv[1]}/report", timeout=30).read()
open(sys.argv[2], "wb").write(body)
EOF
self_contained "$work/live.html"
browse "http://$metrics/report" live
# Every winner of the shipped table is a problem; each but transpose's (no arithmetic) a roofline
# point; each memory-bound op's a bandwidth bar; plus the one miss asked above.
expected_live=$(python3 - "$src/tables/h200.json" <<'EOF'
import json, sys
w = json.load(open(sys.argv[1]))["winners"]
points = sum(1 for r in w if r["problem"]["op"] != "transpose")
bw = sum(1 for r in w if r["problem"]["op"] != "gemm")
print(json.dumps({"point": points, "plabel": points, "bw": bw, "miss": 1, "problem": len(w)}))
EOF
)
check_page live "$expected_live"
echo "ok: $(wc -c <"$work/file.html") byte report from files, $(wc -c <"$work/live.html") byte /report"
