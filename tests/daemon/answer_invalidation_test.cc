// Targeted invalidation of LookupService's answer caches (issue 14): a committed winner drops only
// the cached answers it could change — its family within the nearest radius — so a node that
// merges the fleet's winners keeps its answers warm. Changes without a precise extent (a template
// swap, an import larger than the change log) still drop everything.
#include <gtest/gtest.h>

#include <filesystem>

#include "daemon/lookups.h"
#include "daemon/ops/ops.h"
#include "templates/space.h"
#include "tests/fakes/daemon_parts.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

namespace fs = std::filesystem;
using protocol::Json;
using Cold = LookupService::Cold;

// The value of one sample in Prometheus text, or -1 when absent.
double sample(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + series.size() + 2));
}

class AnswerInvalidationTest : public ::testing::Test {
 protected:
  AnswerInvalidationTest() : m_templates(TemplateRegistry::load({builtin_template_dir()})) {
    DaemonConfig config = default_config();
    config.nearest_radius = 2.0;
    NodeIdentity node;
    node.driver = "none";
    node.nvrtc = "13.0";
    node.node_id = "test-node";
    node.gpu_error = "no GPU in tests";
    m_parts = std::make_unique<testing::DaemonParts>(config, m_templates, node);
    // The device class is known to the index: its first winner would clear the change log.
    m_parts->index.upsert(fresh(gemm(8, 8, 8, "fp16"), 1));
  }
  LookupService& lookups() { return m_parts->lookups; }

  static Problem gemm(std::int64_t m, std::int64_t n, std::int64_t k,
                      const std::string& dtype = "bf16") {
    return Problem{"gemm", dtype, dtype, "rc", {{"M", m}, {"N", n}, {"K", k}}};
  }
  // A fresh winner for `p`, measured with the installed gemm template.
  WinnerRecord fresh(const Problem& p, double us) const {
    WinnerRecord w = testing::winner(p, us);
    w.ranked.resize(1);
    w.ranked[0].template_hash = m_templates.find("gemm")->hash;
    w.ranked[0].params = *heuristic_config(*m_templates.find("gemm"), p, DeviceLimits{});
    w.validators.nvrtc = "13.0";
    return w;
  }
  void commit(const Problem& p, double us = 50) {
    auto ok = m_parts->catalog.commit(fresh(p, us), "test");
    ASSERT_TRUE(ok) << ok.error().message;
    ASSERT_TRUE(*ok);
  }
  // A lookup line of the shape clients send.
  static std::string line_for(const Problem& p) {
    return R"({"v":1,"id":1,"op":"lookup","device":")" + testing::h200().id() +
           R"(","problem":{"op":"gemm","dtype":")" + p.dtype + R"(","layout":"rc","dims":{"M":)" +
           std::to_string(p.dim("M")) + R"(,"N":)" + std::to_string(p.dim("N")) + R"(,"K":)" +
           std::to_string(p.dim("K")) + "}}}";
  }
  std::shared_ptr<const LookupService::Answer> ask(const Problem& p, Cold cold) {
    const std::string line = line_for(p);
    auto a = lookups().lookup(Json::parse(line), cold, line);
    EXPECT_TRUE(a) << a.error().message;
    return a ? *a : nullptr;
  }
  static std::string provenance(const LookupService::Answer& a) {
    return Json::parse(a.result)["entries"][0]["provenance"];
  }
  double metric(const std::string& series) {
    return sample(op_metrics_gauges(m_parts->ctx), series);
  }

  TemplateRegistry m_templates;
  std::unique_ptr<testing::DaemonParts> m_parts;
  const Problem m_a = gemm(512, 4096, 4096);
};

