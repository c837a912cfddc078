#include "tuner/compiler.h"

#include <gtest/gtest.h>
#include <nvrtc.h>

#include <array>
#include <cstdio>
#include <set>

#include "config/config.h"
#include "store/mem_store.h"
#include "templates/registry.h"
#include "tests/fakes/test_records.h"
#include "tuner/device_kernels.h"

namespace ktune {
namespace {

const std::string k_scale =
    std::string(KTUNE_SOURCE_DIR) + "/tests/data/templates/scale/scale.yaml";

Problem scale_problem(std::int64_t n) {
  return Problem{"scale", "bf16", "bf16", "", {{"n", n}}};
}

// The worker compiles its own kernels (fill, poison, compare, the clock probe) with NVRTC when it
// starts, on the GPU node only; here they compile as it compiles them, for sm_80 and sm_90, and
// every kernel it looks up by name is in the cubin.
TEST(CompilerTest, TheWorkersOwnKernelsCompileWithNvrtc) {
  for (const char* arch : {"--gpu-architecture=sm_80", "--gpu-architecture=sm_90"}) {
    nvrtcProgram prog = nullptr;
    ASSERT_EQ(nvrtcCreateProgram(&prog, k_device_kernels_source, "ktune_worker_kernels.cu", 0,
                                 nullptr, nullptr),
              NVRTC_SUCCESS);
    const char* opts[] = {arch, "-std=c++17"};
    const nvrtcResult compiled = nvrtcCompileProgram(prog, 2, opts);
    size_t log_size = 0;
    nvrtcGetProgramLogSize(prog, &log_size);
    std::string log(log_size, '\0');
    nvrtcGetProgramLog(prog, log.data());
    size_t size = 0;
    nvrtcGetCUBINSize(prog, &size);
    std::string cubin(size, '\0');
    if (size) nvrtcGetCUBIN(prog, cubin.data());
    nvrtcDestroyProgram(&prog);
    ASSERT_EQ(compiled, NVRTC_SUCCESS) << arch << ": " << log;
    for (const char* name : {"ktune_fill", "ktune_poison", "ktune_compare", "ktune_clock_probe"})
      EXPECT_NE(cubin.find(name), std::string::npos) << arch << " lacks " << name;
  }
}

TEST(CompilerTest, CompilesForSm80AndSm90WithResourceReport) {
  auto t = TemplateRegistry::load_template(k_scale);
  ASSERT_TRUE(t) << t.error().message;
  auto inst = instantiate(**t, scale_problem(1 << 20), DeviceLimits{},
                          {{"THREADS", 256}, {"VEC", 4}, {"WAVES", 1}});
  ASSERT_TRUE(inst);
  Compiler compiler({.threads = 2});
  for (const char* arch : {"sm_80", "sm_90"}) {
    auto r = compiler.compile({t->get(), inst->name_expression, arch});
    ASSERT_TRUE(r.ok()) << r.log;
    EXPECT_FALSE(r.cache_hit);
    EXPECT_GT(r.kernel.cubin.size(), 100u);
    EXPECT_EQ(r.kernel.cubin.substr(0, 4),
              "\x7f"
              "ELF");
    EXPECT_TRUE(r.kernel.lowered_name.starts_with("_Z")) << r.kernel.lowered_name;
    EXPECT_GT(r.kernel.registers, 0) << r.log;
    EXPECT_EQ(r.kernel.spill_stores, 0);
    EXPECT_GT(r.kernel.compile_ms, 0);
  }
}

TEST(CompilerTest, CompileErrorIsAResultWithTheLog) {
  auto t = TemplateRegistry::load_template(k_scale);
  ASSERT_TRUE(t);
  Compiler compiler({.threads = 1});
  // A name expression that does not match the template's signature.
  auto r = compiler.compile({t->get(), "ktune_scale<float, float, 128>", "sm_90"});
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status, CompileResult::Status::compile_error);
  EXPECT_NE(r.log.find("error"), std::string::npos) << r.log;
}

TEST(CompilerTest, SecondCompileIsACacheHit) {
  auto t = TemplateRegistry::load_template(k_scale);
  ASSERT_TRUE(t);
  MemStore store;
  Compiler compiler({.threads = 1, .cache = &store});
  const CompileRequest req{t->get(), "ktune_scale<float, float, 128, 2>", "sm_90"};
  auto first = compiler.compile(req);
  ASSERT_TRUE(first.ok()) << first.log;
  EXPECT_FALSE(first.cache_hit);
  auto second = compiler.compile(req);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second.cache_hit);
  EXPECT_EQ(second.kernel, first.kernel);
  EXPECT_EQ(second.cache_key, first.cache_key);
  // Another arch is another key.
  auto other = compiler.compile({t->get(), req.name_expression, "sm_80"});
  EXPECT_FALSE(other.cache_hit);
  EXPECT_NE(other.cache_key, first.cache_key);
}

// The cubin id names exactly what makes a cubin valid: the cache key ends with it, it is stable,
// and it changes with the name expression, the arch or the template's hash. compiles() counts
// NVRTC runs only; submit() with a callback hands the result over on the pool.
TEST(CompilerTest, CubinIdIsTheCacheKeysHashAndCompilesCountsNvrtcRuns) {
  auto t = TemplateRegistry::load_template(k_scale);
  ASSERT_TRUE(t);
  MemStore store;
  Compiler compiler({.threads = 1, .cache = &store});
  const CompileRequest req{t->get(), "ktune_scale<float, float, 128, 2>", "sm_90"};
  const std::string id = Compiler::cubin_id(req);
  EXPECT_EQ(id.size(), 16u);
  EXPECT_EQ(Compiler::cache_key(req), "scale/sm_90/" + id);
  EXPECT_EQ(Compiler::cubin_id(req), id);
  EXPECT_NE(Compiler::cubin_id({t->get(), "ktune_scale<float, float, 256, 2>", "sm_90"}), id);
  EXPECT_NE(Compiler::cubin_id({t->get(), req.name_expression, "sm_80"}), id);
  KernelTemplate edited = **t;
  edited.hash = "0000000000000000";
  EXPECT_NE(Compiler::cubin_id({&edited, req.name_expression, "sm_90"}), id);

  std::promise<CompileResult> got;
  compiler.submit(req, [&got](CompileResult r) { got.set_value(std::move(r)); });
  const CompileResult first = got.get_future().get();
  ASSERT_TRUE(first.ok()) << first.log;
  EXPECT_EQ(first.cache_key, Compiler::cache_key(req));
  EXPECT_EQ(compiler.compiles(), 1u);
  EXPECT_TRUE(compiler.compile(req).cache_hit);
  EXPECT_EQ(compiler.compiles(), 1u) << "a cache hit is no compile";
}

