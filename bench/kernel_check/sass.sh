#!/usr/bin/env bash
# The SASS of one template config, on the dev box (no GPU, no CUDA 13 disassembler): ktune compile
# --cubin-dir writes the cubin NVRTC built; Debian 12's nvdisasm (CUDA 11.8, package
# nvidia-cuda-toolkit from non-free, only its files extracted: no install) decodes sm_90/sm_90a
# code but not CUDA 13's ELF header (ABI version 8, new e_flags), so the copy it reads carries the
# old header of an sm_90 cubin (ABI 7, e_flags 0x5a055a). Instruction encodings are unchanged.
#   bench/kernel_check/sass.sh gemm_tma M=1024,N=1024,K=65536 BLOCK_M=128,BLOCK_N=128,...  > k.sass
# Then e.g. `grep -n HGMMA -B4 k.sass`. NVDISASM: a CUDA 12+ nvdisasm, used as is when given.
set -euo pipefail
cd "$(dirname "$0")/../.."
TEMPLATE=$1 SHAPE=$2 CONFIG=$3
KTUNE=${KTUNE:-build/client/cli/ktune}
W=$(mktemp -d /tmp/ktune-sass-XXXXXX)
trap 'rm -rf "$W"' EXIT
NVDISASM=${NVDISASM:-}
if [ -z "$NVDISASM" ]; then
  NVDISASM=${NVDISASM_11:-$HOME/.cache/ktune/cuda-11.8/usr/bin/nvdisasm}
  if [ ! -x "$NVDISASM" ]; then
    echo "sass.sh: fetching Debian's nvidia-cuda-toolkit (non-free) for its nvdisasm" >&2
    ( cd "$W" && apt-get download nvidia-cuda-toolkit >/dev/null ) || {
      echo "sass.sh: apt-get download failed: add 'non-free' to the apt sources, apt-get update" >&2
      exit 1; }
    mkdir -p "$(dirname "$(dirname "$(dirname "$NVDISASM")")")"
    dpkg-deb -x "$W"/nvidia-cuda-toolkit_*.deb "$(dirname "$(dirname "$(dirname "$NVDISASM")")")"
  fi
  PATCH=1
fi
"$KTUNE" compile "$TEMPLATE" --shape "$SHAPE" --config "$CONFIG" --cubin-dir "$W/c" >&2
CUBIN=$(ls "$W"/c/*.cubin)
if [ -n "${PATCH:-}" ]; then
  python3 - "$CUBIN" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], 'rb').read())
b[8] = 7                                  # EI_ABIVERSION: the pre-CUDA-12.8 layout
struct.pack_into('<I', b, 0x30, 0x5a055a)  # e_flags: sm_90, virtual sm_90, 64-bit, unified tex
open(sys.argv[1], 'wb').write(b)
PY
fi
"$NVDISASM" -c "$CUBIN" | sed -E 's#/\* 0x[0-9a-f]{16} \*/##; /^[[:space:]]*$/d'
