// The whole tuning pipeline without a GPU: real templates compiled by NVRTC, a real TrialRunner
// and WorkerProcess, and a fake worker process that crashes, hangs or exits on cue.
#include "tuner/tuning_job.h"

#include <gtest/gtest.h>

#include <map>

#include "store/mem_store.h"
#include "tuner/strategy/registry.h"

namespace ktune {
namespace {

const std::string k_test_templates = std::string(KTUNE_SOURCE_DIR) + "/tests/data/templates";
const std::string k_fake_worker = std::string(KTUNE_BINARY_DIR) + "/tests/fake-worker";

class TuningJobTest : public ::testing::Test {
 protected:
  TuningJobTest()
      : m_templates(TemplateRegistry::load({k_test_templates})),
        m_compiler({.threads = 2, .cache = &m_store}) {
    EXPECT_TRUE(check_store_format(m_store, false));
    RunnerOptions ro;
    ro.worker_binary = k_fake_worker;
    ro.trial_timeout_ms = 800;
    m_runner = std::make_unique<TrialRunner>(ro);
    m_context = TuneContext{DeviceClass{"Fake GPU", 90, 132, 80}, DeviceLimits{}, "580.0",
                            Compiler::nvrtc_version(), "test"};
  }
  TuneRequest request(const std::string& strategy = "exhaustive") {
    TuneRequest r;
    r.problem = Problem{"fault", "fp32", "fp32", "", {{"n", 4096}}};
    r.strategy = strategy;
    r.budget = Budget{0, 60, 0};
    return r;
  }

  MemStore m_store;
  TemplateRegistry m_templates;
  Compiler m_compiler;
  std::unique_ptr<TrialRunner> m_runner;
  TuneContext m_context;
};

TEST_F(TuningJobTest, CrashesHangsAndExitsAreOutcomesAndTheRightConfigWins) {
  TuningJob job(m_templates, m_compiler, &m_store, *m_runner, m_context);
  std::vector<TuneProgress> progress;
  auto r = job.run(request(), [&](const TuneProgress& p) { progress.push_back(p); });
  ASSERT_TRUE(r) << r.error().message;
  std::map<std::int64_t, std::vector<Outcome>> by_mode;
  for (const auto& t : r->trials) by_mode[t.params.at("MODE")].push_back(t.outcome);
  EXPECT_EQ(by_mode[0], (std::vector<Outcome>{Outcome::ok, Outcome::ok}));
  EXPECT_EQ(by_mode[1], (std::vector<Outcome>{Outcome::crash, Outcome::crash}));
  EXPECT_EQ(by_mode[2], (std::vector<Outcome>{Outcome::timeout, Outcome::timeout}));
  EXPECT_EQ(by_mode[3], (std::vector<Outcome>{Outcome::resource_error, Outcome::resource_error}));
  EXPECT_EQ(by_mode[4], (std::vector<Outcome>{Outcome::crash, Outcome::crash}));
  EXPECT_EQ(r->stats.trials, 10);
  EXPECT_EQ(r->stats.respawns, 6);  // 2 crashes, 2 hangs, 2 exits
  const RankedConfig& best = r->winner.ranked.front();
  EXPECT_EQ(best.params.at("MODE"), 0);
  EXPECT_EQ(best.params.at("THREADS"), 128);
  EXPECT_DOUBLE_EQ(best.median_us, 11.28);
  ASSERT_EQ(r->winner.ranked.size(), 2u);
  EXPECT_GT(best.gbps, 0);
  // Progress was reported after every trial, and the winner is in the store.
  ASSERT_EQ(progress.size(), 10u);
  EXPECT_EQ(progress.back().trials, 10);
  EXPECT_EQ(progress.back().ok, 2);
  auto stored = get_winner(m_store, m_context.device, request().problem);
  ASSERT_TRUE(stored && *stored);
  EXPECT_EQ((*stored)->ranked.front().params, best.params);
  // Every trial is recorded; crashing and hanging configs are blocklisted.
  EXPECT_EQ(scan_trials(m_store)->size(), 10u);
  auto blocked = scan_blocklist(m_store);
  ASSERT_TRUE(blocked);
  EXPECT_EQ(blocked->size(), 6u);
  for (const auto& b : *blocked) EXPECT_NE(b.params.at("MODE"), 0);
}

TEST_F(TuningJobTest, BlocklistedConfigsAreNotTriedAgain) {
  {
    TuningJob job(m_templates, m_compiler, &m_store, *m_runner, m_context);
    ASSERT_TRUE(job.run(request()));
  }
  TuningJob again(m_templates, m_compiler, &m_store, *m_runner, m_context);
  auto r = again.run(request("random"));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->stats.candidates, 4u);
  EXPECT_EQ(r->stats.crashes + r->stats.timeouts, 0);
  EXPECT_EQ(r->stats.cache_hits, 4) << "the second compile of each config is a cubin cache hit";
}

TEST_F(TuningJobTest, BudgetStopsEveryStrategy) {
  for (const std::string& s : strategy_names()) {
    MemStore store;
    ASSERT_TRUE(check_store_format(store, false));
    TuningJob job(m_templates, m_compiler, &store, *m_runner, m_context);
    auto req = request(s);
    req.templates = {"fault"};
    req.budget = Budget{3, 60, 0};
    auto r = job.run(req);
    // The heuristic seed (MODE 0) comes first in every strategy, so there is always a winner.
    ASSERT_TRUE(r) << s << ": " << r.error().message;
    EXPECT_EQ(r->stats.trials, 3) << s;
  }
}

TEST_F(TuningJobTest, UnknownStrategyAndProblemAreErrors) {
  TuningJob job(m_templates, m_compiler, &m_store, *m_runner, m_context);
  auto req = request("genetic");
  EXPECT_FALSE(job.run(req));
  req = request();
  req.problem.op = "fft";
  EXPECT_FALSE(job.run(req));
}

}  // namespace
}  // namespace ktune
