#!/usr/bin/env python3
"""sass_opcodes.py — counts key SASS instructions in a cubin without cuobjdump/nvdisasm.

The development machines have nvcc/ptxas but no disassembler. Volta-and-later SASS is 128 bits per
instruction with the opcode in the low 12 bits, so an opcode histogram of each kernel's .text
section is enough to answer "does it use HMMA / LDSM / LDGSTS, and does it touch local memory".
The opcode numbers below are not documented by NVIDIA; the script first checks them against probe
kernels compiled on the spot (each probe must contain its opcode, a plain kernel none of them),
and refuses to report if a check fails. On a machine with the CUDA binutils, prefer
`cuobjdump --dump-sass`.

Usage: python3 bench/kernel_check/sass_opcodes.py ARCH CUBIN...      (ARCH: sm_80 or sm_90)
"""
import collections
import os
import struct
import subprocess
import sys
import tempfile

OPCODES = {"HMMA": 0x23C, "LDSM": 0x83B, "LDGSTS": 0xFAE, "LDL": 0x983, "STL": 0x387, "BAR": 0xB1D}

PROBES = r'''
extern "C" __global__ void p_base(float* o, const float* i) { o[threadIdx.x] = i[threadIdx.x] * 2.f; }
extern "C" __global__ void p_HMMA(float* o, const unsigned* i) {
  unsigned a0=i[0],a1=i[1],a2=i[2],a3=i[3],b0=i[4],b1=i[5]; float d0=0,d1=0,d2=0,d3=0;
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d0),"+f"(d1),"+f"(d2),"+f"(d3) : "r"(a0),"r"(a1),"r"(a2),"r"(a3),"r"(b0),"r"(b1));
  o[threadIdx.x] = d0+d1+d2+d3; }
extern "C" __global__ void p_LDSM(float* o, const float* i) {
  __shared__ unsigned s[1024]; s[threadIdx.x] = threadIdx.x; __syncthreads();
  unsigned a = (unsigned)__cvta_generic_to_shared(s + threadIdx.x*4); unsigned r0,r1,r2,r3;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r0),"=r"(r1),"=r"(r2),"=r"(r3) : "r"(a));
  o[threadIdx.x] = r0+r1+r2+r3; }
extern "C" __global__ void p_LDGSTS(float* o, const float* i) {
  __shared__ float s[1024]; unsigned a = (unsigned)__cvta_generic_to_shared(s + threadIdx.x*4);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(a), "l"(i + threadIdx.x*4), "r"(16));
  asm volatile("cp.async.commit_group;"); asm volatile("cp.async.wait_group 0;" ::: "memory"); __syncthreads();
  o[threadIdx.x] = s[threadIdx.x ^ 1]; }
extern "C" __global__ void p_LOCAL(float* o, const float* i, int k) {
  float loc[64];
#pragma unroll 1
  for (int j = 0; j < 64; ++j) loc[(j * k) & 63] = i[j];
  o[threadIdx.x] = loc[(k * 7) & 63]; }
'''


def text_sections(path):
    d = open(path, "rb").read()
    if d[:4] != b"\x7fELF" or d[4] != 2:
        raise SystemExit(f"{path}: not a 64-bit ELF cubin")
    shoff, = struct.unpack_from("<Q", d, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", d, 0x3A)
    secs = [struct.unpack_from("<IIQQQQ", d, shoff + i * shentsize) for i in range(shnum)]
    strtab_off = secs[shstrndx][4]

    def name(n):
        s = d[strtab_off + n:]
        return s[:s.index(b"\0")].decode()

    return {name(s[0])[6:]: d[s[4]:s[4] + s[5]] for s in secs if name(s[0]).startswith(".text.")}


def histogram(code):
    h = collections.Counter()
    for i in range(0, len(code) - 15, 16):
        lo, = struct.unpack_from("<Q", code, i)
        h[lo & 0xFFF] += 1
    return h


def calibrate(arch):
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "p.cu"), os.path.join(tmp, "p.cubin")
        open(src, "w").write(PROBES)
        subprocess.run(["nvcc", f"-arch={arch}", "-cubin", "-O3", src, "-o", out], check=True)
        k = {n: histogram(c) for n, c in text_sections(out).items()}
    base = k["p_base"]
    checks = {"HMMA": "p_HMMA", "LDSM": "p_LDSM", "LDGSTS": "p_LDGSTS", "LDL": "p_LOCAL", "STL": "p_LOCAL"}
    for op, probe in checks.items():
        code = OPCODES[op]
        if k[probe][code] == 0 or base[code] != 0:
            raise SystemExit(f"opcode table check failed on {arch}: {op}=0x{code:x} "
                             f"(in {probe}: {k[probe][code]}, in p_base: {base[code]})")


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    arch = sys.argv[1]
    calibrate(arch)
    print(f"opcode table verified against probe kernels for {arch}")
    print(f"{'kernel':<100} {'instrs':>7} " + " ".join(f"{op:>6}" for op in OPCODES))
    for path in sys.argv[2:]:
        for kname, code in text_sections(path).items():
            h = histogram(code)
            print(f"{kname[:100]:<100} {len(code) // 16:>7} " + " ".join(f"{h[c]:>6}" for c in OPCODES.values()))


if __name__ == "__main__":
    main()
