// gemm_nvrtc_check.cpp — compiles the gemm template the way ktune does (NVRTC, in-memory
// "ktune_common.cuh", one program per config, name expression for the lowered entry), for every
// config in gemm_configs.inc on sm_80 and sm_90, and prints registers, spills and compile time
// from the ptxas report. Needs libnvrtc only (no GPU):
//
//   g++ -std=c++17 -O2 -I/usr/local/cuda/include bench/kernel_check/gemm_nvrtc_check.cpp \
//       -L/usr/local/cuda/lib64 -lnvrtc -o /tmp/gemm_nvrtc_check
//   /tmp/gemm_nvrtc_check templates            # [arch ...], default: sm_80 sm_90
//   ... | /tmp/gemm_nvrtc_check templates - sm_90   # name expressions from stdin, one a line
//                                                   # (e.g. gemm_space.py --sample)
#include <nvrtc.h>

#include <chrono>
#include <iostream>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(2);
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Cfg {
  std::string expr;
};

std::vector<Cfg> configs() {
  std::vector<Cfg> v;
#define KTUNE_GEMM_CONFIG(TI, TO, AR, BR, BM, BN, BK, WM, WN, ST, GM, SW, SK)                        \
  v.push_back({"ktune_gemm<" #TI ", " #TO ", " #AR ", " #BR ", " #BM ", " #BN ", " #BK ", " #WM ", " #WN \
               ", " #ST ", " #GM ", " #SW ", " #SK ">"});
#include "gemm_configs.inc"
#undef KTUNE_GEMM_CONFIG
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "templates";
  std::vector<std::string> archs;
  std::vector<Cfg> list = configs();
  for (int i = 2; i < argc; ++i) {
    if (std::string(argv[i]) == "-") {
      list.clear();
      for (std::string line; std::getline(std::cin, line);)
        if (line.rfind("ktune_gemm<", 0) == 0) list.push_back({line});
    } else {
      archs.push_back(argv[i]);
    }
  }
  if (archs.empty()) archs = {"sm_80", "sm_90"};
  const std::string src = read_file(dir + "/gemm/gemm.cuh");
  const std::string common = read_file(dir + "/common/ktune_common.cuh");
  const char* headers[] = {common.c_str()};
  const char* header_names[] = {"ktune_common.cuh"};
  int failures = 0, spilling = 0;
  const std::regex re_regs(R"(Used (\d+) registers)"), re_spill(R"((\d+) bytes spill stores, (\d+) bytes spill loads)"),
      re_stack(R"((\d+) bytes stack frame)");
  std::printf("%-6s %-100s %5s %6s %6s %7s\n", "arch", "config", "regs", "spillB", "stackB", "secs");
  for (const auto& arch : archs) {
    for (const auto& c : list) {
      nvrtcProgram prog;
      if (nvrtcCreateProgram(&prog, src.c_str(), "gemm.cuh", 1, headers, header_names) != NVRTC_SUCCESS) {
        std::fprintf(stderr, "nvrtcCreateProgram failed\n");
        return 2;
      }
      nvrtcAddNameExpression(prog, c.expr.c_str());
      const std::string arch_opt = "--gpu-architecture=" + arch;
      const char* opts[] = {arch_opt.c_str(), "-std=c++17", "--ptxas-options=-v", "-no-cache"};
      const auto t0 = std::chrono::steady_clock::now();
      const nvrtcResult r = nvrtcCompileProgram(prog, 4, opts);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      size_t log_size = 0;
      nvrtcGetProgramLogSize(prog, &log_size);
      std::string log(log_size, '\0');
      nvrtcGetProgramLog(prog, log.data());
      if (r != NVRTC_SUCCESS) {
        ++failures;
        std::printf("%-6s %-100s COMPILE FAILED: %s\n%s\n", arch.c_str(), c.expr.c_str(), nvrtcGetErrorString(r), log.c_str());
        nvrtcDestroyProgram(&prog);
        continue;
      }
      const char* lowered = nullptr;
      if (nvrtcGetLoweredName(prog, c.expr.c_str(), &lowered) != NVRTC_SUCCESS || !lowered) {
        ++failures;
        std::printf("%-6s %-100s no lowered name\n", arch.c_str(), c.expr.c_str());
      }
      size_t cubin_size = 0;
      nvrtcGetCUBINSize(prog, &cubin_size);
      std::smatch m;
      int regs = -1, spill = -1, stack = -1;
      if (std::regex_search(log, m, re_regs)) regs = std::stoi(m[1]);
      if (std::regex_search(log, m, re_spill)) spill = std::stoi(m[1]) + std::stoi(m[2]);
      if (std::regex_search(log, m, re_stack)) stack = std::stoi(m[1]);
      if (spill != 0 || stack != 0) ++spilling;
      std::printf("%-6s %-100s %5d %6d %6d %7.2f\n", arch.c_str(), c.expr.c_str(), regs, spill, stack, secs);
      if (cubin_size == 0) {
        ++failures;
        std::printf("  (no cubin)\n");
      }
      nvrtcDestroyProgram(&prog);
    }
  }
  std::printf("%d compile failure(s), %d config(s) with spills or a stack frame\n", failures, spilling);
  return failures ? 1 : 0;
}