TEST(CompilerTest, ParsesPtxasReport) {
  CubinEntry e;
  parse_ptxas_report(
      "ptxas info    : Compiling entry function '_Z1k' for 'sm_90'\n"
      "ptxas info    : Function properties for _Z1k\n"
      "    24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 168 registers, used 1 barriers, 4096 bytes smem, 400 bytes cmem[0]\n",
      e);
  EXPECT_EQ(e.registers, 168);
  EXPECT_EQ(e.smem_bytes, 4096);
  EXPECT_EQ(e.stack_bytes, 24);
  EXPECT_EQ(e.spill_stores, 8);
  EXPECT_EQ(e.spill_loads, 12);
}

// Issue 4's CI check: every built-in template compiles a sample of >= 20 configs (all of a
// smaller space) for sm_80 and sm_90 with NVRTC, on a machine with no GPU.
TEST(CompilerTest, BuiltinTemplatesCompileASampleForSm80AndSm90) {
  auto reg = TemplateRegistry::load({builtin_template_dir()});
  ASSERT_TRUE(reg.errors().empty()) << reg.errors()[0].message;
  Compiler compiler;
  size_t compiled = 0;
  for (const auto& t : reg.all()) {
    for (const char* arch : {"sm_80", "sm_90"}) {
      const auto limits = *DeviceLimits::for_arch(arch);
      if (t->manifest.min_cc > limits.cc || (t->manifest.max_cc && t->manifest.max_cc < limits.cc))
        continue;
      Problem p{t->manifest.op,
                t->manifest.dtypes.front(),
                t->manifest.dtypes.front(),
                t->manifest.layouts.rbegin()->first,
                {}};
      for (const auto& d : t->manifest.dims) p.dims.emplace_back(d, d == "n" ? 1 << 24 : 4096);
      auto space = SearchSpace::build(*t, p, limits);
      ASSERT_TRUE(space) << space.error().message;
      const auto& configs = space->configs();
      const size_t want = std::min<size_t>(20, configs.size());
      std::vector<CompileRequest> reqs;
      for (size_t i = 0; i < want; ++i) {
        const auto& params = configs[i * configs.size() / want];  // evenly spread
        auto inst = instantiate(*t, p, limits, params);
        ASSERT_TRUE(inst) << inst.error().message;
        reqs.push_back({t.get(), inst->name_expression, target_arch(t->manifest, limits.cc)});
      }
      auto results = compiler.compile_all(reqs);
      for (size_t i = 0; i < results.size(); ++i) {
        EXPECT_TRUE(results[i].ok())
            << t->name() << " " << arch << " " << reqs[i].name_expression << "\n"
            << results[i].log.substr(0, 2000);
        EXPECT_EQ(results[i].kernel.spill_stores, 0) << reqs[i].name_expression;
      }
      compiled += results.size();
    }
  }
  EXPECT_GE(compiled, 6u * 2 * 20);  // the six built-ins on both arches, at least
}

// gemm_tma from the built-in templates (loaded once; nullptr if missing) and sm_90a's nominal
// limits (132 SMs), for which the gemm_tma tests below enumerate, instantiate and compile.
std::pair<const KernelTemplate*, DeviceLimits> gemm_tma_on_sm90a() {
  static const TemplateRegistry reg = TemplateRegistry::load({builtin_template_dir()});
  return {reg.find("gemm_tma"), *DeviceLimits::for_arch("sm_90a")};
}

// Every config gemm_tma's heuristic serves, for the issue-13 shapes and awkward small ones, in
// each dtype pairing it offers, compiles for sm_90a with NVRTC (on this GPU-less machine): HGMMA
// wgmma and TMA code, no register spills, and setmaxnreg honoured (ptxas warns otherwise).
TEST(CompilerTest, GemmTmaHeuristicConfigsCompileForSm90aWithoutSpills) {
  const auto [t, limits] = gemm_tma_on_sm90a();
  ASSERT_NE(t, nullptr);
  const std::vector<std::array<std::int64_t, 3>> shapes = {
      {8192, 8192, 8192}, {4096, 4096, 4096},  {2048, 2048, 2048}, {4096, 14336, 4096},
      {8192, 8192, 512},  {1024, 1024, 65536}, {512, 1024, 32768}, {4000, 6000, 3000},
      {1000, 1000, 1032}, {77, 137, 200},      {1, 8, 8}};
  std::set<std::string> names;
  std::vector<CompileRequest> reqs;
  auto add = [&](const std::string& in, const std::string& out,
                 const std::array<std::int64_t, 3>& s) {
    const Problem p{"gemm", in, out, "rc", {{"M", s[0]}, {"N", s[1]}, {"K", s[2]}}};
    auto h = heuristic_config(*t, p, limits);
    ASSERT_TRUE(h) << p.describe() << ": " << h.error().message;
    auto inst = instantiate(*t, p, limits, *h);
    ASSERT_TRUE(inst) << inst.error().message;
    if (names.insert(inst->name_expression).second)
      reqs.push_back({t, inst->name_expression, target_arch(t->manifest, limits.cc)});
  };
  for (const auto& s : shapes) add("bf16", "bf16", s);
  {  // short K, large M and N: the heuristic serves the ping-pong schedule
    const Problem p{"gemm", "bf16", "bf16", "rc", {{"M", 8192}, {"N", 8192}, {"K", 512}}};
    auto h = heuristic_config(*t, p, limits);
    ASSERT_TRUE(h) << h.error().message;
    EXPECT_EQ(h->at("SCHEDULE"), 1) << params_to_string(*h);
    EXPECT_EQ(h->at("BLOCK_M"), 128);
    EXPECT_EQ(h->at("BLOCK_N"), 128);
    EXPECT_EQ(h->at("STAGES"), 4);
  }
  // The other dtype pairings (their heuristic configs differ only where fp32 staging needs room).
  for (const auto& s : {shapes[0], shapes[5], shapes[9]}) {
    add("bf16", "fp32", s);
    add("fp16", "fp16", s);
  }
  EXPECT_GE(reqs.size(), 10u);
  Compiler compiler({.threads = 2});
  auto results = compiler.compile_all(reqs);
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_TRUE(results[i].ok()) << reqs[i].name_expression << "\n"
                                 << results[i].log.substr(0, 2000);
    EXPECT_EQ(results[i].kernel.spill_stores, 0) << reqs[i].name_expression;
    EXPECT_EQ(results[i].kernel.spill_loads, 0) << reqs[i].name_expression;
    EXPECT_EQ(results[i].log.find("setmaxnreg"), std::string::npos)
        << reqs[i].name_expression << "\n"
        << results[i].log.substr(0, 2000);
  }
}

