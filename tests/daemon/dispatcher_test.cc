// The dispatcher, driven directly with request lines: no sockets, no daemon process.
#include "daemon/dispatcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <future>
#include <regex>
#include <set>
#include <sstream>

#include "client/launch.h"
#include "store/mem_store.h"
#include "store/table_io.h"
#include "templates/space.h"
#include "tests/fakes/daemon_parts.h"
#include "tests/fakes/test_records.h"
#include "tuner/compiler.h"

namespace ktune {
namespace {

using protocol::Json;

const std::string k_h200 = "nvidia-h200.sm90.132sm.140gib";

class DispatcherTest : public ::testing::Test {
 protected:
  DispatcherTest() : m_templates(TemplateRegistry::load({builtin_template_dir()})) {
    DaemonConfig config = default_config();
    config.nearest_radius = 2.0;
    NodeIdentity node;
    node.driver = "none";
    node.nvrtc = "13.0";
    node.node_id = "test-node";
    node.gpu_error = "no GPU in tests";
    m_parts = std::make_unique<testing::DaemonParts>(config, m_templates, node);
    // A tuned 4096^3 and 16x4096x4096 bf16 rc gemm, measured with the current template (4096^3
    // with the L2 flushed; the other does not say how).
    for (auto [m, us] : {std::pair{4096, 190.0}, std::pair{16, 22.0}}) {
      auto w = testing::winner(
          Problem{"gemm", "bf16", "bf16", "rc", {{"M", m}, {"N", 4096}, {"K", 4096}}}, us);
      for (auto& c : w.ranked) {
        c.template_hash = gemm_hash();
        c.params = *heuristic_config(*m_templates.find("gemm"), w.problem, DeviceLimits{});
      }
      // The runner-up: another valid config of the same space.
      auto space = SearchSpace::build(*m_templates.find("gemm"), w.problem, DeviceLimits{});
      for (const auto& p : space->configs())
        if (p != w.ranked[0].params) {
          w.ranked[1].params = p;
          break;
        }
      w.validators.nvrtc = "13.0";
      if (m == 4096) w.timing_l2 = TimingL2::flushed;
      EXPECT_TRUE(put_winner(m_parts->store, w));
    }
    EXPECT_TRUE(m_parts->catalog.load());
  }

  std::string gemm_hash() const { return m_templates.find("gemm")->hash; }

  Json call(const std::string& line) {
    Response r = m_parts->dispatcher.handle(line);
    EXPECT_TRUE(r.line.ends_with("\n"));
    EXPECT_EQ(std::count(r.line.begin(), r.line.end(), '\n'), 1) << "one reply line";
    return Json::parse(r.line);
  }
  Json ok(const std::string& line) {
    Json j = call(line);
    EXPECT_TRUE(j["ok"].get<bool>()) << j.dump();
    return j["result"];
  }
  std::string error_code(const std::string& line) {
    Json j = call(line);
    EXPECT_FALSE(j["ok"].get<bool>()) << j.dump();
    return j.value("error", Json::object()).value("code", "");
  }
  static std::string lookup_line(const std::string& dims, const std::string& extra = "") {
    return R"({"v":1,"id":7,"op":"lookup","device":"nvidia-h200","problem":{"op":"gemm","dtype":"bf16","layout":"rc","dims":)" +
           dims + "}" + extra + "}";
  }

  // Stores `params` of `template_name` (its installed hash) as the one config tuned for `p`.
  void put_config(const Problem& p, const std::string& template_name, const Params& params) {
    auto w = testing::winner(p, 100.0);
    w.ranked.resize(1);
    w.ranked[0].template_name = template_name;
    w.ranked[0].template_hash = m_templates.find(template_name)->hash;
    w.ranked[0].params = params;
    w.validators.nvrtc = "13.0";
    EXPECT_TRUE(put_winner(m_parts->store, w));
  }
  // Stores gemm_tma's heuristic config for `p` on an sm_90 device as the config tuned for `p`.
  Params put_tma_heuristic(const Problem& p) {
    Params params =
        *heuristic_config(*m_templates.find("gemm_tma"), p, *DeviceLimits::for_arch("sm_90"));
    put_config(p, "gemm_tma", params);
    return params;
  }
  // A lookup of `dims` that must list an entry from the tuned shape `from`: its first entry's
  // provenance and, after a space, where that entry came from ("heuristic " for a heuristic).
  std::string lead(const std::string& dims, const std::string& from) {
    Json r = ok(lookup_line(dims));
    const bool listed = std::any_of(r["entries"].begin(), r["entries"].end(),
                                    [&](const Json& e) { return e.value("from", "") == from; });
    EXPECT_TRUE(listed) << dims << ": " << r.dump();
    return r["entries"][0].value("provenance", "") + " " + r["entries"][0].value("from", "");
  }

  MissTracker& misses() { return m_parts->misses; }
  WinnerIndex& index() { return m_parts->index; }