// The fleet case: winners of other families, and of far shapes of A's family, keep A's answer.
TEST_F(AnswerInvalidationTest, UnrelatedWinnersKeepTheCachedAnswer) {
  const auto first = ask(m_a, Cold::build);
  ASSERT_TRUE(first);
  EXPECT_EQ(provenance(*first), "heuristic");
  ASSERT_TRUE(lookups().fast_reply(line_for(m_a)));
  const double hits0 = metric(R"(ktune_answer_cache_hits_total{cache="answers"})");
  const auto g0 = m_parts->index.generation();

  commit(gemm(512, 4096, 4096, "fp16"));  // another family (dtype), same dims
  commit(gemm(512, 512, 512));            // A's family, log2 distance 6 > radius 2
  commit(gemm(512, 4096, 65536));         // distance 4
  ASSERT_EQ(m_parts->index.generation(), g0 + 3);

  const auto again = ask(m_a, Cold::refuse);
  ASSERT_TRUE(again) << "served from the cache, not refused as cold";
  EXPECT_EQ(again.get(), first.get()) << "the very answer cached";
  EXPECT_EQ(again->result, first->result);
  auto s = lookups().cache_stats();
  EXPECT_EQ(s.built, 1u);
  EXPECT_EQ(s.kept, 1u) << "checked once against the three changes";
  EXPECT_EQ(metric(R"(ktune_answer_cache_hits_total{cache="answers"})"), hits0 + 1);
  EXPECT_EQ(metric("ktune_answers_kept_total"), 1);
  // Marked valid through the current generation: the next hit is no check at all.
  ASSERT_TRUE(ask(m_a, Cold::refuse));
  EXPECT_EQ(lookups().cache_stats().kept, 1u);
  // The request line too (one more unrelated change, so the line's own check runs).
  commit(gemm(8, 8, 8));
  auto reply = lookups().fast_reply(line_for(m_a));
  ASSERT_TRUE(reply);
  EXPECT_EQ(Json::parse(*reply)["result"].dump(), Json::parse(first->result).dump());
  s = lookups().cache_stats();
  EXPECT_EQ(s.built, 1u);
  EXPECT_EQ(s.kept, 2u);
}

// A winner that becomes A's nearest shape, then one for A itself: each changes the answer.
TEST_F(AnswerInvalidationTest, AWinnerNearOrAtTheShapeChangesItsAnswer) {
  ASSERT_TRUE(ask(m_a, Cold::build));
  // Distance 1: A's nearest now (a smaller neighbour: its config runs more blocks at A, so it is
  // listed first; a larger one's might idle SMs there and follow the heuristics).
  commit(gemm(256, 4096, 4096));
  EXPECT_FALSE(lookups().fast_reply(line_for(m_a)));
  EXPECT_FALSE(ask(m_a, Cold::refuse)) << "the heuristic answer is no longer valid";
  const auto near = ask(m_a, Cold::build);
  ASSERT_TRUE(near);
  const Json entry = Json::parse(near->result)["entries"][0];
  EXPECT_EQ(entry["provenance"], "nearest");
  EXPECT_EQ(entry["from"], gemm(256, 4096, 4096).key());
  EXPECT_TRUE(near->miss);

  commit(m_a);  // exact now
  EXPECT_FALSE(ask(m_a, Cold::refuse));
  const auto exact = ask(m_a, Cold::build);
  ASSERT_TRUE(exact);
  EXPECT_EQ(provenance(*exact), "exact");
  EXPECT_FALSE(exact->miss);
  // A better record under the same key replaces it: the exact answer changes again.
  commit(m_a, 10);
  EXPECT_FALSE(ask(m_a, Cold::refuse));
  const auto better = ask(m_a, Cold::build);
  ASSERT_TRUE(better);
  EXPECT_EQ(Json::parse(better->result)["entries"][0]["median_us"], 10.0);
  EXPECT_EQ(lookups().cache_stats().built, 4u);
  EXPECT_EQ(lookups().cache_stats().kept, 0u);
}

