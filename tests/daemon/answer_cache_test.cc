// LookupService's answer caches: bounded in bytes, least recently used evicted first, huge request
// lines never kept (issue 9 item 12, issue 10).
#include <gtest/gtest.h>

#include <bit>
#include <condition_variable>
#include <future>
#include <latch>
#include <limits>
#include <mutex>
#include <random>
#include <thread>

#include "daemon/dispatcher.h"
#include "daemon/executor.h"
#include "daemon/lookups.h"
#include "daemon/ops/ops.h"
#include "daemon/process.h"
#include "tests/fakes/daemon_parts.h"
#include "tests/fakes/test_records.h"
#include "tests/fakes/test_volume.h"

namespace ktune {
namespace {

using protocol::Json;

// The value of one sample in Prometheus text, or -1 when absent.
double sample(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + series.size() + 2));
}

NodeIdentity gpu_less_node() {
  NodeIdentity node;
  node.node_id = "test-node";
  node.gpu_error = "no GPU in tests";
  return node;
}

class AnswerCacheTest : public ::testing::Test {
 protected:
  AnswerCacheTest() : m_templates(TemplateRegistry::load({builtin_template_dir()})) {}

  void start(int answer_cache_bytes) {
    DaemonConfig config = default_config();
    config.answer_cache_bytes = answer_cache_bytes;
    start(config);
  }
  // Fresh parts (caches, index, counters) with `config`, on a node without a GPU.
  void start(const DaemonConfig& config) {
    m_parts = std::make_unique<testing::DaemonParts>(config, m_templates, gpu_less_node());
  }

  LookupService& lookups() { return m_parts->lookups; }

  // A lookup line of the shape clients send, for a gemm of the given M.
  static std::string line_for(int m, const std::string& extra = "") {
    return R"({"v":1,"id":1,"op":"lookup","device":")" + testing::h200().id() +
           R"(","problem":{"op":"gemm","dtype":"bf16","layout":"rc","dims":{"M":)" +
           std::to_string(m) + R"(,"N":4096,"K":4096}})" + extra + "}";
  }
  std::shared_ptr<const LookupService::Answer> ask(const std::string& line,
                                                   LookupService::Cold cold) {
    auto a = lookups().lookup(Json::parse(line), cold, line);
    EXPECT_TRUE(a) << a.error().message;
    return a ? *a : nullptr;
  }

  TemplateRegistry m_templates;
  std::unique_ptr<testing::DaemonParts> m_parts;
};

// Issue 9 item 12: 40,000 lookups, each line padded with its own 60 KB unknown field, took the
// daemon from 46 MB to 2.3 GB (every line was a text-cache key). Lines over 4 KiB are not cached
// by text, so memory stays where it was.
TEST_F(AnswerCacheTest, UniqueHugeLinesAreNotKept) {
  start(64 << 20);
  const std::string padded = line_for(4096, R"(,"pad":")" + std::string(60'000, 'x') + "\"");
  const auto body = Json::parse(padded);
  const size_t stamp = padded.find("xxxx");
  std::string line = padded;
  const int n = testing::volume(40'000);
  const double rss0 = resident_mib();
  for (int i = 0; i < n; ++i) {
    const std::string digits = std::to_string(i);
    line.replace(stamp, digits.size(), digits);
    auto a = lookups().lookup(body, LookupService::Cold::build, line);
    ASSERT_TRUE(a) << a.error().message;
  }
  const double growth = resident_mib() - rss0;
#ifdef __SANITIZE_ADDRESS__
  const double bound = 600;  // ASan keeps freed blocks in quarantine (up to 256 MiB) and shadow
#else
  const double bound = 100;
#endif
  EXPECT_LT(growth, bound) << "MiB";
  const auto s = lookups().cache_stats();
  EXPECT_EQ(s.lines.entries, 0u);
  EXPECT_EQ(s.lines_too_long, size_t(n));
  EXPECT_EQ(s.answers.entries, 1u);  // one problem: one answer
  EXPECT_EQ(s.built, 1u);
  EXPECT_LE(s.answers.bytes + s.lines.bytes, size_t(64 << 20));
}