  TemplateRegistry m_templates;
  std::unique_ptr<testing::DaemonParts> m_parts;
};

TEST_F(DispatcherTest, ExactHitIsRankedWithMeasurements) {
  Json r = ok(lookup_line(R"({"M":4096,"N":4096,"K":4096})"));
  EXPECT_EQ(r["device"], k_h200);
  EXPECT_EQ(r["problem_key"], "gemm|bf16|bf16|rc|M=4096,N=4096,K=4096");
  ASSERT_EQ(r["entries"].size(), 2u);
  EXPECT_EQ(r["entries"][0]["provenance"], "exact");
  EXPECT_EQ(r["entries"][0]["median_us"], 190.0);
  EXPECT_GT(r["entries"][0]["tflops"].get<double>(), 0);
  EXPECT_EQ(r["entries"][1]["provenance"], "exact");
  EXPECT_GT(r["entries"][1]["median_us"].get<double>(), 190.0);
  EXPECT_EQ(r["entries"][0]["timing_l2"], "flushed");
  EXPECT_EQ(r["entries"][1]["timing_l2"], "flushed");
  const Json& k = r["entries"][0]["kernel"];
  EXPECT_TRUE(k["name_expression"].get<std::string>().starts_with(
      "ktune_gemm<ktune_bf16, ktune_bf16, 1, 0,"));
  EXPECT_EQ(k["arch"], "sm_90");
  EXPECT_GT(k["block"][0].get<int>(), 0);
  EXPECT_EQ(misses().total(), 0u);
}

TEST_F(DispatcherTest, DimsInAnyOrderAreCanonical) {
  Json r = ok(lookup_line(R"({"K":4096,"N":4096,"M":4096})"));
  EXPECT_EQ(r["entries"][0]["provenance"], "exact");
}

TEST_F(DispatcherTest, NearestShapeAnswersWithDistanceThenHeuristic) {
  Json r = ok(lookup_line(R"({"M":8,"N":4096,"K":4096})"));
  ASSERT_GE(r["entries"].size(), 2u);
  EXPECT_EQ(r["entries"][0]["provenance"], "nearest");
  EXPECT_EQ(r["entries"][0]["distance"], 1.0);
  EXPECT_EQ(r["entries"][0]["from"], "gemm|bf16|bf16|rc|M=16,N=4096,K=4096");
  EXPECT_FALSE(r["entries"][0].contains("timing_l2")) << "its record does not say";
  EXPECT_EQ(r["entries"].back()["provenance"], "heuristic");
  EXPECT_FALSE(r["entries"].back().contains("timing_l2")) << "nothing measured";
  EXPECT_EQ(misses().total(), 1u);
  EXPECT_EQ(misses().top(1)[0].problem.key(), "gemm|bf16|bf16|rc|M=8,N=4096,K=4096");
}

// A neighbour's config that would run fewer blocks here than where it was measured, and fewer
// than the SMs, follows the heuristics: 16x4096x4096's 16x64 tiles in two slices make 128 blocks
// there and 64 at N = 2048 (its measurement says little where it leaves half the SMs idle).
TEST_F(DispatcherTest, ANeighboursConfigThatWouldIdleSmsHereFollowsTheHeuristics) {
  Json r = ok(lookup_line(R"({"M":16,"N":2048,"K":4096})"));
  ASSERT_GE(r["entries"].size(), 2u) << r.dump();
  EXPECT_EQ(r["entries"][0]["provenance"], "heuristic") << r.dump();
  const Json& last = r["entries"].back();
  EXPECT_EQ(last["provenance"], "nearest") << r.dump();
  EXPECT_EQ(last["from"], "gemm|bf16|bf16|rc|M=16,N=4096,K=4096");
  const Json& grid = last["kernel"]["grid"];
  EXPECT_LT(grid[0].get<int>() * grid[1].get<int>() * grid[2].get<int>(), 132);
  // Where it runs as many blocks as there (K doubled), the neighbour answers first.
  r = ok(lookup_line(R"({"M":16,"N":4096,"K":8192})"));
  EXPECT_EQ(r["entries"][0]["provenance"], "nearest") << r.dump();
  EXPECT_EQ(r["entries"][0]["from"], "gemm|bf16|bf16|rc|M=16,N=4096,K=4096");
  // At N = 8192 its k-slices (120 KB of shared memory a block: one a SM) would run 256 blocks in
  // two waves where they ran 128 in one: it follows the heuristics, whose same tiles unsplit fill
  // one wave (the sliced case of ASlicedNeighbourMeasuredOnOneWave... below, for gemm's SPLIT_K).
  r = ok(lookup_line(R"({"M":16,"N":8192,"K":4096})"));
  EXPECT_EQ(r["entries"][0]["provenance"], "heuristic") << r.dump();
  EXPECT_EQ(r["entries"][0]["params"]["SPLIT_K"], 1) << r.dump();
  EXPECT_EQ(r["entries"].back()["from"], "gemm|bf16|bf16|rc|M=16,N=4096,K=4096") << r.dump();
}

// A persistent config's grid is as large at every shape; its work units are not. 128x4096x4096's
// one-row rule (four slices in bands, persistent) runs 128 units in one wave of 132 there, 192
// in two at 64x6144x4096 and 256 in two at 256x4096x4096: it follows the heuristics there (25 %
// slower than them on an H100 at the first), and answers first where its units fill one wave.
TEST_F(DispatcherTest, APersistentConfigWhoseUnitsFillItsWavesWorseHereFollowsTheHeuristics) {
  const Params params =
      put_tma_heuristic({"gemm", "bf16", "bf16", "rc", {{"M", 128}, {"N", 4096}, {"K", 4096}}});
  ASSERT_EQ(params.at("PERSISTENT"), 1);
  ASSERT_EQ(params.at("SPLITS"), 4);
  ASSERT_TRUE(m_parts->catalog.load());
  const std::string from = "gemm|bf16|bf16|rc|M=128,N=4096,K=4096";

  EXPECT_EQ(lead(R"({"M":64,"N":6144,"K":4096})", from), "heuristic ");
  // 256 units at 256x4096x4096: two waves as full as its one there, but its slices of a tile
  // now wait across waves (0.49 of torch against the heuristics' 0.71 on an H100).
  EXPECT_EQ(lead(R"({"M":256,"N":4096,"K":4096})", from), "heuristic ");
  // 128 units at 128x4096x8192 (one wave, as there): the neighbour answers first.
  EXPECT_EQ(lead(R"({"M":128,"N":4096,"K":8192})", from), "nearest " + from);
}

// The wave count for configs measured over several waves: 4096x8192x4096's (persistent, 128x256
// tiles: 1024 in eight waves of 132, 0.97 full) fills its waves 1.33 times worse at 1152 rows
// (288 in three, 0.73) and 1.2 times at 1280 (320 in three, 0.81), where it follows the
// heuristics, but not at 4352 rows (1088 in nine, 0.92).
// 128x8192x1024's split in two (one block per unit, each over half of a SM's shared memory, so
// one a SM) ran 128 blocks in one wave there and 144 in two at N = 9216: it follows them too.
TEST_F(DispatcherTest, ANeighbourMeasuredOverSeveralWavesFollowsTheHeuristicsWhereTheyFillWorse) {
  auto put = [&](const Problem& p, std::int64_t persistent) {
    EXPECT_EQ(put_tma_heuristic(p).at("PERSISTENT"), persistent) << p.describe();
  };
  put({"gemm", "bf16", "bf16", "rc", {{"M", 4096}, {"N", 8192}, {"K", 4096}}}, 1);
  put({"gemm", "bf16", "bf16", "rc", {{"M", 128}, {"N", 8192}, {"K", 1024}}}, 0);
  ASSERT_TRUE(m_parts->catalog.load());
  const std::string large = "gemm|bf16|bf16|rc|M=4096,N=8192,K=4096";
  const std::string split = "gemm|bf16|bf16|rc|M=128,N=8192,K=1024";
  EXPECT_EQ(lead(R"({"M":1152,"N":8192,"K":4096})", large), "heuristic ");
  EXPECT_EQ(lead(R"({"M":1280,"N":8192,"K":4096})", large), "heuristic ");
  EXPECT_EQ(lead(R"({"M":4352,"N":8192,"K":4096})", large), "nearest " + large);
  EXPECT_EQ(lead(R"({"M":128,"N":9216,"K":1024})", split), "heuristic ");
}

// The same for a template whose grid is one block per tile: gemm_sm90's 64x128 tiles with 7
// stages (172 KB of shared memory: one block a SM) ran 256 blocks in two waves at
// 1024x2048x4096 (0.97 full) and would run 288 in three at 1152 rows (0.73).
TEST_F(DispatcherTest, AOneBlockPerTileNeighbourWhoseBlocksFillASmFollowsTheHeuristics) {
  const auto limits = *DeviceLimits::for_arch("sm_90a");
  const Problem tuned{"gemm", "bf16", "bf16", "rc", {{"M", 1024}, {"N", 2048}, {"K", 4096}}};
  const Params params{{"BLOCK_M", 64},  {"BLOCK_N", 128}, {"BLOCK_K", 64},   {"STAGES", 7},
                      {"CONSUMERS", 1}, {"GROUP_M", 1},   {"SPECIALIZED", 0}};
  auto inst = instantiate(*m_templates.find("gemm_sm90"), tuned, limits, params);
  ASSERT_TRUE(inst) << inst.error().message;
  ASSERT_GT(2 * std::int64_t(inst->launch.smem), limits.max_smem_per_block);
  ASSERT_EQ(inst->launch.grid[0] * inst->launch.grid[1] * inst->launch.grid[2], 256u);
  put_config(tuned, "gemm_sm90", params);
  ASSERT_TRUE(m_parts->catalog.load());
  const std::string from = "gemm|bf16|bf16|rc|M=1024,N=2048,K=4096";
  EXPECT_EQ(lead(R"({"M":1152,"N":2048,"K":4096})", from), "heuristic ");
  // 2048 rows: 512 blocks in four waves (0.97): it answers first.
  EXPECT_EQ(lead(R"({"M":2048,"N":2048,"K":4096})", from), "nearest " + from);
}

// A sliced (split-K) config measured on one wave of units follows the heuristics where its units
// need more: 256x4096x4096's two k-slices of 128x128 tiles (one block a SM) ran 128 units in one
// wave there and would run 256 in two at 512x4096x4096, as full (0.97), but with a tile's slices
// in different waves and tiles that fill the SMs alone (0.60 of torch there on an H100, the
// heuristics 0.91). Where its units still fit one wave (K doubled) it answers first.
TEST_F(DispatcherTest, ASlicedNeighbourMeasuredOnOneWaveFollowsTheHeuristicsWhereItNeedsMore) {
  const Params params =
      put_tma_heuristic({"gemm", "bf16", "bf16", "rc", {{"M", 256}, {"N", 4096}, {"K", 4096}}});
  ASSERT_EQ(params.at("SPLITS"), 2);
  ASSERT_EQ(params.at("PERSISTENT"), 0);
  ASSERT_TRUE(m_parts->catalog.load());
  const std::string from = "gemm|bf16|bf16|rc|M=256,N=4096,K=4096";
  EXPECT_EQ(lead(R"({"M":512,"N":4096,"K":4096})", from), "heuristic ");
  EXPECT_EQ(lead(R"({"M":256,"N":4096,"K":8192})", from), "nearest " + from);
}

// A sliced config whose tiles still leave most SMs idle where its units need a second wave keeps
// its place: 512x512x2048's four slices of 16 tiles (64 units, 0.48 of a wave) make 256 units
// of 64 tiles at 1024x1024x2048 (two waves, 0.97 full; two slices of 64 tiles would fit one).
TEST_F(DispatcherTest, ASlicedNeighbourWhoseTilesLeaveMostSmsIdleKeepsItsPlace) {
  const Params params =
      put_tma_heuristic({"gemm", "bf16", "bf16", "rc", {{"M", 512}, {"N", 512}, {"K", 2048}}});
  ASSERT_EQ(params.at("SPLITS"), 4);
  ASSERT_EQ(params.at("BLOCK_N"), 128);
  ASSERT_TRUE(m_parts->catalog.load());
  const std::string from = "gemm|bf16|bf16|rc|M=512,N=512,K=2048";
  EXPECT_EQ(lead(R"({"M":1024,"N":1024,"K":2048})", from), "nearest " + from);
}

// The control: a whole-tile config grown from one wave to two as full keeps its place
// (512x4096x4096's 128 tiles of 128x128, one block a SM; 256 at 1024 rows).
TEST_F(DispatcherTest, AWholeTileNeighbourGrownFromOneWaveToTwoAsFullKeepsItsPlace) {
  const Params params =
      put_tma_heuristic({"gemm", "bf16", "bf16", "rc", {{"M", 512}, {"N", 4096}, {"K", 4096}}});
  ASSERT_EQ(params.at("SPLITS"), 1);
  ASSERT_EQ(params.at("PERSISTENT"), 0);
  ASSERT_EQ(params.at("BLOCK_N"), 128);
  ASSERT_TRUE(m_parts->catalog.load());
  const std::string from = "gemm|bf16|bf16|rc|M=512,N=4096,K=4096";
  EXPECT_EQ(lead(R"({"M":1024,"N":4096,"K":4096})", from), "nearest " + from);
}

// What the wave count leaves alone: a one-block-per-unit config whose blocks fit two a SM (how
// many share one depends on registers a lookup does not know): 128x8192x1024's split in two
// with a 2-stage ring, 128 blocks there and 144 at N = 9216.
TEST_F(DispatcherTest, AConfigWhoseWavesCannotBeCountedKeepsItsPlace) {
  const KernelTemplate& tma = *m_templates.find("gemm_tma");
  const auto sm90 = *DeviceLimits::for_arch("sm_90");
  const Problem p{"gemm", "bf16", "bf16", "rc", {{"M", 128}, {"N", 8192}, {"K", 1024}}};
  Params params = *heuristic_config(tma, p, sm90);
  ASSERT_EQ(params.at("SPLITS"), 2);
  params["STAGES"] = 2;
  auto inst = instantiate(tma, p, sm90, params);
  ASSERT_TRUE(inst) << inst.error().message;
  ASSERT_LE(2 * std::int64_t(inst->launch.smem), sm90.max_smem_per_block);
  put_config(p, "gemm_tma", params);
  ASSERT_TRUE(m_parts->catalog.load());
  Json r = ok(lookup_line(R"({"M":128,"N":9216,"K":1024})"));
  EXPECT_EQ(r["entries"][0]["provenance"], "nearest") << r.dump();
  EXPECT_EQ(r["entries"][0]["from"], "gemm|bf16|bf16|rc|M=128,N=8192,K=1024");
}

// Neighbours sharing a config are listed once, from the nearest fresh one: a stale neighbour
// does not count as having offered its config, and a farther one with another config follows.
TEST_F(DispatcherTest, NeighboursSharingAConfigAreListedOnceFromTheNearestFreshOne) {
  const Problem target{"gemm", "bf16", "bf16", "rc", {{"M", 256}, {"N", 2048}, {"K", 2048}}};
  const KernelTemplate& gemm = *m_templates.find("gemm");
  const Params shared = *heuristic_config(gemm, target, DeviceLimits{});
  Params other;
  const auto space = SearchSpace::build(gemm, target, DeviceLimits{});
  ASSERT_TRUE(space);
  for (const auto& p : space->configs())
    if (p != shared) {
      other = p;
      break;
    }
  ASSERT_FALSE(other.empty());
  // At distance 1, in key order (the nearest-first tie-break): M=128 (stale), N=1024, M=512;
  // at distance 2: K=8192, with the other config.
  auto put = [&](std::int64_t m, std::int64_t n, std::int64_t k, const Params& config,
                 const std::string& hash) {
    auto w = testing::winner(Problem{"gemm", "bf16", "bf16", "rc", {{"M", m}, {"N", n}, {"K", k}}},
                             50.0);
    w.ranked.resize(1);
    w.ranked[0].template_hash = hash;
    w.ranked[0].params = config;
    w.validators.nvrtc = "13.0";
    EXPECT_TRUE(put_winner(m_parts->store, w));
  };
  put(128, 2048, 2048, shared, "0123456789abcdef");
  put(256, 1024, 2048, shared, gemm_hash());
  put(512, 2048, 2048, shared, gemm_hash());
  put(256, 2048, 8192, other, gemm_hash());
  ASSERT_TRUE(m_parts->catalog.load());

  Json r = ok(lookup_line(R"({"M":256,"N":2048,"K":2048})"));
  ASSERT_GE(r["entries"].size(), 3u) << r.dump();
  EXPECT_EQ(r["entries"][0]["provenance"], "nearest");
  EXPECT_EQ(r["entries"][0]["from"], "gemm|bf16|bf16|rc|M=256,N=1024,K=2048");
  EXPECT_EQ(r["entries"][0]["params"], Json(shared));
  EXPECT_EQ(r["entries"][1]["provenance"], "nearest");
  EXPECT_EQ(r["entries"][1]["from"], "gemm|bf16|bf16|rc|M=256,N=2048,K=8192");
  EXPECT_EQ(r["entries"][1]["distance"], 2.0);
  EXPECT_EQ(r["entries"][1]["params"], Json(other));
  for (size_t i = 2; i < r["entries"].size(); ++i)
    EXPECT_EQ(r["entries"][i]["provenance"], "heuristic") << r["entries"][i].dump();
}

TEST_F(DispatcherTest, FarShapeGetsEachTemplatesHeuristicAndIsCountedAsAMiss) {
  // Every template implementing gemm rc on sm_90 offers its heuristic config (kernel selection).
  const Problem p{"gemm", "bf16", "bf16", "rc", {{"M", 1000}, {"N", 1000}, {"K", 1000}}};
  const auto templates = m_templates.for_problem(p, 90);
  ASSERT_GE(templates.size(), 1u);
  for (int i = 0; i < 3; ++i) {
    Json r = ok(lookup_line(R"({"M":1000,"N":1000,"K":1000})"));
    ASSERT_EQ(r["entries"].size(), templates.size());
    for (size_t k = 0; k < templates.size(); ++k) {
      EXPECT_EQ(r["entries"][k]["provenance"], "heuristic");
      EXPECT_EQ(r["entries"][k]["template"], templates[k]->name());
      EXPECT_EQ(r["entries"][k]["template_hash"], templates[k]->hash);
    }
  }
  auto top = misses().top(5);
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0].count, 3u);
  EXPECT_EQ(top[0].reason, "no winner");
}

