// The durable job queue over a MemStore: dedupe, priority order, cancel, restart, watchers.
#include "daemon/jobs/queue.h"

#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "store/mem_store.h"
#include "tests/fakes/eventually.h"
#include "tests/fakes/flaky_store.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

JobSpec spec(std::int64_t m, double priority, std::string origin = "miss") {
  JobSpec s;
  s.device = testing::h200();
  s.problem = testing::gemm_problem(m, 4096, 4096);
  s.origin = std::move(origin);
  s.priority = priority;
  s.strategy = "model";
  s.budget_trials = 10;
  s.budget_seconds = 60;
  return s;
}

class JobQueueTest : public ::testing::Test {
 protected:
  JobQueueTest() { EXPECT_TRUE(check_store_format(m_store, false)); }
  std::set<std::string> classes() const { return {testing::h200().id()}; }
  MemStore m_store;
};

TEST_F(JobQueueTest, SameProblemIsOneJobAndAnExplicitAskRaisesItsPriority) {
  JobQueue q(m_store, 10);
  auto a = q.submit(spec(64, 5));
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->created);
  auto b = q.submit(spec(64, 1e12, "request"));
  ASSERT_TRUE(b);
  EXPECT_FALSE(b->created);
  EXPECT_EQ(b->job.id, a->job.id);
  EXPECT_EQ(q.get(a->job.id)->priority, 1e12);
  EXPECT_EQ(q.list(10).size(), 1u);
}

TEST_F(JobQueueTest, ClaimsHighestPriorityThenOldest) {
  JobQueue q(m_store, 10);
  const auto low = q.submit(spec(16, 1))->job.id;
  const auto high_old = q.submit(spec(32, 100))->job.id;
  const auto high_new = q.submit(spec(64, 100))->job.id;
  const auto other_device = [&] {
    JobSpec s = spec(128, 1e9);
    s.device.name = "NVIDIA A100";
    return q.submit(s)->job.id;
  }();
  EXPECT_EQ(q.claim(classes(), 0)->id, high_old);
  EXPECT_EQ(q.claim(classes(), 0)->id, high_new);
  EXPECT_EQ(q.claim(classes(), 0)->id, low);
  EXPECT_EQ(q.get(other_device)->state, JobState::queued) << "no lane of its class claimed it";
  EXPECT_EQ(q.get(low)->state, JobState::running);
  EXPECT_EQ(q.get(low)->lane, 0);
}

TEST_F(JobQueueTest, QueueIsBounded) {
  JobQueue q(m_store, 2);
  ASSERT_TRUE(q.submit(spec(16, 1)));
  ASSERT_TRUE(q.submit(spec(32, 1)));
  auto third = q.submit(spec(64, 1));
  ASSERT_FALSE(third);
  EXPECT_EQ(third.error().code, ErrorCode::unavailable);
}

// A plan's jobs go in whole or not at all: three new keys do not fit beside two queued of four,
// so nothing is queued; a key already queued (or named twice) needs no room.
TEST_F(JobQueueTest, SubmitAllQueuesEveryJobOrNone) {
  JobQueue q(m_store, 4);
  ASSERT_TRUE(q.submit(spec(16, 1)));
  ASSERT_TRUE(q.submit(spec(32, 1)));
  auto refused = q.submit_all({spec(64, 1), spec(128, 1), spec(256, 1)});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::unavailable);
  EXPECT_NE(refused.error().message.find("nothing queued"), std::string::npos);
  EXPECT_EQ(q.list(10).size(), 2u) << "none of the plan's jobs was queued";
  auto fits = q.submit_all({spec(16, 1e9), spec(64, 1), spec(128, 1), spec(64, 1)});
  ASSERT_TRUE(fits) << fits.error().message;
  ASSERT_EQ(fits->size(), 4u);
  EXPECT_FALSE((*fits)[0].created) << "16 was queued already";
  EXPECT_TRUE((*fits)[1].created);
  EXPECT_TRUE((*fits)[2].created);
  EXPECT_FALSE((*fits)[3].created) << "64 twice is one job";
  EXPECT_EQ((*fits)[3].job.id, (*fits)[1].job.id);
  EXPECT_EQ(q.list(10).size(), 4u);
}

// A store that refuses the write fails submit, submit_all and a queued job's cancel with the
// store's error, not the queue's unavailable or not_found (the ops answer it `internal`).
TEST(JobQueueStoreTest, AFailedWriteIsTheStoresError) {
  testing::FlakyStore store;
  ASSERT_TRUE(check_store_format(store, false));
  JobQueue q(store, 10);
  auto queued = q.submit(spec(16, 1));
  ASSERT_TRUE(queued);
  store.failing = true;
  auto one = q.submit(spec(32, 1));
  ASSERT_FALSE(one);
  EXPECT_EQ(one.error().code, ErrorCode::io_error);
  auto all = q.submit_all({spec(64, 1)});
  ASSERT_FALSE(all);
  EXPECT_EQ(all.error().code, ErrorCode::io_error);
  auto cancelled = q.cancel(queued->job.id);
  ASSERT_FALSE(cancelled);
  EXPECT_EQ(cancelled.error().code, ErrorCode::io_error);
}

