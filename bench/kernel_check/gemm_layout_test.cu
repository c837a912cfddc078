// gemm_layout_test.cu — host-only emulation of the gemm template's data movement (no GPU needed).
//
// Drives the template's own index math (GemmConfig, TileCopier, raster, k_slice from gemm.cuh)
// through an emulated block: copies each k-tile into an emulated shared-memory stage exactly as
// the cp.async items would, emulates ldmatrix(.trans).x4 and mma.m16n8k16 as the PTX ISA defines
// their fragment layouts, writes outputs with the accumulator layout of the mma, and compares the
// result with a plain GEMM. Inputs are small integers, so the comparison is exact. Also reports
// shared-memory bank conflicts of every ldmatrix phase and cp.async write phase.
//
// What this does NOT check: the PTX text itself (operand order in asm), the pipeline's
// wait/barrier discipline, the split-K ticket protocol, the epilogue's stores. Those need the GPU
// harness (gemm_check.cu).
//
// Build and run (host only):
//   nvcc -std=c++17 -O2 -I templates/common -I templates/gemm \
//        bench/kernel_check/gemm_layout_test.cu -o /tmp/gemm_layout_test && /tmp/gemm_layout_test
#include "gemm.cuh"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace {

using u16 = std::uint16_t;
using u32 = std::uint32_t;