// Distinct shapes past the bound: the least recently used answers go, one at a time; the cache
// never empties itself, and an answer asked again and again stays.
TEST_F(AnswerCacheTest, AnswersAreEvictedLeastRecentlyUsedWithinTheBound) {
  start(256 << 10);
  const std::string hot = line_for(100'000);
  ask(hot, LookupService::Cold::build);
  size_t least_entries_after_first_eviction = SIZE_MAX;
  const int n = testing::volume(1500);
  for (int m = 1; m <= n; ++m) {
    ask(line_for(m), LookupService::Cold::build);
    if (m % 10 == 0) {
      ASSERT_TRUE(ask(hot, LookupService::Cold::refuse)) << "hot answer evicted at " << m;
    }
    const auto s = lookups().cache_stats();
    ASSERT_LE(s.answers.bytes, s.answers.max_bytes);
    ASSERT_LE(s.lines.bytes, s.lines.max_bytes);
    if (s.answers.evictions > 0)
      least_entries_after_first_eviction =
          std::min(least_entries_after_first_eviction, s.answers.entries);
  }
  const auto s = lookups().cache_stats();
  EXPECT_EQ(s.answers.max_bytes, size_t(128 << 10));
  EXPECT_EQ(s.lines.max_bytes, size_t(128 << 10));
  EXPECT_EQ(s.built, size_t(n + 1));
  EXPECT_EQ(s.answers.entries + s.answers.evictions, s.built) << "each answer kept or evicted";
  EXPECT_GT(s.answers.evictions, size_t(n / 4));
  EXPECT_GT(s.lines.evictions, 0u);
  EXPECT_GT(least_entries_after_first_eviction, 20u) << "never emptied wholesale";
  EXPECT_GE(s.answers.hits, size_t(n / 10));
  // The newest answers are there, the oldest are gone.
  EXPECT_TRUE(ask(line_for(n), LookupService::Cold::refuse));
  EXPECT_FALSE(ask(line_for(1), LookupService::Cold::refuse));
}

// The text cache answers a repeated line without parsing it, until a change touches its answer
// (here a winner for its own key; answer_invalidation_test.cc has the changes that do not).
TEST_F(AnswerCacheTest, RepeatedLinesAreAnsweredFromTextUntilTheirAnswerChanges) {
  start(64 << 20);
  const std::string line = line_for(512);
  EXPECT_FALSE(lookups().fast_reply(line));
  ask(line, LookupService::Cold::build);
  auto reply = lookups().fast_reply(line);
  ASSERT_TRUE(reply);
  EXPECT_EQ(Json::parse(*reply)["result"]["entries"][0]["provenance"], "heuristic");
  // A short line: cached by text, and charged for it.
  const auto s = lookups().cache_stats();
  EXPECT_EQ(s.lines.entries, 1u);
  EXPECT_GT(s.lines.bytes, line.size() - 20);
  Problem own = testing::gemm_problem(512, 4096, 4096);
  own.layout = "rc";
  m_parts->index.upsert(testing::winner(own, 1));
  EXPECT_FALSE(lookups().fast_reply(line)) << "a winner for the line's own key";
  EXPECT_TRUE(ask(line, LookupService::Cold::build));
  EXPECT_TRUE(lookups().fast_reply(line));
  EXPECT_EQ(lookups().cache_stats().built, 2u);
}

// A miss answered from the text cache is counted on its answer and recorded when the tracker
// folds: every read folds first, so no reader (top, total, the status and misses ops, metrics)
// waits for the scheduler's loop (DaemonParts has none) to see it.
TEST_F(AnswerCacheTest, CachedMissesAreSeenByEveryReaderAtOnce) {
  start(64 << 20);
  const std::string line = line_for(512);  // a heuristic answer: a miss
  ASSERT_TRUE(ask(line, LookupService::Cold::build)->miss);
  ASSERT_EQ(m_parts->misses.total(), 0u) << "lookup() alone records nothing (reply() does)";
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(lookups().fast_reply(line));
  EXPECT_EQ(m_parts->misses.total(), 5u);
  ASSERT_EQ(m_parts->misses.top(1).size(), 1u);
  EXPECT_EQ(m_parts->misses.top(1)[0].count, 5u);
  ASSERT_TRUE(lookups().fast_reply(line));
  EXPECT_EQ(m_parts->misses.stats().total, 6u);
  ASSERT_TRUE(lookups().fast_reply(line));
  const Json status =
      Json::parse(m_parts->dispatcher.handle(R"({"v":1,"id":1,"op":"status"})").line);
  EXPECT_EQ(status["result"]["misses"]["total"], 7);
  EXPECT_EQ(status["result"]["misses"]["top"][0]["count"], 7);
  ASSERT_TRUE(lookups().fast_reply(line));
  const Json misses =
      Json::parse(m_parts->dispatcher.handle(R"({"v":1,"id":2,"op":"misses"})").line);
  EXPECT_EQ(misses["result"]["total"], 8);
  EXPECT_EQ(misses["result"]["top"][0]["count"], 8);
  ASSERT_TRUE(lookups().fast_reply(line));
  EXPECT_EQ(sample(op_metrics_gauges(m_parts->ctx), "ktune_lookup_misses_total"), 9);
}

// Misses counted on cached answers and folded give each key the count, worth, reasons and order
// that recording every one of them gives, folded at any point.
TEST_F(AnswerCacheTest, CachedMissesFoldToWhatRecordingEachGives) {
  start(64 << 20);
  MissTracker direct;
  const std::vector<std::pair<int, int>> keys = {{512, 7}, {1024, 3}, {96, 12}, {8192, 1}};
  std::vector<std::pair<std::string, std::shared_ptr<const LookupService::Answer>>> asked;
  for (const auto& [m, _] : keys) {
    asked.emplace_back(line_for(m), ask(line_for(m), LookupService::Cold::build));
    ASSERT_TRUE(asked.back().second->miss);
  }
  for (int round = 0; round < 12; ++round) {
    for (size_t k = 0; k < keys.size(); ++k) {
      if (round >= keys[k].second) continue;
      ASSERT_TRUE(lookups().fast_reply(asked[k].first));
      const auto& a = *asked[k].second;
      direct.record(a.miss_key, a.device, a.problem, a.miss_reason, a.expected_us, a.gain);
    }
    if (round == 4) m_parts->misses.fold();  // some counts folded mid-way, the rest later
  }
  const auto folded = m_parts->misses.top(10);
  const auto recorded = direct.top(10);
  ASSERT_EQ(folded.size(), keys.size());
  ASSERT_EQ(recorded.size(), keys.size());
  for (size_t i = 0; i < folded.size(); ++i) {
    EXPECT_EQ(folded[i].problem.key(), recorded[i].problem.key()) << i;
    EXPECT_EQ(folded[i].count, recorded[i].count) << i;
    EXPECT_EQ(folded[i].worth_us, recorded[i].worth_us) << i;
    EXPECT_EQ(folded[i].expected_us, recorded[i].expected_us) << i;
    EXPECT_EQ(folded[i].gain, recorded[i].gain) << i;
    EXPECT_EQ(folded[i].reason, recorded[i].reason) << i;
  }
  EXPECT_EQ(m_parts->misses.total(), direct.total());
  EXPECT_EQ(m_parts->misses.total(), 23u);
  EXPECT_EQ(m_parts->misses.distinct(), direct.distinct());
  EXPECT_EQ(m_parts->misses.stats().bytes, direct.stats().bytes);
  // The tuning queue's order: the same keys come due, most worth first.
  const double threshold = recorded[1].worth_us;
  const auto due_folded = m_parts->misses.due(threshold);
  const auto due_direct = direct.due(threshold);
  ASSERT_EQ(due_folded.size(), due_direct.size());
  ASSERT_GE(due_folded.size(), 2u);
  for (size_t i = 0; i < due_folded.size(); ++i)
    EXPECT_EQ(due_folded[i].problem.key(), due_direct[i].problem.key()) << i;
}

// Counts held on an answer outlive it in the cache: an answer evicted by others, or dropped as
// invalid after a change to the index, still has its misses recorded at the next fold.
TEST_F(AnswerCacheTest, CachedMissesSurviveEvictionAndInvalidation) {
  start(256 << 10);
  const std::string hot = line_for(100'000);
  ASSERT_TRUE(ask(hot, LookupService::Cold::build)->miss);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(lookups().fast_reply(hot));
  // Enough other answers to fill the bound many times over; nothing reads the tracker meanwhile,
  // so nothing folds.
  for (int m = 1; m <= 1500; ++m) ask(line_for(m), LookupService::Cold::build);
  ASSERT_GT(lookups().cache_stats().answers.evictions, 1000u);
  ASSERT_FALSE(lookups().fast_reply(hot)) << "the hot answer is evicted";
  EXPECT_EQ(m_parts->misses.total(), 3u);
  ASSERT_EQ(m_parts->misses.top(1).size(), 1u);
  EXPECT_EQ(m_parts->misses.top(1)[0].problem.dims[0].second, 100'000);
  EXPECT_EQ(m_parts->misses.top(1)[0].count, 3u);

  const std::string line = line_for(512);
  ASSERT_TRUE(ask(line, LookupService::Cold::build)->miss);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(lookups().fast_reply(line));
  Problem own = testing::gemm_problem(512, 4096, 4096);
  own.layout = "rc";
  m_parts->index.upsert(testing::winner(own, 1));
  ASSERT_FALSE(lookups().fast_reply(line)) << "dropped: a winner for its own key";
  EXPECT_EQ(m_parts->misses.total(), 5u);
  EXPECT_EQ(m_parts->misses.distinct(), 2u);
}

// A line's entry holds its answer (one probe per repeated line), charged in full for it: an
// answer the answer cache let go stays reachable by its line, within the line cache's bound, and
// the reply is the same bytes.
TEST_F(AnswerCacheTest, ALineHoldsItsAnswerChargedInFull) {
  start(256 << 10);
  const std::string hot = line_for(100'000);
  const auto answer = ask(hot, LookupService::Cold::build);
  ASSERT_TRUE(answer);
  const auto first = lookups().fast_reply(hot);
  ASSERT_TRUE(first);
  auto s = lookups().cache_stats();
  EXPECT_GT(s.lines.bytes, hot.size() + answer->result.size()) << "the answer is charged";
  const std::uint64_t answer_hits = s.answers.hits;
  const std::uint64_t line_hits = s.lines.hits;
  ASSERT_TRUE(lookups().fast_reply(hot));
  s = lookups().cache_stats();
  EXPECT_EQ(s.lines.hits, line_hits + 1);
  EXPECT_EQ(s.answers.hits, answer_hits) << "one probe: the line cache's";
  // Other answers, asked without a line, until the answer cache has let the hot one go.
  for (int m = 1; m <= 1000; ++m) {
    const std::string other = line_for(m);
    ASSERT_TRUE(lookups().lookup(Json::parse(other), LookupService::Cold::build));
    if (m % 100 == 0) {
      ASSERT_EQ(lookups().fast_reply(hot), first) << m;
    }
  }
  s = lookups().cache_stats();
  EXPECT_GT(s.answers.evictions, 500u);
  EXPECT_LE(s.lines.bytes, s.lines.max_bytes);
  EXPECT_LE(s.answers.bytes, s.answers.max_bytes);
  EXPECT_FALSE(lookups().lookup(Json::parse(hot), LookupService::Cold::refuse).value())
      << "gone from the answer cache";
  EXPECT_EQ(lookups().fast_reply(hot), first) << "still answered by its line, the same bytes";
}

// No cache at all is a valid setting: every lookup is built, none is kept.
TEST_F(AnswerCacheTest, ZeroBytesCachesNothing) {
  start(0);
  const std::string line = line_for(512);
  for (int i = 0; i < 3; ++i) ask(line, LookupService::Cold::build);
  const auto s = lookups().cache_stats();
  EXPECT_EQ(s.built, 3u);
  EXPECT_EQ(s.answers.entries + s.lines.entries, 0u);
  EXPECT_EQ(s.answers.refused, 3u);
  EXPECT_FALSE(lookups().fast_reply(line));
}

// Asks `line` from `threads` threads at once, Cold::build. The first build is held until every
// other thread has joined it (a deadline ends the wait when they never do, as without the dedupe,
// where each thread builds its own). Counts builds and joins as the observer sees them.
struct Concurrent {
  std::vector<protocol::Expected<std::shared_ptr<const LookupService::Answer>>> results;
  int builds = 0;
  int joins = 0;
};
Concurrent ask_at_once(LookupService& lookups, const std::string& line, int threads) {
  Concurrent out;
  std::mutex mutex;
  std::condition_variable changed;
  lookups.set_build_observer({.on_build =
                                  [&](const std::string&) {
                                    std::unique_lock lock(mutex);
                                    ++out.builds;
                                    changed.wait_for(lock, std::chrono::seconds(5),
                                                     [&] { return out.joins == threads - 1; });
                                  },
                              .on_join =
                                  [&](const std::string&) {
                                    std::lock_guard lock(mutex);
                                    ++out.joins;
                                    changed.notify_all();
                                  }});
  const auto body = Json::parse(line);
  std::latch go(threads);
  out.results.resize(size_t(threads), nullptr);
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i)
    pool.emplace_back([&, i] {
      go.arrive_and_wait();
      out.results[size_t(i)] = lookups.lookup(body, LookupService::Cold::build, line);
    });
  for (auto& t : pool) t.join();
  lookups.set_build_observer({});
  return out;
}

// Issue 10: many clients asking the same new key at once cost one build; the others wait for it.
TEST_F(AnswerCacheTest, ConcurrentColdLookupsOfOneKeyBuildOnce) {
  start(64 << 20);
  constexpr int k_threads = 8;
  const std::string line = line_for(3000);
  const Concurrent c = ask_at_once(lookups(), line, k_threads);
  EXPECT_EQ(c.builds, 1);
  EXPECT_EQ(c.joins, k_threads - 1);
  const auto s = lookups().cache_stats();
  EXPECT_EQ(s.built, 1u);
  EXPECT_EQ(s.joined, size_t(k_threads - 1));
  for (const auto& a : c.results) {
    ASSERT_TRUE(a) << a.error().message;
    ASSERT_NE(*a, nullptr);
    EXPECT_EQ(a->get(), c.results[0]->get()) << "every thread got the one answer built";
  }
  EXPECT_EQ(sample(op_metrics_gauges(m_parts->ctx), "ktune_answer_builds_joined_total"),
            k_threads - 1);
  // Done: the next ask is a plain cache hit, no build, no wait.
  ASSERT_TRUE(ask(line, LookupService::Cold::refuse));
  EXPECT_EQ(lookups().cache_stats().built, 1u);
}

// A build that fails hands its error to every thread that waited for it, and leaves nothing
// behind: the next ask builds again.
TEST_F(AnswerCacheTest, AFailedBuildIsSharedAndNotCached) {
  start(64 << 20);
  const std::string line = R"({"v":1,"id":1,"op":"lookup","device":")" + testing::h200().id() +
                           R"(","problem":{"op":"nosuchop","dtype":"bf16","dims":{"n":5}}})";
  const Concurrent c = ask_at_once(lookups(), line, 4);
  EXPECT_EQ(c.builds, 1);
  for (const auto& a : c.results) {
    ASSERT_FALSE(a);
    EXPECT_EQ(a.error().kind, protocol::ErrorKind::invalid_problem);
  }
  auto again = lookups().lookup(Json::parse(line), LookupService::Cold::build, line);
  ASSERT_FALSE(again);
  const auto s = lookups().cache_stats();
  EXPECT_EQ(s.built, 2u);
  EXPECT_EQ(s.joined, 3u);
  EXPECT_EQ(s.answers.entries, 0u);
}