// Compiles `reqs` with NVRTC (two threads): each compiles, without spills or stack, within
// `max_registers` per thread, and ptxas honours setmaxnreg (no warning about it in the log).
void expect_compiled_without_spills(const std::vector<CompileRequest>& reqs, int max_registers) {
  Compiler compiler({.threads = 2});
  auto results = compiler.compile_all(reqs);
  ASSERT_EQ(results.size(), reqs.size());
  for (size_t i = 0; i < results.size(); ++i) {
    const std::string& n = reqs[i].name_expression;
    ASSERT_TRUE(results[i].ok()) << n << "\n" << results[i].log.substr(0, 2000);
    std::printf("%s: %d registers, %d B stack\n", n.c_str(), results[i].kernel.registers,
                results[i].kernel.stack_bytes);
    EXPECT_EQ(results[i].kernel.spill_stores, 0) << n;
    EXPECT_EQ(results[i].kernel.spill_loads, 0) << n;
    EXPECT_EQ(results[i].kernel.stack_bytes, 0) << n;
    EXPECT_GT(results[i].kernel.registers, 0) << n;
    EXPECT_LE(results[i].kernel.registers, max_registers) << n;
    EXPECT_EQ(results[i].log.find("setmaxnreg"), std::string::npos)
        << n << "\n"
        << results[i].log.substr(0, 2000);
  }
}

// Appends the compile request of `params` for `problem` to `into`; the config must instantiate.
void add_request(const KernelTemplate& t, const DeviceLimits& limits, const Problem& problem,
                 const Params& params, std::vector<CompileRequest>& into) {
  auto inst = instantiate(t, problem, limits, params);
  ASSERT_TRUE(inst) << params_to_string(params) << ": " << inst.error().message;
  into.push_back({&t, inst->name_expression, target_arch(t.manifest, limits.cc)});
}

// `base` with `changes` applied must be refused for `problem` (`why` says by which constraint);
// with `by`, the refusal must quote it (a part of the constraint's own `why`), so a config that
// another constraint refuses first does not pass for this one.
void expect_refused(const KernelTemplate& t, const DeviceLimits& limits, const Problem& problem,
                    Params base,
                    std::initializer_list<std::pair<const char*, std::int64_t>> changes,
                    const char* why, const char* by = nullptr) {
  const Params refused = testing::with_params(std::move(base), changes);
  auto inst = instantiate(t, problem, limits, refused);
  EXPECT_FALSE(inst) << why << ": " << params_to_string(refused);
  if (!inst && by) {
    EXPECT_NE(inst.error().message.find(by), std::string::npos)
        << why << ": refused by another constraint: " << inst.error().message;
  }
}

// Compile requests for `base` in 2, 4 and 8 k-slices.
void add_split_requests(const KernelTemplate& t, const DeviceLimits& limits, const Problem& problem,
                        const Params& base, std::vector<CompileRequest>& reqs) {
  for (std::int64_t n : {2, 4, 8}) {
    Params c = base;
    c["SPLITS"] = n;
    add_request(t, limits, problem, c, reqs);
  }
}

// gemm_tma's ping-pong schedule (issue 13 step 2): the space offers it only where it is meant
// to run (two consumers, persistent, no split-K; BLOCK_M 64 nowhere else), and a spread of its
// configs, every tile shape and a 2-CTA cluster and fp32 output among them, compiles for sm_90a
// with NVRTC: no spills, no stack, setmaxnreg honoured (the 40/232 budget holds).
TEST(CompilerTest, GemmTmaPingpongConfigsCompileForSm90aWithoutSpills) {
  const auto [t, limits] = gemm_tma_on_sm90a();
  ASSERT_NE(t, nullptr);
  const Problem p{"gemm", "bf16", "bf16", "rc", {{"M", 8192}, {"N", 8192}, {"K", 512}}};
  auto space = SearchSpace::build(*t, p, limits);
  ASSERT_TRUE(space) << space.error().message;
  std::vector<Params> pingpong;
  std::set<std::pair<std::int64_t, std::int64_t>> tiles;
  for (const auto& c : space->configs()) {
    if (c.at("BLOCK_M") == 64) {
      EXPECT_EQ(c.at("SCHEDULE"), 1) << params_to_string(c);
    }
    if (c.at("SCHEDULE") != 1) continue;
    EXPECT_EQ(c.at("CONSUMERS"), 2) << params_to_string(c);
    EXPECT_EQ(c.at("PERSISTENT"), 1) << params_to_string(c);
    EXPECT_EQ(c.at("SPLITS"), 1) << params_to_string(c);
    // Each warpgroup holds a whole tile's accumulators: at most 128 fp32 per thread.
    EXPECT_LE(c.at("BLOCK_M") / 64 * c.at("BLOCK_N") / 2, 128) << params_to_string(c);
    tiles.insert({c.at("BLOCK_M"), c.at("BLOCK_N")});
    pingpong.push_back(c);
  }
  const std::set<std::pair<std::int64_t, std::int64_t>> want_tiles = {
      {64, 128}, {64, 160}, {64, 192}, {64, 256}, {128, 128}};
  EXPECT_EQ(tiles, want_tiles);
  ASSERT_GE(pingpong.size(), 8u);
  std::vector<CompileRequest> reqs;
  std::set<std::string> names;
  auto add = [&](const Problem& prob, const Params& params) {
    auto inst = instantiate(*t, prob, limits, params);
    ASSERT_TRUE(inst) << params_to_string(params) << ": " << inst.error().message;
    if (names.insert(inst->name_expression).second)
      reqs.push_back({t, inst->name_expression, target_arch(t->manifest, limits.cc)});
  };
  const size_t want = 8;
  for (size_t i = 0; i < want; ++i) add(p, pingpong[i * pingpong.size() / want]);  // evenly spread
  Params big{{"BLOCK_M", 64},   {"BLOCK_N", 256}, {"BLOCK_K", 64}, {"STAGES", 4},
             {"CONSUMERS", 2},  {"GROUP_M", 8},   {"EPILOGUE", 1}, {"CLUSTER_M", 2},
             {"PERSISTENT", 1}, {"SPLITS", 1},    {"SCHEDULE", 1}, {"STREAMK", 0},
             {"CLUSTER_N", 1},  {"RASTER", 0},    {"REDUCE", 0}};
  add(p, big);  // the largest accumulator tile, multicast in a 2-CTA cluster
  Params fp32 = big;
  fp32["BLOCK_M"] = 128;
  fp32["BLOCK_N"] = 128;
  fp32["CLUSTER_M"] = 1;
  add(Problem{"gemm", "bf16", "fp32", "rc", {{"M", 8192}, {"N", 8192}, {"K", 512}}}, fp32);
  // Registers at launch: the cap of (128 producer + 256 consumer threads) in one block.
  expect_compiled_without_spills(reqs, 168);
}

