// The whole tuning pipeline without a GPU: real templates compiled by NVRTC, a real TrialRunner
// and WorkerProcess, and a fake worker process that crashes, hangs or exits on cue.
#include "tuner/tuning_job.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>

#include "store/mem_store.h"
#include "tuner/strategy/registry.h"

namespace ktune {
namespace {

const std::string k_test_templates = std::string(KTUNE_SOURCE_DIR) + "/tests/data/templates";
const std::string k_fake_worker = std::string(KTUNE_BINARY_DIR) + "/tests/fake-worker";

// The fake worker's log of measured trials (FAKE_WORKER_LOG), for one test. Workers started
// while it exists inherit the variable.
class WorkerLog {
 public:
  explicit WorkerLog(const std::string& name)
      : m_path(::testing::TempDir() + "ktune_" + name + "_" + std::to_string(::getpid()) + ".log") {
    clear();
    ::setenv("FAKE_WORKER_LOG", m_path.c_str(), 1);
  }
  ~WorkerLog() {
    ::unsetenv("FAKE_WORKER_LOG");
    std::remove(m_path.c_str());
  }
  void clear() { std::remove(m_path.c_str()); }
  // One line per measured trial: the config's params, e.g. "MODE=0,THREADS=128".
  std::vector<std::string> lines() const {
    std::vector<std::string> out;
    std::ifstream in(m_path);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }

 private:
  std::string m_path;
};

// Trial records in the store that carry an outcome (not in flight).
size_t final_trials(Store& store) {
  auto trials = scan_trials(store);
  EXPECT_TRUE(trials);
  size_t n = 0;
  if (trials)
    for (const auto& t : *trials) n += t.outcome != Outcome::in_flight;
  return n;
}

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
  // The winner carries the clock and power read while its own trial ran, and the clock counted
  // after it.
  EXPECT_EQ((*stored)->sm_clock_mhz, 1400 + 128);
  EXPECT_DOUBLE_EQ((*stored)->power_w, 300.0 + 128 / 10.0);
  EXPECT_EQ((*stored)->sm_clock_counted_mhz, 1390 + 128);
  EXPECT_EQ((*stored)->mem_clock_mhz, 2619);
  // Every trial is recorded, a timed one with the clock and power the worker read while timing it;
  // crashing and hanging configs are blocklisted.
  auto trials = scan_trials(m_store);
  ASSERT_TRUE(trials);
  EXPECT_EQ(trials->size(), 10u);
  for (const auto& t : *trials) {
    const bool timed = t.outcome == Outcome::ok;
    EXPECT_EQ(t.sm_clock_mhz, timed ? 1400 + t.params.at("THREADS") : 0) << to_string(t.outcome);
    EXPECT_EQ(t.power_w, timed ? 300.0 + double(t.params.at("THREADS")) / 10.0 : 0.0);
    EXPECT_EQ(t.sm_clock_counted_mhz, timed ? 1390 + t.params.at("THREADS") : 0);
    EXPECT_EQ(t.mem_clock_mhz, timed ? 2619 : 0);
  }
  auto blocked = scan_blocklist(m_store);
  ASSERT_TRUE(blocked);
  EXPECT_EQ(blocked->size(), 6u);
  for (const auto& b : *blocked) EXPECT_NE(b.params.at("MODE"), 0);
}

// A kernel whose outputs are NaN/inf or never written is a wrong_result: its +inf reference error
// crosses the worker protocol and the store (as the largest double) without the worker taken for
// crashed, and
// the config is not blocklisted for every other shape.
TEST_F(TuningJobTest, NonFiniteOutputsAreAWrongResultNotACrash) {
  ::setenv("FAKE_WORKER_NONFINITE", "1", 1);
  TuningJob job(m_templates, m_compiler, &m_store, *m_runner, m_context);
  auto r = job.run(request(), nullptr);
  ::unsetenv("FAKE_WORKER_NONFINITE");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->stats.wrong_results, 2);
  EXPECT_EQ(r->stats.respawns, 4) << "2 crashes, 2 hangs; not the wrong results";
  auto trials = scan_trials(m_store);
  ASSERT_TRUE(trials) << trials.error().message << " (a stored +inf must read back)";
  size_t wrong = 0;
  for (const auto& t : *trials)
    if (t.params.at("MODE") == 4) {
      ++wrong;
      EXPECT_EQ(t.outcome, Outcome::wrong_result);
      EXPECT_TRUE(std::isinf(t.ref_error)) << t.ref_error;
      EXPECT_NE(t.message.find("never written"), std::string::npos) << t.message;
    }
  EXPECT_EQ(wrong, 2u);
  auto blocked = scan_blocklist(m_store);
  ASSERT_TRUE(blocked);
  for (const auto& b : *blocked)
    EXPECT_NE(b.params.at("MODE"), 4) << "wrong here, maybe not elsewhere";
  // A second job for the problem resumes from those trials (it reads every one back).
  TuningJob again(m_templates, m_compiler, &m_store, *m_runner, m_context);
  EXPECT_TRUE(again.run(request(), nullptr));
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

// A crash recorded before 2026-12-06 carries the template's hash of every byte (content_hash):
// the config is as blocked as under the kernel hash.
TEST_F(TuningJobTest, ConfigsBlocklistedUnderTheOldHashAreNotTriedAgain) {
  {
    TuningJob job(m_templates, m_compiler, &m_store, *m_runner, m_context);
    ASSERT_TRUE(job.run(request()));
  }
  auto blocked = scan_blocklist(m_store);
  ASSERT_TRUE(blocked);
  ASSERT_EQ(blocked->size(), 6u);
  MemStore old;
  ASSERT_TRUE(check_store_format(old, false));
  const KernelTemplate* fault = m_templates.find("fault");
  ASSERT_NE(fault->content_hash, fault->hash);
  for (BlockEntry b : *blocked) {
    b.template_hash = fault->content_hash;
    ASSERT_TRUE(put_block(old, b));
  }
  TuningJob again(m_templates, m_compiler, &old, *m_runner, m_context);
  auto r = again.run(request("random"));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->stats.candidates, 4u);
  EXPECT_EQ(r->stats.crashes + r->stats.timeouts, 0);
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

// After the heuristic's config and the requested ones, the template's other rules' configs
// (whatever their `when`, at most a quarter of the trials), then the strategy's own picks
// (tuner/seeds.h). The scale template has two rules: n < 4096 takes {128, 1, 1}; at n = 2^20 the
// second, {256, 4, 2}, fits.
TEST_F(TuningJobTest, OtherRulesConfigsAreMeasuredAfterTheOtherSeeds) {
  WorkerLog log("rule_seeds");
  auto order = [&](int budget) {
    log.clear();
    MemStore store;
    EXPECT_TRUE(check_store_format(store, false));
    TuningJob job(m_templates, m_compiler, &store, *m_runner, m_context);
    TuneRequest req = request();
    req.problem = Problem{"scale", "fp32", "fp32", "", {{"n", 1 << 20}}};
    req.budget = Budget{budget, 60, 0};
    req.seeds = {Params{{"THREADS", 512}, {"VEC", 2}, {"WAVES", 3}}};
    auto r = job.run(req);
    EXPECT_TRUE(r) << r.error().message;
    EXPECT_EQ(r ? r->stats.rule_seeds_queued : -1, budget >= 4 ? 1 : 0) << budget;
    return log.lines();
  };
  const auto eight = order(8);
  ASSERT_EQ(eight.size(), 8u);
  EXPECT_EQ(eight[0], "THREADS=256,VEC=4,WAVES=2") << "the heuristic's config first";
  EXPECT_EQ(eight[1], "THREADS=512,VEC=2,WAVES=3") << "then the requested one";
  EXPECT_EQ(eight[2], "THREADS=128,VEC=1,WAVES=1") << "then the other rule's";
  const auto three = order(3);  // a quarter of 3 trials is none
  ASSERT_EQ(three.size(), 3u);
  EXPECT_EQ(three[2], "THREADS=64,VEC=1,WAVES=1") << "exhaustive's first pick";
}

// A job cancelled after 3 trials, then resumed by a second job on the same store: the second
// measures exactly the configs the first did not (finalists loaded again for re-timing are not
// measurements), for every strategy. Each trial is in the store before progress reports it.
TEST_F(TuningJobTest, ResumedJobMeasuresOnlyWhatTheCancelledOneDidNot) {
  WorkerLog worker_log("resume");
  for (const std::string& s : strategy_names()) {
    MemStore store;
    ASSERT_TRUE(check_store_format(store, false));
    worker_log.clear();
    TuningJob job(m_templates, m_compiler, &store, *m_runner, m_context);
    auto req = request(s);
    int reported = 0;
    req.control.cancelled = [&] { return reported >= 3; };
    auto first = job.run(req, [&](const TuneProgress& p) {
      reported = p.trials;
      EXPECT_EQ(final_trials(store), size_t(p.trials)) << s << ": written as soon as known";
    });
    ASSERT_FALSE(first) << s;
    EXPECT_EQ(first.error().code, ErrorCode::cancelled) << s;
    auto recorded = scan_trials(store);
    ASSERT_TRUE(recorded);
    ASSERT_EQ(recorded->size(), 3u) << s;
    int blocked = 0;  // crashed or hung in the first job: not candidates of the second
    for (const auto& t : *recorded)
      blocked += t.outcome == Outcome::crash || t.outcome == Outcome::timeout;

    req.control = {};
    req.resume = true;
    std::vector<TuneProgress> progress;
    auto second = job.run(req, [&](const TuneProgress& p) { progress.push_back(p); });
    ASSERT_TRUE(second) << s << ": " << second.error().message;
    EXPECT_EQ(second->stats.reused, 3 - blocked) << s;
    EXPECT_EQ(second->stats.trials, 10 - blocked) << s;
    EXPECT_EQ(second->trials.size(), 7u) << s << ": only what the first job did not measure";
    ASSERT_FALSE(progress.empty());
    EXPECT_EQ(progress.front().reused, 3 - blocked) << s << ": reported once read back";
    EXPECT_EQ(progress.back().trials, 10 - blocked) << s;

    const auto lines = worker_log.lines();
    const std::set<std::string> measured(lines.begin(), lines.end());
    EXPECT_EQ(measured.size(), lines.size()) << s << ": a config measured twice";
    EXPECT_EQ(measured, (std::set<std::string>{"MODE=0,THREADS=128", "MODE=0,THREADS=256",
                                               "MODE=3,THREADS=128", "MODE=3,THREADS=256"}))
        << s;
    EXPECT_EQ(final_trials(store), 10u) << s;
    const RankedConfig& best = second->winner.ranked.front();
    EXPECT_EQ(best.params, (Params{{"MODE", 0}, {"THREADS", 128}})) << s;
    EXPECT_EQ(second->winner.ranked.size(), 2u) << s << ": reused finalists are re-timed too";
  }
}

// Records still in flight (the process died mid-trial) and records of another template version
// are measured again; final records of the current one are not.
TEST_F(TuningJobTest, ResumeMeasuresInFlightAndStaleRecordsAgain) {
  WorkerLog worker_log("in_flight");
  const KernelTemplate* fault = m_templates.find("fault");
  ASSERT_NE(fault, nullptr);
  auto record = [&](std::int64_t threads, std::int64_t mode, Outcome outcome, std::string hash) {
    TrialRecord t;
    t.device = m_context.device;
    t.problem = request().problem;
    t.template_name = "fault";
    t.template_hash = std::move(hash);
    t.params = {{"MODE", mode}, {"THREADS", threads}};
    t.outcome = outcome;
    t.median_us = 20;
    if (outcome == Outcome::ok) t.timing_l2 = TimingL2::flushed;  // as this job times
    ASSERT_TRUE(m_store.put(Table::trials, t.key(), encode(t), Durability::buffered));
  };
  record(256, 0, Outcome::ok, fault->hash);
  // Written before 2026-12-06, under the hash of every byte: the same kernel, reused too.
  record(256, 3, Outcome::resource_error, fault->content_hash);
  record(128, 0, Outcome::in_flight, fault->hash);
  record(128, 1, Outcome::ok, "0000000000000000");

  TuningJob job(m_templates, m_compiler, &m_store, *m_runner, m_context);
  auto req = request();
  req.templates = {"fault"};
  req.resume = true;
  req.budget = Budget{4, 60, 0};  // 2 reused (the heuristic seed is one) + 2 measured
  auto r = job.run(req);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->stats.reused, 2);
  EXPECT_EQ(r->stats.trials, 4);
  EXPECT_EQ(r->stats.resource_errors, 1);
  std::set<Params> measured;
  for (const auto& t : r->trials) measured.insert(t.params);
  EXPECT_EQ(measured, (std::set<Params>{{{"MODE", 0}, {"THREADS", 128}},     // was in flight
                                        {{"MODE", 1}, {"THREADS", 128}}}));  // stale hash
  EXPECT_EQ(worker_log.lines(), std::vector<std::string>{"MODE=0,THREADS=128"});
  // The reused finalist (recorded at 20 us) was loaded again and re-timed with the other, which
  // was loaded again too (MODE=1 crashed the worker that measured it).
  ASSERT_EQ(r->winner.ranked.size(), 2u);
  EXPECT_EQ(r->winner.ranked[0].params, (Params{{"MODE", 0}, {"THREADS", 128}}));
  EXPECT_DOUBLE_EQ(r->winner.ranked[1].median_us, 12.56);
}