// The cache metrics move with what the caches do.
TEST_F(AnswerCacheTest, MetricsFollowTheCaches) {
  start(64 << 10);
  const std::string big_line = line_for(7, R"(,"pad":")" + std::string(5'000, 'x') + "\"");
  for (int m = 1; m <= 200; ++m) ask(line_for(m), LookupService::Cold::build);
  ask(line_for(200), LookupService::Cold::build);
  ask(big_line, LookupService::Cold::build);
  const std::string text = op_metrics_gauges(m_parts->ctx);
  const auto s = lookups().cache_stats();
  EXPECT_EQ(sample(text, R"(ktune_answer_cache_entries{cache="answers"})"), s.answers.entries);
  EXPECT_GT(s.answers.entries, 0u);
  EXPECT_EQ(sample(text, R"(ktune_answer_cache_bytes{cache="lines"})"), s.lines.bytes);
  EXPECT_EQ(sample(text, R"(ktune_answer_cache_max_bytes{cache="answers"})"), 32 << 10);
  EXPECT_GE(sample(text, R"(ktune_answer_cache_hits_total{cache="answers"})"), 1);
  EXPECT_GE(sample(text, R"(ktune_answer_cache_misses_total{cache="answers"})"), 200);
  EXPECT_GT(sample(text, R"(ktune_answer_cache_evictions_total{cache="answers"})"), 100);
  EXPECT_GT(sample(text, R"(ktune_answer_cache_evictions_total{cache="lines"})"), 10);
  EXPECT_EQ(sample(text, R"(ktune_answer_cache_refused_total{cache="lines"})"), 1);
  EXPECT_EQ(sample(text, "ktune_answers_built_total"), 201);
  const Json status =
      Json::parse(m_parts->dispatcher.handle(R"({"v":1,"id":1,"op":"status"})").line);
  EXPECT_EQ(status["result"]["answer_cache"]["answers"]["entries"], s.answers.entries);
  EXPECT_EQ(status["result"]["answer_cache"]["lines"]["max_bytes"], 32 << 10);
}