// A config that launches clusters says so in its kernel section (and a client reads it back);
// a persistent grid is given for one block per SM: 66 clusters of 2 on 132 SMs.
TEST_F(DispatcherTest, ClusterConfigsCarryTheirClusterDims) {
  Json r = ok(lookup_line(R"({"M":4000,"N":6000,"K":3000})"));
  bool tma = false;
  for (const Json& e : r["entries"]) {
    const Json& k = e["kernel"];
    if (e["template"] != "gemm_tma") {
      EXPECT_FALSE(k.contains("cluster")) << e.dump();
      continue;
    }
    tma = true;
    ASSERT_TRUE(k.contains("cluster")) << e.dump();
    EXPECT_EQ(k["cluster"], Json::parse("[2, 1, 1]"));
    EXPECT_EQ(e["params"]["CLUSTER_M"], 2);
    EXPECT_EQ(k["grid"][0], 132);
    auto parsed = protocol::lookup_entry_from_json(e);
    ASSERT_TRUE(parsed);
    EXPECT_EQ(parsed->cluster, (std::vector<std::uint32_t>{2, 1, 1}));
    EXPECT_EQ(protocol::to_json(*parsed)["kernel"]["cluster"], k["cluster"]);
  }
  EXPECT_TRUE(tma) << r.dump();
}