// gemm_tma's stream-K (issue 13): the space offers it only with the persistent cooperative
// schedule and no split-K, and only where the tiles fill more than one wave and leave the last
// one partly idle (4096^3 in 128x256 tiles: 512 tiles on 132 SMs; not 8448 x 4096: 1,056 = 8
// whole waves, nor 2048^3: 128 tiles);
// its configs (both tile shapes, one and two consumers, a 2-CTA cluster, fp32 out) compile for
// sm_90a with NVRTC without spills or stack, at the 168-register launch cap.
TEST(CompilerTest, GemmTmaStreamKConfigsCompileForSm90aWithoutSpills) {
  const auto [t, limits] = gemm_tma_on_sm90a();
  ASSERT_NE(t, nullptr);
  const Problem p{"gemm", "bf16", "bf16", "rc", {{"M", 4096}, {"N", 4096}, {"K", 4096}}};
  auto space = SearchSpace::build(*t, p, limits);
  ASSERT_TRUE(space) << space.error().message;
  int streamk = 0;
  for (const auto& c : space->configs()) {
    if (c.at("STREAMK") != 1) continue;
    ++streamk;
    EXPECT_EQ(c.at("PERSISTENT"), 1) << params_to_string(c);
    EXPECT_EQ(c.at("SPLITS"), 1) << params_to_string(c);
    EXPECT_EQ(c.at("SCHEDULE"), 0) << params_to_string(c);
  }
  EXPECT_GT(streamk, 0);
  Params sk{{"BLOCK_M", 128},  {"BLOCK_N", 256}, {"BLOCK_K", 64}, {"STAGES", 4},
            {"CONSUMERS", 2},  {"GROUP_M", 8},   {"EPILOGUE", 1}, {"CLUSTER_M", 1},
            {"PERSISTENT", 1}, {"SPLITS", 1},    {"SCHEDULE", 0}, {"STREAMK", 1},
            {"CLUSTER_N", 1},  {"RASTER", 0},    {"REDUCE", 0}};
  EXPECT_TRUE(instantiate(*t, p, limits, sk));
  const Problem whole{"gemm", "bf16", "bf16", "rc", {{"M", 8448}, {"N", 4096}, {"K", 4096}}};
  EXPECT_FALSE(instantiate(*t, whole, limits, sk)) << "8 whole waves: stream-K changes nothing";
  const Problem few{"gemm", "bf16", "bf16", "rc", {{"M", 2048}, {"N", 2048}, {"K", 2048}}};
  EXPECT_FALSE(instantiate(*t, few, limits, sk)) << "128 tiles, under one wave: not offered";
  std::vector<CompileRequest> reqs;
  auto add = [&](const Problem& prob, const Params& params) {
    add_request(*t, limits, prob, params, reqs);
  };
  add(p, sk);
  Params pair = sk;
  pair["CLUSTER_M"] = 2;
  add(p, pair);
  Params small = sk;
  small["BLOCK_N"] = 128;
  small["CONSUMERS"] = 1;
  small["STAGES"] = 6;
  small["EPILOGUE"] = 0;
  add(p, small);
  Params fp32 = sk;
  fp32["STAGES"] = 3;
  add(Problem{"gemm", "bf16", "fp32", "rc", {{"M", 4096}, {"N", 4096}, {"K", 4096}}}, fp32);
  // One consumer warpgroup: 256 threads, up to 255 registers each.
  expect_compiled_without_spills(reqs, 255);
}

// gemm_tma's TMA-store epilogue (EPILOGUE 2, issue 13): offered only where tmC can be encoded
// (N * out_bytes a multiple of 16: N = 1000 yes, N = 1001 no, for bf16); its per-warp boxes take
// 32 KB whatever the output type, so fp32 output keeps 128x256 tiles at 4 stages, which the
// staged epilogue's 66 KB of areas cannot; its configs (cooperative, fp32 out, ping-pong in a
// 2-CTA cluster, split-K, stream-K, one consumer) compile for sm_90a without spills or stack.
TEST(CompilerTest, GemmTmaStoreEpilogueConfigsCompileForSm90aWithoutSpills) {
  const auto [t, limits] = gemm_tma_on_sm90a();
  ASSERT_NE(t, nullptr);
  auto epilogues = [&](const Problem& p) {
    std::set<std::int64_t> e;
    auto space = SearchSpace::build(*t, p, limits);
    EXPECT_TRUE(space) << space.error().message;
    if (space)
      for (const auto& c : space->configs()) e.insert(c.at("EPILOGUE"));
    return e;
  };
  const Problem even{"gemm", "bf16", "bf16", "rc", {{"M", 4096}, {"N", 1000}, {"K", 4096}}};
  const Problem odd{"gemm", "bf16", "bf16", "rc", {{"M", 4096}, {"N", 1001}, {"K", 4096}}};
  EXPECT_EQ(epilogues(even), (std::set<std::int64_t>{0, 1, 2}));
  EXPECT_EQ(epilogues(odd), (std::set<std::int64_t>{0, 1})) << "tmC's rows need 16-byte strides";

  const Params coop{{"BLOCK_M", 128},  {"BLOCK_N", 256}, {"BLOCK_K", 64}, {"STAGES", 4},
                    {"CONSUMERS", 2},  {"GROUP_M", 8},   {"EPILOGUE", 2}, {"CLUSTER_M", 1},
                    {"PERSISTENT", 1}, {"SPLITS", 1},    {"SCHEDULE", 0}, {"STREAMK", 0},
                    {"CLUSTER_N", 1},  {"RASTER", 0},    {"REDUCE", 0}};
  const Problem p{"gemm", "bf16", "bf16", "rc", {{"M", 4096}, {"N", 4096}, {"K", 4096}}};
  const Problem p32{"gemm", "bf16", "fp32", "rc", {{"M", 4096}, {"N", 4096}, {"K", 4096}}};
  Params staged = coop;
  staged["EPILOGUE"] = 1;
  EXPECT_TRUE(instantiate(*t, p32, limits, coop)) << "fp32 out, 128x256, 4 stages, TMA store";
  EXPECT_FALSE(instantiate(*t, p32, limits, staged)) << "the staged areas leave room for 3 stages";
  std::vector<CompileRequest> reqs, one_consumer;
  auto add = [&](const Problem& prob, const Params& params,
                 std::vector<CompileRequest>* into = nullptr) {
    add_request(*t, limits, prob, params, into ? *into : reqs);
  };
  add(p, coop);
  add(p32, coop);
  Params pp = coop;
  pp["BLOCK_M"] = 64;
  pp["CLUSTER_M"] = 2;
  pp["SCHEDULE"] = 1;
  add(Problem{"gemm", "fp16", "fp16", "rc", {{"M", 4096}, {"N", 4096}, {"K", 4096}}}, pp);
  Params sk = coop;
  sk["STREAMK"] = 1;
  add(p, sk);
  Params split = coop;
  split["PERSISTENT"] = 0;
  split["BLOCK_N"] = 128;
  split["SPLITS"] = 4;
  add(Problem{"gemm", "bf16", "bf16", "rc", {{"M", 1024}, {"N", 512}, {"K", 16384}}}, split);
  expect_compiled_without_spills(reqs, 168);
  Params one = coop;
  one["CONSUMERS"] = 1;
  one["BLOCK_N"] = 128;
  add(p, one, &one_consumer);
  expect_compiled_without_spills(one_consumer, 255);  // 256 threads, up to 255 registers each
}