// Cold::build_if_cheap (the I/O thread's ask) builds only what is measured to be cheap: never an
// op no build of which was measured, never past inline_build_us, never a limit over 8, never 0.
TEST_F(AnswerCacheTest, BuildIfCheapBuildsOnlyMeasuredCheapOps) {
  auto with_limit = [](int m, int limit) {
    return line_for(m, R"(,"limit":)" + std::to_string(limit));
  };
  // Budget large enough for any build on any test machine, a Debug ASan build on a loaded box
  // included (one took 1.05 ms there): what is tested is the policy, not the speed.
  constexpr int k_budget_us = 1'000'000;
  DaemonConfig config = default_config();
  config.inline_build_us = k_budget_us;
  start(config);
  EXPECT_FALSE(lookups().build_cpu_us("gemm"));
  // Nothing measured yet: refused, nothing built.
  EXPECT_EQ(ask(line_for(1), LookupService::Cold::build_if_cheap), nullptr);
  EXPECT_EQ(lookups().cache_stats().built, 0u);
  ask(line_for(2), LookupService::Cold::build);  // as the executor would
  const auto cost = lookups().build_cpu_us("gemm");
  ASSERT_TRUE(cost);
  EXPECT_GT(*cost, 0);
  EXPECT_LT(*cost, k_budget_us);
  // Measured and cheap: built here, counted as inline, then cached like any answer.
  const auto a = ask(line_for(3), LookupService::Cold::build_if_cheap);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->problem.dims[0].second, 3);
  auto s = lookups().cache_stats();
  EXPECT_EQ(s.built, 2u);
  EXPECT_EQ(s.built_inline, 1u);
  EXPECT_EQ(ask(line_for(3), LookupService::Cold::refuse), a);
  ASSERT_EQ(s.build_cpu_us.size(), 1u);
  EXPECT_EQ(s.build_cpu_us[0].first, "gemm");
  // A limit over k_inline_max_limit: refused, even though this class is cheap.
  EXPECT_EQ(ask(with_limit(2, LookupService::k_inline_max_limit + 1),
                LookupService::Cold::build_if_cheap),
            nullptr);
  EXPECT_NE(
      ask(with_limit(2, LookupService::k_inline_max_limit), LookupService::Cold::build_if_cheap),
      nullptr);
  // M=2 and M=3 share a cost class (dims of the same power of two); M=1000 does not, even though
  // gemm builds were measured.
  EXPECT_EQ(ask(line_for(1000), LookupService::Cold::build_if_cheap), nullptr);
  // An op measured for gemm says nothing about softmax.
  const std::string softmax =
      R"({"v":1,"id":1,"op":"lookup","device":")" + testing::h200().id() +
      R"(","problem":{"op":"softmax","dtype":"bf16","dims":{"rows":64,"cols":4096}}})";
  EXPECT_EQ(ask(softmax, LookupService::Cold::build_if_cheap), nullptr);
  s = lookups().cache_stats();
  EXPECT_EQ(s.built_inline, 2u);
  const std::string text = op_metrics_gauges(m_parts->ctx);
  EXPECT_EQ(sample(text, "ktune_answers_built_inline_total"), 2);
  EXPECT_GT(sample(text, R"(ktune_answer_build_cpu_us{op="gemm"})"), 0);

  // A budget below any build: measured, never cheap. 0: never.
  for (int budget : {1, 0}) {
    config.inline_build_us = budget;
    start(config);
    ask(line_for(2), LookupService::Cold::build);
    if (budget > 0) {
      ASSERT_TRUE(lookups().build_cpu_us("gemm"));
    }
    EXPECT_EQ(ask(line_for(3), LookupService::Cold::build_if_cheap), nullptr) << budget;
    EXPECT_EQ(lookups().cache_stats().built_inline, 0u);
  }
}