TEST_F(DispatcherTest, ChangedTemplateMakesTheEntryStaleNeverExact) {
  auto w = testing::winner(
      Problem{"gemm", "bf16", "bf16", "rc", {{"M", 8192}, {"N", 8192}, {"K", 8192}}}, 1500);
  for (auto& c : w.ranked) {
    c.template_hash = "00000000deadbeef";
    c.params = *heuristic_config(*m_templates.find("gemm"), w.problem, DeviceLimits{});
  }
  w.ranked.resize(1);
  w.validators.nvrtc = "13.0";
  index().upsert(w);
  Json r = ok(lookup_line(R"({"M":8192,"N":8192,"K":8192})"));
  EXPECT_EQ(r["entries"][0]["provenance"], "stale");
  EXPECT_NE(r["entries"][0]["from"].get<std::string>().find("template gemm changed"),
            std::string::npos);
  EXPECT_EQ(misses().top(1)[0].reason.substr(0, 6), "stale:");
}

TEST_F(DispatcherTest, OtherNvrtcIsStale) {
  auto w = testing::winner(
      Problem{"gemm", "bf16", "bf16", "rc", {{"M", 2048}, {"N", 2048}, {"K", 2048}}}, 50);
  for (auto& c : w.ranked) {
    c.template_hash = gemm_hash();
    c.params = *heuristic_config(*m_templates.find("gemm"), w.problem, DeviceLimits{});
  }
  w.ranked.resize(1);
  w.validators.nvrtc = "12.8";
  index().upsert(w);
  Json r = ok(lookup_line(R"({"M":2048,"N":2048,"K":2048})"));
  EXPECT_EQ(r["entries"][0]["provenance"], "stale");
}

TEST_F(DispatcherTest, AnswersFollowIndexUpdates) {
  Json before = ok(lookup_line(R"({"M":1024,"N":1024,"K":1024})"));
  EXPECT_EQ(before["entries"][0]["provenance"], "heuristic");
  auto w = testing::winner(
      Problem{"gemm", "bf16", "bf16", "rc", {{"M", 1024}, {"N", 1024}, {"K", 1024}}}, 9);
  for (auto& c : w.ranked) {
    c.template_hash = gemm_hash();
    c.params = *heuristic_config(*m_templates.find("gemm"), w.problem, DeviceLimits{});
  }
  w.ranked.resize(1);
  w.validators.nvrtc = "13.0";
  index().upsert(w);
  Json after = ok(lookup_line(R"({"M":1024,"N":1024,"K":1024})"));
  EXPECT_EQ(after["entries"][0]["provenance"], "exact");
}

TEST_F(DispatcherTest, NoGpuAndNoDeviceIsAClearError) {
  Json j = call(
      R"({"v":1,"id":1,"op":"lookup","problem":{"op":"softmax","dtype":"bf16","dims":{"rows":8,"cols":8}}})");
  EXPECT_EQ(j["error"]["code"], "unavailable");
  EXPECT_NE(j["error"]["message"].get<std::string>().find(k_h200), std::string::npos)
      << "lists known classes";
}

TEST_F(DispatcherTest, UnknownDeviceClassNamesTheKnownOnes) {
  Json j = call(
      R"({"v":1,"id":1,"op":"lookup","device":"amd-mi300","problem":{"op":"gemm","dtype":"bf16","dims":{"M":8,"N":8,"K":8}}})");
  EXPECT_EQ(j["error"]["code"], "not_found");
  EXPECT_NE(j["error"]["message"].get<std::string>().find(k_h200), std::string::npos);
}

// A device class is named by any part of its id that matches one class only; a part matching
// several is refused with the candidates, the most specific tier deciding first.
TEST_F(DispatcherTest, DeviceClassesMatchByUniqueSubstringAndAmbiguityListsCandidates) {
  auto device_of = [&](const std::string& name) {
    Json j = call(
        R"({"v":1,"id":1,"op":"lookup","device":")" + name +
        R"(","problem":{"op":"gemm","dtype":"bf16","layout":"rc","dims":{"M":8,"N":8,"K":8}}})");
    return j["ok"].get<bool>() ? j["result"]["device"].get<std::string>()
                               : j["error"]["code"].get<std::string>() + ": " +
                                     j["error"]["message"].get<std::string>();
  };
  for (const char* name : {"h200", "H200", "nvidia-h", "132sm", "sm90.132sm.140gib"})
    EXPECT_EQ(device_of(name), k_h200) << name;
  // A second class: an H200 NVL winner.
  auto nvl = testing::winner(
      Problem{"gemm", "bf16", "bf16", "rc", {{"M", 4096}, {"N", 4096}, {"K", 4096}}}, 180.0);
  nvl.device = DeviceClass{"NVIDIA H200 NVL", 90, 132, 141};
  for (auto& c : nvl.ranked) {
    c.template_hash = gemm_hash();
    c.params = *heuristic_config(*m_templates.find("gemm"), nvl.problem, DeviceLimits{});
  }
  ASSERT_TRUE(put_winner(m_parts->store, nvl));
  ASSERT_TRUE(m_parts->catalog.load());
  const std::string k_nvl = "nvidia-h200-nvl.sm90.132sm.141gib";
  EXPECT_EQ(device_of("nvidia-h200"), k_h200) << "a whole name before '.' wins";
  EXPECT_EQ(device_of("nvl"), k_nvl);
  EXPECT_EQ(device_of("141gib"), k_nvl);
  const std::string ambiguous = device_of("h200");
  EXPECT_TRUE(ambiguous.starts_with("not_found: device class 'h200' is ambiguous: it matches "))
      << ambiguous;
  EXPECT_NE(ambiguous.find(k_h200), std::string::npos) << ambiguous;
  EXPECT_NE(ambiguous.find(k_nvl), std::string::npos) << ambiguous;
  EXPECT_EQ(device_of("132sm").substr(0, 40), "not_found: device class '132sm' is ambig");
  EXPECT_EQ(device_of("a100").substr(0, 43), "not_found: device class 'a100' is unknown (");
}