// gemm_tma's 128x192 tiles (wgmma n192, issue 13): the heuristic serves them where one wave of
// them fits (768x4096x4096: 132 tiles); a B box of 192 (96 rows a CTA in a 2 x 1 cluster), three
// TMA-store boxes a warp and tile (2-byte outputs) or six (fp32), the staged epilogue, 24
// column groups split in bands and k-slices, ping-pong and stream-K all compile for sm_90a
// without spills.
TEST(CompilerTest, GemmTma128x192ConfigsCompileForSm90aWithoutSpills) {
  const auto [t, limits] = gemm_tma_on_sm90a();
  ASSERT_NE(t, nullptr);
  const Problem p{"gemm", "bf16", "bf16", "rc", {{"M", 768}, {"N", 4096}, {"K", 4096}}};
  auto h = heuristic_config(*t, p, limits);
  ASSERT_TRUE(h) << h.error().message;
  EXPECT_EQ(h->at("BLOCK_N"), 192) << params_to_string(*h);
  EXPECT_EQ(h->at("EPILOGUE"), 2) << params_to_string(*h);
  std::vector<CompileRequest> reqs;
  auto add = [&](const Problem& prob, const Params& params) {
    add_request(*t, limits, prob, params, reqs);
  };
  add(p, *h);
  Params staged = *h;
  staged["EPILOGUE"] = 1;
  add(p, staged);
  const Problem big{"gemm", "fp16", "fp32", "rc", {{"M", 4096}, {"N", 4096}, {"K", 4096}}};
  Params pers = *h;
  pers["PERSISTENT"] = 1;
  add(big, pers);
  Params pp = pers;
  pp["BLOCK_M"] = 64;
  pp["SCHEDULE"] = 1;
  pp["CLUSTER_M"] = 2;
  add(Problem{"gemm", "bf16", "bf16", "rc", {{"M", 4096}, {"N", 4096}, {"K", 4096}}}, pp);
  Params sk = pers;
  sk["STREAMK"] = 1;
  sk["EPILOGUE"] = 0;
  add(Problem{"gemm", "bf16", "bf16", "rc", {{"M", 4096}, {"N", 4096}, {"K", 4096}}}, sk);
  const Problem few{"gemm", "bf16", "bf16", "rc", {{"M", 512}, {"N", 2048}, {"K", 8192}}};
  Params cluster = *h;
  cluster["EPILOGUE"] = 0;
  cluster["SPLITS"] = 2;
  cluster["REDUCE"] = 1;
  add(few, cluster);
  Params bands = cluster;
  bands["SPLITS"] = 4;
  bands["REDUCE"] = 2;
  bands["PERSISTENT"] = 1;
  add(few, bands);
  ASSERT_EQ(reqs.size(), 7u);
  expect_compiled_without_spills(reqs, 168);
}

// gemm_tma's 128x160 tiles (issue 13; wgmma n160): the TMA store only where a tile row is whole
// 128-byte boxes (fp32 outputs: five; 2-byte ones would be 2.5), and a spread of configs (each
// epilogue, persistent, split-K with each sum, stream-K in a cluster, ping-pong 64x160) compiles
// for sm_90a without spills.
TEST(CompilerTest, GemmTma128x160ConfigsCompileForSm90aWithoutSpills) {
  const auto [t, limits] = gemm_tma_on_sm90a();
  ASSERT_NE(t, nullptr);
  const Problem p{"gemm", "bf16", "bf16", "rc", {{"M", 640}, {"N", 4096}, {"K", 4096}}};
  const Problem p32{"gemm", "bf16", "fp32", "rc", {{"M", 640}, {"N", 4096}, {"K", 4096}}};
  const Problem big{"gemm", "fp16", "fp16", "rc", {{"M", 4096}, {"N", 4096}, {"K", 4096}}};
  const Problem few{"gemm", "bf16", "bf16", "rc", {{"M", 512}, {"N", 1024}, {"K", 32768}}};
  const Params base{{"BLOCK_M", 128},  {"BLOCK_N", 160}, {"BLOCK_K", 64}, {"STAGES", 5},
                    {"CONSUMERS", 2},  {"GROUP_M", 1},   {"EPILOGUE", 1}, {"CLUSTER_M", 1},
                    {"PERSISTENT", 0}, {"SPLITS", 1},    {"SCHEDULE", 0}, {"STREAMK", 0},
                    {"CLUSTER_N", 1},  {"RASTER", 1},    {"REDUCE", 0}};
  expect_refused(*t, limits, p, base, {{"EPILOGUE", 2}}, "2.5 boxes of 2-byte outputs a row");
  std::vector<CompileRequest> reqs;
  auto add = [&](const Problem& prob,
                 std::initializer_list<std::pair<const char*, std::int64_t>> changes) {
    add_request(*t, limits, prob, testing::with_params(base, changes), reqs);
  };
  add(p, {});
  add(p, {{"EPILOGUE", 0}, {"STAGES", 6}});
  add(p32, {{"EPILOGUE", 2}, {"STAGES", 4}});
  add(big, {{"PERSISTENT", 1}, {"STREAMK", 1}, {"CLUSTER_M", 2}});
  add(big, {{"BLOCK_M", 64}, {"SCHEDULE", 1}, {"PERSISTENT", 1}, {"CLUSTER_M", 2}});
  add(few, {{"EPILOGUE", 0}, {"SPLITS", 4}, {"REDUCE", 1}});
  add(few, {{"EPILOGUE", 0}, {"SPLITS", 2}, {"REDUCE", 2}, {"PERSISTENT", 1}});
  add(few, {{"SPLITS", 3}});
  ASSERT_EQ(reqs.size(), 8u);
  expect_compiled_without_spills(reqs, 168);
}