// A build in flight on another thread is never joined by build_if_cheap (the I/O thread must not
// wait): the ask is refused and the executor's lookup joins it instead.
TEST_F(AnswerCacheTest, BuildIfCheapNeverWaitsForABuildInFlight) {
  DaemonConfig config = default_config();
  config.inline_build_us = 1000;
  start(config);
  ask(line_for(2), LookupService::Cold::build);  // gemm measured: cheap
  const std::string line = line_for(5);
  std::mutex mutex;
  std::condition_variable cv;
  bool building = false, release = false;
  lookups().set_build_observer({[&](const std::string&) {
                                  std::unique_lock lock(mutex);
                                  building = true;
                                  cv.notify_all();
                                  cv.wait(lock, [&] { return release; });
                                },
                                {}});
  std::thread executor([&] { ask(line, LookupService::Cold::build); });
  {
    std::unique_lock lock(mutex);
    cv.wait(lock, [&] { return building; });
  }
  EXPECT_EQ(ask(line, LookupService::Cold::build_if_cheap), nullptr);  // returns while held
  {
    std::lock_guard lock(mutex);
    release = true;
  }
  cv.notify_all();
  executor.join();
  lookups().set_build_observer({});
  EXPECT_NE(ask(line, LookupService::Cold::build_if_cheap), nullptr);  // now cached
  EXPECT_EQ(lookups().cache_stats().built, 2u);
  EXPECT_EQ(lookups().cache_stats().built_inline, 0u);
}

