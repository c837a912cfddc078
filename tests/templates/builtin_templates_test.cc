// Every built-in template loads, enumerates and prunes for representative problems. (Compiling
// samples with NVRTC is in tests/tuner/compiler_test.cc.)
#include <gtest/gtest.h>

#include <algorithm>
#include <initializer_list>
#include <map>
#include <tuple>

#include "config/config.h"
#include "templates/registry.h"
#include "templates/space.h"

namespace ktune {
namespace {

const std::vector<std::string> k_builtin = {"gemm",      "gemm_sm90", "gemm_tma",   "softmax",
                                            "layernorm", "rmsnorm",   "reduce_sum", "transpose"};

// A representative problem per op (the shapes the benchmarks use).
Problem problem_for(const Manifest& m) {
  Problem p{m.op, m.dtypes.front(), m.dtypes.front(), m.layouts.begin()->first, {}};
  if (m.op == "gemm") {
    p.layout = "rc";
    p.dims = {{"M", 4096}, {"N", 4096}, {"K", 4096}};
  } else if (m.op == "reduce_sum") {
    p.dims = {{"n", 100'000'000}};
  } else if (m.op == "transpose") {
    p.dims = {{"rows", 16384}, {"cols", 16384}};
  } else {
    p.dims = {{"rows", 32768}, {"cols", 4096}};
  }
  return p;
}

TEST(BuiltinTemplatesTest, AllLoadWithoutErrors) {
  auto reg = TemplateRegistry::load({builtin_template_dir()});
  for (const auto& e : reg.errors()) ADD_FAILURE() << e.message;
  for (const auto& name : k_builtin) EXPECT_NE(reg.find(name), nullptr) << name;
}

// The gemm templates of an sm_90 device come gemm_tma first where its heuristic_rank is 1 (M and
// N of at least one 128 x 128 tile), then the others in registry order; decode shapes keep the
// registry order (the mma.sync template's split-K heuristic first: gemm_tma's rules have nothing
// for M = 16, and its fallback, a 128-row tile, would be served); on sm_80 only the mma.sync
// template runs, and a layout gemm_tma lacks (rr) keeps the registry order.
TEST(BuiltinTemplatesTest, HeuristicRankOrdersTheTemplatesOfAProblem) {
  auto reg = TemplateRegistry::load({builtin_template_dir()});
  auto names = [&](const Problem& p, int cc) {
    std::vector<std::string> out;
    for (const KernelTemplate* t : reg.for_problem(p, cc)) out.push_back(t->name());
    return out;
  };
  Problem rc{"gemm", "bf16", "bf16", "rc", {{"M", 8192}, {"N", 8192}, {"K", 8192}}};
  EXPECT_EQ(names(rc, 90), (std::vector<std::string>{"gemm_tma", "gemm", "gemm_sm90"}));
  EXPECT_EQ(names(rc, 80), (std::vector<std::string>{"gemm"}));
  const Problem decode{"gemm", "bf16", "bf16", "rc", {{"M", 16}, {"N", 4096}, {"K", 4096}}};
  EXPECT_EQ(names(decode, 90), (std::vector<std::string>{"gemm", "gemm_sm90", "gemm_tma"}));
  const KernelTemplate* tma = reg.find("gemm_tma");
  ASSERT_NE(tma, nullptr);
  EXPECT_EQ(heuristic_rank(*tma, rc), 1);
  EXPECT_EQ(heuristic_rank(*tma, decode), 0);
  // From 65 rows (decode batches of 72-120) gemm_tma's one-row rules come first: gemm's rules stop
  // at 64 rows and its safe chain ran 0.10-0.45 of torch there (H100, 2026-12-06).
  for (int64_t m : {65, 72, 96, 120})
    EXPECT_EQ(
        names({"gemm", "bf16", "bf16", "rc", {{"M", m}, {"N", 4096}, {"K", 4096}}}, 90).front(),
        "gemm_tma")
        << m << " rows";
  EXPECT_EQ(
      names({"gemm", "bf16", "bf16", "rc", {{"M", 64}, {"N", 4096}, {"K", 4096}}}, 90).front(),
      "gemm");
  // A small problem (at most 64 128x128 tiles, short K) gets gemm_sm90's 64x128 tiles first:
  // gemm_tma's rule ran it 1.4x slower on the H100 (2026-12-06).
  auto gemm = [](int64_t m, int64_t n, int64_t k) {
    return Problem{"gemm", "bf16", "bf16", "rc", {{"M", m}, {"N", n}, {"K", k}}};
  };
  EXPECT_EQ(names(gemm(1024, 1024, 1024), 90).front(), "gemm_sm90");
  EXPECT_EQ(names(gemm(512, 2048, 2048), 90).front(), "gemm_sm90");
  const auto small = heuristic_config(*reg.find("gemm_sm90"), gemm(1024, 1024, 1024),
                                      *DeviceLimits::for_arch("sm_90"));
  ASSERT_TRUE(small);
  EXPECT_EQ(*small, (Params{{"BLOCK_M", 64},
                            {"BLOCK_N", 128},
                            {"BLOCK_K", 64},
                            {"STAGES", 7},
                            {"CONSUMERS", 1},
                            {"SPECIALIZED", 0},
                            {"GROUP_M", 1}}));
  // Wherever gemm_sm90 ranks first, its small-problem rule passes (a rule that cannot would fall
  // through silently to another config).
  const auto sm90 = *DeviceLimits::for_arch("sm_90");
  int covered = 0;
  for (int64_t m : {512, 640, 768, 1024, 2048})
    for (int64_t n : {512, 1000, 1024, 2048, 4096})
      for (int64_t k : {64, 256, 320, 384, 512, 1000, 1024, 2048, 4096}) {
        const Problem p = gemm(m, n, k);
        if (names(p, 90).front() != "gemm_sm90") continue;
        ++covered;
        const auto h = heuristic_config(*reg.find("gemm_sm90"), p, sm90);
        EXPECT_TRUE(h && *h == *small) << p.describe();
      }
  EXPECT_GT(covered, 20);
  for (const Problem& p : {gemm(1024, 2048, 1024), gemm(1024, 1024, 65536), gemm(2048, 2048, 2048),
                           gemm(128, 4096, 1024), gemm(512, 512, 2048), gemm(1024, 1024, 256)})
    EXPECT_EQ(names(p, 90).front(), "gemm_tma") << p.describe();
  // Among those, the few-tile ones have rules of their own (tuned on the H100, 2026-12-06):
  // 16 tiles with long K split K in 4 summed in the cluster; one wave with short K, whole tiles.
  auto tma_rule = [&](const Problem& p) {
    auto h = heuristic_config(*tma, p, *DeviceLimits::for_arch("sm_90"));
    EXPECT_TRUE(h) << p.describe();
    return h ? std::tuple{h->at("SPLITS"), h->at("REDUCE"), h->at("PERSISTENT"), h->at("STAGES")}
             : std::tuple<int64_t, int64_t, int64_t, int64_t>{};
  };
  EXPECT_EQ(tma_rule(gemm(512, 512, 2048)),
            (std::tuple<int64_t, int64_t, int64_t, int64_t>{4, 1, 0, 5}));
  EXPECT_EQ(tma_rule(gemm(1024, 2048, 1024)),
            (std::tuple<int64_t, int64_t, int64_t, int64_t>{1, 0, 0, 5}));
  EXPECT_EQ(tma_rule(gemm(2048, 1024, 1024)),
            (std::tuple<int64_t, int64_t, int64_t, int64_t>{1, 0, 0, 5}));
  EXPECT_EQ(std::get<2>(tma_rule(gemm(8192, 8192, 512))), 1) << "more than a wave: persistent";
  Problem rr = rc;
  rr.layout = "rr";
  const auto rr90 = names(rr, 90);
  ASSERT_FALSE(rr90.empty());
  EXPECT_EQ(rr90.front(), "gemm");
  EXPECT_EQ(std::count(rr90.begin(), rr90.end(), "gemm_tma"), 0);
}

// The named params of the config a built-in template's heuristic gives a bf16 rc GEMM of
// m x n x k (`out` outputs) on an sm_90 of 132 SMs (empty when no rule applies).
std::map<std::string, int64_t> gemm_rule(const char* name, int64_t m, int64_t n, int64_t k,
                                         std::initializer_list<const char*> params,
                                         const char* out = "bf16") {
  static const TemplateRegistry reg = TemplateRegistry::load({builtin_template_dir()});
  const auto limits = *DeviceLimits::for_arch("sm_90");
  EXPECT_EQ(limits.sm_count, 132);
  std::map<std::string, int64_t> got;
  const KernelTemplate* t = reg.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return got;
  const Problem p{"gemm", "bf16", out, "rc", {{"M", m}, {"N", n}, {"K", k}}};
  auto h = heuristic_config(*t, p, limits);
  EXPECT_TRUE(h) << name << " " << p.describe();
  if (h)
    for (const char* param : params) got[param] = h->at(param);
  return got;
}

// The mma.sync gemm's decode rows (M <= 32, K >= 2048) split K in two only where the waves say it
// pays: T 64-column tiles, one block per SM, cost ceil(T / SMs) waves of K whole and
// ceil(2T / SMs) waves of K / 2 + 1024 split (H100, graphed: bench/NOTES.md "Decode rows: the
// waves"). 132 SMs here.
TEST(BuiltinTemplatesTest, GemmSplitsDecodeRowsWhereTheWavesSayItPays) {
  auto split = [](int64_t m, int64_t n, int64_t k) {
    auto p = gemm_rule("gemm", m, n, k, {"BLOCK_M", "SPLIT_K"});
    EXPECT_EQ(p["BLOCK_M"], m <= 16 ? 16 : 32) << m << "x" << n << "x" << k;
    return p["SPLIT_K"];
  };
  // One wave either way: half the K plus the sum beats the whole K from K = 4096 on.
  EXPECT_EQ(split(16, 4096, 4096), 2) << "64 tiles, 1 wave split: 3072 < 4096";
  EXPECT_EQ(split(16, 3072, 4096), 2) << "48 tiles: 3072 < 4096";
  EXPECT_EQ(split(32, 4096, 14336), 2);
  EXPECT_EQ(split(16, 4096, 2048), 1) << "K = 2048: 2048 split is no better than 2048 whole";
  // Split into a second wave: whole K wins unless the whole K leaves its own second wave.
  EXPECT_EQ(split(16, 8192, 8192), 1) << "128 tiles: 1 wave whole against 2 split";
  EXPECT_EQ(split(16, 6144, 4096), 1);
  EXPECT_EQ(split(32, 6144, 4096), 1);
  EXPECT_EQ(split(16, 8448, 4096), 1) << "132 tiles: exactly one wave";
  EXPECT_EQ(split(16, 10240, 8192), 2) << "160 tiles: 2 waves of 8192 against 3 of 5120";
  EXPECT_EQ(split(32, 10240, 8192), 2);
  EXPECT_EQ(split(1, 14336, 4096), 1) << "224 tiles: 2 waves of 4096 against 4 of 3072";
  EXPECT_EQ(split(16, 14336, 4096), 1);
  EXPECT_EQ(split(32, 14336, 4096), 1);
  EXPECT_EQ(split(24, 11008, 4096), 1) << "172 tiles: 2 waves of 4096 against 3 of 3072";
}

// Narrow decode outputs (N <= 2112 at 132 SMs) take 32-column tiles in four slices while four
// slices of them fit a wave, else two: about one wave of blocks where 64-column tiles left most SMs
// idle (the tuner's pick on an H100; bench/NOTES.md "Narrow decode outputs").
TEST(BuiltinTemplatesTest, GemmNarrowDecodeOutputsFillAWaveWith32ColumnTiles) {
  auto rule = [](int64_t m, int64_t n, int64_t k) {
    return gemm_rule("gemm", m, n, k, {"BLOCK_M", "BLOCK_N", "SPLIT_K"});
  };
  using P = std::map<std::string, int64_t>;
  EXPECT_EQ(rule(16, 1024, 4096), (P{{"BLOCK_M", 16}, {"BLOCK_N", 32}, {"SPLIT_K", 4}}))
      << "32 tiles: 128 blocks";
  EXPECT_EQ(rule(1, 1024, 8192), (P{{"BLOCK_M", 16}, {"BLOCK_N", 32}, {"SPLIT_K", 4}}));
  EXPECT_EQ(rule(16, 1056, 4096), (P{{"BLOCK_M", 16}, {"BLOCK_N", 32}, {"SPLIT_K", 4}}))
      << "33 tiles: 132 blocks";
  EXPECT_EQ(rule(16, 1088, 4096), (P{{"BLOCK_M", 16}, {"BLOCK_N", 32}, {"SPLIT_K", 2}}))
      << "34 tiles";
  EXPECT_EQ(rule(16, 2048, 8192), (P{{"BLOCK_M", 16}, {"BLOCK_N", 32}, {"SPLIT_K", 2}}));
  EXPECT_EQ(rule(32, 1024, 8192), (P{{"BLOCK_M", 32}, {"BLOCK_N", 32}, {"SPLIT_K", 4}}));
  EXPECT_EQ(rule(24, 1536, 4096), (P{{"BLOCK_M", 32}, {"BLOCK_N", 32}, {"SPLIT_K", 2}}));
  EXPECT_EQ(rule(32, 2112, 4096), (P{{"BLOCK_M", 32}, {"BLOCK_N", 32}, {"SPLIT_K", 2}}));
  // Past 66 tiles of 32 columns the 64-column rules above take over.
  EXPECT_EQ(rule(16, 2144, 4096)["BLOCK_N"], 64);
  EXPECT_EQ(rule(32, 4096, 4096)["BLOCK_N"], 64);
  EXPECT_EQ(rule(16, 1024, 2048), (P{{"BLOCK_M", 16}, {"BLOCK_N", 32}, {"SPLIT_K", 2}}))
      << "K = 2048: four slices of 512 hold fewer k-tiles than 6 stages";
  EXPECT_EQ(rule(16, 1024, 1024)["SPLIT_K"], 1) << "short K: the K >= 2048 rules do not apply";
}

// 33-64 rows: 32x32 tiles (2x2 warps) in up to three blocks a SM where the 64x64 split-2 rule ran
// 0.42-0.76 of torch graphed (the tuner's picks on an H100; bench/NOTES.md "33-128-row narrow
// rules"): four slices of K while they fit two a SM, two where the waves say it pays (the sum
// worth 3072 of K), else whole K; past two a SM, 4 stages.
TEST(BuiltinTemplatesTest, GemmRowsUpTo64TakeUpToThreeBlocksASmOf32x32Tiles) {
  auto rule = [](int64_t m, int64_t n, int64_t k) {
    return gemm_rule("gemm", m, n, k, {"BLOCK_M", "BLOCK_N", "SPLIT_K", "STAGES"});
  };
  using P = std::map<std::string, int64_t>;
  const P four{{"BLOCK_M", 32}, {"BLOCK_N", 32}, {"SPLIT_K", 4}, {"STAGES", 6}};
  const P two{{"BLOCK_M", 32}, {"BLOCK_N", 32}, {"SPLIT_K", 2}, {"STAGES", 6}};
  const P whole{{"BLOCK_M", 32}, {"BLOCK_N", 32}, {"SPLIT_K", 1}, {"STAGES", 6}};
  const P three_a_sm{{"BLOCK_M", 32}, {"BLOCK_N", 32}, {"SPLIT_K", 1}, {"STAGES", 4}};
  EXPECT_EQ(rule(64, 1024, 4096), four) << "2 x 32 tiles: 256 blocks";
  EXPECT_EQ(rule(48, 1024, 4096), four);
  EXPECT_EQ(rule(64, 1024, 8192), four);
  EXPECT_EQ(rule(64, 1056, 4096), four) << "2 x 33 tiles: 264 blocks, two a SM";
  EXPECT_EQ(rule(64, 1088, 4096), whole) << "2 x 34 tiles at K = 4096: 2048 + 3072 > 4096";
  EXPECT_EQ(rule(64, 2048, 4096), whole);
  EXPECT_EQ(rule(64, 1536, 8192), two) << "96 blocks at K = 8192: 4096 + 3072 < 8192";
  EXPECT_EQ(rule(40, 2048, 8192), two);
  EXPECT_EQ(rule(64, 2048, 8192), two);
  EXPECT_EQ(rule(64, 3072, 8192), whole) << "192 blocks: two slices take a second wave";
  EXPECT_EQ(rule(64, 4224, 4096), whole) << "2 x 132 tiles";
  EXPECT_EQ(rule(64, 4256, 4096), three_a_sm) << "2 x 133 tiles: past two a SM";
  EXPECT_EQ(rule(64, 6144, 4096), three_a_sm);
  EXPECT_EQ(rule(64, 6336, 4096), three_a_sm) << "2 x 198 tiles: three a SM";
  EXPECT_EQ(rule(64, 6400, 4096),
            (P{{"BLOCK_M", 64}, {"BLOCK_N", 64}, {"SPLIT_K", 2}, {"STAGES", 3}}))
      << "2 x 200 tiles: past three a SM";
  EXPECT_EQ(rule(64, 14336, 4096),
            (P{{"BLOCK_M", 64}, {"BLOCK_N", 128}, {"SPLIT_K", 1}, {"STAGES", 4}}));
  EXPECT_EQ(rule(64, 1024, 1024)["BLOCK_M"], 64) << "short K: the K >= 2048 rules do not apply";
  EXPECT_EQ(rule(32, 4096, 4096)["BLOCK_N"], 64) << "up to 32 rows keep their own rules";
  // A SM of sm_80 holds one 96 KB block: the rules count two, so there the 64x64 rule serves.
  const auto sm80 =
      heuristic_config(*TemplateRegistry::load({builtin_template_dir()}).find("gemm"),
                       Problem{"gemm", "bf16", "bf16", "rc", {{"M", 64}, {"N", 1024}, {"K", 4096}}},
                       *DeviceLimits::for_arch("sm_80"));
  ASSERT_TRUE(sm80);
  EXPECT_EQ(sm80->at("BLOCK_M"), 64);
}

// One row of 128-row tiles (M = 128: a decode batch) fell through every gemm_tma rule to the
// safe chain's 2-stage, 1-consumer config (0.305x cuBLAS at 128x4096x4096 on an H100). It gets
// the rules tuned there: split-K 4 summed in bands while 4 slices of every tile fit a wave, then
// split 2, then whole tiles with 5 stages.
TEST(BuiltinTemplatesTest, GemmTmaHasRulesForOneRowOfTiles) {
  auto rule = [](int64_t m, int64_t n, int64_t k) {
    return gemm_rule("gemm_tma", m, n, k,
                     {"SPLITS", "REDUCE", "STAGES", "CONSUMERS", "PERSISTENT"});
  };
  using P = std::map<std::string, int64_t>;
  EXPECT_EQ(rule(128, 4096, 4096),
            (P{{"SPLITS", 4}, {"REDUCE", 2}, {"STAGES", 4}, {"CONSUMERS", 2}, {"PERSISTENT", 1}}));
  EXPECT_EQ(rule(128, 8192, 4096),
            (P{{"SPLITS", 2}, {"REDUCE", 0}, {"STAGES", 6}, {"CONSUMERS", 2}, {"PERSISTENT", 0}}));
  EXPECT_EQ(rule(128, 14336, 4096),
            (P{{"SPLITS", 1}, {"REDUCE", 0}, {"STAGES", 5}, {"CONSUMERS", 1}, {"PERSISTENT", 0}}));
  // Short K: no split.
  EXPECT_EQ(rule(128, 4096, 512),
            (P{{"SPLITS", 1}, {"REDUCE", 0}, {"STAGES", 5}, {"CONSUMERS", 1}, {"PERSISTENT", 0}}));
  // Narrow outputs: eight slices in bands up to 12 tiles (at 132 SMs), then four summed by the
  // last block, 6 stages, while eight would fit a wave.
  const P eight{{"SPLITS", 8}, {"REDUCE", 2}, {"STAGES", 5}, {"CONSUMERS", 2}, {"PERSISTENT", 1}};
  const P four_last{
      {"SPLITS", 4}, {"REDUCE", 1}, {"STAGES", 6}, {"CONSUMERS", 2}, {"PERSISTENT", 0}};
  EXPECT_EQ(rule(128, 1024, 4096), eight) << "8 tiles: 64 blocks";
  EXPECT_EQ(rule(128, 1024, 8192), eight);
  EXPECT_EQ(rule(128, 512, 4096), eight);
  EXPECT_EQ(rule(128, 1280, 4096), eight);
  EXPECT_EQ(rule(128, 1536, 4096), eight) << "12 tiles: 384 <= 396";
  EXPECT_EQ(rule(96, 1024, 4096), eight) << "65-127 rows take the one-row rules";
  EXPECT_EQ(rule(128, 1664, 4096), four_last) << "13 tiles";
  EXPECT_EQ(rule(128, 2048, 4096), four_last) << "16 tiles: 128 <= 132";
  EXPECT_EQ(rule(128, 2048, 8192), four_last);
  EXPECT_EQ(rule(112, 2048, 4096), four_last);
  EXPECT_EQ(rule(128, 2176, 8192)["REDUCE"], 2) << "17 tiles: 136 > 132, four in bands";
  EXPECT_EQ(rule(128, 1024, 2048)["SPLITS"], 4) << "K = 2048";
  // Two rows of tiles keep the rules they had where the mid-size ones below leave them.
  EXPECT_EQ(rule(256, 8192, 4096)["SPLITS"], 1);
  EXPECT_EQ(rule(256, 8192, 4096)["STAGES"], 4);
}

// From 256 rows the tiles are chosen by how they fill waves of 132 SMs (H100 tuner and graphed
// A/B, bench/NOTES.md "Mid-size GEMMs whose tiles leave the last wave idle").
TEST(BuiltinTemplatesTest, GemmTmaMidSizeRulesFillTheWaves) {
  auto rule = [](int64_t m, int64_t n, int64_t k) {
    return gemm_rule("gemm_tma", m, n, k,
                     {"BLOCK_N", "SPLITS", "STAGES", "PERSISTENT", "SCHEDULE", "CLUSTER_M"});
  };
  using P = std::map<std::string, int64_t>;
  const P pingpong{{"BLOCK_N", 128},  {"SPLITS", 1},   {"STAGES", 6},
                   {"PERSISTENT", 1}, {"SCHEDULE", 1}, {"CLUSTER_M", 1}};
  const P one_wave{{"BLOCK_N", 256},  {"SPLITS", 1},   {"STAGES", 4},
                   {"PERSISTENT", 0}, {"SCHEDULE", 0}, {"CLUSTER_M", 1}};
  // 64 tiles of 128x128: two slices.
  EXPECT_EQ(rule(256, 4096, 4096), (P{{"BLOCK_N", 128},
                                      {"SPLITS", 2},
                                      {"STAGES", 6},
                                      {"PERSISTENT", 0},
                                      {"SCHEDULE", 0},
                                      {"CLUSTER_M", 1}}));
  // One wave of 128x256 tiles rather than two of 128x128 ones, or of 128x192 ones where those
  // fit one wave (3/4 of a tile's work).
  P n192 = one_wave;
  n192["BLOCK_N"] = 192;
  EXPECT_EQ(rule(768, 4096, 4096), n192) << "132 tiles of 128x192, 96 of 128x256; 156 of 128x160";
  EXPECT_EQ(rule(512, 6144, 4096), n192) << "128 against 96; 156 of 128x160: two waves";
  // One wave of 192x192 tiles, at least 90 % full, where 128x256 ones take more than a wave:
  // three 64-row consumers, 3 stages, staged epilogue.
  auto rows = [](int64_t m, int64_t n, int64_t k) {
    return gemm_rule("gemm_tma", m, n, k,
                     {"BLOCK_M", "BLOCK_N", "CONSUMERS", "STAGES", "EPILOGUE"});
  };
  const P n192_rows{
      {"BLOCK_M", 192}, {"BLOCK_N", 192}, {"CONSUMERS", 3}, {"STAGES", 3}, {"EPILOGUE", 1}};
  EXPECT_EQ(rows(1152, 4096, 4096), n192_rows) << "132 tiles of 192x192; 144 of 128x256";
  EXPECT_EQ(rows(768, 6144, 14336), n192_rows) << "128 tiles of 192x192; 144 of 128x256";
  EXPECT_EQ(rows(1088, 4096, 4096), n192_rows);
  EXPECT_EQ(rows(1280, 4096, 4096).at("BLOCK_M"), 128) << "154 tiles of 192x192: past one wave";
  EXPECT_EQ(rows(576, 7168, 4096).at("BLOCK_M"), 128)
      << "114 tiles of 192x192 fill 86 % of a wave (140 of 128x256: more than a wave)";
  EXPECT_EQ(gemm_rule("gemm_tma", 1152, 4096, 4096, {"BLOCK_M"}, "fp32").at("BLOCK_M"), 128)
      << "fp32 outputs: the staged 192x192 tile spills, so the rule falls through";
  // Past one wave, 192x160 tiles where they fill their waves over 5 % better than every 128-row
  // width: three consumers, 4 stages, staged, one block per tile (graphed on the H100, call B).
  const P n160_rows{
      {"BLOCK_M", 192}, {"BLOCK_N", 160}, {"CONSUMERS", 3}, {"STAGES", 4}, {"EPILOGUE", 1}};
  EXPECT_EQ(rows(960, 8192, 4096), n160_rows) << "260 tiles in two waves (0.97), 0.91 at best";
  EXPECT_EQ(rows(2304, 5120, 4096), n160_rows) << "384 tiles in three waves (0.97)";
  EXPECT_EQ(rows(3072, 3584, 4096), n160_rows) << "ping-pong 64x192 fills better, but M > 1024";
  EXPECT_EQ(rows(4608, 2560, 4096), n160_rows);
  EXPECT_EQ(rows(960, 12288, 4096), n160_rows) << "64x192: 960 tiles in 8 waves fill 0.91 < 0.97";
  EXPECT_EQ(rows(4096, 4096, 4096).at("BLOCK_M"), 128) << "equal fills: 128x256";
  EXPECT_EQ(rows(576, 6912, 4096).at("BLOCK_M"), 128)
      << "132 tiles of 192x160 are one wave (0.98 full): not measured, so not this rule";
  EXPECT_EQ(gemm_rule("gemm_tma", 2304, 5120, 4096, {"BLOCK_M"}, "fp32").at("BLOCK_M"), 128)
      << "fp32 outputs: 4 staged stages of 192x160 exceed shared memory, so the rule falls through";
  // Where that rule would serve at most 1024 rows and 64x192 tiles walked by two ping-pong
  // consumers fill their waves over 5 % better: those (graphed on the H100, calls D and E).
  auto pingpong_rows = [](int64_t m, int64_t n, int64_t k, const char* out = "bf16") {
    return gemm_rule("gemm_tma", m, n, k,
                     {"BLOCK_M", "BLOCK_N", "SCHEDULE", "PERSISTENT", "STAGES", "GROUP_M"}, out);
  };
  const P pp64{{"BLOCK_M", 64},   {"BLOCK_N", 192}, {"SCHEDULE", 1},
               {"PERSISTENT", 1}, {"STAGES", 6},    {"GROUP_M", 16}};
  EXPECT_EQ(pingpong_rows(768, 14336, 4096), pp64) << "900 tiles in 7 waves (0.97) against 0.905";
  EXPECT_EQ(pingpong_rows(320, 28672, 4096).at("BLOCK_M"), 64) << "192-row tiles pad 320 to 384";
  P pp64_g8 = pp64;
  pp64_g8["GROUP_M"] = 8;
  EXPECT_EQ(pingpong_rows(384, 28672, 4096), pp64_g8)
      << "6 rows of 64-row tiles refuse bands of 16";
  EXPECT_EQ(pingpong_rows(768, 14336, 4096, "fp32").at("BLOCK_M"), 128)
      << "measured with bf16 outputs only";
  EXPECT_EQ(pingpong_rows(768, 14336, 4096, "fp16").at("BLOCK_M"), 64);
  // One wave of 128x160 tiles where it fits: 5/6 of a 128x192 tile's work.
  P n160 = one_wave;
  n160["BLOCK_N"] = 160;
  n160["STAGES"] = 5;
  EXPECT_EQ(rule(640, 4096, 14336), n160) << "130 tiles of 128x160, 110 of 128x192";
  EXPECT_EQ(rule(640, 4096, 4096), n160);
  EXPECT_EQ(rule(384, 6144, 4096), n160) << "117 against 96";
  EXPECT_EQ(rule(896, 4096, 4096), one_wave) << "154 tiles of 128x192: two waves";
  EXPECT_EQ(rule(1000, 4096, 4096), one_wave);
  // 128x128 tiles fill their waves better than 128x256 ones: 640 in five (0.97) against 320 in
  // three; 1280x4096, 320 in three (0.81) against 160 in two (0.61), is 128x160's (below).
  EXPECT_EQ(rule(2560, 4096, 4096), pingpong) << "640 in five (0.97) against 320 in three";
  EXPECT_EQ(rule(4608, 1024, 4096), pingpong) << "N < 1280: not 128x160 (measured)";
  EXPECT_EQ(rule(6656, 1024, 4096)["BLOCK_N"], 256)
      << "N < 1280: not 128x160 (measured; 128x256 fills as well)";
  EXPECT_EQ(rule(896, 6144, 4096), pingpong) << "224 of 128x192 in two: the same 0.85";
  // 128x160 tiles fill theirs over 5 % better than every other width: persistent, column raster.
  P n160_waves{{"BLOCK_N", 160},  {"SPLITS", 1},   {"STAGES", 5},
               {"PERSISTENT", 1}, {"SCHEDULE", 0}, {"CLUSTER_M", 1}};
  EXPECT_EQ(rule(1280, 4096, 4096), n160_waves) << "260 in two (0.97) against 320 in three (0.81)";
  EXPECT_EQ(rule(2560, 5120, 4096), n160_waves)
      << "640 in five (0.97) against 540 of 128x192 in five";
  EXPECT_EQ(rule(640, 8192, 4096), n160_waves);
  EXPECT_EQ(rule(4096, 1280, 4096), n160_waves) << "256 in two (0.97) against 320 in three (0.81)";
  EXPECT_EQ(rule(2560, 1792, 4096), n160_waves) << "240 in two (0.85) against 280 in three (0.71)";
  EXPECT_EQ(rows(3072, 1536, 4096), n192_rows) << "before 128x160: 128 tiles of 192x192 (0.97)";
  EXPECT_EQ(rule(640, 4096, 4096)["BLOCK_N"], 160) << "one wave of 128x256 tiles: the rules above";
  // 128x192 tiles fill theirs over 5 % better than 128x128 and 128x256 ones: persistent.
  const P n192_waves{{"BLOCK_N", 192},  {"SPLITS", 1},   {"STAGES", 5},
                     {"PERSISTENT", 1}, {"SCHEDULE", 0}, {"CLUSTER_M", 1}};
  EXPECT_EQ(rule(1536, 6144, 4096), n192_waves) << "384 in three (0.97) against 576 in five (0.87)";
  EXPECT_EQ(rule(3840, 4096, 4096), n192_waves) << "660 in five (0.97) against 480 in four (0.91)";
  EXPECT_EQ(rule(2304, 4096, 4096), n192_waves);
  EXPECT_EQ(gemm_rule("gemm_tma", 1536, 6144, 4096, {"RASTER", "GROUP_M", "EPILOGUE"}),
            (P{{"RASTER", 1}, {"GROUP_M", 1}, {"EPILOGUE", 1}}));
  // Equal fills keep the 128x256 rules: 4096^3 (1024 tiles in 8 waves, 512 in 4), 8192^3, and
  // 2048x4096x4096 (512 in 4, 256 in 2).
  EXPECT_EQ(rule(4096, 4096, 4096)["BLOCK_N"], 256);
  EXPECT_EQ(rule(8192, 8192, 8192)["BLOCK_N"], 256);
  EXPECT_EQ(rule(2048, 4096, 4096)["BLOCK_N"], 256);
  EXPECT_EQ(rule(1024, 4096, 4096)["BLOCK_N"], 256) << "128 tiles of 128x256: one wave";
  // Short K and K rows off the 128-byte grid keep their rules.
  EXPECT_EQ(rule(1280, 4096, 1024)["SCHEDULE"], 1);
  EXPECT_EQ(rule(1280, 4096, 1024)["BLOCK_N"], 128);
  EXPECT_EQ(rule(1280, 4096, 1024)["STAGES"], 4);
  EXPECT_EQ(rule(1280, 4096, 3000)["CLUSTER_M"], 2);
}

TEST(BuiltinTemplatesTest, EverySpaceEnumeratesPrunesAndHasAValidHeuristic) {
  auto reg = TemplateRegistry::load({builtin_template_dir()});
  for (const auto& t : reg.all()) {
    for (const char* arch : {"sm_80", "sm_90"}) {
      const auto limits = *DeviceLimits::for_arch(arch);
      const Problem p = problem_for(t->manifest);
      if (t->manifest.min_cc > limits.cc || (t->manifest.max_cc && t->manifest.max_cc < limits.cc))
        continue;
      auto space = SearchSpace::build(*t, p, limits);
      ASSERT_TRUE(space) << t->name() << " " << arch << ": " << space.error().message;
      const auto& r = space->report();
      EXPECT_GT(r.valid, 0) << t->name();
      EXPECT_LE(r.valid, r.total) << t->name();
      EXPECT_FALSE(r.pruned.empty())
          << t->name() << ": constraints pruned nothing at " << p.describe();
      auto h = heuristic_config(*t, p, limits);
      ASSERT_TRUE(h) << t->name() << ": " << h.error().message;
      auto inst = instantiate(*t, p, limits, *h);
      ASSERT_TRUE(inst) << t->name() << ": " << inst.error().message;
      EXPECT_GT(inst->metric, 0);
      if (t->manifest.reference.builtin.empty()) {
        auto ref = reference_instance(*t, p, limits);
        EXPECT_TRUE(ref) << t->name() << ": " << ref.error().message;
      }
    }
  }
}

// Calls fn(template, limits, problem) for every built-in template on sm_80 and sm_90 (where its
// arch range allows), with its sample problem's dims scaled by each of `scales` / 1024.
template <class Fn>
void for_each_scaled_problem(const TemplateRegistry& reg,
                             std::initializer_list<std::int64_t> scales, Fn fn) {
  for (const auto& t : reg.all())
    for (const char* arch : {"sm_80", "sm_90"}) {
      const auto limits = *DeviceLimits::for_arch(arch);
      if (t->manifest.min_cc > limits.cc || (t->manifest.max_cc && t->manifest.max_cc < limits.cc))
        continue;
      for (const std::int64_t scale : scales) {
        Problem p = problem_for(t->manifest);
        for (auto& [name, v] : p.dims) v = std::max<std::int64_t>(1, v * scale / 1024);
        fn(*t, limits, p);
      }
    }
}

// heuristic_instance() (a cold lookup's heuristic entries) is instantiate(heuristic_config())
// for every template and problems small and large, where a rule fits and where none does.
TEST(BuiltinTemplatesTest, HeuristicInstanceIsInstantiateOfHeuristicConfig) {
  auto reg = TemplateRegistry::load({builtin_template_dir()});
  int compared = 0;
  for_each_scaled_problem(
      reg, {1, 7, 64, 1000, 4096, 1 << 20},
      [&](const KernelTemplate& t, const DeviceLimits& limits, const Problem& p) {
        auto h = heuristic_config(t, p, limits);
        auto both = heuristic_instance(t, p, limits);
        const auto inst = h ? instantiate(t, p, limits, *h) : Result<Instance>();
        ASSERT_EQ(bool(both), h && inst) << t.name() << " " << p.describe();
        if (!both) return;
        ++compared;
        EXPECT_EQ(both->config(), *h) << t.name() << " " << p.describe();
        // A rule's config is the manifest's own, not copied into the instance.
        if (both->rule) {
          EXPECT_TRUE(both->instance.params.empty());
        }
        const Instance& got = both->instance;
        EXPECT_EQ(got.name_expression, inst->name_expression);
        EXPECT_EQ(got.launch, inst->launch);
        EXPECT_EQ(got.metric, inst->metric);
        ASSERT_EQ(got.args.size(), inst->args.size());
        for (size_t i = 0; i < got.args.size(); ++i) {
          EXPECT_EQ(got.args[i].name, inst->args[i].name);
          EXPECT_EQ(got.args[i].count, inst->args[i].count);
          EXPECT_EQ(got.args[i].value, inst->args[i].value);
        }
      });
  EXPECT_GT(compared, 50);
}

// ArgValues::checked (v1 lookup entries) makes the same instance but the args, and fails where
// ArgValues::kept fails, with the same error.
TEST(BuiltinTemplatesTest, CheckedArgsInstanceIsTheKeptOneWithoutArgs) {
  auto reg = TemplateRegistry::load({builtin_template_dir()});
  int compared = 0, failed = 0;
  for_each_scaled_problem(
      reg, {1, 7, 64, 1000, 4096, 1 << 20},
      [&](const KernelTemplate& t, const DeviceLimits& limits, const Problem& p) {
        auto kept = heuristic_instance(t, p, limits, ArgValues::kept);
        auto checked = heuristic_instance(t, p, limits, ArgValues::checked);
        ASSERT_EQ(bool(kept), bool(checked)) << t.name() << " " << p.describe();
        if (!kept) {
          EXPECT_EQ(kept.error().message, checked.error().message);
          return;
        }
        ++compared;
        EXPECT_TRUE(checked->instance.args.empty());
        EXPECT_EQ(checked->config(), kept->config());
        EXPECT_EQ(checked->instance.name_expression, kept->instance.name_expression);
        EXPECT_EQ(checked->instance.launch, kept->instance.launch);
        EXPECT_EQ(checked->instance.metric, kept->instance.metric);
        EXPECT_EQ(checked->instance.max_active_clusters, kept->instance.max_active_clusters);
        // Every config of a small space, valid or not for its args: the same verdict and error.
        auto space = SearchSpace::build(t, p, limits, 64);
        if (!space) return;
        for (Params c : space->configs()) {
          for (auto& [name, v] : c) {
            const ParamDomain* d = t.manifest.param(name);
            if (d && d->values.size() > 1) v = d->values.back();  // may break an arg's range
            auto a = instantiate(t, p, limits, c, {}, ArgValues::kept);
            auto b = instantiate(t, p, limits, c, {}, ArgValues::checked);
            ASSERT_EQ(bool(a), bool(b)) << t.name() << " " << p.describe();
            if (!a) {
              ++failed;
              EXPECT_EQ(a.error().message, b.error().message);
            } else {
              EXPECT_EQ(a->launch, b->launch);
            }
          }
        }
      });
  EXPECT_GT(compared, 50);
  EXPECT_GT(failed, 0);
}

// Heuristic rules are tried from their plans (manifest.h, RulePlan: what a rule's params decide
// folded when the manifest loads, a repeated `when` reused): the same config, or the same error,
// as evaluating each rule's `when` and check_config() (a template whose plans are dropped), and
// the same instance (launch, name, metric: every derived value set once a rule fits), over a
// grid of shapes on both archs, every output dtype, where rules fit and where none does.
TEST(BuiltinTemplatesTest, PlannedRulesPickWhatCheckingEveryConstraintPicks) {
  auto reg = TemplateRegistry::load({builtin_template_dir()});
  const std::vector<std::int64_t> sizes = {1, 8, 63, 128, 1000, 1024, 4096, 8192, 44864, 65536};
  int compared = 0, known_derived = 0, open_derived = 0, open_checks = 0, whens_repeated = 0;
  size_t constraints = 0;
  for (const auto& t : reg.all()) {
    const Manifest& m = t->manifest;
    ASSERT_EQ(m.slots.rules.size(), m.heuristic.size()) << t->name();
    // What reading params alone would settle (no folding): constraints reading only params and
    // derived values that read only params.
    std::vector<bool> of_params(m.symbols.size(), false);
    for (int slot : m.slots.params) of_params[size_t(slot)] = true;
    const auto params_only = [&](const Expression& e) {
      return std::all_of(e.used_slots.begin(), e.used_slots.end(),
                         [&](int u) { return of_params[size_t(u)]; });
    };
    for (size_t i = 0; i < m.derived.size(); ++i)
      if (params_only(m.derived[i].expr)) of_params[size_t(m.slots.derived[i])] = true;
    const auto unsettled =
        size_t(std::count_if(m.constraints.begin(), m.constraints.end(),
                             [&](const Constraint& c) { return !params_only(c.expr); }));
    for (const auto& plan : m.slots.rules) {
      whens_repeated += plan.when_repeats;
      for (bool k : plan.derived_known) known_derived += k;
      open_derived += int(plan.check_derived.size());
      open_checks += int(plan.checks.size());
      if (plan.fixed_constraints_hold) constraints += unsettled;
    }
    KernelTemplate unplanned = *t;
    unplanned.manifest.slots.rules.clear();
    std::vector<std::string> outs = m.out_dtypes.empty() ? m.dtypes : m.out_dtypes;
    for (const char* arch : {"sm_80", "sm_90"}) {
      const auto limits = *DeviceLimits::for_arch(arch);
      if (m.min_cc > limits.cc || (m.max_cc && m.max_cc < limits.cc)) continue;
      for (const auto& out : outs) {
        Problem p = problem_for(m);
        p.out_dtype = out;
        if (m.out_dtypes.empty()) p.dtype = out;
        // Every combination of sizes over the first three dims.
        std::vector<size_t> at(p.dims.size(), 0);
        while (true) {
          for (size_t d = 0; d < p.dims.size(); ++d) p.dims[d].second = sizes[at[d]];
          auto want = heuristic_config(unplanned, p, limits);
          auto got = heuristic_config(*t, p, limits);
          ASSERT_EQ(bool(got), bool(want)) << t->name() << " " << p.describe();
          if (got) {
            EXPECT_EQ(*got, *want) << t->name() << " " << p.describe();
            auto fast = heuristic_instance(*t, p, limits);
            auto slow = instantiate(unplanned, p, limits, *want);
            ASSERT_EQ(bool(fast), bool(slow)) << t->name() << " " << p.describe();
            if (fast) {
              EXPECT_EQ(fast->instance.name_expression, slow->name_expression);
              EXPECT_EQ(fast->instance.launch.grid, slow->launch.grid)
                  << t->name() << " " << p.describe();
              EXPECT_EQ(fast->instance.launch.block, slow->launch.block);
              EXPECT_EQ(fast->instance.launch.smem, slow->launch.smem);
              EXPECT_EQ(fast->instance.launch.cluster, slow->launch.cluster);
              EXPECT_EQ(fast->instance.metric, slow->metric);
              ASSERT_EQ(fast->instance.args.size(), slow->args.size());
              for (size_t a = 0; a < slow->args.size(); ++a) {
                EXPECT_EQ(fast->instance.args[a].count, slow->args[a].count) << slow->args[a].name;
                EXPECT_EQ(fast->instance.args[a].value, slow->args[a].value) << slow->args[a].name;
              }
            }
          } else {
            EXPECT_EQ(got.error().message, want.error().message);
          }
          ++compared;
          size_t d = 0;
          while (d < at.size() && ++at[d] == sizes.size()) at[d++] = 0;
          if (d == at.size()) break;
        }
      }
    }
  }
  EXPECT_GT(compared, 3000);
  // Not vacuous: rules decide derived values and leave some open for the checks, and folding
  // settles more constraints than reading params alone would (gemm_tma's STREAMK 0 alone settles
  // three that read the problem).
  EXPECT_GT(known_derived, 100);
  EXPECT_GT(open_derived, 10);
  EXPECT_GT(open_checks, 10);
  EXPECT_LT(size_t(open_checks) * 10, constraints * 8) << open_checks << " of " << constraints;
  EXPECT_GT(whens_repeated, 10);  // gemm_tma's rules come in runs of one `when`
}

// The heuristics' fallback (no rule fits) stops the enumeration at the first valid config: the
// same config, or the same error, as the full enumeration, for every template and problems small
// and large (gemm with N = K = 64 is where every rule misses).
TEST(BuiltinTemplatesTest, FirstConfigIsTheFullEnumerationsFirst) {
  auto reg = TemplateRegistry::load({builtin_template_dir()});
  int compared = 0;
  for_each_scaled_problem(
      reg, {1, 7, 16, 64, 1000, 4096, 1 << 20},
      [&](const KernelTemplate& t, const DeviceLimits& limits, const Problem& p) {
        auto all = SearchSpace::build(t, p, limits);
        auto first = SearchSpace::build(t, p, limits, 1);
        ASSERT_EQ(bool(all), bool(first)) << t.name() << " " << p.describe();
        if (!all) {
          EXPECT_EQ(all.error().message, first.error().message);
          return;
        }
        ++compared;
        ASSERT_EQ(first->configs().size(), 1u);
        EXPECT_EQ(first->configs().front(), all->configs().front())
            << t.name() << " " << p.describe();
      });
  EXPECT_GT(compared, 50);
}

TEST(BuiltinTemplatesTest, GemmSpaceIsLargeEnoughToTune) {
  auto reg = TemplateRegistry::load({builtin_template_dir()});
  const KernelTemplate* gemm = reg.find("gemm");
  ASSERT_NE(gemm, nullptr);
  const Problem p{"gemm", "bf16", "bf16", "rc", {{"M", 8192}, {"N", 8192}, {"K", 8192}}};
  auto space = SearchSpace::build(*gemm, p, DeviceLimits{});
  ASSERT_TRUE(space) << space.error().message;
  EXPECT_GE(space->report().valid, 500);
  // Decode shapes keep small-M tiles in the space.
  const Problem decode{"gemm", "bf16", "bf16", "rc", {{"M", 16}, {"N", 4096}, {"K", 4096}}};
  auto dspace = SearchSpace::build(*gemm, decode, DeviceLimits{});
  ASSERT_TRUE(dspace) << dspace.error().message;
  bool small = false;
  for (const auto& c : dspace->configs()) small |= c.at("BLOCK_M") <= 32;
  EXPECT_TRUE(small);
}

}  // namespace
}  // namespace ktune
