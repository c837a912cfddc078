// GPU tests (ctest label "gpu"): a real ktune-worker on a real GPU. Each skips cleanly where there
// is no GPU. Run on the lent H200 with the binaries built here (see docs/GPU workflow in
// bench/NOTES.md): KTUNE_WORKER=<path to ktune-worker> ./gpu_tests
#include <gtest/gtest.h>

#include <cstdio>
#include <map>

#include "store/records.h"
#include "templates/space.h"
#include "tests/fakes/test_records.h"
#include "tuner/local_tuner.h"
#include "tuner/nvml.h"

namespace ktune {
namespace {

// $KTUNE_HOME when the binary runs from another checkout (the GPU machine), else the source tree.
const std::string k_test_templates =
    std::string(std::getenv("KTUNE_HOME") ? std::getenv("KTUNE_HOME") : KTUNE_SOURCE_DIR) +
    "/tests/data/templates";

#define KTUNE_REQUIRE_GPU()                                                    \
  do {                                                                         \
    if (auto gpus = query_gpus(); !gpus) GTEST_SKIP() << gpus.error().message; \
  } while (0)

std::unique_ptr<LocalTuner> open_tuner(std::vector<std::string> dirs,
                                       int trial_timeout_ms = 20'000) {
  LocalTunerOptions o;
  o.template_dirs = std::move(dirs);
  o.trial_timeout_ms = trial_timeout_ms;
  auto t = LocalTuner::open(o);
  EXPECT_TRUE(t) << t.error().message;
  return t ? std::move(*t) : nullptr;
}

// A faulting kernel (illegal address), a hanging one and one asking for too much shared memory
// are each classified, the worker is replaced, and the job still finds the right winner.
TEST(GpuFaultTest, FaultsAreClassifiedWorkerRespawnedRightWinner) {
  KTUNE_REQUIRE_GPU();
  auto tuner = open_tuner({k_test_templates}, 3000);
  ASSERT_TRUE(tuner);
  TuneRequest req;
  req.problem = Problem{"fault", "fp32", "fp32", "", {{"n", 1 << 20}}};
  req.strategy = "exhaustive";
  req.budget = Budget{0, 120, 0};
  req.timing.target_ms = 5;
  auto r = tuner->tune(req);
  ASSERT_TRUE(r) << r.error().message;
  std::map<std::int64_t, std::vector<Outcome>> by_mode;
  for (const auto& t : r->trials) by_mode[t.params.at("MODE")].push_back(t.outcome);
  for (auto o : by_mode[0]) EXPECT_EQ(o, Outcome::ok);
  for (auto o : by_mode[1]) EXPECT_EQ(o, Outcome::crash);
  for (auto o : by_mode[2]) EXPECT_EQ(o, Outcome::timeout);
  for (auto o : by_mode[3]) EXPECT_EQ(o, Outcome::resource_error);
  for (auto o : by_mode[4]) EXPECT_EQ(o, Outcome::wrong_result);
  EXPECT_EQ(r->stats.trials, 10);
  EXPECT_GE(r->stats.respawns, 4) << "two crashes and two timeouts each replace the worker";
  EXPECT_EQ(r->winner.ranked.front().params.at("MODE"), 0);
  // Crashing and hanging configs are blocklisted and skipped next time.
  auto blocked = scan_blocklist(tuner->store());
  ASSERT_TRUE(blocked);
  EXPECT_EQ(blocked->size(), 4u);
  auto again = tuner->tune(req);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->stats.candidates, 6u);
  EXPECT_EQ(again->stats.crashes + again->stats.timeouts, 0);
}

TEST(GpuTuneTest, SmallGemmFindsAVerifiedWinnerFasterThanTheHeuristicOrEqual) {
  KTUNE_REQUIRE_GPU();
  auto tuner = open_tuner({});
  ASSERT_TRUE(tuner);
  TuneRequest req;
  req.problem = Problem{"gemm", "bf16", "bf16", "rc", {{"M", 1000}, {"N", 1000}, {"K", 1032}}};
  req.budget = Budget{40, 120, 0};
  req.timing.target_ms = 10;
  auto r = tuner->tune(req);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->stats.wrong_results, 0) << "every gemm config must match cuBLAS";
  EXPECT_EQ(r->stats.crashes, 0);
  EXPECT_LT(r->winner.ref_error, 2e-2);
  EXPECT_GT(r->winner.ranked.front().tflops, 1.0);
  auto stored = get_winner(tuner->store(), tuner->context().device, req.problem);
  ASSERT_TRUE(stored && *stored);
  EXPECT_EQ((*stored)->ranked.front().params, r->winner.ranked.front().params);
  // Every template's heuristic config is measured first (a seed); the winner's own trial is at
  // least as fast as the best of them, within 5 % (the winner is picked by the finalists'
  // re-time, so its trial may read a little over a heuristic's that it beat there).
  auto trial_us = [&](const std::string& name, const Params& params) {
    for (const TrialRecord& t : r->trials)
      if (t.outcome == Outcome::ok && t.template_name == name && t.params == params)
        return t.median_us;
    return 0.0;
  };
  double best_heuristic_us = 0;
  for (const KernelTemplate* t :
       tuner->templates().for_problem(req.problem, tuner->context().limits.cc)) {
    auto h = heuristic_config(*t, req.problem, tuner->context().limits);
    if (!h) continue;
    const double us = trial_us(t->name(), *h);
    if (us > 0 && (best_heuristic_us == 0 || us < best_heuristic_us)) best_heuristic_us = us;
  }
  ASSERT_GT(best_heuristic_us, 0.0) << "no heuristic config was measured";
  const RankedConfig& won = r->winner.ranked.front();
  const double winner_us = trial_us(won.template_name, won.params);
  ASSERT_GT(winner_us, 0.0) << "the winner's trial is not among this run's";
  EXPECT_LE(winner_us, 1.05 * best_heuristic_us);
}