TEST_F(JobQueueTest, CancelQueuedAtOnceRunningAtItsNextTrial) {
  JobQueue q(m_store, 10);
  const auto queued = q.submit(spec(16, 1))->job.id;
  const auto running = q.submit(spec(32, 5))->job.id;
  ASSERT_EQ(q.claim(classes(), 0)->id, running);
  EXPECT_EQ(q.cancel(queued)->state, JobState::cancelled);
  EXPECT_EQ(q.cancel(running)->state, JobState::running);
  EXPECT_TRUE(q.cancel_requested(running));
  EXPECT_FALSE(q.cancel_requested(queued));
  ASSERT_TRUE(q.finish(running, JobState::cancelled, "cancelled by a client"));
  EXPECT_EQ(q.get(running)->state, JobState::cancelled);
  EXPECT_FALSE(q.cancel("999999999999"));
  // A finished key can be queued again.
  EXPECT_TRUE(q.submit(spec(32, 5))->created);
}

TEST_F(JobQueueTest, RunningJobsResumeAfterARestartAndIdsKeepGrowing) {
  std::string running, done;
  {
    JobQueue q(m_store, 10);
    running = q.submit(spec(16, 1))->job.id;
    done = q.submit(spec(32, 1))->job.id;
    ASSERT_TRUE(q.claim(classes(), 0));
    ASSERT_TRUE(q.claim(classes(), 1));
    ASSERT_TRUE(q.finish(done, JobState::done, "ok"));
    q.progress(running, 7, 0, 12.5, "gemm {...}");
  }  // the daemon died here
  JobQueue q(m_store, 10);
  auto resumed = q.load();
  ASSERT_TRUE(resumed);
  EXPECT_EQ(*resumed, 1);
  EXPECT_EQ(q.get(running)->state, JobState::queued);
  EXPECT_EQ(q.get(done)->state, JobState::done);
  EXPECT_FALSE(q.submit(spec(16, 1))->created) << "still deduplicated after the restart";
  const auto fresh = q.submit(spec(64, 1))->job.id;
  EXPECT_GT(fresh, done);
  EXPECT_EQ(q.claim(classes(), 0)->id, running);
}

TEST_F(JobQueueTest, WatchersSeeEveryChangeUntilTheEnd) {
  JobQueue q(m_store, 10);
  const auto id = q.submit(spec(16, 1))->job.id;
  std::vector<JobRecord> seen;
  ASSERT_TRUE(q.watch(id, [&](const JobRecord& j, JobQueue::WatchEvent e) {
    EXPECT_EQ(e, JobQueue::WatchEvent::changed);
    seen.push_back(j);
    return true;
  }));
  ASSERT_TRUE(q.claim(classes(), 0));
  q.progress(id, 1, 0, 20, "a");
  q.progress(id, 2, 0, 10, "b");
  ASSERT_TRUE(q.finish(id, JobState::done, "ok"));
  q.progress(id, 3, 0, 5, "after the end");
  ASSERT_EQ(seen.size(), 5u);
  EXPECT_EQ(seen[0].state, JobState::queued);
  EXPECT_EQ(seen[1].state, JobState::running);
  EXPECT_EQ(seen[3].best, "b");
  EXPECT_EQ(seen[4].state, JobState::done);
  EXPECT_FALSE(q.watch("nope", [](const JobRecord&, JobQueue::WatchEvent) { return true; }));
  q.stop();
  EXPECT_EQ(seen.size(), 5u) << "a watch that ended with its job is not called at stop";
}

// stop() ends the watches of queued jobs with one last `stopped` call; a running job's end when
// its lane puts it back (then they can say it is queued); a watch that starts after stop() gets
// the state and `stopped` at once.
TEST_F(JobQueueTest, StopEndsEveryWatchOfAnUnfinishedJob) {
  JobQueue q(m_store, 10);
  const auto running = q.submit(spec(16, 1))->job.id;
  const auto queued = q.submit(spec(32, 1))->job.id;
  ASSERT_EQ(q.claim(classes(), 0)->id, running);
  std::vector<std::pair<std::string, JobQueue::WatchEvent>> seen;
  auto record = [&](const JobRecord& j, JobQueue::WatchEvent e) {
    seen.emplace_back(j.id, e);
    return true;
  };
  ASSERT_TRUE(q.watch(running, record));
  ASSERT_TRUE(q.watch(queued, record));
  ASSERT_EQ(seen.size(), 2u);
  q.stop();
  q.requeue(running);  // what a lane does when the daemon stops
  using E = JobQueue::WatchEvent;
  const std::vector<std::pair<std::string, E>> want = {{running, E::changed},
                                                       {queued, E::changed},
                                                       {queued, E::stopped},
                                                       {running, E::changed},
                                                       {running, E::stopped}};
  EXPECT_EQ(seen, want);
  ASSERT_TRUE(q.cancel(queued));  // a change a watcher would have seen
  EXPECT_EQ(seen.size(), want.size()) << "no call after stopped";
  seen.clear();
  ASSERT_TRUE(q.watch(running, record));
  EXPECT_EQ(seen,
            (std::vector<std::pair<std::string, E>>{{running, E::changed}, {running, E::stopped}}));
}