// Issue 10: one client's cold lookups run on its lane, one at a time, so a client flooding
// never-seen shapes holds one executor thread and the others stay free for other clients.
// Deterministic: the first build is held; a marker posted to the executor after both lookups runs
// on the free thread, which without a lane takes the second lookup (and starts its build) first.
TEST_F(AnswerCacheTest, OneClientsColdLookupsRunOneAtATimeOnItsLane) {
  DaemonConfig config = default_config();
  config.inline_build_us = 0;  // every cold build on the executor
  start(config);
  Executor executor(2, 0);
  Dispatcher dispatcher(m_parts->ctx, &executor);
  const std::optional<Executor::Lane> lane = dispatcher.make_lane();
  ASSERT_TRUE(lane);

  // Asks two new shapes (on `lane` when given) and returns how many builds had started when the
  // marker ran, the first build still held.
  auto builds_beside_a_held_one = [&](int m1, int m2, const Executor::Lane* on) {
    std::mutex mutex;
    std::condition_variable cv;
    size_t started = 0;
    bool release = false;
    lookups().set_build_observer({[&](const std::string&) {
                                    std::unique_lock lock(mutex);
                                    const bool first = started++ == 0;
                                    cv.notify_all();
                                    if (first) cv.wait(lock, [&] { return release; });
                                  },
                                  {}});
    std::latch replied(2);
    auto emit = [&](std::string text, bool last) {
      EXPECT_NE(text.find(R"("ok":true)"), std::string::npos) << text;
      if (last) replied.count_down();
      return true;
    };
    dispatcher.handle(line_for(m1), {}, Peer{}, emit, on);
    dispatcher.handle(line_for(m2), {}, Peer{}, emit, on);
    {
      std::unique_lock lock(mutex);
      cv.wait(lock, [&] { return started >= 1; });
    }
    std::promise<size_t> seen;
    executor.post([&] {
      std::lock_guard lock(mutex);
      seen.set_value(started);
    });
    const size_t at_marker = seen.get_future().get();
    {
      std::lock_guard lock(mutex);
      release = true;
    }
    cv.notify_all();
    replied.wait();
    lookups().set_build_observer({});
    EXPECT_EQ(started, 2u);
    return at_marker;
  };
  EXPECT_EQ(builds_beside_a_held_one(7, 9, &*lane), 1u) << "the lane ran its second lookup early";
  // The premise: without a lane the free thread builds the second shape before the marker.
  EXPECT_EQ(builds_beside_a_held_one(11, 13, nullptr), 2u);
}