// Lookups remember how a device name resolved; a device class the index learns afterwards (by
// one upsert, not only a load) must still make a name that now matches two classes ambiguous.
TEST_F(DispatcherTest, RememberedDeviceNamesFollowNewDeviceClasses) {
  auto resolve = [&](const std::string& name) -> std::string {
    auto r = m_parts->lookups.resolve_device_cached(name);
    if (!r) return "error: " + r.error().message;
    EXPECT_EQ((*r)->id, (*r)->device.id());
    return (*r)->id;
  };
  EXPECT_EQ(resolve("h200"), k_h200);
  EXPECT_EQ(resolve("h200"), k_h200) << "remembered";
  EXPECT_EQ(resolve("nvl").substr(0, 34), "error: device class 'nvl' is unkno");
  auto nvl = testing::winner(
      Problem{"gemm", "bf16", "bf16", "rc", {{"M", 4096}, {"N", 4096}, {"K", 4096}}}, 180.0);
  nvl.device = DeviceClass{"NVIDIA H200 NVL", 90, 132, 141};
  const auto version = m_parts->index.device_ids_version();
  m_parts->index.upsert(nvl);
  EXPECT_NE(m_parts->index.device_ids_version(), version);
  EXPECT_EQ(resolve("h200").substr(0, 41), "error: device class 'h200' is ambiguous: ");
  EXPECT_EQ(resolve("nvl"), "nvidia-h200-nvl.sm90.132sm.141gib");
  // More distinct names than are remembered: each still resolves as when asked alone.
  for (int i = 0; i < int(LookupService::k_max_resolved_names) + 10; ++i) {
    const std::string id = i % 2 ? k_h200 : "nvidia-h200-nvl.sm90.132sm.141gib";
    std::string name = id;
    for (size_t j = 0; j <= size_t(i / 2) && j < name.size(); ++j)
      name[j] = char(std::toupper(static_cast<unsigned char>(name[j])));
    EXPECT_EQ(resolve(name), id) << name;
  }
}

// Errors about the problem name what is valid.
TEST_F(DispatcherTest, ProblemErrorsListWhatIsValid) {
  auto message = [&](const std::string& problem) {
    Json j = call(R"({"v":1,"id":1,"op":"lookup","device":"h200","problem":)" + problem + "}");
    EXPECT_EQ(j["error"]["code"], "invalid_problem") << j.dump();
    return j["error"]["message"].get<std::string>();
  };
  std::string ops;
  for (const auto& op : m_templates.ops()) ops += (ops.empty() ? "" : ", ") + op;
  EXPECT_EQ(message(R"({"op":"gemmm","dtype":"bf16","dims":{"M":8,"N":8,"K":8}})"),
            "unknown op 'gemmm' (ops: " + ops + "), and nothing was tuned for it");
  EXPECT_EQ(message(R"({"op":"gemm","dtype":"bf16","layout":"xx","dims":{"M":8,"N":8,"K":8}})"),
            "gemm has no layout 'xx' (layouts: cc, cr, rc, rr), and nothing was tuned for it");
  // tune: the same, before the device (this node has no GPU).
  Json t = call(
      R"({"v":1,"id":1,"op":"tune","strategy":"bogus","problem":{"op":"gemm","dtype":"bf16","dims":{"M":8,"N":8,"K":8}}})");
  EXPECT_EQ(t["error"]["code"], "bad_request") << t.dump();
  EXPECT_NE(t["error"]["message"].get<std::string>().find("unknown strategy 'bogus'"),
            std::string::npos);
  t = call(
      R"({"v":1,"id":1,"op":"tune","problem":{"op":"gemmm","dtype":"bf16","dims":{"M":8,"N":8,"K":8}}})");
  EXPECT_EQ(t["error"]["code"], "invalid_problem") << t.dump();
  EXPECT_TRUE(t["error"]["message"].get<std::string>().starts_with("unknown op 'gemmm'"));
}

// Every class of bad input gets its own error code, and the next request is still answered.
TEST_F(DispatcherTest, BadRequestsGetSpecificErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{not json", "parse_error"},
      {"[1,2,3]", "bad_request"},
      {R"({"id":1,"op":"status"})", "bad_request"},
      {R"({"v":"one","id":1,"op":"status"})", "bad_request"},
      {R"({"v":3,"id":1,"op":"status"})", "unsupported_version"},
      {R"({"v":0,"id":1,"op":"status"})", "unsupported_version"},
      {R"({"v":1,"id":1})", "bad_request"},
      {R"({"v":1,"id":1,"op":"explode"})", "unknown_op"},
      {R"({"v":1,"id":1,"op":"lookup"})", "bad_request"},
      {lookup_line(R"({"M":0,"N":8,"K":8})"), "invalid_problem"},
      {lookup_line(R"({"M":-4,"N":8,"K":8})"), "invalid_problem"},
      {lookup_line(R"({"M":99999999999999999999,"N":8,"K":8})"), "invalid_problem"},
      {lookup_line(R"({"M":4.5,"N":8,"K":8})"), "invalid_problem"},
      {lookup_line(R"({"M":"big","N":8,"K":8})"), "bad_request"},
      {lookup_line(R"({"M":1048576,"N":1048576,"K":1048576})"), "invalid_problem"},
      {lookup_line(R"({"M":8,"N":8})"), "invalid_problem"},
      {lookup_line(R"({"M":8,"N":8,"K":8})", R"(,"limit":0)"), "bad_request"},
      {R"({"v":1,"id":1,"op":"lookup","device":"nvidia-h200","problem":{"op":"gemm","dtype":"int3","dims":{"M":8,"N":8,"K":8}}})",
       "invalid_problem"},
      {R"({"v":1,"id":1,"op":"lookup","device":"nvidia-h200","problem":{"op":"fft","dtype":"fp32","dims":{"n":8}}})",
       "invalid_problem"},
      {R"({"v":1,"id":1,"op":"export","format":"xml"})", "bad_request"},
      {R"({"v":1,"id":1,"op":"import"})", "bad_request"},
      {R"({"v":1,"id":1,"op":"import","path":"/etc/shadow"})", "bad_request"},
      {R"({"v":1,"id":1,"op":"tune","problem":{"op":"gemm","dtype":"bf16","dims":{"M":8,"N":8,"K":8}}})",
       "unavailable"},
      {R"({"v":1,"id":1,"op":"job","job":"000000000042"})", "not_found"},
      {R"({"v":1,"id":1,"op":"cancel"})", "bad_request"},
      {R"({"v":1,"id":1,"op":"jobs","state":"sleeping"})", "bad_request"},
      {R"({"v":1,"id":1,"op":"plan","plan":"- {op: gemm}"})", "invalid_problem"},
      {R"({"v":1,"id":1,"op":"plan","plan":"42"})", "bad_request"},
      {R"({"v":1,"id":1,"op":"watch","job":"nope"})", "not_found"},
      {R"({"v":1,"id":1,"op":"import","table":"{\"ktune_table\":1,\"winners\":[{}]}"})",
       "bad_request"},
  };
  for (const auto& [line, code] : cases) {
    EXPECT_EQ(error_code(line), code) << line;
    EXPECT_EQ(ok(R"({"v":1,"id":2,"op":"status"})")["node_id"], "test-node") << "after " << line;
  }
  EXPECT_GE(m_parts->metrics.errors(), cases.size());
}