float bf16_to_float(u16 b) {
  const u32 u = static_cast<u32>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
u16 float_to_bf16_exact(float f) {  // only for values exactly representable (small integers)
  u32 u;
  std::memcpy(&u, &f, 4);
  return static_cast<u16>(u >> 16);
}

struct Stats {
  long ldsm_phases = 0, ldsm_conflict_phases = 0, ldsm_extra_wavefronts = 0;
  long copy_phases = 0, copy_conflict_phases = 0;
};

// Number of extra wavefronts for 8 16-byte accesses (one ldmatrix phase / cp.async phase).
int extra_wavefronts(const unsigned* addr, int n) {
  int count[8] = {0};
  for (int i = 0; i < n; ++i) count[(addr[i] % 128) / 16]++;
  int worst = 0;
  for (int g = 0; g < 8; ++g) worst = count[g] > worst ? count[g] : worst;
  return worst - 1;
}

// ldmatrix.sync.aligned.m8n8.x4{.trans}.b16 on emulated shared memory.
// Matrix q's row i is at addr[8q+i]. Non-trans: thread t gets row t/4, elements 2(t%4), 2(t%4)+1.
// Trans: thread t gets element t/4 of rows 2(t%4) and 2(t%4)+1. Low half = first element.
void ldsm_x4(const std::vector<unsigned char>& smem, const unsigned* addr, bool trans,
             u32 out[32][4], Stats& st, bool& ok) {
  for (int q = 0; q < 4; ++q) {
    for (int i = 0; i < 8; ++i) {
      if (addr[8 * q + i] % 16 != 0 || addr[8 * q + i] + 16 > smem.size()) {
        std::printf("  ldmatrix address out of range/misaligned: %u\n", addr[8 * q + i]);
        ok = false;
        return;
      }
    }
    const int extra = extra_wavefronts(addr + 8 * q, 8);
    st.ldsm_phases++;
    if (extra) {
      st.ldsm_conflict_phases++;
      st.ldsm_extra_wavefronts += extra;
    }
    for (int t = 0; t < 32; ++t) {
      u16 lo, hi;
      if (!trans) {
        const u16* row = reinterpret_cast<const u16*>(smem.data() + addr[8 * q + t / 4]);
        lo = row[2 * (t % 4)];
        hi = row[2 * (t % 4) + 1];
      } else {
        lo = reinterpret_cast<const u16*>(smem.data() + addr[8 * q + 2 * (t % 4)])[t / 4];
        hi = reinterpret_cast<const u16*>(smem.data() + addr[8 * q + 2 * (t % 4) + 1])[t / 4];
      }
      out[t][q] = static_cast<u32>(lo) | (static_cast<u32>(hi) << 16);
    }
  }
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 per the PTX ISA fragment layouts.
void mma_16816(const u32 a[32][4], const u32 b[32][2], float d[32][4]) {
  float A[16][16], B[16][8];
  for (int t = 0; t < 32; ++t) {
    const int g = t >> 2, c = t & 3;
    auto lo = [](u32 v) { return bf16_to_float(static_cast<u16>(v & 0xffff)); };
    auto hi = [](u32 v) { return bf16_to_float(static_cast<u16>(v >> 16)); };
    A[g][2 * c] = lo(a[t][0]);         A[g][2 * c + 1] = hi(a[t][0]);
    A[g + 8][2 * c] = lo(a[t][1]);     A[g + 8][2 * c + 1] = hi(a[t][1]);
    A[g][2 * c + 8] = lo(a[t][2]);     A[g][2 * c + 9] = hi(a[t][2]);
    A[g + 8][2 * c + 8] = lo(a[t][3]); A[g + 8][2 * c + 9] = hi(a[t][3]);
    B[2 * c][g] = lo(b[t][0]);         B[2 * c + 1][g] = hi(b[t][0]);
    B[2 * c + 8][g] = lo(b[t][1]);     B[2 * c + 9][g] = hi(b[t][1]);
  }
  for (int t = 0; t < 32; ++t) {
    const int g = t >> 2, c = t & 3;
    for (int e = 0; e < 4; ++e) {
      const int row = g + (e >> 1) * 8, col = 2 * c + (e & 1);
      float s = 0;
      for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];
      d[t][e] += s;
    }
  }
}

template <int A_ROW, int B_ROW, int BM, int BN, int BK, int WM, int WN, int STAGES, int GROUP_M,
          int SWIZZLE, int SPLIT_K>
bool run_case(int M, int N, int K, unsigned seed) {
  using namespace ktune_gemm_detail;
  using Cfg = GemmConfig<A_ROW, B_ROW, BM, BN, BK, WM, WN, STAGES, SWIZZLE>;
  constexpr int T = Cfg::kThreads, MI = Cfg::kMI, NI = Cfg::kNI, KK = Cfg::kKK;
  constexpr int kABytes = Cfg::LayoutA::kBytes;
  char name[160];
  std::snprintf(name, sizeof name, "%s%s %3dx%3dx%3d w%dx%d st%d g%2d sw%d sk%d  M=%d N=%d K=%d",
                A_ROW ? "r" : "c", B_ROW ? "r" : "c", BM, BN, BK, WM, WN, STAGES, GROUP_M, SWIZZLE,
                SPLIT_K, M, N, K);
  bool ok = true;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-3, 3);
  std::vector<ktune_bf16> A(static_cast<size_t>(M) * K), B(static_cast<size_t>(K) * N);
  std::vector<float> a_val(static_cast<size_t>(M) * K), b_val(static_cast<size_t>(K) * N);
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < K; ++k) {
      const float v = static_cast<float>(dist(rng));
      a_val[static_cast<size_t>(m) * K + k] = v;
      A[A_ROW ? static_cast<size_t>(m) * K + k : static_cast<size_t>(k) * M + m].bits = float_to_bf16_exact(v);
    }
  for (int k = 0; k < K; ++k)
    for (int n = 0; n < N; ++n) {
      const float v = static_cast<float>(dist(rng));
      b_val[static_cast<size_t>(k) * N + n] = v;
      B[B_ROW ? static_cast<size_t>(k) * N + n : static_cast<size_t>(n) * K + k].bits = float_to_bf16_exact(v);
    }
  std::vector<double> ref(static_cast<size_t>(M) * N, 0.0);
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < K; ++k) {
      const double a = a_val[static_cast<size_t>(m) * K + k];
      for (int n = 0; n < N; ++n) ref[static_cast<size_t>(m) * N + n] += a * b_val[static_cast<size_t>(k) * N + n];
    }
  std::vector<double> out(static_cast<size_t>(M) * N, 0.0);
  std::vector<int> writes(static_cast<size_t>(M) * N, 0);

  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  std::vector<int> seen(static_cast<size_t>(tiles_m) * tiles_n, 0);
  Stats st;
  std::vector<unsigned char> smem(Cfg::kStageBytes);
  std::vector<int> owner(Cfg::kStageBytes / 16);

  for (int pid = 0; pid < tiles_m * tiles_n && ok; ++pid) {
    int tm, tn;
    raster(pid, tiles_m, tiles_n, GROUP_M, tm, tn);
    if (tm < 0 || tm >= tiles_m || tn < 0 || tn >= tiles_n || seen[static_cast<size_t>(tm) * tiles_n + tn]++) {
      std::printf("  raster is not a bijection at pid %d -> (%d,%d)\n", pid, tm, tn);
      ok = false;
      break;
    }
    const int m0 = tm * BM, n0 = tn * BN;
    const int k_tiles = (K + BK - 1) / BK;
    for (int z = 0; z < SPLIT_K && ok; ++z) {
      int kt_begin = 0, kt_count = k_tiles;
      if (SPLIT_K > 1) k_slice(k_tiles, SPLIT_K, z, kt_begin, kt_count);
      const int k0 = kt_begin * BK;
      using CopierA = typename Cfg::template CopierA<ktune_bf16>;
      using CopierB = typename Cfg::template CopierB<ktune_bf16>;
      std::vector<CopierA> ca;
      std::vector<CopierB> cb;
      for (int tid = 0; tid < T; ++tid) {
        ca.emplace_back(A.data(), A_ROW ? M : K, A_ROW ? K : M, A_ROW ? m0 : k0, A_ROW ? k0 : m0, tid);
        cb.emplace_back(B.data(), B_ROW ? K : N, B_ROW ? N : K, B_ROW ? k0 : n0, B_ROW ? n0 : k0, tid);
      }
      std::vector<float> acc(static_cast<size_t>(WM * WN) * 32 * MI * NI * 4, 0.0f);
      auto ACC = [&](int w, int l, int mi, int ni) { return &acc[((static_cast<size_t>(w) * 32 + l) * MI * NI + mi * NI + ni) * 4]; };
      for (int kt = 0; kt < kt_count && ok; ++kt) {
        std::memset(smem.data(), 0xCD, smem.size());  // garbage: reading unwritten bytes shows up
        std::fill(owner.begin(), owner.end(), -1);
        // Emulate the copies in the same split the kernel uses (part kk of KK).
        for (int part = 0; part < KK; ++part) {
          for (int tid = 0; tid < T; ++tid) {
            auto emit = [&](unsigned base_off, int which) {
              return [&, base_off, which](unsigned off, const ktune_bf16* src, bool valid) {
                const unsigned dst = base_off + off;
                const unsigned lim = which == 0 ? kABytes : Cfg::kStageBytes;
                if (dst % 16 || dst + 16 > lim || dst < base_off) {
                  std::printf("  copy dst out of range: %u (operand %c)\n", dst, which ? 'B' : 'A');
                  ok = false;
                  return;
                }
                if (owner[dst / 16] != -1) {
                  std::printf("  chunk at %u written twice (threads %d, %d)\n", dst, owner[dst / 16], tid);
                  ok = false;
                }
                owner[dst / 16] = tid;
                if (valid) std::memcpy(smem.data() + dst, src, 16);
                else std::memset(smem.data() + dst, 0, 16);
              };
            };
            ca[tid].for_items(part, KK, emit(0, 0));
            cb[tid].for_items(part, KK, emit(kABytes, 1));
          }
        }
        // cp.async write phases: 8 consecutive threads' item j (approximation of the hardware).
        for (int w = 0; w < T / 32; ++w)
          for (int ph = 0; ph < 4; ++ph) {
            for (int which = 0; which < 2; ++which) {
              std::vector<std::vector<unsigned>> items(64);
              for (int i = 0; i < 8; ++i) {
                const int tid = w * 32 + ph * 8 + i;
                int j = 0;
                auto rec = [&](unsigned off, const ktune_bf16*, bool) { items[j++].push_back(off); };
                for (int part = 0; part < KK; ++part) {
                  if (which == 0) ca[tid].for_items(part, KK, rec); else cb[tid].for_items(part, KK, rec);
                }
              }
              for (auto& v : items) {
                if (v.size() < 2) continue;
                st.copy_phases++;
                if (extra_wavefronts(v.data(), static_cast<int>(v.size()))) st.copy_conflict_phases++;
              }
            }
          }
        // Every byte a fragment reads must have been written: checked through the 0xCD garbage.
        for (int w = 0; w < WM * WN && ok; ++w) {
          const int warp_m = w / WN, warp_n = w % WN;
          for (int kk = 0; kk < KK && ok; ++kk) {
            u32 af[MI][32][4], bfr[NI][32][2];
            for (int mi = 0; mi < MI; ++mi) {
              unsigned addr[32];
              for (int l = 0; l < 32; ++l) addr[l] = Cfg::a_base(l, warp_m, A_ROW ? kk : mi) + Cfg::a_const(mi, kk);
              ldsm_x4(smem, addr, !A_ROW, af[mi], st, ok);
            }
            for (int p = 0; p < NI / 2; ++p) {
              unsigned addr[32];
              for (int l = 0; l < 32; ++l) addr[l] = kABytes + Cfg::b_base(l, warp_n, B_ROW ? p : kk) + Cfg::b_const(p, kk);
              u32 r[32][4];
              ldsm_x4(smem, addr, B_ROW != 0, r, st, ok);
              for (int l = 0; l < 32; ++l) {
                bfr[2 * p][l][0] = r[l][0];
                bfr[2 * p][l][1] = r[l][1];
                bfr[2 * p + 1][l][0] = r[l][2];
                bfr[2 * p + 1][l][1] = r[l][3];
              }
            }
            if (!ok) break;
            for (int mi = 0; mi < MI; ++mi)
              for (int ni = 0; ni < NI; ++ni) {
                float d[32][4];
                for (int l = 0; l < 32; ++l)
                  for (int e = 0; e < 4; ++e) d[l][e] = ACC(w, l, mi, ni)[e];
                mma_16816(af[mi], bfr[ni], d);
                for (int l = 0; l < 32; ++l)
                  for (int e = 0; e < 4; ++e) ACC(w, l, mi, ni)[e] = d[l][e];
              }
          }
        }
        for (int tid = 0; tid < T; ++tid) {
          ca[tid].advance();
          cb[tid].advance();
        }
      }
      // Epilogue, as the kernel's staged path does it: per warp and (mi, h), lanes store their
      // accumulator pairs at epi_write(), then read 4-column pieces at epi_read(). Also checks that
      // the staging never overlaps another warp's region and stays inside the pipeline's smem.
      std::vector<float> stage_mem(Cfg::kEpiBytes / 4);
      std::vector<int> stage_owner(Cfg::kEpiBytes / 4);
      for (int w = 0; w < WM * WN && ok; ++w) {
        const int warp_m = w / WN, warp_n = w % WN;
        float* st_w = stage_mem.data() + w * Cfg::kEpiWarpFloats;
        for (int mi = 0; mi < MI && ok; ++mi)
          for (int h = 0; h < 2 && ok; ++h) {
            std::fill(stage_owner.begin(), stage_owner.end(), -1);
            for (int l = 0; l < 32; ++l)
              for (int ni = 0; ni < NI; ++ni) {
                const int off = Cfg::epi_write(l, ni);
                if (off < 0 || off + 2 > Cfg::kEpiWarpFloats || off % 2) {
                  std::printf("  epilogue write out of the warp's region: %d\n", off);
                  ok = false;
                }
                for (int e = 0; e < 2; ++e) {
                  st_w[off + e] = ACC(w, l, mi, ni)[2 * h + e];
                  stage_owner[w * Cfg::kEpiWarpFloats + off + e] = l * 64 + ni * 2 + e;
                }
              }
            for (int it = 0; it < Cfg::kEpiIters; ++it)
              for (int l = 0; l < 32; ++l) {
                int r, c;
                Cfg::epi_read(l, it, r, c);
                const int off = r * Cfg::kEpiStride + c;
                if (r < 0 || r >= 8 || c < 0 || c + 4 > Cfg::kWarpN || off % 4) {
                  std::printf("  epilogue read out of range: r=%d c=%d\n", r, c);
                  ok = false;
                  continue;
                }
                for (int e = 0; e < 4; ++e) {
                  if (stage_owner[w * Cfg::kEpiWarpFloats + off + e] < 0) {
                    std::printf("  epilogue reads an unwritten float (r=%d c=%d)\n", r, c + e);
                    ok = false;
                  }
                  const int row = m0 + warp_m * Cfg::kWarpM + mi * 16 + h * 8 + r;
                  const int col = n0 + warp_n * Cfg::kWarpN + c + e;
                  if (row < M && col < N) {
                    out[static_cast<size_t>(row) * N + col] += st_w[off + e];
                    writes[static_cast<size_t>(row) * N + col]++;
                  }
                }
              }
          }
      }
    }
  }
  long bad = 0, miswritten = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] != ref[i]) bad++;
    if (writes[i] != SPLIT_K) miswritten++;
  }
  if (bad || miswritten) ok = false;
  std::printf("%s %-60s mismatches=%ld wrong-write-count=%ld ldsm-conflict-phases=%ld/%ld "
              "copy-conflict-phases=%ld/%ld\n",
              ok ? "PASS" : "FAIL", name, bad, miswritten, st.ldsm_conflict_phases, st.ldsm_phases,
              st.copy_conflict_phases, st.copy_phases);
  return ok;
}

}  // namespace