TEST(GpuTuneTest, EveryLayoutAndOutputTypeVerifies) {
  KTUNE_REQUIRE_GPU();
  auto tuner = open_tuner({});
  ASSERT_TRUE(tuner);
  for (const char* layout : {"rr", "rc", "cr", "cc"})
    for (const char* out : {"bf16", "fp32"}) {
      TuneRequest req;
      req.problem = Problem{"gemm", "bf16", out, layout, {{"M", 264}, {"N", 136}, {"K", 200}}};
      req.strategy = "random";
      req.budget = Budget{12, 60, 0};
      req.timing.target_ms = 2;
      auto r = tuner->tune(req);
      ASSERT_TRUE(r) << layout << " " << out << ": " << r.error().message;
      EXPECT_EQ(r->stats.wrong_results, 0) << layout << " " << out;
    }
}

TEST(GpuTuneTest, MemoryBoundTemplatesVerify) {
  KTUNE_REQUIRE_GPU();
  auto tuner = open_tuner({});
  ASSERT_TRUE(tuner);
  const std::vector<Problem> problems = {
      {"softmax", "bf16", "bf16", "", {{"rows", 37}, {"cols", 1000}}},
      {"layernorm", "fp16", "fp16", "", {{"rows", 100}, {"cols", 4096}}},
      {"rmsnorm", "bf16", "bf16", "", {{"rows", 64}, {"cols", 10000}}},
      {"reduce_sum", "fp32", "fp32", "", {{"n", 1'000'003}}},
      {"transpose", "fp32", "fp32", "", {{"rows", 1000}, {"cols", 776}}},
  };
  for (const auto& p : problems) {
    TuneRequest req;
    req.problem = p;
    req.strategy = "random";
    req.budget = Budget{16, 60, 0};
    req.timing.target_ms = 2;
    auto r = tuner->tune(req);
    ASSERT_TRUE(r) << p.describe() << ": " << r.error().message;
    EXPECT_EQ(r->stats.wrong_results, 0) << p.describe();
    EXPECT_EQ(r->stats.crashes, 0) << p.describe();
  }
}

// The tensor-map path end to end: every tma_copy config (TMA loads through an encoded map, clusters
// of 1 and 2 — a kernel launched without its cluster traps —, one block per tile or a persistent
// grid sized by the worker's occupancy answer) verifies exactly.
TEST(GpuTmaTest, TensorMapCopyVerifiesInClustersAndPersistentGrids) {
  KTUNE_REQUIRE_GPU();
  auto tuner = open_tuner({k_test_templates});
  ASSERT_TRUE(tuner);
  TuneRequest req;
  req.problem = Problem{"tma_copy", "fp32", "fp32", "", {{"rows", 1000}, {"cols", 776}}};
  req.strategy = "exhaustive";
  req.budget = Budget{0, 120, 0};
  req.timing.target_ms = 2;
  auto r = tuner->tune(req);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->stats.trials, 8);
  for (const auto& t : r->trials)
    EXPECT_EQ(t.outcome, Outcome::ok) << params_to_string(t.params) << ": " << t.message;
  EXPECT_EQ(r->winner.ref_error, 0.0);
}

// A map the driver refuses (a 776-byte row stride is not a multiple of 16; the loader's
// constraints never let one through, so the request is made by hand) is an invalid trial, and
// the worker goes on measuring the next one.
TEST(GpuTmaTest, RefusedEncodingIsAnInvalidTrial) {
  KTUNE_REQUIRE_GPU();
  auto tuner = open_tuner({k_test_templates});
  ASSERT_TRUE(tuner);
  const Problem p{"tma_copy", "fp32", "fp32", "", {{"rows", 256}, {"cols", 256}}};
  const KernelTemplate* t = tuner->templates().find("tma_copy");
  ASSERT_NE(t, nullptr);
  const DeviceLimits limits = tuner->context().limits;
  ASSERT_TRUE(prepare_runner(tuner->runner(), tuner->compiler(), *t, *setup_args({t}, p, limits), p,
                             limits, 1));
  auto inst = instantiate(*t, p, limits, {{"BOX_R", 8}, {"CLUSTER", 1}, {"PERSISTENT", 0}});
  ASSERT_TRUE(inst) << inst.error().message;
  auto compiled =
      tuner->compiler().compile({t, inst->name_expression, target_arch(t->manifest, limits.cc)});
  ASSERT_TRUE(compiled.ok()) << compiled.log;
  TrialRequest tr;
  tr.id = 1;
  tr.lowered_name = compiled.kernel.lowered_name;
  tr.launch = inst->launch;
  tr.args = inst->args;
  tr.timing.target_ms = 1;
  ASSERT_EQ(tr.args[1].kind, ArgKind::tensor_map);
  tr.args[1].map.strides = {776};
  TrialResult bad = tuner->runner().run(tr, compiled.kernel.cubin);
  EXPECT_EQ(bad.outcome, Outcome::invalid) << bad.message;
  EXPECT_NE(bad.message.find("cuTensorMapEncodeTiled refused 'tmx'"), std::string::npos)
      << bad.message;
  EXPECT_EQ(tuner->runner().respawns(), 0);
  tr.id = 2;
  tr.args = inst->args;
  TrialResult good = tuner->runner().run(tr, compiled.kernel.cubin);
  EXPECT_EQ(good.outcome, Outcome::ok) << good.message;
}