// A resumed job whose winner is a trial of the earlier run: the winner record carries the clocks
// and power recorded with that trial (it carried zeros: "not sampled").
TEST_F(TuningJobTest, AReusedWinnerCarriesTheClocksItsTrialRecorded) {
  TrialRecord t;
  t.device = m_context.device;
  t.problem = request().problem;
  t.template_name = "fault";
  t.template_hash = m_templates.find("fault")->hash;
  t.params = {{"MODE", 0}, {"THREADS", 128}};
  t.outcome = Outcome::ok;
  t.median_us = 5;
  t.timing_l2 = TimingL2::flushed;  // as this job times
  t.sm_clock_mhz = 1755;
  t.power_w = 612.5;
  t.sm_clock_counted_mhz = 1740;
  t.mem_clock_mhz = 3201;
  ASSERT_TRUE(m_store.put(Table::trials, t.key(), encode(t), Durability::buffered));
  TuningJob job(m_templates, m_compiler, &m_store, *m_runner, m_context);
  auto req = request();
  req.templates = {"fault"};
  req.resume = true;
  req.budget = Budget{1, 60, 0};  // the reused trial is the budget: nothing else measured
  auto r = job.run(req);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->stats.reused, 1);
  ASSERT_EQ(r->winner.ranked.front().params, t.params);
  EXPECT_EQ(r->winner.sm_clock_mhz, 1755);
  EXPECT_DOUBLE_EQ(r->winner.power_w, 612.5);
  EXPECT_EQ(r->winner.sm_clock_counted_mhz, 1740);
  EXPECT_EQ(r->winner.mem_clock_mhz, 3201) << "it read 0 before TrialRecord kept the memory clock";
}