int main() {
  int fails = 0;
  auto chk = [&](bool r) { fails += r ? 0 : 1; };
  // rr: K % 8 == 0, N % 8 == 0; rc: K % 8 == 0; cr: M % 8 == 0, N % 8 == 0; cc: M % 8 == 0, K % 8 == 0.
  // Large-shape candidates.
  chk(run_case<1, 0, 128, 256, 32, 2, 4, 4, 8, 1, 1>(300, 520, 200, 1));
  chk(run_case<1, 1, 128, 256, 32, 2, 4, 4, 8, 1, 1>(300, 520, 200, 2));
  chk(run_case<1, 0, 256, 128, 32, 4, 2, 3, 8, 1, 1>(300, 261, 136, 3));
  chk(run_case<1, 1, 256, 128, 64, 4, 2, 3, 8, 0, 1>(300, 264, 136, 4));
  chk(run_case<1, 0, 128, 128, 64, 2, 2, 4, 8, 0, 1>(200, 200, 264, 5));
  chk(run_case<1, 1, 128, 128, 32, 2, 2, 4, 16, 1, 1>(77, 136, 200, 6));
  // Every layout, both swizzles, split-K.
  chk(run_case<1, 1, 64, 64, 32, 2, 2, 3, 8, 0, 2>(77, 136, 200, 7));
  chk(run_case<1, 0, 64, 64, 32, 2, 2, 3, 8, 1, 2>(77, 77, 200, 8));
  chk(run_case<0, 1, 64, 128, 32, 2, 2, 3, 1, 1, 1>(72, 136, 201, 9));
  chk(run_case<0, 1, 64, 128, 64, 2, 2, 3, 1, 0, 4>(72, 136, 201, 10));
  chk(run_case<0, 0, 128, 64, 64, 4, 1, 3, 8, 1, 1>(136, 77, 200, 11));
  chk(run_case<0, 0, 128, 64, 32, 2, 2, 3, 8, 0, 8>(136, 77, 520, 12));
  // Decode-style: BLOCK_M 16 / 32, one warp row, BLOCK_K 128, split-K, col-major A with BM 16.
  chk(run_case<1, 0, 16, 64, 128, 1, 2, 4, 1, 1, 4>(16, 200, 1032, 13));
  chk(run_case<1, 0, 16, 128, 128, 1, 4, 4, 1, 0, 2>(5, 200, 520, 14));
  chk(run_case<1, 1, 16, 128, 64, 1, 4, 4, 1, 1, 4>(16, 136, 1032, 15));
  chk(run_case<1, 1, 32, 256, 64, 1, 4, 4, 1, 0, 1>(33, 264, 136, 16));
  chk(run_case<0, 0, 16, 32, 64, 1, 2, 2, 1, 1, 2>(16, 45, 136, 17));
  chk(run_case<0, 1, 16, 64, 32, 1, 1, 2, 1, 0, 1>(8, 40, 33, 18));
  chk(run_case<0, 1, 16, 64, 32, 1, 1, 2, 1, 1, 1>(8, 40, 33, 19));
  chk(run_case<1, 0, 64, 128, 128, 2, 4, 3, 1, 1, 8>(64, 300, 1032, 20));
  chk(run_case<1, 1, 64, 256, 64, 4, 4, 3, 8, 1, 1>(77, 264, 72, 21));
  chk(run_case<1, 1, 256, 256, 32, 4, 4, 3, 8, 1, 1>(260, 264, 40, 22));
  chk(run_case<1, 0, 32, 32, 32, 1, 1, 5, 1, 1, 1>(1, 1, 8, 23));
  chk(run_case<1, 1, 32, 32, 32, 1, 1, 5, 1, 0, 1>(1, 8, 8, 24));
  // Copy row steps that are not multiples of 8 (XOR key changes between a thread's items).
  chk(run_case<1, 1, 16, 256, 64, 1, 2, 4, 1, 1, 4>(16, 264, 1032, 25));
  chk(run_case<1, 1, 16, 256, 32, 1, 1, 3, 1, 1, 1>(20, 256, 96, 26));
  chk(run_case<0, 1, 64, 256, 32, 2, 1, 3, 8, 1, 1>(136, 264, 99, 27));
  chk(run_case<0, 0, 256, 128, 64, 4, 2, 3, 16, 1, 1>(520, 136, 72, 28));
  // Decode and large candidates measured on the H200 (bench/NOTES.md) and the cr odd-K case.
  chk(run_case<1, 0, 16, 32, 128, 1, 2, 6, 1, 1, 1>(13, 100, 1032, 29));
  chk(run_case<1, 0, 16, 32, 256, 1, 2, 4, 1, 1, 1>(16, 72, 1032, 30));
  chk(run_case<1, 0, 64, 128, 64, 1, 4, 4, 1, 1, 2>(64, 260, 520, 31));
  chk(run_case<1, 1, 64, 128, 64, 2, 2, 4, 1, 1, 1>(61, 264, 200, 32));
  chk(run_case<0, 1, 16, 32, 32, 1, 1, 2, 1, 1, 1>(16, 72, 4097, 33));
  chk(run_case<1, 0, 256, 128, 64, 4, 2, 3, 8, 1, 1>(300, 261, 136, 34));
  chk(run_case<1, 0, 128, 256, 128, 2, 4, 2, 8, 1, 1>(200, 300, 392, 35));
  chk(run_case<1, 1, 128, 256, 128, 2, 4, 2, 8, 1, 1>(130, 264, 264, 36));
  chk(run_case<1, 0, 64, 128, 128, 1, 4, 4, 1, 1, 1>(64, 200, 520, 37));
  std::printf("%s: %d failing case(s)\n", fails ? "FAILED" : "ALL PASS", fails);
  return fails ? 1 : 0;
}