// gemm_tma on awkward shapes and every dtype pairing, split-K and cluster configs included:
// nothing wrong, nothing crashes; the occupancy the worker reports for a 2-CTA cluster config is
// at most one cluster per SM pair.
TEST(GpuTmaTest, GemmTmaVerifiesAcrossShapesDtypesSplitsAndClusters) {
  KTUNE_REQUIRE_GPU();
  auto tuner = open_tuner({});
  ASSERT_TRUE(tuner);
  const std::vector<Problem> problems = {
      {"gemm", "bf16", "bf16", "rc", {{"M", 264}, {"N", 136}, {"K", 200}}},
      {"gemm", "bf16", "fp32", "rc", {{"M", 1000}, {"N", 1000}, {"K", 1032}}},
      {"gemm", "fp16", "fp16", "rc", {{"M", 777}, {"N", 520}, {"K", 4104}}},
      {"gemm", "bf16", "bf16", "rc", {{"M", 1024}, {"N", 512}, {"K", 16384}}},  // split-K
      {"gemm", "bf16", "bf16", "rc", {{"M", 2100}, {"N", 1000}, {"K", 520}}},   // clusters
  };
  // Seeded so that the split-K and the cluster shapes surely try one of each.
  const Params split{{"BLOCK_M", 128},  {"BLOCK_N", 256}, {"BLOCK_K", 64}, {"STAGES", 4},
                     {"CONSUMERS", 2},  {"GROUP_M", 8},   {"EPILOGUE", 1}, {"CLUSTER_M", 1},
                     {"PERSISTENT", 0}, {"SPLITS", 4},    {"SCHEDULE", 0}, {"STREAMK", 0},
                     {"CLUSTER_N", 1},  {"RASTER", 0},    {"REDUCE", 0}};
  Params cluster = split;
  cluster["CLUSTER_M"] = 2;
  cluster["SPLITS"] = 1;
  for (size_t i = 0; i < problems.size(); ++i) {
    const Problem& p = problems[i];
    TuneRequest req;
    req.problem = p;
    req.templates = {"gemm_tma"};
    req.strategy = "random";
    req.budget = Budget{14, 90, 0};
    req.timing.target_ms = 2;
    if (i == 3) req.seeds = {split};
    if (i == 4) req.seeds = {cluster};
    auto r = tuner->tune(req);
    ASSERT_TRUE(r) << p.describe() << ": " << r.error().message;
    EXPECT_EQ(r->stats.wrong_results, 0) << p.describe();
    EXPECT_EQ(r->stats.crashes + r->stats.timeouts, 0) << p.describe();
    bool seeded = i < 3;
    for (const auto& t : r->trials) {
      EXPECT_EQ(t.outcome, Outcome::ok)
          << p.describe() << " " << params_to_string(t.params) << ": " << t.message;
      if (!req.seeds.empty()) seeded |= t.params == req.seeds.front();
    }
    EXPECT_TRUE(seeded) << p.describe() << ": the seed was not measured";
  }
  const Problem big{"gemm", "bf16", "bf16", "rc", {{"M", 4000}, {"N", 6000}, {"K", 3000}}};
  const KernelTemplate* t = tuner->templates().find("gemm_tma");
  const DeviceLimits limits = tuner->context().limits;
  auto h = heuristic_config(*t, big, limits);
  ASSERT_TRUE(h);
  ASSERT_EQ(h->at("CLUSTER_M"), 2);
  auto inst = instantiate(*t, big, limits, *h);
  ASSERT_TRUE(inst) << inst.error().message;
  auto compiled =
      tuner->compiler().compile({t, inst->name_expression, target_arch(t->manifest, limits.cc)});
  ASSERT_TRUE(compiled.ok()) << compiled.log;
  auto n =
      tuner->runner().occupancy(compiled.kernel.lowered_name, inst->launch, compiled.kernel.cubin);
  ASSERT_TRUE(n) << n.error().message;
  std::printf("gemm_tma %s: max_active_clusters %d (fallback %lld)\n", params_to_string(*h).c_str(),
              n->first, static_cast<long long>(inst->max_active_clusters));
  EXPECT_GE(n->first, 1) << n->second;
  EXPECT_LE(n->first, limits.sm_count / 2);
}

using testing::with_params;

// Tunes each problem with gemm_tma, seeded with every one of `configs` its space holds (at least
// two per problem), and checks that each seed was measured and verified against cuBLAS, with no
// wrong result, crash or timeout among the trials. Returns how many seeded trials ran.
int verify_gemm_tma_seeds(LocalTuner& tuner, const std::vector<Params>& configs,
                          const std::vector<Problem>& problems) {
  const DeviceLimits limits = tuner.context().limits;
  const KernelTemplate* t = tuner.templates().find("gemm_tma");
  EXPECT_NE(t, nullptr);
  if (t == nullptr) return 0;
  int measured = 0;
  for (const Problem& p : problems) {
    TuneRequest req;
    req.problem = p;
    req.templates = {"gemm_tma"};
    req.strategy = "random";
    req.timing.target_ms = 2;
    for (const auto& c : configs)
      if (instantiate(*t, p, limits, c)) req.seeds.push_back(c);  // those the space holds
    EXPECT_GE(req.seeds.size(), 2u) << p.describe();
    req.budget = Budget{static_cast<int>(req.seeds.size()) + 2, 120, 0};
    auto r = tuner.tune(req);
    EXPECT_TRUE(r) << p.describe() << ": " << (r ? "" : r.error().message);
    if (!r) continue;
    EXPECT_EQ(r->stats.wrong_results, 0) << p.describe();
    EXPECT_EQ(r->stats.crashes + r->stats.timeouts, 0) << p.describe();
    for (const auto& seed : req.seeds) {
      bool found = false;
      for (const auto& tr : r->trials) {
        if (tr.params != seed) continue;
        found = true;
        ++measured;
        EXPECT_EQ(tr.outcome, Outcome::ok)
            << p.describe() << " " << params_to_string(seed) << ": " << tr.message;
      }
      EXPECT_TRUE(found) << p.describe() << " " << params_to_string(seed) << " was not measured";
    }
  }
  return measured;
}