// gemm_tma's 192-row tiles (issue 13): three consumer warpgroups of 64 rows beside the producer
// warpgroup, 512 threads, so ptxas compiles each thread for 128 registers: the space offers them
// only with at most 96 accumulators (n128-n192), one block per whole tile, neither the TMA store
// of 2-byte outputs nor fp32 192x192 tiles staged or in a cluster (each spills at n192), and a
// spread of them (each epilogue, a 2 x 1 and a 1 x 2 cluster: 96-row halves of A's box, both
// rasters) compiles for sm_90a within 128 registers without spills.
TEST(CompilerTest, GemmTma192RowTilesAreOfferedWithinTheirRegistersAndCompileWithoutSpills) {
  const auto [t, limits] = gemm_tma_on_sm90a();
  ASSERT_NE(t, nullptr);
  const Problem p{"gemm", "bf16", "bf16", "rc", {{"M", 1152}, {"N", 4096}, {"K", 4096}}};
  const Problem p32{"gemm", "fp16", "fp32", "rc", {{"M", 2100}, {"N", 3000}, {"K", 4096}}};
  const Params base{{"BLOCK_M", 192},  {"BLOCK_N", 192}, {"BLOCK_K", 64}, {"STAGES", 3},
                    {"CONSUMERS", 3},  {"GROUP_M", 8},   {"EPILOGUE", 1}, {"CLUSTER_M", 1},
                    {"PERSISTENT", 0}, {"SPLITS", 1},    {"SCHEDULE", 0}, {"STREAMK", 0},
                    {"CLUSTER_N", 1},  {"RASTER", 0},    {"REDUCE", 0}};
  const Problem p8k{"gemm", "bf16", "bf16", "rc", {{"M", 768}, {"N", 4096}, {"K", 8192}}};
  const Problem p2w{"gemm", "bf16", "bf16", "rc", {{"M", 2100}, {"N", 3000}, {"K", 4096}}};
  const char* three = "three consumers beside the producer";
  const char* fp32 = "192x192 tiles of fp32 outputs spill";
  expect_refused(*t, limits, p, base, {{"BLOCK_N", 256}}, "128 accumulators beside 512 threads",
                 three);
  expect_refused(*t, limits, p, base, {{"CONSUMERS", 2}}, "96-row warpgroups", "whole 64-row");
  expect_refused(*t, limits, p8k, base, {{"SPLITS", 2}}, "no split-K with three consumers", three);
  expect_refused(*t, limits, p2w, base, {{"PERSISTENT", 1}}, "no persistent walk yet", three);
  expect_refused(*t, limits, p32, base, {{"EPILOGUE", 0}, {"PERSISTENT", 1}, {"STREAMK", 1}},
                 "no stream-K", three);
  expect_refused(*t, limits, p, base, {{"EPILOGUE", 2}}, "the TMA store of 2-byte outputs", three);
  expect_refused(*t, limits, p32, base, {{"EPILOGUE", 0}, {"CLUSTER_M", 2}},
                 "fp32 192x192 in a cluster spills", fp32);
  expect_refused(*t, limits, p32, base, {}, "the staged epilogue of fp32 192x192 tiles spills",
                 fp32);
  expect_refused(*t, limits, p, base, {{"STAGES", 4}},
                 "four stages and the staged epilogue: 231 KB", "shared-memory ring");
  auto space = SearchSpace::build(*t, p, limits);
  ASSERT_TRUE(space) << space.error().message;
  std::set<std::int64_t> widths;  // BLOCK_N offered with 192-row tiles
  for (const auto& c : space->configs()) {
    if (c.at("BLOCK_M") != 192) continue;
    widths.insert(c.at("BLOCK_N"));
    EXPECT_EQ(c.at("CONSUMERS"), 3) << params_to_string(c);
  }
  EXPECT_EQ(widths, (std::set<std::int64_t>{128, 160, 192}));
  std::vector<CompileRequest> reqs;
  auto add = [&](const Problem& prob,
                 std::initializer_list<std::pair<const char*, std::int64_t>> changes) {
    add_request(*t, limits, prob, testing::with_params(base, changes), reqs);
  };
  add(p, {});
  add(p, {{"EPILOGUE", 0}, {"STAGES", 4}});
  add(p32, {{"EPILOGUE", 2}});
  add(p, {{"CLUSTER_M", 2}});
  add(p, {{"BLOCK_N", 128}, {"CLUSTER_N", 2}, {"STAGES", 4}});
  add(p32, {{"EPILOGUE", 0}, {"GROUP_M", 1}, {"RASTER", 1}});
  add(p, {{"GROUP_M", 1}, {"RASTER", 1}, {"CLUSTER_N", 2}});
  add(p32, {{"BLOCK_N", 160}, {"EPILOGUE", 2}});
  ASSERT_EQ(reqs.size(), 8u);
  expect_compiled_without_spills(reqs, 128);
}

// gemm_tma's three k-slices (issue 13; the tuner's winner at 640x4096x14336 on the H100,
// 2026-12-07): split-K may take up to three waves of k-slices; three slices only with the workspace
// sum (the cluster and band sums split a tile's 16 or 32 column groups evenly); the winner compiles
// for sm_90a without spills.
TEST(CompilerTest, GemmTmaThreeKSlicesAreOfferedWithTheWorkspaceSumAndCompileWithoutSpills) {
  const auto [t, limits] = gemm_tma_on_sm90a();
  ASSERT_NE(t, nullptr);
  const Problem p{"gemm", "bf16", "bf16", "rc", {{"M", 640}, {"N", 4096}, {"K", 14336}}};
  auto space = SearchSpace::build(*t, p, limits);
  ASSERT_TRUE(space) << space.error().message;
  std::set<std::pair<std::int64_t, std::int64_t>> splits_reduce;  // (SPLITS, REDUCE) offered
  std::set<std::int64_t> splits_at_256;  // SPLITS offered with 128x256 tiles (80 of them)
  std::set<std::int64_t> reduce_3_at_192;  // REDUCE offered with three slices of 128x192 tiles
  for (const auto& c : space->configs()) {
    if (c.at("BLOCK_N") == 192 && c.at("SPLITS") == 3) reduce_3_at_192.insert(c.at("REDUCE"));
    if (c.at("BLOCK_N") == 192) continue;  // 24 column groups: three bands too (below)
    splits_reduce.insert({c.at("SPLITS"), c.at("REDUCE")});
    if (c.at("BLOCK_M") == 128 && c.at("BLOCK_N") == 256) splits_at_256.insert(c.at("SPLITS"));
  }
  EXPECT_TRUE(splits_reduce.contains({3, 0}));
  EXPECT_FALSE(splits_reduce.contains({3, 1}));
  EXPECT_FALSE(splits_reduce.contains({3, 2}));
  EXPECT_TRUE(splits_reduce.contains({4, 2}));
  EXPECT_EQ(reduce_3_at_192, (std::set<std::int64_t>{0, 1, 2}));
  EXPECT_EQ(splits_at_256, (std::set<std::int64_t>{1, 2, 3, 4})) << "320 slices <= 396; 640 > 396";
  const Params winner{{"BLOCK_M", 128},  {"BLOCK_N", 256}, {"BLOCK_K", 64}, {"STAGES", 4},
                      {"CONSUMERS", 2},  {"GROUP_M", 1},   {"EPILOGUE", 2}, {"CLUSTER_M", 1},
                      {"PERSISTENT", 1}, {"SPLITS", 3},    {"SCHEDULE", 0}, {"STREAMK", 0},
                      {"CLUSTER_N", 1},  {"RASTER", 1},    {"REDUCE", 0}};
  std::vector<CompileRequest> reqs;
  add_request(*t, limits, p, winner, reqs);
  ASSERT_EQ(reqs.size(), 1u);
  expect_compiled_without_spills(reqs, 168);
}

