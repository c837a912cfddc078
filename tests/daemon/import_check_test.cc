// Imports that would poison lookups are refused record by record, with a reason each; a bad
// winner already in the index (an old store) falls back to heuristics; device prefixes resolve
// to the class whose name they spell out.
#include <gtest/gtest.h>

#include <filesystem>

#include "daemon/dispatcher.h"
#include "store/rocksdb_store.h"
#include "store/table_io.h"
#include "templates/space.h"
#include "tests/fakes/daemon_parts.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

using protocol::Json;

const std::string k_h200 = "nvidia-h200.sm90.132sm.140gib";

class ImportCheckTest : public ::testing::Test {
 protected:
  ImportCheckTest() : m_templates(TemplateRegistry::load({builtin_template_dir()})) {
    NodeIdentity node;
    node.driver = "none";
    node.nvrtc = "13.0";
    node.node_id = "test-node";
    node.gpu_error = "no GPU in tests";
    m_parts = std::make_unique<testing::DaemonParts>(default_config(), m_templates, node);
    // The real 4096^3 winner, imported the way every table is.
    Json r = import({valid(4096, 190.0)});
    EXPECT_TRUE(r["ok"].get<bool>()) << r.dump();
  }

  const KernelTemplate& gemm() const { return *m_templates.find("gemm"); }

  // A gemm bf16 rc winner with the heuristic config of the installed template.
  WinnerRecord valid(std::int64_t m, double us) const {
    auto w = testing::winner(
        Problem{"gemm", "bf16", "bf16", "rc", {{"M", m}, {"N", 4096}, {"K", 4096}}}, us);
    w.ranked.resize(1);
    w.ranked[0].template_hash = gemm().hash;
    w.ranked[0].params = *heuristic_config(gemm(), w.problem, DeviceLimits{});
    w.validators.nvrtc = "13.0";
    return w;
  }

  static Json table(const std::vector<WinnerRecord>& records) {
    return Json::parse(render_table(records, TableFormat::json));
  }
  Json import_json(const Json& doc) {
    Json req = {{"v", 1}, {"id", 1}, {"op", "import"}, {"table", doc.dump()}};
    return Json::parse(m_parts->dispatcher.handle(req.dump()).line);
  }
  Json import(const std::vector<WinnerRecord>& records) { return import_json(table(records)); }

  // Imports one record edited as JSON; returns the error message ("" when it was imported).
  std::string rejection(const std::function<void(Json&)>& edit) {
    Json doc = table({valid(4096, 1.0)});
    edit(doc["winners"][0]);
    Json r = import_json(doc);
    if (r["ok"].get<bool>()) return "";
    EXPECT_EQ(r["error"]["code"], "bad_request") << r.dump();
    return r["error"]["message"].get<std::string>();
  }

  Json lookup(const std::string& device, std::int64_t m = 4096) {
    Json req = {{"v", 1},
                {"id", 2},
                {"op", "lookup"},
                {"device", device},
                {"problem",
                 {{"op", "gemm"},
                  {"dtype", "bf16"},
                  {"layout", "rc"},
                  {"dims", {{"M", m}, {"N", 4096}, {"K", 4096}}}}}};
    return Json::parse(m_parts->dispatcher.handle(req.dump()).line);
  }
  // The served 4096^3 answer is still the real winner.
  void expect_real_winner_served() {
    Json r = lookup(k_h200);
    ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
    EXPECT_EQ(r["result"]["entries"][0]["provenance"], "exact");
    EXPECT_EQ(r["result"]["entries"][0]["median_us"], 190.0);
  }

  TemplateRegistry m_templates;
  std::unique_ptr<testing::DaemonParts> m_parts;
};

// The case: a faster record whose params are outside the template's space replaced the
// real winner, and the lookup then failed with no fallback.
TEST_F(ImportCheckTest, ParamsOutsideTheDomainAreRefused) {
  std::string why = rejection([](Json& w) { w["ranked"][0]["params"]["BLOCK_M"] = 7; });
  EXPECT_NE(why.find("winners[0]: ranked[0].params: "), std::string::npos) << why;
  // Each message says what is valid: the domain, or the template's params.
  EXPECT_NE(why.find("param BLOCK_M=7 is not in its domain (16, 32, 64, 128"), std::string::npos)
      << why;
  why = rejection([](Json& w) { w["ranked"][0]["params"]["UNROLL"] = 4; });
  EXPECT_NE(why.find("has no param UNROLL (params: BLOCK_M, BLOCK_N, BLOCK_K"), std::string::npos)
      << why;
  why = rejection([](Json& w) { w["ranked"][0]["params"].erase("STAGES"); });
  EXPECT_NE(why.find("missing param STAGES (params: BLOCK_M,"), std::string::npos) << why;
  // A misspelt name is both unknown and missing: the unknown one is named.
  why = rejection([](Json& w) {
    w["ranked"][0]["params"].erase("STAGES");
    w["ranked"][0]["params"]["STAGE"] = 4;
  });
  EXPECT_NE(why.find("has no param STAGE "), std::string::npos) << why;
  expect_real_winner_served();
}