// gemm_tma's ping-pong schedule: each of its tile shapes, with a 2-CTA cluster, both epilogues,
// BLOCK_K 128, and fp32/fp16 outputs, on shapes with tails in M, N and K, k-tile counts that are
// not multiples of the ring depth (the warpgroups step over each other's stages) and blocks with
// odd unit counts (the last unit's order-barrier hand-off): every one verifies against cuBLAS.
TEST(GpuTmaTest, GemmTmaPingpongVerifiesAcrossTilesShapesAndDtypes) {
  KTUNE_REQUIRE_GPU();
  auto tuner = open_tuner({});
  ASSERT_TRUE(tuner);
  const Params base{{"BLOCK_M", 128},  {"BLOCK_N", 128}, {"BLOCK_K", 64}, {"STAGES", 4},
                    {"CONSUMERS", 2},  {"GROUP_M", 8},   {"EPILOGUE", 1}, {"CLUSTER_M", 1},
                    {"PERSISTENT", 1}, {"SPLITS", 1},    {"SCHEDULE", 1}, {"STREAMK", 0},
                    {"CLUSTER_N", 1},  {"RASTER", 0},    {"REDUCE", 0}};
  auto with = [&](std::initializer_list<std::pair<const char*, std::int64_t>> changes) {
    return with_params(base, changes);
  };
  const std::vector<Params> configs = {
      base,
      with({{"BLOCK_M", 64}, {"BLOCK_N", 256}, {"CLUSTER_M", 2}}),
      with({{"BLOCK_M", 64}, {"BLOCK_K", 128}, {"STAGES", 3}, {"EPILOGUE", 0}, {"GROUP_M", 1}}),
      with({{"BLOCK_M", 64}, {"BLOCK_N", 256}, {"STAGES", 2}, {"GROUP_M", 16}}),
  };
  const std::vector<Problem> problems = {
      {"gemm", "bf16", "bf16", "rc", {{"M", 2100}, {"N", 1000}, {"K", 520}}},
      {"gemm", "bf16", "fp32", "rc", {{"M", 3000}, {"N", 2056}, {"K", 1032}}},
      {"gemm", "fp16", "fp16", "rc", {{"M", 1500}, {"N", 4000}, {"K", 200}}},
  };
  EXPECT_GE(verify_gemm_tma_seeds(*tuner, configs, problems), 8);
}

// gemm_tma's stream-K: shapes of a wave and a fraction (every tile in the stream-K part, cut
// among 2-3 shares), two waves and a fraction, and four waves and a fraction (whole tiles first,
// then the stream-K tail; K not a multiple of BLOCK_K), with both tile
// shapes, one and two consumers, a 2-CTA cluster, both epilogues and bf16/fp32/fp16 outputs:
// every config the space holds verifies against cuBLAS (the partials of a tile summed by whichever
// CTA arrives last; tile counters back to zero, or the next launch of the timing loop would break).
TEST(GpuTmaTest, GemmTmaStreamKVerifiesAcrossShapesAndDtypes) {
  KTUNE_REQUIRE_GPU();
  auto tuner = open_tuner({});
  ASSERT_TRUE(tuner);
  const Params base{{"BLOCK_M", 128},  {"BLOCK_N", 256}, {"BLOCK_K", 64}, {"STAGES", 4},
                    {"CONSUMERS", 2},  {"GROUP_M", 8},   {"EPILOGUE", 1}, {"CLUSTER_M", 1},
                    {"PERSISTENT", 1}, {"SPLITS", 1},    {"SCHEDULE", 0}, {"STREAMK", 1},
                    {"CLUSTER_N", 1},  {"RASTER", 0},    {"REDUCE", 0}};
  auto with = [&](std::initializer_list<std::pair<const char*, std::int64_t>> changes) {
    return with_params(base, changes);
  };
  const std::vector<Params> configs = {
      base,
      with({{"CLUSTER_M", 2}, {"STAGES", 3}}),
      with({{"BLOCK_N", 128}, {"CONSUMERS", 1}, {"STAGES", 6}, {"EPILOGUE", 0}, {"GROUP_M", 1}}),
      with({{"BLOCK_M", 256}, {"BLOCK_N", 128}, {"BLOCK_K", 128}, {"STAGES", 2}}),
  };
  const std::vector<Problem> problems = {
      {"gemm", "bf16", "bf16", "rc", {{"M", 4300}, {"N", 2100}, {"K", 3000}}},
      {"gemm", "bf16", "fp32", "rc", {{"M", 3000}, {"N", 2056}, {"K", 1032}}},
      {"gemm", "fp16", "fp16", "rc", {{"M", 4000}, {"N", 4100}, {"K", 520}}},
  };
  EXPECT_GE(verify_gemm_tma_seeds(*tuner, configs, problems), 8);
}

