#!/usr/bin/env bash
# .ci/demo builds only what it runs (ktuned, ktune, ktune-worker: no tests, no benchmarks) and
# says so before the build starts. cmake and dpkg are replaced by recorders on PATH, so nothing
# is built or installed: the test checks what the demo asks for.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
mkdir -p "$T/bin" "$T/cuda/include"; touch "$T/cuda/include/nvrtc.h"
cat >"$T/bin/cmake" <<SHIM
#!/bin/sh
echo "cmake \$*" >>"$T/calls"
SHIM
printf '#!/bin/sh\nexit 0\n' >"$T/bin/dpkg"
chmod +x "$T/bin/cmake" "$T/bin/dpkg"
out=$(cd "$SRC" && PATH="$T/bin:$PATH" CUDA_ROOT="$T/cuda" DEMO_BUILD_ONLY=1 .ci/demo 2>&1)
fail() { echo "FAIL: $*"; echo "--- output:"; echo "$out"; echo "--- cmake calls:"; cat "$T/calls"; exit 1; }
build=$(grep -- "--build" "$T/calls") || fail "no build step"
[[ $build == *"--target ktuned ktune ktune-worker"* ]] || fail "does not build only its targets: $build"
[[ $build != *test* && $build != *bench* ]] || fail "builds tests or benchmarks: $build"
first=$(echo "$out" | head -1)
[[ $first == "== building"* ]] || fail "prints nothing before building"
echo "$out" | grep -q "bootstrap: building ktuned ktune ktune-worker" || fail "no progress line"
echo "ok"