TEST_F(ImportCheckTest, ParamsBreakingAConstraintAreRefused) {
  // A config of the declared values that a constraint prunes for this problem.
  const auto problem = valid(4096, 1.0).problem;
  std::optional<Params> pruned;
  Params p = *heuristic_config(gemm(), problem, DeviceLimits{});
  for (std::int64_t warps : {1, 2, 4})
    for (std::int64_t bm : {16, 32, 64, 128, 256}) {
      p["WARPS_M"] = warps;
      p["WARPS_N"] = 4;
      p["BLOCK_M"] = bm;
      p["BLOCK_N"] = 32;
      if (!pruned && !instantiate(gemm(), problem, DeviceLimits{}, p)) pruned = p;
    }
  ASSERT_TRUE(pruned) << "no pruned config found to test with";
  const std::string why = rejection([&](Json& w) {
    for (const auto& [n, v] : *pruned) w["ranked"][0]["params"][n] = v;
  });
  EXPECT_NE(why.find("constraint at"), std::string::npos) << why;
  expect_real_winner_served();
}

TEST_F(ImportCheckTest, TimesOutsideTheSaneRangeAreRefused) {
  auto with_time = [](double us) {  // tflops dropped: only the time is judged
    return [us](Json& w) {
      w["ranked"][0]["median_us"] = us;
      w["ranked"][0].erase("tflops");
    };
  };
  for (double us : {5e-324, 0.05, 2e9}) {
    const std::string why = rejection(with_time(us));
    EXPECT_NE(why.find("ranked[0].median_us"), std::string::npos) << us << ": " << why;
  }
  EXPECT_EQ(rejection(with_time(0.1)), "");
}

// tflops and gbps are what the config's metric (the manifest's FLOPs or bytes) over median_us
// gives; a record that states other figures would have lookups pass them on.
TEST_F(ImportCheckTest, ThroughputThatMedianUsDoesNotGiveIsRefused) {
  // valid(4096, 1.0): 2 * 4096^3 FLOPs in 1 us, 137,439 TFLOP/s.
  std::string why = rejection([](Json& w) { w["ranked"][0]["tflops"] = 274878.0; });
  EXPECT_NE(why.find("winners[0]: ranked[0].tflops: 274878 is not what median_us 1 gives (137439)"),
            std::string::npos)
      << why;
  why = rejection([](Json& w) { w["ranked"][0]["tflops"] = 137439.0 * 1.015; });
  EXPECT_NE(why.find("ranked[0].tflops: 139501 is not what"), std::string::npos) << "1.5 % off";
  // gemm counts FLOPs: a GB/s figure was never derived.
  why = rejection([](Json& w) { w["ranked"][0]["gbps"] = 3000.0; });
  EXPECT_NE(why.find("ranked[0].gbps: gemm counts FLOPs, so gbps must be 0 or absent"),
            std::string::npos)
      << why;
  // A memory-bound op's gbps: softmax moves rows * cols * 4 bytes in bf16.
  const KernelTemplate& softmax = *m_templates.find("softmax");
  auto sm = testing::winner(
      Problem{"softmax", "bf16", "bf16", "", {{"rows", 4096}, {"cols", 4096}}}, 10.0);
  sm.ranked.resize(1);
  sm.ranked[0].template_name = "softmax";
  sm.ranked[0].template_hash = softmax.hash;
  sm.ranked[0].params = *heuristic_config(softmax, sm.problem, DeviceLimits{});
  sm.ranked[0].tflops = 0;
  sm.ranked[0].gbps = 4096.0 * 4096 * 4 / (10.0 * 1e3) * 1.5;  // 6,710.9 GB/s, stated 1.5x
  Json r = import({sm});
  ASSERT_FALSE(r["ok"].get<bool>()) << r.dump();
  EXPECT_NE(r["error"]["message"].get<std::string>().find(
                "ranked[0].gbps: 10066.3 is not what median_us 10 gives (6710.89)"),
            std::string::npos)
      << r.dump();
  expect_real_winner_served();
  sm.ranked[0].gbps /= 1.5;
  EXPECT_TRUE(import({sm})["ok"].get<bool>());
  EXPECT_EQ(rejection([](Json& w) { w["ranked"][0]["tflops"] = 138000.0; }), "") << "within 1 %";
  EXPECT_EQ(rejection([](Json& w) { w["ranked"][0].erase("tflops"); }), "") << "none stated";
}