// A time recorded another way (tuning.timing_l2 changed between the runs, or a record from before
// trials said) does not rank against this job's: measured again. A failure stands either way.
// The job's own trials and its winner say how they were timed.
TEST_F(TuningJobTest, ResumeMeasuresTrialsTimedAnotherWayAgain) {
  WorkerLog worker_log("timing");
  const KernelTemplate* fault = m_templates.find("fault");
  ASSERT_NE(fault, nullptr);
  auto record = [&](std::int64_t threads, std::int64_t mode, Outcome outcome, TimingL2 timing) {
    TrialRecord t;
    t.device = m_context.device;
    t.problem = request().problem;
    t.template_name = "fault";
    t.template_hash = fault->hash;
    t.params = {{"MODE", mode}, {"THREADS", threads}};
    t.outcome = outcome;
    t.median_us = 5;  // faster than anything the fake worker measures: it would win if reused
    t.timing_l2 = timing;
    ASSERT_TRUE(m_store.put(Table::trials, t.key(), encode(t), Durability::buffered));
  };
  record(256, 0, Outcome::ok, TimingL2::rotated);
  record(128, 0, Outcome::ok, TimingL2::unknown);
  record(256, 3, Outcome::resource_error, TimingL2::unknown);

  TuningJob job(m_templates, m_compiler, &m_store, *m_runner, m_context);
  auto req = request();
  req.templates = {"fault"};
  req.resume = true;
  ASSERT_EQ(req.timing.l2, TimingL2::flushed);
  auto r = job.run(req);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->stats.reused, 1) << "only the resource error";
  const auto lines = worker_log.lines();
  const std::set<std::string> measured(lines.begin(), lines.end());
  EXPECT_TRUE(measured.count("MODE=0,THREADS=256"));
  EXPECT_TRUE(measured.count("MODE=0,THREADS=128"));
  EXPECT_FALSE(measured.count("MODE=3,THREADS=256"));
  EXPECT_EQ(r->winner.timing_l2, TimingL2::flushed);
  EXPECT_DOUBLE_EQ(r->winner.ranked.front().median_us, 11.28) << "measured, not the 5 us record";
  auto stored = get_winner(m_store, m_context.device, req.problem);
  ASSERT_TRUE(stored && *stored);
  EXPECT_EQ((*stored)->timing_l2, TimingL2::flushed);
  auto trials = scan_trials(m_store);
  ASSERT_TRUE(trials);
  for (const auto& t : *trials)
    EXPECT_EQ(t.timing_l2, t.outcome == Outcome::ok ? TimingL2::flushed : TimingL2::unknown)
        << params_to_string(t.params) << " " << to_string(t.outcome);
}