// gemm_tma's TMA-store epilogue (EPILOGUE 2): stmatrix boxes stored through tmC while the next
// tile's main loop runs, under every schedule that reaches it (one block per tile, persistent
// cooperative with one and two consumers, ping-pong with a 2-CTA cluster, split-K, stream-K), on
// shapes with tails in M and N (TMA clips the boxes) and bf16/fp32/fp16 outputs (fp32 is written
// with plain shared stores, not stmatrix): every config the space holds verifies against cuBLAS.
TEST(GpuTmaTest, GemmTmaStoreEpilogueVerifiesAcrossSchedulesShapesAndDtypes) {
  KTUNE_REQUIRE_GPU();
  auto tuner = open_tuner({});
  ASSERT_TRUE(tuner);
  const Params base{{"BLOCK_M", 128},  {"BLOCK_N", 256}, {"BLOCK_K", 64}, {"STAGES", 4},
                    {"CONSUMERS", 2},  {"GROUP_M", 8},   {"EPILOGUE", 2}, {"CLUSTER_M", 1},
                    {"PERSISTENT", 0}, {"SPLITS", 1},    {"SCHEDULE", 0}, {"STREAMK", 0},
                    {"CLUSTER_N", 1},  {"RASTER", 0},    {"REDUCE", 0}};
  auto with = [&](std::initializer_list<std::pair<const char*, std::int64_t>> changes) {
    return with_params(base, changes);
  };
  const std::vector<Params> configs = {
      base,
      with({{"PERSISTENT", 1}, {"STAGES", 3}}),
      with({{"BLOCK_N", 128}, {"CONSUMERS", 1}, {"PERSISTENT", 1}, {"GROUP_M", 1}}),
      with({{"BLOCK_M", 64}, {"CLUSTER_M", 2}, {"PERSISTENT", 1}, {"SCHEDULE", 1}}),
      with({{"BLOCK_N", 128}, {"SPLITS", 4}}),
      with({{"PERSISTENT", 1}, {"STREAMK", 1}, {"STAGES", 3}}),
  };
  const std::vector<Problem> problems = {
      {"gemm", "bf16", "bf16", "rc", {{"M", 4300}, {"N", 2104}, {"K", 520}}},
      {"gemm", "bf16", "fp32", "rc", {{"M", 3000}, {"N", 2056}, {"K", 1032}}},
      {"gemm", "fp16", "fp16", "rc", {{"M", 4000}, {"N", 4104}, {"K", 200}}},
      {"gemm", "bf16", "bf16", "rc", {{"M", 1000}, {"N", 520}, {"K", 8192}}},  // split-K
  };
  EXPECT_GE(verify_gemm_tma_seeds(*tuner, configs, problems), 10);
}

// gemm_tma's 1 x 2 clusters (tile pairs along N multicasting their common A tile) and column
// raster: cooperative and ping-pong (64-row tiles: 32-row half-boxes of A), one block per tile and
// persistent, split-K and stream-K, every epilogue, on shapes whose tile-column count is odd (the
// pair's second CTA computes a tile past N: zero-filled B, every store masked or clipped) and with
// tails in M, N and K, bf16/fp32/fp16 outputs: every config the space holds verifies against
// cuBLAS.
TEST(GpuTmaTest, GemmTmaClusterAlongNAndColumnRasterVerifyAcrossShapesAndDtypes) {
  KTUNE_REQUIRE_GPU();
  auto tuner = open_tuner({});
  ASSERT_TRUE(tuner);
  const Params base{{"BLOCK_M", 256},  {"BLOCK_N", 128}, {"BLOCK_K", 64}, {"STAGES", 4},
                    {"CONSUMERS", 2},  {"GROUP_M", 8},   {"EPILOGUE", 2}, {"CLUSTER_M", 1},
                    {"PERSISTENT", 1}, {"SPLITS", 1},    {"SCHEDULE", 0}, {"STREAMK", 0},
                    {"CLUSTER_N", 2},  {"RASTER", 1},    {"REDUCE", 0}};
  auto with = [&](std::initializer_list<std::pair<const char*, std::int64_t>> changes) {
    return with_params(base, changes);
  };
  const std::vector<Params> configs = {
      base,
      with({{"PERSISTENT", 0}, {"EPILOGUE", 1}, {"RASTER", 0}}),
      with({{"BLOCK_M", 64}, {"BLOCK_N", 256}, {"SCHEDULE", 1}, {"GROUP_M", 1}}),
      with({{"BLOCK_M", 128}, {"PERSISTENT", 0}, {"SPLITS", 4}, {"EPILOGUE", 0}, {"RASTER", 0}}),
      with({{"STREAMK", 1}, {"STAGES", 3}, {"RASTER", 0}}),
      with({{"BLOCK_M", 128}, {"BLOCK_N", 256}, {"CLUSTER_N", 1}, {"GROUP_M", 16}}),
  };
  const std::vector<Problem> problems = {
      {"gemm",
       "bf16",
       "bf16",
       "rc",
       {{"M", 4300}, {"N", 2600}, {"K", 520}}},  // 21 / 11 tile columns
      {"gemm", "bf16", "fp32", "rc", {{"M", 3000}, {"N", 2056}, {"K", 1032}}},
      {"gemm", "fp16", "fp16", "rc", {{"M", 4000}, {"N", 4104}, {"K", 200}}},
      {"gemm",
       "bf16",
       "bf16",
       "rc",
       {{"M", 1000}, {"N", 520}, {"K", 8192}}},  // split-K, 5 tile columns
  };
  EXPECT_GE(verify_gemm_tma_seeds(*tuner, configs, problems), 10);
}