TEST_F(ImportCheckTest, DimsMustBeTheOpsInItsOrder) {
  std::string why = rejection([](Json& w) {
    w["problem"]["dims"] = {{"X", 4096}, {"N", 4096}, {"K", 4096}};
  });
  EXPECT_NE(why.find("problem.dims: gemm takes dims M, N, K"), std::string::npos) << why;
  why = rejection([](Json& w) { w["problem"]["dims"] = {{"N", 4096}, {"M", 4096}, {"K", 4096}}; });
  EXPECT_NE(why.find("in that order"), std::string::npos) << why;
  why = rejection([](Json& w) { w["problem"]["op"] = "fft"; });
  EXPECT_NE(why.find("no installed template implements 'fft'"), std::string::npos) << why;
  why = rejection([](Json& w) { w["problem"]["layout"] = ""; });
  EXPECT_NE(why.find("no installed template implements"), std::string::npos) << why;
}

TEST_F(ImportCheckTest, TemplatesMustBeInstalledAndImplementTheOp) {
  std::string why = rejection([](Json& w) { w["ranked"][0]["template"] = "gemm_v9"; });
  EXPECT_NE(why.find("'gemm_v9' is not installed here"), std::string::npos) << why;
  why = rejection([](Json& w) { w["ranked"][0]["template"] = "softmax"; });
  EXPECT_NE(why.find("softmax implements softmax, not gemm"), std::string::npos) << why;
}

// 64-bit values are range-checked, never cut to an int: cc 2^32+90 is not 90.
TEST_F(ImportCheckTest, IntegersAreNotTruncated) {
  std::string why = rejection([](Json& w) { w["device"]["cc"] = (std::int64_t(1) << 32) + 90; });
  EXPECT_NE(why.find("device.cc: 4294967386 is out of range"), std::string::npos) << why;
  why = rejection([](Json& w) { w["trials"] = (std::int64_t(1) << 32) + 5; });
  EXPECT_NE(why.find("trials: 4294967301 is out of range"), std::string::npos) << why;
  why = rejection([](Json& w) { w["ranked"][0]["params"]["STAGES"] = std::uint64_t(1) << 63; });
  EXPECT_NE(why.find("is out of range"), std::string::npos) << why;
  EXPECT_EQ(m_parts->index.device_ids(), std::vector<std::string>{k_h200});
}

TEST_F(ImportCheckTest, DeviceNamesAndTextFieldsAreSafe) {
  for (const char* name : {"NVIDIA H200/../x", "NVIDIA|H200", "", "NVIDIA\tH200"}) {
    const std::string why = rejection([&](Json& w) { w["device"]["name"] = name; });
    EXPECT_NE(why.find("device.name"), std::string::npos) << name << ": " << why;
  }
  std::string why = rejection([](Json& w) { w["node_id"] = "node\r\n,evil"; });
  EXPECT_NE(why.find("node_id: must be printable ASCII"), std::string::npos) << why;
  EXPECT_EQ(m_parts->index.device_ids(), std::vector<std::string>{k_h200});
}