// gemm_tma's 1 x 2 clusters and column raster (issue 13): the space pairs tiles along N only
// where there are two tile columns, never builds a cluster of more than two CTAs, and offers
// column bands only where they order tiles differently from a row raster; pairs along N (A
// multicast, half-boxes of 32 rows under ping-pong's 64-row tiles), split-K and stream-K ones
// among them, compile for sm_90a without spills or stack.
TEST(CompilerTest, GemmTmaClusterAlongNAndColumnRasterConfigsCompileForSm90aWithoutSpills) {
  const auto [t, limits] = gemm_tma_on_sm90a();
  ASSERT_NE(t, nullptr);
  struct Seen {
    int pairs_n = 0, column = 0, both = 0;
  };
  auto scan = [&](const Problem& p) {
    Seen seen;
    auto space = SearchSpace::build(*t, p, limits);
    EXPECT_TRUE(space) << space.error().message;
    if (!space) return seen;
    for (const auto& c : space->configs()) {
      seen.pairs_n += c.at("CLUSTER_N") == 2;
      seen.column += c.at("RASTER") == 1;
      seen.both += c.at("CLUSTER_N") == 2 && c.at("CLUSTER_M") == 2;
    }
    return seen;
  };
  const Problem p{"gemm", "bf16", "bf16", "rc", {{"M", 4096}, {"N", 4096}, {"K", 4096}}};
  const Seen square = scan(p);
  EXPECT_GT(square.pairs_n, 0);
  EXPECT_GT(square.column, 0);
  EXPECT_EQ(square.both, 0) << "clusters of two CTAs at most";
  // One column of 256-wide tiles: no pair along N at BLOCK_N 256, and no column bands for them
  // (with one column of tiles every order is the row raster's); 128-, 160- and 192-wide ones make
  // two.
  const Problem narrow{"gemm", "bf16", "bf16", "rc", {{"M", 4096}, {"N", 256}, {"K", 4096}}};
  auto space = SearchSpace::build(*t, narrow, limits);
  ASSERT_TRUE(space) << space.error().message;
  for (const auto& c : space->configs()) {
    if (c.at("BLOCK_N") == 256) {
      EXPECT_EQ(c.at("CLUSTER_N"), 1) << params_to_string(c);
    }
    if (c.at("RASTER") == 1) {
      EXPECT_LT(c.at("BLOCK_N"), 256) << params_to_string(c);
    }
  }
  Params pair{{"BLOCK_M", 256},  {"BLOCK_N", 128}, {"BLOCK_K", 64}, {"STAGES", 4},
              {"CONSUMERS", 2},  {"GROUP_M", 8},   {"EPILOGUE", 2}, {"CLUSTER_M", 1},
              {"PERSISTENT", 1}, {"SPLITS", 1},    {"SCHEDULE", 0}, {"STREAMK", 0},
              {"CLUSTER_N", 2},  {"RASTER", 1},    {"REDUCE", 0}};
  Params both = pair;
  both["CLUSTER_M"] = 2;
  EXPECT_FALSE(instantiate(*t, p, limits, both)) << "a 2 x 2 cluster is not offered";
  std::vector<CompileRequest> reqs;
  auto add = [&](const Problem& prob, const Params& params) {
    add_request(*t, limits, prob, params, reqs);
  };
  add(p, pair);
  Params pp = pair;  // ping-pong 64-row tiles: each CTA loads 32 rows of A and multicasts them
  pp["BLOCK_M"] = 64;
  pp["BLOCK_N"] = 256;
  pp["SCHEDULE"] = 1;
  pp["RASTER"] = 0;
  add(p, pp);
  Params split = pair;
  split["PERSISTENT"] = 0;
  split["SPLITS"] = 4;
  split["RASTER"] = 0;
  add(Problem{"gemm", "bf16", "bf16", "rc", {{"M", 1024}, {"N", 1024}, {"K", 65536}}}, split);
  Params sk = pair;
  sk["STREAMK"] = 1;
  sk["EPILOGUE"] = 1;
  sk["STAGES"] = 3;
  add(p, sk);
  expect_compiled_without_spills(reqs, 168);
}