// gemm_tma's cluster split-K (REDUCE 1): each tile's k-slices as one cluster, partials summed in
// column bands through distributed shared memory, in 2, 4 and 8 slices, with both wide tiles,
// on shapes with tails in M, N and K and bf16/fp32/fp16 outputs: every config the space holds
// verifies against cuBLAS (an unwritten band or a partial read before it was stored fails).
TEST(GpuTmaTest, GemmTmaClusterSplitKVerifiesAcrossSlicesShapesAndDtypes) {
  KTUNE_REQUIRE_GPU();
  auto tuner = open_tuner({});
  ASSERT_TRUE(tuner);
  const Params base{{"BLOCK_M", 128},  {"BLOCK_N", 128}, {"BLOCK_K", 64}, {"STAGES", 4},
                    {"CONSUMERS", 2},  {"GROUP_M", 1},   {"EPILOGUE", 0}, {"CLUSTER_M", 1},
                    {"PERSISTENT", 0}, {"SPLITS", 4},    {"SCHEDULE", 0}, {"STREAMK", 0},
                    {"CLUSTER_N", 1},  {"RASTER", 0},    {"REDUCE", 1}};
  auto with = [&](std::initializer_list<std::pair<const char*, std::int64_t>> changes) {
    return with_params(base, changes);
  };
  const std::vector<Params> configs = {
      base,
      with({{"SPLITS", 2}}),
      with({{"SPLITS", 8}, {"STAGES", 3}}),
      with({{"BLOCK_N", 256}, {"SPLITS", 2}, {"STAGES", 3}}),
      with({{"BLOCK_M", 256}, {"SPLITS", 4}, {"STAGES", 3}}),
      with({{"BLOCK_K", 128}, {"SPLITS", 2}, {"STAGES", 2}}),
  };
  const std::vector<Problem> problems = {
      {"gemm", "bf16", "bf16", "rc", {{"M", 264}, {"N", 136}, {"K", 4104}}},    // 3 x 2 tiles
      {"gemm", "bf16", "fp32", "rc", {{"M", 777}, {"N", 520}, {"K", 16392}}},   // 7 x 5
      {"gemm", "fp16", "fp16", "rc", {{"M", 1000}, {"N", 1000}, {"K", 8200}}},  // 8 x 8
  };
  EXPECT_GE(verify_gemm_tma_seeds(*tuner, configs, problems), 10);
}

// gemm_tma's band split-K (REDUCE 2): every k-slice of a tile sums one column band of the partials
// through the workspace once all of the tile's slices have stored theirs. In 2, 4 and 8 slices,
// with multicast pairs along M and N, both wide tiles and fp32/fp16 outputs, on shapes with tails
// in M, N and K, where the persistent grid holds every unit and where it walks two rounds of them
// (1000 x 1000 in 128 x 128 tiles and 4 slices: 256 units): every config the space holds verifies
// against cuBLAS (a band summed before a partial was stored fails), and the timing loop's
// back-to-back launches finish (a counter left non-zero would hang the next one: a timeout).
TEST(GpuTmaTest, GemmTmaBandSplitKVerifiesAcrossSlicesClustersAndRounds) {
  KTUNE_REQUIRE_GPU();
  auto tuner = open_tuner({});
  ASSERT_TRUE(tuner);
  const Params base{{"BLOCK_M", 128},  {"BLOCK_N", 128}, {"BLOCK_K", 64}, {"STAGES", 4},
                    {"CONSUMERS", 2},  {"GROUP_M", 8},   {"EPILOGUE", 0}, {"CLUSTER_M", 1},
                    {"PERSISTENT", 1}, {"SPLITS", 4},    {"SCHEDULE", 0}, {"STREAMK", 0},
                    {"CLUSTER_N", 1},  {"RASTER", 0},    {"REDUCE", 2}};
  auto with = [&](std::initializer_list<std::pair<const char*, std::int64_t>> changes) {
    return with_params(base, changes);
  };
  const std::vector<Params> configs = {
      base,
      with({{"SPLITS", 2}, {"CLUSTER_M", 2}}),
      with({{"SPLITS", 8}, {"STAGES", 6}}),
      with({{"BLOCK_M", 256}, {"CLUSTER_N", 2}}),
      with({{"BLOCK_N", 256}, {"SPLITS", 2}, {"CLUSTER_M", 2}, {"RASTER", 1}}),
      with({{"BLOCK_K", 128}, {"SPLITS", 2}, {"STAGES", 2}}),
  };
  const std::vector<Problem> problems = {
      {"gemm", "bf16", "bf16", "rc", {{"M", 264}, {"N", 136}, {"K", 4104}}},    // 3 x 2 tiles
      {"gemm", "bf16", "fp32", "rc", {{"M", 777}, {"N", 520}, {"K", 16392}}},   // 7 x 5
      {"gemm", "fp16", "fp16", "rc", {{"M", 1000}, {"N", 1000}, {"K", 8200}}},  // 8 x 8: two rounds
  };
  EXPECT_GE(verify_gemm_tma_seeds(*tuner, configs, problems), 12);
}

// Verifies `configs` (gemm_tma, BLOCK_N `block_n`, varied by `changes`) on `problems` against
// cuBLAS: every config the space holds for a shape (`pairs` config-shape pairs in all; the pairs
// it refuses are printed with their reasons), and each config on at least one shape.
void expect_wide_tiles_verify(
    std::int64_t block_n,
    std::initializer_list<std::initializer_list<std::pair<const char*, std::int64_t>>> changes,
    const std::vector<Problem>& problems, int pairs) {
  auto tuner = open_tuner({});
  ASSERT_TRUE(tuner);
  const Params base{{"BLOCK_M", 128},  {"BLOCK_N", block_n}, {"BLOCK_K", 64}, {"STAGES", 4},
                    {"CONSUMERS", 2},  {"GROUP_M", 8},       {"EPILOGUE", 2}, {"CLUSTER_M", 1},
                    {"PERSISTENT", 0}, {"SPLITS", 1},        {"SCHEDULE", 0}, {"STREAMK", 0},
                    {"CLUSTER_N", 1},  {"RASTER", 0},        {"REDUCE", 0}};
  std::vector<Params> configs;
  for (const auto& c : changes) configs.push_back(with_params(base, c));
  const DeviceLimits limits = tuner->context().limits;
  const KernelTemplate* t = tuner->templates().find("gemm_tma");
  ASSERT_NE(t, nullptr);
  for (const auto& c : configs) {
    bool held = false;
    for (const auto& p : problems) {
      auto inst = instantiate(*t, p, limits, c);
      held = held || inst.has_value();
      if (!inst)
        std::printf("not held: %s for %s: %s\n", params_to_string(c).c_str(), p.describe().c_str(),
                    inst.error().message.c_str());
    }
    EXPECT_TRUE(held) << params_to_string(c) << " is held for none of the shapes";
  }
  EXPECT_GE(verify_gemm_tma_seeds(*tuner, configs, problems), pairs);
}

