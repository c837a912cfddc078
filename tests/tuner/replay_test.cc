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
    f.push_back(
        replay(p, strategy, {.max_trials = trials, .rng_seed = std::uint64_t(s)})->at(trials));
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
    auto c = replay(p, "exhaustive", {});
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

// Seeds given as params reach every strategy right after the heuristic config: seeding a shape
// with its own fastest config finds the best at the 2nd trial.
TEST_F(ReplayTest, SeedsAreProposedRightAfterTheHeuristic) {
  for (const auto& p : *s_problems)
    for (const std::string& s : strategy_names()) {
      auto c = replay(p, s, {.max_trials = 4, .seeds = fastest_configs(p, 1)});
      ASSERT_TRUE(c);
      EXPECT_LT(c->at(1), 1.0) << p.problem.key() << " " << s << ": the heuristic is not the best";
      EXPECT_DOUBLE_EQ(c->at(2), 1.0) << p.problem.key() << " " << s;
    }
}

// What the daemon does for a new shape: seed its job with the winners of the nearest tuned shape.
// On the two recorded shapes that does not pay (bench/NOTES.md, "Seeding from a neighbouring
// shape": their optima use different split-K, and the other shape's top 5 reach only 0.59-0.87 of
// this shape's best), so what is held here is the bound that does: for the ordered strategies,
// seeds that do not reach 98 % cost exactly their own trials and nothing more.
TEST_F(ReplayTest, NeighbourSeedsCostTheOrderedStrategiesAtMostTheirOwnTrials) {
  ASSERT_EQ(s_problems->size(), 2u);
  for (size_t a = 0; a < 2; ++a) {
    const ReplayProblem& p = (*s_problems)[a];
    const auto seeds = fastest_configs((*s_problems)[1 - a], 5);
    size_t landed = 0;
    for (const auto& params : seeds) landed += p.candidates.find_all(params).size();
    for (const char* s : {"exhaustive", "random"})
      for (std::uint64_t rng = 1; rng <= 5; ++rng) {
        const size_t cold = replay(p, s, {.rng_seed = rng})->trials_to(0.98);
        const size_t seeded = replay(p, s, {.rng_seed = rng, .seeds = seeds})->trials_to(0.98);
        EXPECT_LE(seeded, cold + landed) << p.problem.key() << " " << s << " seed " << rng;
      }
  }
}

TEST_F(ReplayTest, StrategiesNeverProposeTwice) {
  for (const std::string& s : strategy_names()) {
    const auto& p = s_problems->front();
    auto strategy = make_strategy(s, p.candidates, p.seeds.heuristic, 3);
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

// What a job seeds after the heuristic and the requested configs: the template's other rules'
// configs (tuner/seeds.h). On the recorded sweeps they cost the model-guided strategy at most
// their own trials on the way to 98 % of the best (median over rng seeds), and at 16x4096x4096,
// where a rule's config other than the heuristic's is within 98 % of the best, they reach it
// within their own count of trials (3 against 25 without them).
TEST_F(ReplayTest, RuleSeedsCostTheModelAtMostTheirOwnTrials) {
  constexpr size_t k_trials = 120;  // as the bench tables' jobs ran (the daemon's default: 256)
  for (const auto& p : *s_problems) {
    const size_t rules = order_seeds(p.seeds, p.candidates, {}, k_trials).rule_configs;
    EXPECT_GE(rules, 2u) << p.problem.key() << ": the gemm template's other rules that fit";
    std::vector<size_t> with, without;  // trials to 98 %; one past the run when never reached
    for (std::uint64_t rng = 1; rng <= 7; ++rng) {
      with.push_back(
          replay(p, "model", {.max_trials = k_trials, .rng_seed = rng})->trials_to(0.98));
      without.push_back(
          replay(p, "model",
                 {.max_trials = k_trials, .rng_seed = rng, .rule_seeds = RuleSeeds::left_out})
              ->trials_to(0.98));
    }
    std::sort(with.begin(), with.end());
    std::sort(without.begin(), without.end());
    EXPECT_LE(with[3], without[3] + rules) << p.problem.key();
    if (p.problem.dim("N") == 4096) {
      EXPECT_LE(with[3], 1 + rules) << "16x4096x4096: a rule's config is within 98 % of the best";
    }
    RecordProperty(p.problem.key() + " model to 98% with / without its rule seeds",
                   std::to_string(with[3]) + " / " + std::to_string(without[3]) + " (" +
                       std::to_string(rules) + " rule configs)");
  }
}

}  // namespace
}  // namespace ktune