// A session's lane may outlive the executor (the daemon destroys the executor before the I/O
// threads' last sessions): the lane keeps the strand's io_context alive. Before, the strand's
// destructor touched the destroyed io_context (ASan: heap-use-after-free at shutdown).
TEST(ExecutorLaneTest, ALaneMayOutliveItsExecutor) {
  std::optional<Executor::Lane> lane;
  {
    Executor executor(1, 0);
    lane = executor.make_lane();
    std::promise<void> ran;
    Executor::post(*lane, [&] { ran.set_value(); });
    ran.get_future().wait();
  }
  bool ran_after_stop = false;
  Executor::post(*lane, [&] { ran_after_stop = true; });  // queued, never run: no threads left
  lane.reset();
  EXPECT_FALSE(ran_after_stop);
}

// Numbers in a reply's text: the library's dump of the same double, byte for byte, over special
// values and 100,000 random bit patterns (every exponent, denormals, NaNs and infinities).
TEST(LookupReplyTextTest, NumbersAreTheLibrarysDump) {
  std::vector<double> values = {0.0, -0.0, 1.0, -1.0, 2.5, 1e-7, 1e300, 1e-320, 123456789.125,
                                1.0 / 3.0, 4294967296.0, 9007199254740993.0,
                                std::numeric_limits<double>::max(), std::numeric_limits<double>::min(),
                                std::numeric_limits<double>::denorm_min(),
                                std::numeric_limits<double>::infinity(),
                                -std::numeric_limits<double>::infinity(),
                                std::numeric_limits<double>::quiet_NaN()};
  std::mt19937_64 rng(11);
  for (int i = 0; i < 100000; ++i) values.push_back(std::bit_cast<double>(rng()));
  for (const double v : values) {
    std::string out = "x";
    protocol::detail::append_json_number(out, v);
    ASSERT_EQ(out, "x" + Json(v).dump()) << std::bit_cast<std::uint64_t>(v);
  }
}

// Strings in a reply's text: the library's dump, byte for byte, with each of the 256 byte values
// at every position of strings of 1-24 bytes (the eight-byte steps of json_plain and its tail).
TEST(LookupReplyTextTest, StringsAreTheLibrarysDump) {
  for (size_t len = 1; len <= 24; ++len)
    for (size_t at = 0; at < len; ++at)
      for (int b = 0; b < 256; ++b) {
        std::string s(len, 'a');
        s[at] = char(b);
        std::string out = "x";
        protocol::detail::append_json_string(out, s);
        ASSERT_EQ(out, "x" + Json(s).dump(-1, ' ', false, Json::error_handler_t::replace))
            << "byte " << b << " at " << at << " of " << len;
      }
}