// The GPU is refused before the 3rd measurement: the job stops there, with ErrorCode::cancelled,
// or, with finish_on_cancel, declares a winner from what it measured without re-timing.
TEST_F(TuningJobTest, RefusedGpuStopsTheJob) {
  WorkerLog worker_log("acquire");
  for (bool finish : {false, true}) {
    MemStore store;
    ASSERT_TRUE(check_store_format(store, false));
    worker_log.clear();
    TuningJob job(m_templates, m_compiler, &store, *m_runner, m_context);
    auto req = request();  // exhaustive: MODE=0 THREADS=256 (seed), MODE=0 THREADS=128, ...
    bool ours = true;
    req.control.acquire_gpu = [&] { return ours; };
    req.control.finish_on_cancel = finish;
    auto r = job.run(req, [&](const TuneProgress& p) { ours = p.trials < 2; });
    EXPECT_EQ(worker_log.lines().size(), 2u) << finish;
    EXPECT_EQ(scan_trials(store)->size(), 2u) << finish << ": nothing left in flight";
    if (!finish) {
      ASSERT_FALSE(r);
      EXPECT_EQ(r.error().code, ErrorCode::cancelled);
      continue;
    }
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->stats.trials, 2);
    ASSERT_EQ(r->winner.ranked.size(), 2u);
    EXPECT_EQ(r->winner.ranked.front().params, (Params{{"MODE", 0}, {"THREADS", 128}}));
  }
}

// Foreign work touches the GPU while the 2nd trial is measured (the disturbance counter follows
// the fake worker's measurements past the first): that trial is measured again, and its record is
// the retake's.
TEST_F(TuningJobTest, DisturbedMeasurementIsTakenAgain) {
  WorkerLog worker_log("disturb");
  TuningJob job(m_templates, m_compiler, &m_store, *m_runner, m_context);
  auto req = request();
  req.budget = Budget{2, 60, 0};
  req.control.disturbance = [&] { return std::uint64_t(worker_log.lines().size() >= 2); };
  auto r = job.run(req);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->stats.trials, 2);
  EXPECT_EQ(r->stats.retaken, 1);
  EXPECT_EQ(
      worker_log.lines(),
      (std::vector<std::string>{"MODE=0,THREADS=256", "MODE=0,THREADS=128", "MODE=0,THREADS=128"}));
  ASSERT_EQ(r->trials.size(), 2u);
  EXPECT_EQ(r->trials[1].message, "fake measurement 3");
  auto stored = scan_trials(m_store);
  ASSERT_TRUE(stored);
  for (const auto& t : *stored) {
    if (t.params.at("THREADS") == 128) {
      EXPECT_EQ(t.message, "fake measurement 3");
    }
  }
}