// The store refusing a write is the daemon's failure, `internal` (protocol.md), not the client's:
// an import of a valid table is not answered bad_request. (tune and plan map a job the store
// could not write the same way, through as_protocol; they need a node with GPU lanes.)
TEST_F(DispatcherTest, AStoreThatFailsAWriteIsInternal) {
  Json table = Json::parse(
      ok(R"({"v":1,"id":1,"op":"export","format":"json"})")["content"].get<std::string>());
  for (auto& c : table["winners"][0]["ranked"]) {  // faster: the import replaces it
    c["median_us"] = c["median_us"].get<double>() / 2;
    for (const char* t : {"tflops", "gbps"})
      if (c.contains(t)) c[t] = c[t].get<double>() * 2;
  }
  const Json import = {{"v", 1}, {"id", 1}, {"op", "import"}, {"table", table.dump()}};
  m_parts->store.failing = true;
  EXPECT_EQ(error_code(import.dump()), "internal");
  m_parts->store.failing = false;
  EXPECT_EQ(ok(import.dump())["replaced"], 1);
}

// A watch that ktuned's stop ends gets an `unavailable` line, an error reply like any other:
// counted in ktune_errors_total (it was sent without being counted).
TEST_F(DispatcherTest, AWatchEndedByTheStopIsAnErrorCounted) {
  JobSpec spec;
  spec.device = testing::h200();
  spec.problem = testing::gemm_problem(64, 4096, 4096);
  spec.strategy = "model";
  spec.budget_trials = 10;
  auto job = m_parts->jobs.submit(spec);
  ASSERT_TRUE(job) << job.error().message;
  std::promise<std::string> last;
  m_parts->dispatcher.handle(R"({"v":1,"id":5,"op":"watch","job":")" + job->job.id + R"("})", {},
                             Peer{}, [&last](std::string line, bool end) {
                               if (end) last.set_value(std::move(line));
                               return true;
                             });
  const size_t errors = m_parts->metrics.errors();
  m_parts->jobs.stop();
  auto ended = last.get_future();
  ASSERT_EQ(ended.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const Json line = Json::parse(ended.get());
  EXPECT_EQ(line["id"], 5);
  EXPECT_EQ(line["error"]["code"], "unavailable") << line.dump();
  EXPECT_EQ(m_parts->metrics.errors(), errors + 1);
}

// One text, one answer: a NUL byte (nlohmann's parser ends the text there) is a parse error on
// every path, and a line that gives "id" or "v" twice gets the same reply every time (the cached
// path read the first, the general parser the last).
TEST_F(DispatcherTest, NulBytesAndRepeatedKeysGetOneAnswerPerText) {
  const std::string status = R"({"v":1,"id":1,"op":"status"})";
  EXPECT_EQ(error_code(status + std::string(1, '\0') + "garbage"), "parse_error");
  const std::string lookup = lookup_line(R"({"M":2048,"N":4096,"K":4096})");
  EXPECT_EQ(error_code(lookup + std::string(1, '\0') + "zz"), "parse_error");
  for (const std::string& twice : {lookup.substr(0, lookup.size() - 1) + R"(,"id":8})",
                                   lookup.substr(0, lookup.size() - 1) + R"(,"v":2})"}) {
    const std::string first = m_parts->dispatcher.handle(twice).line;
    for (int i = 0; i < 3; ++i) EXPECT_EQ(m_parts->dispatcher.handle(twice).line, first) << twice;
  }
}

TEST_F(DispatcherTest, IdIsEchoedEvenOnErrors) {
  EXPECT_EQ(call(R"({"v":1,"id":"abc-1","op":"status"})")["id"], "abc-1");
  EXPECT_EQ(call(R"({"v":9,"id":42,"op":"status"})")["id"], 42);
  EXPECT_TRUE(call("{broken")["id"].is_null());
}

TEST_F(DispatcherTest, ExportThenImportThroughTheDispatcher) {
  Json exported = ok(R"({"v":1,"id":1,"op":"export","format":"json"})");
  EXPECT_EQ(exported["count"], 2);
  const std::string table = exported["content"].get<std::string>();
  testing::DaemonParts other(m_parts->config, m_templates, m_parts->node);
  Json req = {{"v", 1}, {"id", 3}, {"op", "import"}, {"table", table}};
  Json r = Json::parse(other.dispatcher.handle(req.dump()).line);
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  EXPECT_EQ(r["result"]["added"], 2);
  EXPECT_EQ(other.index.size(), 2u);
  // The same table as an attachment (how clients send tables larger than a frame).
  testing::DaemonParts third(m_parts->config, m_templates, m_parts->node);
  Json attached = {{"v", 1}, {"id", 4}, {"op", "import"}, {"attach", table.size()}};
  r = Json::parse(third.dispatcher.handle(attached.dump(), {}, table).line);
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  EXPECT_EQ(third.index.size(), 2u);
  Json csv = ok(R"({"v":1,"id":1,"op":"export","format":"csv"})");
  EXPECT_TRUE(csv["content"].get<std::string>().starts_with("device,op,dtype"));
  // YAML and CSV exports import too.
  for (const char* format : {"yaml", "csv"}) {
    Json text = ok(R"({"v":1,"id":1,"op":"export","format":")" + std::string(format) + "\"}");
    testing::DaemonParts fourth(m_parts->config, m_templates, m_parts->node);
    Json imp = {{"v", 1}, {"id", 5}, {"op", "import"}, {"table", text["content"]}};
    r = Json::parse(fourth.dispatcher.handle(imp.dump()).line);
    ASSERT_TRUE(r["ok"].get<bool>()) << format << ": " << r.dump();
    EXPECT_EQ(r["result"]["added"], 2) << format;
  }
  // export's device is resolved as lookup's: a part of an id, or not_found.
  EXPECT_EQ(ok(R"({"v":1,"id":1,"op":"export","device":"h200"})")["count"], 2);
  EXPECT_EQ(error_code(R"({"v":1,"id":1,"op":"export","device":"a100"})"), "not_found");
}

TEST_F(DispatcherTest, TcpPeersNeedTheToken) {
  m_parts->config.tcp_token = "s3cret";
  Dispatcher& d = m_parts->dispatcher;
  Response r = d.handle(R"({"v":1,"id":1,"op":"status"})", Peer{true});
  EXPECT_EQ(Json::parse(r.line)["error"]["code"], "unauthorized");
  r = d.handle(R"({"v":1,"id":1,"op":"status","token":"s3cret"})", Peer{true});
  EXPECT_TRUE(Json::parse(r.line)["ok"].get<bool>());
  r = d.handle(R"({"v":1,"id":1,"op":"status"})", Peer{false});  // Unix socket: no token
  EXPECT_TRUE(Json::parse(r.line)["ok"].get<bool>());
}

