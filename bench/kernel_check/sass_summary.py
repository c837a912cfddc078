#!/usr/bin/env python3
"""sass_summary.py — per-kernel opcode counts from `cuobjdump --dump-sass` output (read on stdin or
from a file): HGMMA (wgmma), UTMALDG (TMA loads), LDGSTS (cp.async), SYNCS (mbarrier ops), BAR,
LDL/STL (local memory: must be 0 in a GEMM main loop). Used by the gemm_tma device runs."""
import re
import sys
from collections import Counter

OPS = ["HGMMA", "UTMALDG", "LDGSTS", "SYNCS", "BAR", "LDL", "STL", "STG", "STS", "LDS"]


def main():
    text = open(sys.argv[1]).read() if len(sys.argv) > 1 else sys.stdin.read()
    kernels = []
    for line in text.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            kernels.append((m.group(1), Counter()))
            continue
        if not kernels:
            continue
        m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(\.[A-Z0-9_.]+)?", line)
        if m:
            kernels[-1][1][m.group(1)] += 1
    for name, c in kernels:
        if "gemm" not in name:
            continue
        print(name[:110])
        print("   " + "  ".join(f"{op} {c.get(op, 0)}" for op in OPS))


if __name__ == "__main__":
    main()