// gemm_tma's 128x192 tiles (issue 13; wgmma n192, three 64-column boxes a tile row): every
// epilogue (the TMA store's odd box count waits for its stores at a tile's first box, so a
// persistent CTA's next tile does not overwrite a box still being stored), one block per tile and
// persistent, split-K with each sum (three slices: 24 column groups in bands of 8), stream-K,
// ping-pong's 64x192 tiles in a 2-CTA cluster, and A multicast along N, on shapes whose N leaves a
// partial last tile (1000 = 5 x 192 + 40, 520 = 2 x 192 + 136, 2000 = 10 x 192 + 80), the rule's
// own shape, and 1.4 waves of tiles (221 of them; the persistent grids). 25 pairs (the H100's
// limits and sm_90a's nominal ones refuse the same 15).
TEST(GpuTmaTest, GemmTma128x192VerifiesAcrossEpiloguesSchedulesSlicesAndDtypes) {
  KTUNE_REQUIRE_GPU();
  expect_wide_tiles_verify(
      192,
      {{},
       {{"EPILOGUE", 1}, {"STAGES", 5}, {"GROUP_M", 1}, {"RASTER", 1}},
       {{"EPILOGUE", 0}},
       {{"PERSISTENT", 1}, {"STAGES", 3}},
       {{"EPILOGUE", 1}, {"SPLITS", 3}},
       {{"EPILOGUE", 0}, {"SPLITS", 2}, {"REDUCE", 1}},
       {{"EPILOGUE", 0}, {"PERSISTENT", 1}, {"SPLITS", 3}, {"REDUCE", 2}},
       {{"PERSISTENT", 1}, {"STREAMK", 1}},
       {{"BLOCK_M", 64}, {"SCHEDULE", 1}, {"PERSISTENT", 1}, {"CLUSTER_M", 2}},
       {{"CLUSTER_N", 2}, {"EPILOGUE", 1}}},
      {
          {"gemm", "bf16", "bf16", "rc", {{"M", 1000}, {"N", 1000}, {"K", 1032}}},
          {"gemm", "bf16", "fp32", "rc", {{"M", 777}, {"N", 520}, {"K", 4104}}},
          {"gemm", "fp16", "fp16", "rc", {{"M", 768}, {"N", 4096}, {"K", 4096}}},
          {"gemm", "bf16", "bf16", "rc", {{"M", 2100}, {"N", 2000}, {"K", 1032}}},  // 1.4 waves
      },
      25);
}

// gemm_tma's 128x160 tiles (wgmma n160: 80 accumulators a thread, 20 n8 groups, so the
// partials' reduction loads 10 float4 a batch and the band sums take 2 or 4 slices): the staged
// and register epilogues, the TMA store for fp32 outputs only (five 128-byte boxes a row, an odd
// count, so a CTA's next tile waits for the stores at its first box: persistent cooperative and
// ping-pong walks of fp32 tiles check it; 2-byte outputs would be 2.5 boxes), one block per tile
// and persistent, split-K with each sum, stream-K, ping-pong's 64x160 tiles in a 2-CTA cluster,
// and A multicast along N, on shapes whose N leaves a partial last tile (1000 = 6 x 160 + 40,
// 520 = 3 x 160 + 40, 2000 = 12 x 160 + 80, 1400 = 8 x 160 + 120), one wave of 128x160 tiles
// (640x4096: 130) and more (2100x2000: 221; 2100x1400 fp32: 153). 34 pairs (sm_90a's nominal
// limits refuse the other 26).
TEST(GpuTmaTest, GemmTma128x160VerifiesAcrossEpiloguesSchedulesSlicesAndDtypes) {
  KTUNE_REQUIRE_GPU();
  expect_wide_tiles_verify(
      160,
      {{{"EPILOGUE", 1}, {"STAGES", 5}, {"GROUP_M", 1}, {"RASTER", 1}},
       {{"EPILOGUE", 0}, {"STAGES", 6}},
       {{"EPILOGUE", 2}},
       {{"EPILOGUE", 2}, {"PERSISTENT", 1}, {"STAGES", 3}},
       {{"EPILOGUE", 2}, {"BLOCK_M", 64}, {"SCHEDULE", 1}, {"PERSISTENT", 1}, {"CLUSTER_M", 2}},
       {{"EPILOGUE", 1}, {"PERSISTENT", 1}, {"STAGES", 3}},
       {{"EPILOGUE", 1}, {"SPLITS", 3}},
       {{"EPILOGUE", 0}, {"SPLITS", 4}, {"REDUCE", 1}},
       {{"EPILOGUE", 0}, {"PERSISTENT", 1}, {"SPLITS", 2}, {"REDUCE", 2}},
       {{"EPILOGUE", 1}, {"PERSISTENT", 1}, {"STREAMK", 1}},
       {{"BLOCK_M", 64}, {"SCHEDULE", 1}, {"PERSISTENT", 1}, {"CLUSTER_M", 2}, {"EPILOGUE", 1}},
       {{"CLUSTER_N", 2}, {"EPILOGUE", 1}}},
      {
          {"gemm", "bf16", "bf16", "rc", {{"M", 1000}, {"N", 1000}, {"K", 1032}}},
          {"gemm", "bf16", "fp32", "rc", {{"M", 777}, {"N", 520}, {"K", 4104}}},
          {"gemm", "fp16", "fp16", "rc", {{"M", 640}, {"N", 4096}, {"K", 4096}}},
          {"gemm", "bf16", "bf16", "rc", {{"M", 2100}, {"N", 2000}, {"K", 1032}}},  // 1.7 waves
          {"gemm", "bf16", "fp32", "rc", {{"M", 2100}, {"N", 1400}, {"K", 520}}},   // 1.2 waves
      },
      34);
}