// A cold answer's text is written straight into a string (protocol::lookup_reply_text), not
// through an ordered_json tree: it must be the library's serialization byte for byte, for
// replies built here (escapes, non-ASCII and invalid UTF-8, numbers of every magnitude,
// clusters, launch descriptions) and for every answer LookupService builds, v1 and v2.
TEST(LookupReplyTextTest, IsTheLibrarySerializationByteForByte) {
  const auto library = [](const protocol::LookupReply& r) {
    return protocol::to_json(r).dump(-1, ' ', false, Json::error_handler_t::replace);
  };
  protocol::LookupReply r;
  r.device = "nvidia-h200.sm90.132sm.140gib";
  r.problem_key = "gemm bf16->bf16 rc M=1 N=2 K=3";
  EXPECT_EQ(protocol::lookup_reply_text(r), library(r));
  const std::vector<std::string> texts = {
      "",         "plain",       "q\"uote",      "back\\slash", "tab\there", "nl\n",
      "\x01\x1f", "caf\xc3\xa9", "bad \xff\xfe", "del\x7f",     "ok/slash"};
  const std::vector<double> numbers = {0.1,   1.0,    10.0, 1e-7,     123456789.125,
                                       1e300, 3.0e-5, 2.5,  1.0 / 3.0};
  for (size_t i = 0; i < 40; ++i) {
    protocol::LookupEntry e;
    e.provenance = std::vector<std::string>{"exact", "nearest", "heuristic", "stale"}[i % 4];
    e.template_name = texts[i % texts.size()];
    e.template_hash = texts[(i + 3) % texts.size()];
    for (size_t p = 0; p < i % 5; ++p)
      e.params.emplace_back("P" + std::to_string(p) + texts[(i + p) % 3], std::int64_t(p) - 2);
    e.median_us = i % 3 ? numbers[i % numbers.size()] : 0;
    if (e.median_us > 0) e.timing_l2 = i % 2 ? "flushed" : "rotated";
    e.tflops = i % 2 ? numbers[(i + 1) % numbers.size()] : 0;
    e.gbps = i % 5 ? numbers[(i + 2) % numbers.size()] : 0;
    e.distance = i % 7 ? numbers[(i + 4) % numbers.size()] : 0;
    e.from = texts[(i + 5) % texts.size()];
    e.name_expression = "k<" + texts[i % texts.size()] + ">";
    e.arch = "sm_90a";
    e.grid = {std::uint32_t(i + 1), 2, 4294967295u};
    e.block = {128, 1, 1};
    e.smem = std::uint32_t(i * 1000);
    if (i % 3 == 0) e.cluster = {2, 1, 1};
    if (i % 2)
      e.launch = Json{{"args", Json::array({Json{{"name", texts[i % texts.size()]}}})},
                      {"smem", i},
                      {"x", numbers[i % numbers.size()]}};
    r.entries.push_back(e);
    ASSERT_EQ(protocol::lookup_reply_text(r), library(r)) << "entry " << i;
  }
  r.assumed_layout = "rc";  // v2: what the daemon filled in
  EXPECT_EQ(protocol::lookup_reply_text(r), library(r));

  const auto templates = TemplateRegistry::load({builtin_template_dir()});
  testing::DaemonParts parts(default_config(), templates, gpu_less_node());
  auto flushed = testing::winner(testing::gemm_problem(4096, 4096, 4096), 10.0);
  flushed.timing_l2 = TimingL2::flushed;
  parts.index.load({flushed, testing::winner(testing::gemm_problem(2048, 4096, 4096), 6.0)});
  for (const std::string problem :
       {R"({"op":"gemm","dtype":"bf16","layout":"rr","dims":{"M":4096,"N":4096,"K":4096}})",
        R"({"op":"gemm","dtype":"bf16","layout":"rr","dims":{"M":3000,"N":4096,"K":4096}})",
        R"({"op":"gemm","dtype":"bf16","layout":"rc","dims":{"M":3000,"N":4096,"K":4096}})",
        R"({"op":"gemm","dtype":"fp16","layout":"rr","dims":{"M":17,"N":4096,"K":1024}})",
        R"({"op":"gemm","dtype":"bf16","dims":{"M":4096,"N":4096,"K":4096}})",  // layout assumed
        R"({"op":"softmax","dtype":"bf16","dims":{"rows":4096,"cols":1000}})",
        R"({"op":"rmsnorm","dtype":"fp32","dims":{"rows":8,"cols":4096}})",
        R"({"op":"reduce_sum","dtype":"fp32","dims":{"n":1048576}})"})
    for (int version : {1, 2}) {
      const Json body = Json::parse(R"({"device":")" + testing::h200().id() +
                                    R"(","limit":8,"problem":)" + problem + "}");
      auto answer = parts.lookups.lookup(body, LookupService::Cold::build, {}, version);
      ASSERT_TRUE(answer) << answer.error().message;
      auto parsed = protocol::lookup_reply_from_json(Json::parse((*answer)->result));
      ASSERT_TRUE(parsed);
      EXPECT_EQ((*answer)->result, library(*parsed)) << problem << " v" << version;
      EXPECT_EQ(version >= 2, !parsed->entries.front().launch.is_null());
    }
}

}  // namespace
}  // namespace ktune
