#!/usr/bin/env bash
# Builds what bench/gemm_peers/run_h200.sh runs on the GPU node and puts it in .gpu/ (git-ignored):
# ktuned, ktune, ktune-worker, ktune-bench, the shared libraries the node lacks (.gpu/devlibs, by
# shared/tools/device-bundle) and .gpu/COMMIT (the commit built, "-dirty" with local changes).
#   bash bench/gemm_peers/make_kit.sh          # BUILD=build (configured as the README says)
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${BUILD:-build}
ninja -C "$B" -j2 ktuned ktune ktune-worker ktune-bench
mkdir -p .gpu
cp "$B/daemon/ktuned" "$B/client/cli/ktune" "$B/tuner/ktune-worker" "$B/bench/ktune-bench" .gpu/
"${DEVICE_BUNDLE:-../shared/tools/device-bundle}" .gpu
git describe --always --dirty --abbrev=12 > .gpu/COMMIT
echo "kit: $(du -sh .gpu | cut -f1) in .gpu (commit $(cat .gpu/COMMIT)); carry [\".gpu\"]"
