// Strategies against the exhaustive GEMM sweep recorded on the H200 (bench/data/), no GPU: the
// model-guided strategy must reach 98 % of the sweep's best within 10 % of its trials.
#include "tuner/replay.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "config/config.h"
#include "tuner/strategy/registry.h"

namespace ktune {
namespace {

const std::string k_sweep = std::string(KTUNE_SOURCE_DIR) + "/bench/data/h200_gemm_sweep.json";

class ReplayTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    s_templates = new TemplateRegistry(TemplateRegistry::load({builtin_template_dir()}));
    auto p = load_replay(k_sweep, *s_templates);
    ASSERT_TRUE(p) << p.error().message;
    s_problems = new std::vector<ReplayProblem>(std::move(*p));
  }
  static void TearDownTestSuite() {
    delete s_problems;
    delete s_templates;
  }
  static TemplateRegistry* s_templates;
  static std::vector<ReplayProblem>* s_problems;
};
TemplateRegistry* ReplayTest::s_templates = nullptr;
std::vector<ReplayProblem>* ReplayTest::s_problems = nullptr;

// Median over seeds of the fraction of the best reached within `trials`.
double median_fraction(const ReplayProblem& p, const char* strategy, size_t trials, int seeds) {
  std::vector<double> f;
  for (int s = 1; s <= seeds; ++s)
    f.push_back(replay(p, strategy, trials, std::uint64_t(s))->at(trials));
  std::sort(f.begin(), f.end());
  return f[f.size() / 2];
}

TEST_F(ReplayTest, TheRecordedSweepIsLargeEnough) {
  size_t configs = 0;
  for (const auto& p : *s_problems) {
    configs += p.candidates.size();
    EXPECT_GT(p.best, 0) << p.problem.key();
    EXPECT_TRUE(std::isfinite(p.best));
  }
  EXPECT_GE(s_problems->size(), 2u);
  EXPECT_GE(configs, 1000u);
}

TEST_F(ReplayTest, ExhaustiveFindsTheBestAtTheEnd) {
  for (const auto& p : *s_problems) {
    auto c = replay(p, "exhaustive", p.candidates.size(), 1);
    ASSERT_TRUE(c);
    EXPECT_DOUBLE_EQ(c->fraction.back(), 1.0) << p.problem.key();
    EXPECT_EQ(c->fraction.size(), p.candidates.size());
  }
}

TEST_F(ReplayTest, ModelGuidedReaches98PercentWithin10PercentOfTrials) {
  for (const auto& p : *s_problems) {
    const size_t budget = std::max<size_t>(1, p.candidates.size() / 10);
    const double model = median_fraction(p, "model", budget, 7);
    const double random = median_fraction(p, "random", budget, 7);
    EXPECT_GE(model, 0.98) << p.problem.key() << " (" << p.candidates.size() << " configs, "
                           << budget << " trials)";
    RecordProperty(p.problem.key() + " model@10%", std::to_string(model));
    RecordProperty(p.problem.key() + " random@10%", std::to_string(random));
  }
}

TEST_F(ReplayTest, StrategiesNeverProposeTwice) {
  for (const std::string& s : strategy_names()) {
    const auto& p = s_problems->front();
    auto strategy = make_strategy(s, p.candidates, p.seeds, 3);
    ASSERT_TRUE(strategy);
    std::vector<bool> seen(p.candidates.size(), false);
    size_t total = 0;
    while (true) {
      auto batch = (*strategy)->propose(32);
      if (batch.empty()) break;
      std::vector<Observation> obs;
      for (size_t i : batch) {
        ASSERT_FALSE(seen[i]) << s << " proposed " << i << " twice";
        seen[i] = true;
        obs.push_back({i, p.value[i]});
      }
      (*strategy)->observe(obs);
      total += batch.size();
    }
    EXPECT_EQ(total, p.candidates.size()) << s << " covers the whole space when run to the end";
  }
}

}  // namespace
}  // namespace ktune