// The policy stage runs before any cache: a line a Unix client made hot is still refused to a
// TCP client without the token, by the text cache and by the answer cache alike.
TEST_F(DispatcherTest, TokenIsCheckedBeforeAnyCachedAnswer) {
  m_parts->config.tcp_token = "s3cret";
  Dispatcher& d = m_parts->dispatcher;
  const std::string line = lookup_line(R"({"M":4096,"N":4096,"K":4096})");
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(Json::parse(d.handle(line, Peer{false}).line)["ok"].get<bool>());
  ASSERT_TRUE(d.try_fast(line, Peer{false})) << "the line is in the text cache";
  EXPECT_FALSE(d.try_fast(line, Peer{true})) << "no text cache for TCP peers";
  Json r = Json::parse(d.handle(line, Peer{true}).line);
  EXPECT_EQ(r["error"]["code"], "unauthorized") << r.dump();
  std::string with_token = line;
  with_token.insert(with_token.size() - 1, R"(,"token":"s3cret")");
  r = Json::parse(d.handle(with_token, Peer{true}).line);
  EXPECT_EQ(r["result"]["entries"][0]["provenance"], "exact") << r.dump();
}

// The op table, the handlers and the metrics agree on every op.
TEST_F(DispatcherTest, EveryOpHasOneHandlerAndAMetric) {
  std::set<std::string_view> ops, handlers;
  for (const auto& op : protocol::k_ops) EXPECT_TRUE(ops.insert(op.name).second) << op.name;
  for (const auto& h : op_handlers()) {
    EXPECT_TRUE(handlers.insert(h.name).second) << h.name;
    const protocol::OpInfo* info = protocol::find_op(h.name);
    ASSERT_NE(info, nullptr) << h.name;
    // Streamed and asynchronous ops reply through Emit; the others return their line.
    EXPECT_EQ(bool(info->flags & (protocol::op_stream | protocol::op_async)), h.stream != nullptr)
        << h.name;
    EXPECT_EQ(h.stream == nullptr, h.call != nullptr) << h.name;
    EXPECT_EQ(bool(info->flags & protocol::op_fast), h.fast != nullptr) << h.name;
  }
  EXPECT_EQ(ops, handlers);
  const std::string text = m_parts->metrics.prometheus();
  for (const auto& op : protocol::k_ops)
    EXPECT_NE(text.find("ktune_requests_total{op=\"" + std::string(op.name) + "\"}"),
              std::string::npos)
        << op.name;
}

// The lookup time's sum keeps every digit past a million seconds (streamed with 6 digits it
// stepped by 10 s, and rate(sum)/rate(count) became noise).
TEST(MetricsTest, TheLookupTimeSumKeepsItsDigits) {
  Metrics metrics;
  metrics.count_lookup("exact", 1'234'567.5);
  metrics.count_lookup("exact", 0.000001);
  const std::string text = metrics.prometheus();
  EXPECT_NE(text.find("ktune_lookup_seconds_sum 1234567.500001000\n"), std::string::npos) << text;
  EXPECT_NE(text.find("ktune_lookup_seconds_count 2\n"), std::string::npos) << text;
}

// docs/protocol.md documents every op of the table (a section titled with the op's name).
TEST(ProtocolDocTest, EveryOpIsDocumented) {
  std::ifstream in(std::string(KTUNE_SOURCE_DIR) + "/docs/protocol.md");
  std::string headings;  // the "### ..." lines, where an op's section names it
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("### ")) headings += line + "\n";
  for (const auto& op : protocol::k_ops)
    EXPECT_NE(headings.find("`" + std::string(op.name) + "`"), std::string::npos) << op.name;
}

// The spec's error table lists exactly the codes the daemon and clients use, and its Rights
// paragraph puts every op under the right it needs.
TEST(ProtocolDocTest, ErrorCodesAndRightsMatchTheTables) {
  std::ifstream in(std::string(KTUNE_SOURCE_DIR) + "/docs/protocol.md");
  std::set<std::string> rows;  // "| `code` | ..." rows of the error table
  std::string text;            // the whole page, for the Rights paragraph
  static const std::regex row(R"(^\| `([a-z_]+)` \| .* \| (stays open|\*\*closed\*\*) \|$)");
  for (std::string line; std::getline(in, line);) {
    if (std::smatch m; std::regex_match(line, m, row)) rows.insert(m[1]);
    text += line + "\n";
  }
  // "Two rights. **Read**: ... (ops). **Admin**: ... (ops, and ops added later ...). A peer ..."
  const size_t from = text.find("Two rights."), admin_at = text.find("**Admin**", from),
               to = text.find("A peer with read", admin_at);
  ASSERT_TRUE(from != std::string::npos && admin_at != std::string::npos &&
              to != std::string::npos);
  const std::string read = text.substr(from, admin_at - from),
                    admin = text.substr(admin_at, to - admin_at);
  std::set<std::string> names;
  for (const auto& [kind, name] : protocol::k_error_names)
    if (name != "connection_failed") names.insert(std::string(name));  // the clients' own
  EXPECT_EQ(rows, names);
  for (const auto& op : protocol::k_ops) {
    const std::string quoted = "`" + std::string(op.name) + "`";
    const bool needs_admin = op.flags & (protocol::op_write | protocol::op_admin);
    EXPECT_NE((needs_admin ? admin : read).find(quoted), std::string::npos) << op.name;
    EXPECT_EQ((needs_admin ? read : admin).find(quoted), std::string::npos) << op.name;
  }
}

TEST_F(DispatcherTest, MissesAreWorthSomethingAndListed) {
  ok(lookup_line(R"({"M":1000,"N":1000,"K":1000})"));
  ok(lookup_line(R"({"M":1000,"N":1000,"K":1000})"));
  ok(lookup_line(R"({"M":32,"N":4096,"K":4096})"));
  Json m = ok(R"({"v":1,"id":1,"op":"misses","limit":5})");
  ASSERT_EQ(m["top"].size(), 2u);
  EXPECT_EQ(m["total"], 3);
  for (const auto& e : m["top"]) {
    EXPECT_GT(e["expected_us"].get<double>(), 0) << e.dump();
    EXPECT_GT(e["worth_us"].get<double>(), 0) << e.dump();
  }
  const Json& heuristic = m["top"][0]["problem"] == "gemm|bf16|bf16|rc|M=1000,N=1000,K=1000"
                              ? m["top"][0]
                              : m["top"][1];
  EXPECT_EQ(heuristic["count"], 2);
  EXPECT_EQ(heuristic["gain"], 0.3);
}

TEST_F(DispatcherTest, TemplatesAndStatus) {
  Json t = ok(R"({"v":1,"id":1,"op":"templates"})");
  EXPECT_EQ(t["templates"].size(), m_templates.all().size());
  Json s = ok(R"({"v":1,"id":1,"op":"status"})");
  EXPECT_EQ(s["winners"], 2);
  EXPECT_EQ(s["device_classes"][0], k_h200);
  EXPECT_EQ(s["validators"]["nvrtc"], "13.0");
}

// Protocol v1 is answered exactly as before v2 existed: "v":1, entries without "launch", the
// kernel object with its five fields, the same bytes from the cold path and the fast path.
TEST_F(DispatcherTest, V1LookupIsAnsweredAsBefore) {
  Dispatcher& d = m_parts->dispatcher;
  const std::string line = lookup_line(R"({"M":16,"N":4096,"K":4096})");
  const std::string cold = d.handle(line).line;
  const Json r = Json::parse(cold);
  EXPECT_EQ(r["v"], 1);
  ASSERT_GE(r["result"]["entries"].size(), 2u);
  for (const auto& e : r["result"]["entries"]) {
    EXPECT_FALSE(e.contains("launch")) << e.dump();
    std::set<std::string> keys;
    for (auto it = e["kernel"].begin(); it != e["kernel"].end(); ++it) keys.insert(it.key());
    EXPECT_EQ(keys, (std::set<std::string>{"name_expression", "arch", "grid", "block", "smem"}));
  }
  auto fast = d.try_fast(line, Peer{});
  ASSERT_TRUE(fast) << "a repeated v1 line is answered from the text cache";
  EXPECT_EQ(*fast, cold);
}