// Finished jobs are kept up to k_finished_kept, the longest finished deleted first, from memory
// and the store; a job still queued is never pruned, one that waited long and just finished is
// kept, and after a restart ids go on past every id given.
TEST_F(JobQueueTest, KeepsTheMostRecentFinishedJobsAndIdsKeepGrowing) {
  constexpr size_t kept = JobQueue::k_finished_kept;
  std::string first, last_id, waiting;
  {
    JobQueue q(m_store, 10);
    waiting = q.submit(spec(1, 1))->job.id;  // stays queued throughout
    for (size_t i = 0; i < kept + 10; ++i) {
      const auto id = q.submit(spec(std::int64_t(i) + 2, 1))->job.id;
      if (i == 0) first = id;
      ASSERT_TRUE(q.finish(id, JobState::done, ""));
      last_id = id;
    }
    EXPECT_FALSE(q.get(first)) << "the oldest finished job is forgotten";
    EXPECT_TRUE(q.get(last_id));
    EXPECT_EQ(q.get(waiting)->state, JobState::queued);
    EXPECT_EQ(q.list(2 * kept).size(), kept + 1);
    ASSERT_TRUE(q.finish(waiting, JobState::done, ""));  // the oldest id, finished last
    EXPECT_TRUE(q.get(waiting)) << "finished last: kept";
    EXPECT_EQ(q.list(2 * kept).size(), kept);
  }
  auto stored = scan_jobs(m_store);
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->size(), kept);
  JobQueue again(m_store, 10);
  ASSERT_TRUE(again.load());
  EXPECT_EQ(again.get(waiting)->state, JobState::done);
  EXPECT_GT(again.submit(spec(999999, 1))->job.id, last_id);
}

TEST_F(JobQueueTest, ClaimWaitsForWorkAndStopWakesIt) {
  JobQueue q(m_store, 10);
  auto waiting = std::async(std::launch::async, [&] { return q.claim(classes(), 0); });
  ASSERT_TRUE(testing::eventually([&] { return q.waiting_claims() == 1; }));
  EXPECT_EQ(waiting.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  const auto id = q.submit(spec(16, 1))->job.id;
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(waiting.get()->id, id);
  EXPECT_EQ(q.waiting_claims(), 0);
  // stop() wakes a claim() that is already waiting (not only one that starts after it).
  auto idle = std::async(std::launch::async, [&] { return q.claim(classes(), 0); });
  ASSERT_TRUE(testing::eventually([&] { return q.waiting_claims() == 1; }));
  q.stop();
  ASSERT_EQ(idle.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_FALSE(idle.get());
}

// A job whose key another node of the fleet is tuning waits out its deferral while other jobs
// run; a claim() waiting on nothing but the deferral wakes when it ends.
TEST_F(JobQueueTest, DeferredJobsWaitTheirTurnAndOthersGoFirst) {
  JobQueue q(m_store, 10);
  const auto held = q.submit(spec(16, 100))->job.id;
  const auto other = q.submit(spec(32, 1))->job.id;
  ASSERT_EQ(q.claim(classes(), 0)->id, held);
  q.defer(held, std::chrono::milliseconds(300), "waiting: node b is tuning this key");
  const JobRecord waiting = *q.get(held);
  EXPECT_EQ(waiting.state, JobState::queued);
  EXPECT_EQ(waiting.message, "waiting: node b is tuning this key");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(q.claim(classes(), 0)->id, other) << "the deferred job, though first, waits";
  EXPECT_EQ(q.claim(classes(), 0)->id, held) << "claim() woke when the deferral ended";
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(300));
}

// The fleet's winner for a key ends this node's queued job for it, never a running one.
TEST_F(JobQueueTest, CompleteQueuedEndsOnlyAQueuedJob) {
  JobQueue q(m_store, 10);
  const auto queued = q.submit(spec(16, 1))->job.id;
  const auto running = q.submit(spec(32, 100))->job.id;
  ASSERT_EQ(q.claim(classes(), 0)->id, running);
  EXPECT_TRUE(q.complete_queued(testing::h200(), testing::gemm_problem(16, 4096, 4096),
                                "tuned by node b (from the fleet)"));
  EXPECT_EQ(q.get(queued)->state, JobState::done);
  EXPECT_EQ(q.get(queued)->message, "tuned by node b (from the fleet)");
  EXPECT_FALSE(q.complete_queued(testing::h200(), testing::gemm_problem(32, 4096, 4096), "x"));
  EXPECT_EQ(q.get(running)->state, JobState::running);
  EXPECT_FALSE(q.complete_queued(testing::h200(), testing::gemm_problem(64, 4096, 4096), "x"))
      << "no job for that key";
  // A new job for the key can be queued again afterwards (dedupe forgot the finished one).
  EXPECT_TRUE(q.submit(spec(16, 1))->created);
}

}  // namespace
}  // namespace ktune