// An import within the log is checked record by record; one larger than the log drops everything.
TEST_F(AnswerInvalidationTest, AnImportLargerThanTheLogDropsEveryAnswer) {
  ASSERT_TRUE(ask(m_a, Cold::build));
  std::vector<WinnerRecord> small;
  for (int m = 1; m <= 8; ++m) small.push_back(fresh(gemm(m, 8, 8, "fp16"), 5));
  m_parts->index.upsert(std::move(small));
  EXPECT_TRUE(ask(m_a, Cold::refuse)) << "eight unrelated records";
  std::vector<WinnerRecord> bulk;
  for (size_t k = 1; k <= WinnerIndex::k_change_log + 1; ++k)
    bulk.push_back(fresh(gemm(16, 16, std::int64_t(k) * 8, "fp16"), 5));
  m_parts->index.upsert(std::move(bulk));
  EXPECT_FALSE(lookups().fast_reply(line_for(m_a)));
  EXPECT_FALSE(ask(m_a, Cold::refuse)) << "not vouched for: the import was not logged";
  EXPECT_TRUE(ask(m_a, Cold::build));
  EXPECT_EQ(lookups().cache_stats().built, 2u);
}

// A template reload can change any answer and how any line is read: everything is dropped.
TEST_F(AnswerInvalidationTest, ATemplateReloadDropsEveryAnswer) {
  const auto before = ask(m_a, Cold::build);
  ASSERT_TRUE(before);
  ASSERT_TRUE(lookups().fast_reply(line_for(m_a)));
  testing::TempDir dir;
  for (const char* name : {"gemm", "common"})
    fs::copy(std::string(KTUNE_SOURCE_DIR) + "/templates/" + name, dir.path() + "/" + name,
             fs::copy_options::recursive);
  auto changes = m_parts->catalog.replace_templates(TemplateRegistry::load({dir.path()}));
  ASSERT_TRUE(changes) << changes.error().message;
  ASSERT_FALSE(changes->empty()) << "the other templates were removed";
  EXPECT_FALSE(lookups().fast_reply(line_for(m_a)));
  EXPECT_FALSE(ask(m_a, Cold::refuse));
  const auto after = ask(m_a, Cold::build);
  ASSERT_TRUE(after);
  EXPECT_NE(after.get(), before.get());
  EXPECT_EQ(lookups().cache_stats().kept, 0u);
}

// The race the generation guards: a winner committed while A's answer is being built. The answer
// is cached at the generation read before the build, so a change during it counts as after it:
// an unrelated one keeps the answer, one that touches A has it built again.
TEST_F(AnswerInvalidationTest, AWinnerCommittedDuringTheBuildIsNotMissed) {
  int builds = 0;
  lookups().set_build_observer({.on_build =
                                    [&](const std::string&) {
                                      ++builds;
                                      if (builds == 1)
                                        commit(gemm(4096, 4096, 4096, "fp16"));  // another family
                                      if (builds == 2) commit(m_a);              // A itself
                                    },
                                .on_join = {}});
  ASSERT_TRUE(ask(m_a, Cold::build));
  EXPECT_TRUE(ask(m_a, Cold::refuse)) << "the change during the build was to another family";
  commit(gemm(1024, 4096, 4096));  // near A: built again, and A's own winner lands meanwhile
  EXPECT_FALSE(ask(m_a, Cold::refuse));
  ASSERT_TRUE(ask(m_a, Cold::build));
  EXPECT_EQ(builds, 2);
  EXPECT_FALSE(ask(m_a, Cold::refuse))
      << "built while A's winner was committed: not trusted, whatever the build read";
  const auto rebuilt = ask(m_a, Cold::build);
  ASSERT_TRUE(rebuilt);
  EXPECT_EQ(provenance(*rebuilt), "exact");
  EXPECT_EQ(builds, 3);
  EXPECT_TRUE(ask(m_a, Cold::refuse)) << "cached at a generation after every change";
  EXPECT_EQ(lookups().cache_stats().kept, 1u);
  lookups().set_build_observer({});
}

}  // namespace
}  // namespace ktune