// All or nothing, as before; the report counts and lists the first 20 reasons.
TEST_F(ImportCheckTest, ReportCountsAndListsTheFirstReasons) {
  std::vector<WinnerRecord> records = {valid(16, 20.0)};
  for (int i = 0; i < 30; ++i) {
    auto w = valid(32 + i, 1.0);
    w.ranked[0].params["BLOCK_M"] = 7;
    records.push_back(w);
  }
  Json r = import(records);
  ASSERT_FALSE(r["ok"].get<bool>());
  const std::string msg = r["error"]["message"];
  EXPECT_TRUE(msg.starts_with("30 of 31 records rejected; nothing imported:")) << msg;
  EXPECT_NE(msg.find("winners[20]"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("winners[21]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("... and 10 more"), std::string::npos) << msg;
  EXPECT_EQ(m_parts->index.size(), 1u) << "nothing imported";
}

// A config measured with another version of its template is never served as exact, so its
// params are not checked against the installed space; the lookup falls back past it.
TEST_F(ImportCheckTest, OtherTemplateVersionIsAcceptedAndServedAtMostStale) {
  auto w = valid(2048, 1.0);
  w.ranked[0].template_hash = "00000000deadbeef";
  w.ranked[0].params["BLOCK_M"] = 7;
  Json r = import({w});
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  r = lookup(k_h200, 2048);
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  const Json& entries = r["result"]["entries"];
  ASSERT_FALSE(entries.empty()) << "the lookup falls back past it: " << r.dump();
  for (const auto& e : entries) {
    EXPECT_NE(e["provenance"], "exact") << r.dump();
    EXPECT_NE(e["template_hash"], "00000000deadbeef") << "BLOCK_M 7 cannot be served: " << r.dump();
  }
}

// A winner that reached the index before imports were checked (an old store): the lookup
// answers from heuristics instead of failing, and counts a miss so the key is tuned again.
TEST_F(ImportCheckTest, WinnerThatCannotBeInstantiatedFallsBackToHeuristics) {
  auto w = valid(4096, 1.0);
  w.ranked[0].params["BLOCK_M"] = 7;
  m_parts->index.upsert(w);
  Json r = lookup(k_h200);
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  ASSERT_FALSE(r["result"]["entries"].empty());
  for (const auto& e : r["result"]["entries"]) EXPECT_NE(e["provenance"], "exact") << r.dump();
  EXPECT_EQ(r["result"]["entries"].back()["provenance"], "heuristic");
  ASSERT_EQ(m_parts->misses.total(), 1u);
  EXPECT_NE(m_parts->misses.top(1)[0].reason.find("valid"), std::string::npos)
      << m_parts->misses.top(1)[0].reason;
}

// One imported "NVIDIA H200 NVL" record made the prefix nvidia-h200 ambiguous for every client.
TEST_F(ImportCheckTest, PrefixThatIsAWholeNameWinsOverLongerNames) {
  auto nvl = valid(1024, 50.0);
  nvl.device.name = "NVIDIA H200 NVL";
  Json r = import({nvl});
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  r = lookup("nvidia-h200");
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  EXPECT_EQ(r["result"]["device"], k_h200);
  r = lookup("nvidia-h200-nvl");
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  EXPECT_EQ(r["result"]["device"], "nvidia-h200-nvl.sm90.132sm.140gib");
  r = lookup("nvidia-h200.sm90");
  EXPECT_EQ(r["result"]["device"], k_h200) << r.dump();
  r = lookup("nvidia");  // a prefix of both names: still ambiguous
  EXPECT_EQ(r["error"]["code"], "not_found") << r.dump();
  EXPECT_NE(r["error"]["message"].get<std::string>().find("ambiguous"), std::string::npos);
}

// An import of Catalog::k_flush_after_records or more leaves nothing of its records in the
// store's memory (the index serves them): the RocksDB memtable of winners goes to a table file.
// A smaller import stays in the memtable, as every other write does.
TEST(CatalogFlushTest, ALargeImportFlushesTheStoresWinnersToAFile) {
  testing::TempDir dir;
  auto store = RocksDbStore::open(dir / "db");
  ASSERT_TRUE(store) << store.error().message;
  TemplateSet templates(TemplateRegistry::load({builtin_template_dir()}));
  NodeIdentity node;
  node.driver = "none";
  node.nvrtc = "13.0";
  WinnerIndex index;
  Catalog catalog(**store, index, templates, node);
  const KernelTemplate& gemm = *templates.current()->find("gemm");
  auto records = [&](std::int64_t first, size_t n) {
    std::vector<WinnerRecord> out;
    for (size_t i = 0; i < n; ++i) {
      auto w = testing::winner(
          Problem{
              "gemm", "bf16", "bf16", "rc", {{"M", first + std::int64_t(i)}, {"N", 64}, {"K", 64}}},
          5.0);
      w.ranked.resize(1);
      w.ranked[0].template_hash = gemm.hash;
      w.ranked[0].params = *heuristic_config(gemm, w.problem, DeviceLimits{});
      w.validators.nvrtc = "13.0";
      out.push_back(std::move(w));
    }
    return render_table(out, TableFormat::json);
  };
  auto table_files = [&] { return testing::table_files(dir / "db"); };
  const size_t at_start = table_files();
  auto small = catalog.import(records(1, 10), "small");
  ASSERT_TRUE(small && small->applied());
  EXPECT_EQ(table_files(), at_start);
  EXPECT_EQ(small->written.size(), 10u) << "handed back (the fleet's merge reads them)";
  auto large = catalog.import(records(100, Catalog::k_flush_after_records), "large",
                              Catalog::Written::moved_to_index);
  ASSERT_TRUE(large && large->applied());
  EXPECT_EQ(large->added, Catalog::k_flush_after_records);
  EXPECT_TRUE(large->written.empty()) << "moved into the index";
  EXPECT_EQ(table_files(), at_start + 1) << "both imports' records, in one file";
  EXPECT_EQ(index.size(), 10 + Catalog::k_flush_after_records);
  EXPECT_TRUE(
      index.exact(testing::h200().id(),
                  Problem{"gemm", "bf16", "bf16", "rc", {{"M", 100}, {"N", 64}, {"K", 64}}}));
}

}  // namespace
}  // namespace ktune