// gemm_tma's 192-row tiles (issue 13): three consumer warpgroups of 64 rows each (empty[s] counts
// their 12 warps), on shapes whose M and N leave partial last tiles (1000 = 5 x 192 + 40; 777 = 4 x
// 192 + 9), one wave of 192x192 tiles (1152x4096: 132 of them), and more than a wave (2100x3000:
// 176), with each epilogue (the TMA store for fp32 outputs only), n128/n160/n192, and both
// multicast pairs (a 2 x 1 cluster shares B; a 1 x 2 cluster loads A in two 96-row halves). 21
// pairs (the constraints refuse the other 7: fp32 192x192 staged or clustered, 2-byte TMA stores,
// and fp32 192x160 in four stages, past shared memory).
TEST(GpuTmaTest, GemmTma192RowTilesVerifyAcrossEpiloguesWidthsClustersAndDtypes) {
  KTUNE_REQUIRE_GPU();
  expect_wide_tiles_verify(
      192,
      {{{"BLOCK_M", 192}, {"CONSUMERS", 3}, {"STAGES", 3}, {"EPILOGUE", 1}},
       {{"BLOCK_M", 192}, {"CONSUMERS", 3}, {"STAGES", 4}, {"EPILOGUE", 0}},
       {{"BLOCK_M", 192}, {"CONSUMERS", 3}, {"STAGES", 3}, {"EPILOGUE", 2}},
       {{"BLOCK_M", 192},
        {"CONSUMERS", 3},
        {"STAGES", 3},
        {"EPILOGUE", 1},
        {"GROUP_M", 1},
        {"RASTER", 1}},
       {{"BLOCK_M", 192}, {"CONSUMERS", 3}, {"STAGES", 3}, {"EPILOGUE", 1}, {"CLUSTER_M", 2}},
       {{"BLOCK_M", 192}, {"BLOCK_N", 160}, {"CONSUMERS", 3}, {"STAGES", 4}, {"EPILOGUE", 1}},
       {{"BLOCK_M", 192},
        {"BLOCK_N", 128},
        {"CONSUMERS", 3},
        {"STAGES", 4},
        {"EPILOGUE", 1},
        {"CLUSTER_N", 2}}},
      {
          {"gemm", "bf16", "bf16", "rc", {{"M", 1000}, {"N", 1000}, {"K", 1032}}},
          {"gemm", "bf16", "fp32", "rc", {{"M", 777}, {"N", 520}, {"K", 4104}}},
          {"gemm", "fp16", "fp16", "rc", {{"M", 1152}, {"N", 4096}, {"K", 4096}}},
          {"gemm", "bf16", "bf16", "rc", {{"M", 2100}, {"N", 3000}, {"K", 1032}}},  // 1.3 waves
      },
      21);
}

// Both timings of tuning.timing_l2 measure: with the L2 flushed (the default) each launch is timed
// on its own after a write over 2x L2, so a kernel of a few microseconds reads longer than under
// the rotated timing, whose graph replay amortizes the launch gap (docs/worker-protocol.md).
TEST(GpuWorkerTest, ShortKernelsTimeWithTheL2FlushedAndRotated) {
  KTUNE_REQUIRE_GPU();
  auto tuner = open_tuner({});
  ASSERT_TRUE(tuner);
  std::map<TimingL2, double> median_us;
  for (TimingL2 l2 : {TimingL2::flushed, TimingL2::rotated}) {
    TuneRequest req;
    req.problem = Problem{"softmax", "bf16", "bf16", "", {{"rows", 37}, {"cols", 1000}}};
    req.strategy = "random";
    req.budget = Budget{6, 60, 0};
    req.timing.target_ms = 2;
    req.timing.l2 = l2;
    auto r = tuner->tune(req);
    ASSERT_TRUE(r) << to_string(l2) << ": " << r.error().message;
    EXPECT_EQ(r->stats.wrong_results + r->stats.crashes + r->stats.timeouts, 0) << to_string(l2);
    median_us[l2] = r->winner.ranked.front().median_us;
    EXPECT_GT(median_us[l2], 0.0) << to_string(l2);
    EXPECT_LT(median_us[l2], 1000.0) << to_string(l2);
  }
  EXPECT_GT(median_us[TimingL2::flushed], median_us[TimingL2::rotated]);
}

TEST(GpuWorkerTest, CopyCeilingIsPlausible) {
  KTUNE_REQUIRE_GPU();
  auto tuner = open_tuner({});
  ASSERT_TRUE(tuner);
  auto copy = tuner->runner().time_copy(512u << 20, TimingOptions{});
  ASSERT_TRUE(copy) << copy.error().message;
  EXPECT_GT(copy->second, 100.0) << "GB/s";
  EXPECT_LT(copy->first.spread_pct(), 50.0);
  // The SMs count their own clock right after the copies (ktune_clock_probe; no NVML needed):
  // between an idle floor and the H100/H200's 1980 MHz.
  const int counted = tuner->runner().last_telemetry().sm_clock_counted_mhz;
  EXPECT_GT(counted, 200);
  EXPECT_LE(counted, 2100);
  // NVML, which the driver installs beside libcuda.so.1, reads the clock and power while the
  // copies ran (~20 reads over the 100 ms measured), not once after them.
  ASSERT_TRUE(Nvml::get()) << "libnvidia-ml.so.1 did not load on a node whose driver has a GPU (a "
                              "container started without NVIDIA_DRIVER_CAPABILITIES=utility?)";
  const GpuTelemetry t = tuner->runner().last_telemetry();
  EXPECT_GE(t.samples, 5);
  EXPECT_GT(t.sm_clock_mhz, 0);
  EXPECT_GT(t.power_w, 0.0);
}

}  // namespace
}  // namespace ktune