// A gemm lookup naming no layout is answered for rc (nn.Linear's layout, the tuned one here);
// a v2 reply says so in "assumed", a v1 reply is unchanged, and the two are cached apart from a
// request that names the layout.
TEST_F(DispatcherTest, GemmWithoutLayoutAssumesRcAndV2SaysSo) {
  EXPECT_EQ(m_templates.default_layout("gemm"), "rc");
  EXPECT_EQ(m_templates.default_layout("softmax"), "");  // its one layout is unnamed
  const std::string no_layout =
      R"("op":"lookup","device":"h200","problem":{"op":"gemm","dtype":"bf16","dims":{"M":4096,"N":4096,"K":4096}}})";
  for (int pass = 0; pass < 2; ++pass) {  // cold, then from the caches
    Json v2 = ok(R"({"v":2,"id":1,)" + no_layout);
    EXPECT_EQ(v2["problem_key"], "gemm|bf16|bf16|rc|M=4096,N=4096,K=4096");
    EXPECT_EQ(v2["entries"][0]["provenance"], "exact");
    EXPECT_EQ(v2["assumed"], (Json{{"layout", "rc"}})) << v2.dump();
    Json named = ok(lookup_line(R"({"M":4096,"N":4096,"K":4096})").replace(0, 7, R"({"v":2,)"));
    EXPECT_FALSE(named.contains("assumed")) << "the request named its layout";
    Json v1 = ok(R"({"v":1,"id":1,)" + no_layout);
    EXPECT_EQ(v1["problem_key"], "gemm|bf16|bf16|rc|M=4096,N=4096,K=4096");
    EXPECT_FALSE(v1.contains("assumed")) << "v1 replies are as they were";
  }
  auto reply = protocol::lookup_reply_from_json(ok(R"({"v":2,"id":1,)" + no_layout));
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->assumed_layout, "rc");
  EXPECT_EQ(protocol::to_json(*reply)["assumed"]["layout"], "rc");
}

// A v2 lookup answers the same ranking, each entry with its launch description; the reply says
// "v":2, and removing "launch" gives the v1 reply. v1 and v2 answers are cached apart.
TEST_F(DispatcherTest, V2LookupAddsLaunchDescriptionsAndEchoesTheVersion) {
  Dispatcher& d = m_parts->dispatcher;
  std::string v2_line = lookup_line(R"({"M":16,"N":4096,"K":4096})");
  v2_line.replace(0, 7, R"({"v":2,)");
  const Json v1 = Json::parse(d.handle(lookup_line(R"({"M":16,"N":4096,"K":4096})")).line);
  const std::string v2_text = d.handle(v2_line).line;
  Json v2 = Json::parse(v2_text);
  EXPECT_EQ(v2["v"], 2);
  EXPECT_EQ(v2["result"]["entries"][0]["provenance"], "exact");
  const KernelTemplate& gemm = *m_templates.find("gemm");
  const Problem problem{"gemm", "bf16", "bf16", "rc", {{"M", 16}, {"N", 4096}, {"K", 4096}}};
  for (auto& e : v2["result"]["entries"]) {
    ASSERT_TRUE(e.contains("launch")) << e.dump();
    auto launch = protocol::launch_from_json(e["launch"]);
    ASSERT_TRUE(launch) << launch.error().message;
    Params params;
    for (auto it = e["params"].begin(); it != e["params"].end(); ++it)
      params[it.key()] = it.value().get<std::int64_t>();
    DeviceLimits limits = *DeviceLimits::for_arch("sm_90");
    limits.sm_count = 132;
    auto inst = instantiate(gemm, problem, limits, params);
    ASSERT_TRUE(inst) << inst.error().message;
    EXPECT_EQ(launch->name_expression, inst->name_expression);
    EXPECT_EQ(launch->arch, "sm_90");
    EXPECT_EQ(launch->cubin_id, Compiler::cubin_id({&gemm, inst->name_expression, "sm_90"}));
    EXPECT_EQ(launch->grid, inst->launch.grid);
    EXPECT_EQ(launch->args.size(), gemm.manifest.args.size());
    EXPECT_EQ(e["kernel"]["grid"], Json(inst->launch.grid)) << "v1 fields unchanged in v2";
    e.erase("launch");
  }
  EXPECT_EQ(v2["result"], v1["result"]);
  auto fast = d.try_fast(v2_line, Peer{});
  ASSERT_TRUE(fast);
  EXPECT_EQ(*fast, v2_text);
  auto fast_v1 = d.try_fast(lookup_line(R"({"M":16,"N":4096,"K":4096})"), Peer{});
  ASSERT_TRUE(fast_v1);
  EXPECT_EQ(Json::parse(*fast_v1)["v"], 1) << "the v1 text cache entry is not the v2 one";
  EXPECT_FALSE(Json::parse(*fast_v1)["result"]["entries"][0].contains("launch"));
}

// Errors echo the version they were asked in, too.
TEST_F(DispatcherTest, ErrorRepliesEchoTheRequestVersion) {
  EXPECT_EQ(call(R"({"v":2,"id":1,"op":"explode"})")["v"], 2);
  EXPECT_EQ(call(R"({"v":1,"id":1,"op":"explode"})")["v"], 1);
  EXPECT_EQ(call(R"({"v":2,"id":1,"op":"job","job":"000000000042"})")["v"], 2);
  // Refused by the policy stage once the version was read: still the request's version.
  for (const char* line : {R"({"v":2,"id":1})", R"({"v":2,"id":1,"op":7})"}) {
    const Json r = call(line);
    EXPECT_EQ(r["v"], 2) << line << " -> " << r.dump();
  }
  // A version this daemon does not speak, or none: the reply is in version 1.
  EXPECT_EQ(call(R"({"v":3,"id":1,"op":"status"})")["v"], 1);
  EXPECT_EQ(call(R"({"id":1,"op":"status"})")["v"], 1);
}

TEST(WinnerIndexTest, NearestIsWithinRadiusOrderedAndFamilyScoped) {
  WinnerIndex index;
  std::vector<WinnerRecord> records;
  for (int m : {16, 64, 256, 4096})
    records.push_back(testing::winner(testing::gemm_problem(m, 4096, 4096), 10));
  records.push_back(testing::winner(testing::gemm_problem(32, 4096, 4096, "fp16"), 10));
  index.load(records);
  const auto near =
      index.nearest(testing::h200().id(), testing::gemm_problem(32, 4096, 4096), 2.5, 10);
  ASSERT_EQ(near.size(), 2u);  // 16 (1.0) and 64 (1.0); 256 is 3.0 away; fp16 is another family
  EXPECT_EQ(near[0].distance, 1.0);
  EXPECT_EQ(near[0].record->problem.dim("M"), 16);  // tie broken by key order
  EXPECT_EQ(near[1].record->problem.dim("M"), 64);
  EXPECT_TRUE(
      index.nearest(testing::h200().id(), testing::gemm_problem(16, 4096, 4096), 0.5, 10).empty());
  const auto gen = index.generation();
  index.upsert(testing::winner(testing::gemm_problem(16, 4096, 4096), 5));
  EXPECT_GT(index.generation(), gen);
  EXPECT_EQ(index.size(), 5u);
  EXPECT_EQ(
      index.exact(testing::h200().id(), testing::gemm_problem(16, 4096, 4096))->ranked[0].median_us,
      5);
}

}  // namespace
}  // namespace ktune
