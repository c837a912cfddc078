// Strategies on a small synthetic space: the registry agrees with config's list, observed
// indices are never proposed, and the random forest learns a simple function.
#include "tuner/strategy/registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "config/config.h"
#include "tuner/seeds.h"
#include "tuner/strategy/forest.h"

namespace ktune {
namespace {

// One template, params A (8 values) x B (8 values); time grows with the distance from (5, 2).
struct Grid {
  Grid() {
    std::vector<ParamDomain> domains = {{"A", {0, 1, 2, 3, 4, 5, 6, 7}, {}, 0},
                                        {"B", {0, 1, 2, 3, 4, 5, 6, 7}, {}, 0}};
    for (std::int64_t a = 0; a < 8; ++a)
      for (std::int64_t b = 0; b < 8; ++b) {
        candidates.add(nullptr, "grid", Params{{"A", a}, {"B", b}}, domains);
        value.push_back(10.0 + double((a - 5) * (a - 5) + (b - 2) * (b - 2)));
      }
  }
  CandidateSet candidates;
  std::vector<double> value;
};

TEST(StrategyRegistry, ConfigAcceptsExactlyTheRegisteredNames) {
  for (const std::string& name : strategy_names()) {
    DaemonConfig config = default_config();
    EXPECT_TRUE(apply_config_assignment(config, "tuning.strategy=" + name)) << name;
    EXPECT_EQ(config.strategy, name);
  }
  DaemonConfig config = default_config();
  EXPECT_FALSE(apply_config_assignment(config, "tuning.strategy=genetic"));
  // The key table's help lists the same names, in the same order.
  auto keys = config_keys();
  auto key = std::find_if(keys.begin(), keys.end(),
                          [](const ConfigKey& k) { return k.name == "tuning.strategy"; });
  ASSERT_NE(key, keys.end());
  EXPECT_EQ(key->help, strategy_choices());
}

TEST(StrategyRegistry, EveryRowBuildsItsNamedStrategy) {
  Grid g;
  for (const StrategyInfo& info : strategy_table()) {
    EXPECT_FALSE(info.description.empty()) << info.name;
    auto s = make_strategy(info.name, g.candidates, {}, 1);
    ASSERT_TRUE(s) << info.name;
    EXPECT_EQ((*s)->name(), info.name);
  }
  auto unknown = make_strategy("genetic", g.candidates, {}, 1);
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find(std::string("exhaustive, random")), std::string::npos);
}

// A resumed job tells the strategy what an earlier job measured before asking for anything.
TEST(Strategy, ObservedButNeverProposedIndicesAreNeverProposed) {
  Grid g;
  for (const std::string& name : strategy_names()) {
    const size_t seed = g.candidates.find("grid", {{"A", 0}, {"B", 0}});
    auto s = make_strategy(name, g.candidates, {seed, 9}, 7);
    ASSERT_TRUE(s);
    // The seed, the best config and its neighbours were measured by the earlier job.
    const std::set<size_t> earlier = {seed, g.candidates.find("grid", {{"A", 5}, {"B", 2}}),
                                      g.candidates.find("grid", {{"A", 4}, {"B", 2}}),
                                      g.candidates.find("grid", {{"A", 5}, {"B", 3}})};
    std::vector<Observation> told;
    for (size_t i : earlier) told.push_back({i, g.value[i]});
    (*s)->observe(told);
    std::set<size_t> proposed;
    while (true) {
      auto batch = (*s)->propose(5);
      if (batch.empty()) break;
      std::vector<Observation> obs;
      for (size_t i : batch) {
        EXPECT_FALSE(earlier.count(i)) << name << " proposed " << i << ", measured earlier";
        EXPECT_TRUE(proposed.insert(i).second) << name << " proposed " << i << " twice";
        obs.push_back({i, g.value[i]});
      }
      (*s)->observe(obs);
    }
    EXPECT_EQ(proposed.size() + earlier.size(), g.candidates.size()) << name;
  }
}

TEST(RandomForest, LearnsAStepAndIsUnsureRightAtIt) {
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  for (int i = 0; i <= 40; ++i) {
    const double f = double(i) / 40 * 0.5;  // data only in [0, 0.5]
    x.push_back({f});
    y.push_back(f < 0.25 ? 1.0 : 3.0);
  }
  std::mt19937_64 rng(1);
  RandomForest forest;
  EXPECT_TRUE(forest.empty());
  forest.fit(x, y, rng);
  ASSERT_FALSE(forest.empty());
  EXPECT_NEAR(forest.predict({0.1}).mean, 1.0, 0.2);
  EXPECT_NEAR(forest.predict({0.4}).mean, 3.0, 0.2);
  EXPECT_LT(forest.predict({0.1}).spread, 0.5);
  // Between the last sample of one level and the first of the other, the bootstrap samples
  // disagree on the threshold: the trees spread.
  EXPECT_GT(forest.predict({0.245}).spread, 0.3);
}

// The seed order of tuner/seeds.h: heuristic configs, then requested ones, then the rules'
// configs one template's after another's in turn, repeats skipped and not counted, at most a
// quarter of the trials. Indices here are the Grid's: 8 * A + B.
TEST(Seeds, RulesConfigsTakeTurnsAfterTheOtherSeedsUpToAQuarterOfTheTrials) {
  const Grid g;
  TemplateSeeds t;
  t.heuristic = {9};
  t.rules = {{9, 1, 2, 3}, {7, 8}};  // two "templates": the first's first rule is the heuristic's
  const std::vector<Params> requested = {Params{{"A", 0}, {"B", 2}}, Params{{"A", 9}, {"B", 9}}};
  SeedOrder o = order_seeds(t, g.candidates, requested, 16);
  EXPECT_EQ(o.seeds, (std::vector<size_t>{9, 2, 7, 1, 8, 3}))
      << "9 heuristic; 2 requested (the other is no candidate); then 9 (a repeat), 7, 1, 8, 3";
  EXPECT_EQ(o.rule_configs, 4u);
  o = order_seeds(t, g.candidates, requested, 8);  // a quarter: 2
  EXPECT_EQ(o.seeds, (std::vector<size_t>{9, 2, 7, 1}));
  EXPECT_EQ(o.rule_configs, 2u);
  o = order_seeds(t, g.candidates, {}, 16, RuleSeeds::left_out);
  // A job's trial budget: what it asks, at most every candidate; 0 asks for every candidate.
  EXPECT_EQ(trial_budget(8, 40), 8u);
  EXPECT_EQ(trial_budget(100, 40), 40u);
  EXPECT_EQ(trial_budget(0, 40), 40u);
  EXPECT_EQ(o.seeds, (std::vector<size_t>{9}));
  EXPECT_EQ(o.rule_configs, 0u);
  EXPECT_EQ(order_seeds(t, g.candidates, {}, 3).seeds, (std::vector<size_t>{9}))
      << "a quarter of 3 trials is none";
}

}  // namespace
}  // namespace ktune