// A GPU that is never left alone: each measurement is retaken 3 times, then kept.
TEST_F(TuningJobTest, RetakesStopAfterThree) {
  WorkerLog worker_log("busy");
  TuningJob job(m_templates, m_compiler, &m_store, *m_runner, m_context);
  auto req = request();
  req.budget = Budget{2, 60, 0};
  std::uint64_t foreign = 0;
  req.control.disturbance = [&] { return foreign++; };
  auto r = job.run(req);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->stats.trials, 2);
  EXPECT_EQ(worker_log.lines().size(), 8u);
  EXPECT_EQ(r->stats.retaken, 2 * 3 + 3) << "both trials and the finalists' re-timing";
  EXPECT_EQ(r->winner.ranked.front().params, (Params{{"MODE", 0}, {"THREADS", 128}}));
}

// A persistent grid (launch.grid reads max_active_clusters) is sized by what the worker says fits
// for the compiled kernel, and the cluster dims travel with the launch; a config of which no
// cluster fits is a resource_error, not a launch.
TEST_F(TuningJobTest, PersistentGridsUseTheWorkersOccupancyAndClustersTravel) {
  WorkerLog worker_log("occupancy");
  ::setenv("FAKE_WORKER_LOG_LAUNCH", "1", 1);
  ::setenv("FAKE_WORKER_CLUSTERS", "7", 1);
  TuneRequest req = request();
  req.problem = Problem{"tma_copy", "fp32", "fp32", "", {{"rows", 1000}, {"cols", 776}}};
  TuningJob job(m_templates, m_compiler, &m_store, *m_runner, m_context);
  auto r = job.run(req);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->stats.trials, 8);
  std::set<std::string> lines;
  for (const auto& l : worker_log.lines()) lines.insert(l);
  // 32-row boxes: 800 tiles; 8-row: 3125 (in 1563 pairs).
  for (const char* want : {"BOX_R=32,CLUSTER=1,PERSISTENT=1 grid=7,1,1 cluster=1,1,1",
                           "BOX_R=32,CLUSTER=2,PERSISTENT=1 grid=14,1,1 cluster=2,1,1",
                           "BOX_R=8,CLUSTER=2,PERSISTENT=1 grid=14,1,1 cluster=2,1,1",
                           "BOX_R=32,CLUSTER=1,PERSISTENT=0 grid=800,1,1 cluster=1,1,1",
                           "BOX_R=8,CLUSTER=2,PERSISTENT=0 grid=3126,1,1 cluster=2,1,1"})
    EXPECT_TRUE(lines.count(want)) << want;

  // Nothing fits (a cluster the GPU cannot place): every config is refused before its launch.
  ::setenv("FAKE_WORKER_CLUSTERS", "0", 1);
  m_runner = std::make_unique<TrialRunner>(RunnerOptions{.worker_binary = k_fake_worker});
  MemStore store;
  TuningJob none_fit(m_templates, m_compiler, &store, *m_runner, m_context);
  auto n = none_fit.run(req);
  ::unsetenv("FAKE_WORKER_CLUSTERS");
  ::unsetenv("FAKE_WORKER_LOG_LAUNCH");
  ASSERT_FALSE(n);
  EXPECT_NE(n.error().message.find("8 resource errors"), std::string::npos) << n.error().message;
  auto trials = scan_trials(store);
  ASSERT_TRUE(trials);
  ASSERT_EQ(trials->size(), 8u);
  for (const auto& t : *trials) {
    EXPECT_EQ(t.outcome, Outcome::resource_error);
    EXPECT_EQ(t.message, "occupancy: no cluster fits");
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