// gemm_tma's cluster split-K (REDUCE 1, issue 13): the space offers it only for split tiles of a
// one-block-per-unit grid, outside multicast pairs, with the register epilogue and a stage ring
// that holds the fp32 partial; its configs (128x128 in 2, 4 and 8 slices, 128x256 and 256x128
// tiles, fp32 out) compile for sm_90a without spills.
TEST(CompilerTest, GemmTmaClusterSplitKConfigsAreOfferedWhereTheyFitAndCompileWithoutSpills) {
  const auto [t, limits] = gemm_tma_on_sm90a();
  ASSERT_NE(t, nullptr);
  const Problem p{"gemm", "bf16", "bf16", "rc", {{"M", 512}, {"N", 1024}, {"K", 32768}}};
  auto space = SearchSpace::build(*t, p, limits);
  ASSERT_TRUE(space) << space.error().message;
  std::set<std::int64_t> slices;
  for (const auto& c : space->configs()) {
    if (c.at("REDUCE") != 1) continue;
    slices.insert(c.at("SPLITS"));
    if (c.at("SPLITS") == 3) {
      EXPECT_EQ(c.at("BLOCK_N"), 192) << "bands of 8 of 24 column groups";
    }
    EXPECT_EQ(c.at("PERSISTENT"), 0) << params_to_string(c);
    EXPECT_EQ(c.at("CLUSTER_M") * c.at("CLUSTER_N"), 1) << params_to_string(c);
    EXPECT_EQ(c.at("EPILOGUE"), 0) << params_to_string(c);
    EXPECT_GE(c.at("STAGES") * (c.at("BLOCK_M") + c.at("BLOCK_N")) * c.at("BLOCK_K") * 2,
              c.at("BLOCK_M") * c.at("BLOCK_N") * 4)
        << params_to_string(c);
  }
  EXPECT_EQ(slices, (std::set<std::int64_t>{2, 3, 4, 8}));
  Params split{{"BLOCK_M", 128},  {"BLOCK_N", 128}, {"BLOCK_K", 64}, {"STAGES", 6},
               {"CONSUMERS", 2},  {"GROUP_M", 1},   {"EPILOGUE", 0}, {"CLUSTER_M", 1},
               {"PERSISTENT", 0}, {"SPLITS", 4},    {"SCHEDULE", 0}, {"STREAMK", 0},
               {"CLUSTER_N", 1},  {"RASTER", 0},    {"REDUCE", 1}};
  auto launch = instantiate(*t, p, limits, split);
  ASSERT_TRUE(launch) << launch.error().message;
  EXPECT_EQ(launch->launch.cluster[0], 4u) << "the tile's four k-slices are the cluster";
  EXPECT_EQ(launch->launch.grid[0], 4u * 8u * 4u) << "one block per k-slice of each tile";
  expect_refused(*t, limits, p, split, {{"EPILOGUE", 1}}, "bands are written from registers");
  expect_refused(*t, limits, p, split, {{"CLUSTER_M", 2}}, "no multicast pair beside the k-slices");
  expect_refused(*t, limits, p, split, {{"SPLITS", 1}}, "nothing to reduce");
  std::vector<CompileRequest> reqs;
  auto add = [&](const Problem& prob, const Params& params) {
    add_request(*t, limits, prob, params, reqs);
  };
  add_split_requests(*t, limits, p, split, reqs);
  Params wide = split;  // the 128-accumulator tiles: the band sums live beside no accumulators
  wide["BLOCK_N"] = 256;
  wide["STAGES"] = 4;
  wide["SPLITS"] = 2;
  add(Problem{"gemm", "bf16", "bf16", "rc", {{"M", 1024}, {"N", 1024}, {"K", 65536}}}, wide);
  Params tall = wide;
  tall["BLOCK_M"] = 256;
  tall["BLOCK_N"] = 128;
  tall["SPLITS"] = 8;
  add(Problem{"gemm", "bf16", "fp32", "rc", {{"M", 1024}, {"N", 1024}, {"K", 65536}}}, tall);
  expect_compiled_without_spills(reqs, 168);
}

// gemm_tma's band split-K (REDUCE 2, issue 13): every k-slice of a tile sums one column band of the
// partials through the workspace, so the space offers it only where the grid is resident at once
// (the persistent grid) and with the register epilogue, multicast pairs allowed; its configs
// (128x128 in 2, 4 and 8 slices with and without a pair, the 128-accumulator tiles) compile for
// sm_90a without spills.
TEST(CompilerTest, GemmTmaBandSplitKConfigsAreOfferedOnResidentGridsAndCompileWithoutSpills) {
  const auto [t, limits] = gemm_tma_on_sm90a();
  ASSERT_NE(t, nullptr);
  const Problem p{"gemm", "bf16", "bf16", "rc", {{"M", 512}, {"N", 1024}, {"K", 32768}}};
  auto space = SearchSpace::build(*t, p, limits);
  ASSERT_TRUE(space) << space.error().message;
  std::set<std::int64_t> slices, cluster_sizes;
  for (const auto& c : space->configs()) {
    if (c.at("REDUCE") != 2) continue;
    slices.insert(c.at("SPLITS"));
    if (c.at("SPLITS") == 3) {
      EXPECT_EQ(c.at("BLOCK_N"), 192) << "bands of 8 of 24 column groups";
    }
    cluster_sizes.insert(c.at("CLUSTER_M") * c.at("CLUSTER_N"));
    EXPECT_EQ(c.at("PERSISTENT"), 1) << params_to_string(c);
    EXPECT_EQ(c.at("EPILOGUE"), 0) << params_to_string(c);
  }
  EXPECT_EQ(slices, (std::set<std::int64_t>{2, 3, 4, 8}));
  EXPECT_EQ(cluster_sizes, (std::set<std::int64_t>{1, 2})) << "multicast pairs beside band split-K";
  Params split{{"BLOCK_M", 128},  {"BLOCK_N", 128}, {"BLOCK_K", 64}, {"STAGES", 6},
               {"CONSUMERS", 2},  {"GROUP_M", 8},   {"EPILOGUE", 0}, {"CLUSTER_M", 2},
               {"PERSISTENT", 1}, {"SPLITS", 4},    {"SCHEDULE", 0}, {"STREAMK", 0},
               {"CLUSTER_N", 1},  {"RASTER", 0},    {"REDUCE", 2}};
  auto launch = instantiate(*t, p, limits, split);
  ASSERT_TRUE(launch) << launch.error().message;
  EXPECT_EQ(launch->launch.cluster[0], 2u) << "the launch's cluster is the multicast pair";
  expect_refused(*t, limits, p, split, {{"EPILOGUE", 2}}, "bands are written from registers");
  expect_refused(*t, limits, p, split, {{"PERSISTENT", 0}},
                 "a slice waits for the others: the grid must be resident");
  expect_refused(*t, limits, p, split, {{"SPLITS", 1}}, "nothing to reduce");
  std::vector<CompileRequest> reqs;
  auto add = [&](const Problem& prob, const Params& params) {
    add_request(*t, limits, prob, params, reqs);
  };
  add_split_requests(*t, limits, p, split, reqs);
  Params single = split;
  single["CLUSTER_M"] = 1;
  add(p, single);
  const Problem long_k{"gemm", "bf16", "bf16", "rc", {{"M", 1024}, {"N", 1024}, {"K", 65536}}};
  Params tall = split;  // cuBLAS's decomposition of 1024x1024x65536: 128 accumulators a thread
  tall["BLOCK_M"] = 256;
  tall["STAGES"] = 4;
  tall["CLUSTER_M"] = 1;
  tall["CLUSTER_N"] = 2;
  add(long_k, tall);
  Params wide = tall;
  wide["BLOCK_M"] = 128;
  wide["BLOCK_N"] = 256;
  wide["SPLITS"] = 8;
  add(Problem{"gemm", "bf16", "fp32", "rc", {{"M", 1024}, {"N", 1024}, {"K", 65536}}}, wide);
  expect_compiled_without_spills(reqs, 168);
}

}  // namespace
}  // namespace ktune
