// Background tuning end to end: a real ktuned whose lanes drive fake workers (tests/fakes/
// fake_worker.cc: no GPU), a fake NVML (files the test writes), and clients over the socket.
// Label "e2e". Waits poll observable state with deadlines; nothing sleeps to synchronise.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include <algorithm>
#include <array>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "client/client.h"
#include "config/config.h"
#include "store/rocksdb_store.h"
#include "store/table_io.h"
#include "tests/fakes/daemon_probe.h"
#include "tests/fakes/daemon_process.h"
#include "tests/fakes/eventually.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;
using protocol::Json;
using testing::DaemonProcess;
using testing::TempDir;

const std::string k_fake_worker = std::string(KTUNE_BINARY_DIR) + "/tests/fake-worker";
const std::string k_test_templates = std::string(KTUNE_SOURCE_DIR) + "/tests/data/templates";
const protocol::ProblemSpec k_fault{"fault", "fp32", "", "", {{"n", 4096}}};

// Polls `pred` every 20 ms until it holds or `timeout` passes; returns whether it held.
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  return testing::eventually(pred, timeout,
                             std::chrono::milliseconds(20));  // waits on other processes
}

// `n` gemm winners of distinct shapes (M = 16, 17, ...), one ranked config each.
std::vector<WinnerRecord> gemm_winners(int n) {
  std::vector<WinnerRecord> records;
  for (int i = 0; i < n; ++i) {
    auto w = testing::winner(testing::gemm_problem(16 + i, 4096, 4096), 10 + i % 7);
    w.ranked.resize(1);
    records.push_back(std::move(w));
  }
  return records;
}

// No such process, or a zombie nobody reaped yet.
bool process_gone(int pid) {
  if (::kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z';
}

class BackgroundTest : public ::testing::Test {
 protected:
  // A daemon with `gpus` fake GPUs, the fault template and the given extra --set assignments.
  std::unique_ptr<DaemonProcess> daemon(int gpus, std::vector<std::string> sets,
                                        std::vector<std::string> env = {}) {
    std::string devices;
    for (int i = 0; i < gpus; ++i) devices += (i ? "," : "") + std::to_string(i);
    std::vector<std::string> args = {"--set", "templates.dirs=" + k_test_templates,
                                     "--set", "tuning.worker=" + k_fake_worker,
                                     "--set", "tuning.devices=" + devices,
                                     "--set", "tuning.trial_timeout_ms=300",
                                     "--set", "tuning.budget_trials=10",
                                     "--set", "tuning.strategy=exhaustive",
                                     "--set", "tuning.idle_settle_seconds=0.2",
                                     "--set", "tuning.idle_poll_ms=50",
                                     "--set", "templates.compile_threads=2"};
    for (auto& s : sets) {
      args.push_back("--set");
      args.push_back(s);
    }
    env.push_back("KTUNE_FAKE_NVML_DIR=" + m_nvml);
    auto d = std::make_unique<DaemonProcess>(m_dir / "ktuned.sock", m_dir / "state", args);
    d->set_env(env);
    return d;
  }
  ClientOptions options(std::chrono::milliseconds timeout = std::chrono::seconds(10)) const {
    ClientOptions o;
    o.socket_path = m_dir / "ktuned.sock";
    o.timeout = timeout;
    o.cache_capacity = 0;
    return o;
  }
  Json status() {
    Client c(options());
    auto s = c.status();
    return s ? *s : Json();
  }
  Json job(const std::string& id) {
    Client c(options());
    auto j = c.job(id);
    return j ? *j : Json();
  }
  bool job_in(const std::string& id, std::set<std::string> states) {
    Json j = job(id);
    return j.is_object() && states.count(j["state"].get<std::string>());
  }
  void foreign_process(int ordinal, bool present) {
    const std::string path = m_nvml + "/gpu" + std::to_string(ordinal) + ".json";
    if (!present) return void(std::filesystem::remove(path));
    std::ofstream(path + ".tmp") << R"({"utilization": 97, "pids": [424242]})";
    std::filesystem::rename(path + ".tmp", path);
  }
  // GET /metrics from the daemon's metrics port (read from its "ready" log line).
  std::string http_metrics() const {
    std::ifstream log(m_dir / "state.log");
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    const auto at = text.rfind("metrics=127.0.0.1:");
    if (at == std::string::npos) return "no metrics endpoint in the log";
    const int port = std::atoi(text.c_str() + at + 18);
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(std::uint16_t(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      return "connect failed";
    const std::string req = "GET /metrics HTTP/1.0\r\n\r\n";
    (void)!::write(fd, req.data(), req.size());
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
    ::close(fd);
    return out;
  }
  std::string fake_log() const { return m_dir / "fake-worker.log"; }
  // Sends a tune job for `problem` with a budget of `trials` and waits until it is done, having
  // measured exactly that many. REQUIRES: a started daemon whose lane may use its GPU.
  void tune_until_done(Client& client, const protocol::ProblemSpec& problem, int trials) {
    Client::TuneOptions o;
    o.budget_trials = trials;
    auto r = client.tune(problem, o);
    ASSERT_TRUE(r) << r.error().message;
    const std::string id = (*r)["job"]["id"].get<std::string>();
    ASSERT_TRUE(eventually([&] { return job_in(id, {"done", "failed"}); }));
    ASSERT_EQ(job(id)["state"], "done") << job(id).dump();
    EXPECT_EQ(job(id)["trials"], trials);
  }

  std::vector<std::string> measured_configs() const {
    std::vector<std::string> out;
    std::ifstream in(fake_log());
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) out.push_back(line);
    return out;
  }

  void SetUp() override {
    m_nvml = m_dir / "nvml";
    std::filesystem::create_directories(m_nvml);
  }
  void TearDown() override {
    if (!HasFailure()) return;
    std::ifstream log(m_dir / "state.log");  // DaemonProcess logs to <data dir>.log
    std::stringstream text;
    text << log.rdbuf();
    const std::string all = text.str();
    std::printf("---- ktuned log (last 6000 bytes) ----\n%s\n",
                all.substr(all.size() > 6000 ? all.size() - 6000 : 0).c_str());
  }

  TempDir m_dir;
  std::string m_nvml;
};

// An application asks for a shape nobody tuned: heuristic at first; the miss becomes a job on the
// idle GPU's lane, and the same lookup then answers exact.
TEST_F(BackgroundTest, MissBecomesAJobThenAnExactAnswer) {
  auto d = daemon(1, {"tuning.miss_threshold_us=0"});
  ASSERT_TRUE(d->start());
  Client app(options());
  auto first = app.lookup({k_fault, "", 4});
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(first->entries.front().provenance, "heuristic");
  std::string id;
  ASSERT_TRUE(eventually([&] {
    auto jobs = app.jobs(10);
    if (!jobs || (*jobs)["jobs"].empty()) return false;
    id = (*jobs)["jobs"][0]["id"].get<std::string>();
    return (*jobs)["jobs"][0]["state"] == "done";
  })) << status().dump(2);
  Json j = job(id);
  EXPECT_EQ(j["origin"], "miss");
  EXPECT_EQ(j["trials"], 10);
  auto after = app.lookup({k_fault, "", 4});
  ASSERT_TRUE(after);
  EXPECT_EQ(after->entries.front().provenance, "exact");
  EXPECT_EQ(after->entries.front().params.size(), 2u);
  const auto& params = after->entries.front().params;
  const auto mode =
      std::find_if(params.begin(), params.end(), [](const auto& p) { return p.first == "MODE"; });
  ASSERT_NE(mode, params.end());
  EXPECT_EQ(mode->second, 0) << "only MODE 0 passes verification";
  auto misses = app.misses(5);
  ASSERT_TRUE(misses);
  EXPECT_EQ((*misses)["top"][0]["queued"], true);
  // The metrics moved with it.
  const std::string metrics = http_metrics();
  EXPECT_NE(metrics.find("ktune_jobs{state=\"done\"} 1\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("ktune_miss_jobs_total 1\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("ktune_trials_total{outcome=\"ok\"} 2\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("ktune_trials_total{outcome=\"crash\"} 4\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("ktune_gpu_tuning_allowed{gpu=\"0\"} 1\n"), std::string::npos) << metrics;
}

// A miss whose job fails (here its worker cannot start) becomes a job again after
// tuning.miss_retry_seconds, not before. (The key stayed handed out, and was never tuned from
// misses again until a restart.)
TEST_F(BackgroundTest, AMissWhoseJobFailedBecomesAJobAgainAfterTheBackoff) {
  // The worker is there when ktuned starts (it asks it for the GPUs) and gone by the first job.
  const std::string worker = m_dir / "worker";
  std::filesystem::copy_file(k_fake_worker, worker);
  auto d = daemon(1, {"tuning.miss_threshold_us=0", "tuning.worker=" + worker,
                      "tuning.miss_retry_seconds=1.5"});
  ASSERT_TRUE(d->start());
  ASSERT_TRUE(eventually([&] { return status()["gpus"].size() == 1; })) << status().dump(2);
  std::filesystem::remove(worker);
  Client app(options());
  auto failed_jobs = [&] {
    auto jobs = app.jobs(10);
    size_t n = 0;
    if (jobs)
      for (const auto& j : (*jobs)["jobs"]) n += j["state"] == "failed" && j["origin"] == "miss";
    return n;
  };
  auto first = app.lookup({k_fault, "", 4});
  ASSERT_TRUE(first) << first.error().message;
  ASSERT_TRUE(eventually([&] { return failed_jobs() == 1; })) << status().dump(2);
  const auto failed_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(app.lookup({k_fault, "", 4}));
  ASSERT_TRUE(eventually([&] { return failed_jobs() == 2; })) << status().dump(2);
  EXPECT_GE(std::chrono::steady_clock::now() - failed_at, std::chrono::milliseconds(1400))
      << "the second job came before the backoff ended";
  auto jobs = app.jobs(10);
  ASSERT_TRUE(jobs);
  EXPECT_NE((*jobs)["jobs"][0]["message"].get<std::string>().find("worker did not start"),
            std::string::npos)
      << jobs->dump();
}

// kill -9 mid-job: after the restart the job resumes and finishes, and no config is measured twice
// (except one that was in flight at the kill: its measurement never completed).
TEST_F(BackgroundTest, KillMidJobResumesWithoutMeasuringTwice) {
  const std::vector<std::string> env = {"FAKE_WORKER_DELAY_MS=150",
                                        "FAKE_WORKER_LOG=" + fake_log()};
  auto d = daemon(1, {"tuning.gpu_policy=always"}, env);
  ASSERT_TRUE(d->start());
  Client client(options());
  auto tuned = client.tune(k_fault, {});
  ASSERT_TRUE(tuned) << tuned.error().message;
  const std::string id = (*tuned)["job"]["id"].get<std::string>();
  ASSERT_TRUE(eventually([&] { return job(id).value("trials", 0) >= 3; }));
  const int worker = status()["lanes"][0]["worker_pid"].get<int>();
  ASSERT_GT(worker, 0);
  d->crash();
  // The worker dies with the daemon (it would otherwise hold the GPU, e.g. in a hung kernel).
  EXPECT_TRUE(eventually([&] { return process_gone(worker); }, std::chrono::seconds(5)))
      << "worker " << worker << " outlived the killed daemon";
  const size_t before = measured_configs().size();
  std::set<std::string> in_flight;
  {
    auto store = RocksDbStore::open(m_dir / "state/db");
    ASSERT_TRUE(store) << store.error().message;
    auto trials = scan_trials(**store);
    ASSERT_TRUE(trials);
    for (const auto& t : *trials)
      if (t.outcome == Outcome::in_flight) in_flight.insert(params_to_string(t.params));
  }
  auto again = daemon(1, {"tuning.gpu_policy=always"}, env);
  ASSERT_TRUE(again->start());
  ASSERT_TRUE(eventually([&] { return job_in(id, {"done", "failed"}); })) << job(id).dump(2);
  Json j = job(id);
  EXPECT_EQ(j["state"], "done") << j.dump(2);
  EXPECT_GE(j["reused"].get<int>(), 2) << j.dump(2);
  const auto all = measured_configs();
  EXPECT_GT(all.size(), before);
  std::map<std::string, int> count;
  for (const auto& c : all) ++count[c];
  for (const auto& [config, n] : count)
    if (!in_flight.count(config)) {
      EXPECT_EQ(n, 1) << config << " measured " << n << " times";
    }
}

// SIGTERM with a job running on each of two lanes: each watch is answered `unavailable` (its job
// is back in the queue) rather than cut off, no job ends as cancelled (a lane that saw the queue
// stop before its own stop took it for a client's cancel), the daemon exits 0, and the next start
// finishes both.
TEST_F(BackgroundTest, StopPutsEveryRunningJobBackInTheQueueAndEndsItsWatch) {
  const std::vector<std::string> env = {"FAKE_WORKER_DELAY_MS=150"};
  auto d = daemon(2, {"tuning.gpu_policy=always"}, env);
  ASSERT_TRUE(d->start());
  Client client(options());
  std::vector<std::string> ids;
  for (int n : {1024, 2048}) {
    auto t = client.tune({"fault", "fp32", "", "", {{"n", n}}}, {});
    ASSERT_TRUE(t) << t.error().message;
    ids.push_back((*t)["job"]["id"].get<std::string>());
  }
  ASSERT_TRUE(eventually([&] {
    return job(ids[0]).value("trials", 0) >= 1 && job(ids[1]).value("trials", 0) >= 1;
  })) << "both lanes tuning";
  std::array<std::atomic<int>, 2> events{};
  std::vector<std::future<protocol::Expected<Json>>> watches;
  for (size_t i = 0; i < ids.size(); ++i)
    watches.push_back(std::async(std::launch::async, [&, i] {
      Client w(options());
      return w.watch(
          ids[i], [&](const Json&) { ++events[i]; }, std::chrono::seconds(30));
    }));
  ASSERT_TRUE(eventually([&] { return events[0] >= 1 && events[1] >= 1; }));  // both in place
  EXPECT_EQ(d->stop(), 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_EQ(watches[i].wait_for(std::chrono::seconds(10)), std::future_status::ready);
    auto ended = watches[i].get();
    ASSERT_FALSE(ended) << ended->dump();
    EXPECT_EQ(ended.error().kind, protocol::ErrorKind::unavailable) << ended.error().message;
    EXPECT_EQ(ended.error().message, "ktuned is stopping; job " + ids[i] +
                                         " is queued and resumes when ktuned starts again: "
                                         "watch it then");
  }
  auto again = daemon(2, {"tuning.gpu_policy=always"}, env);
  ASSERT_TRUE(again->start());
  for (const auto& id : ids) {
    ASSERT_TRUE(eventually([&] {
      return job_in(id, {"done", "failed", "cancelled"});
    })) << job(id).dump(2);
    EXPECT_EQ(job(id)["state"], "done") << job(id).dump(2);
  }
}

// A stop waiting on a lane's hung trial (tuning.trial_timeout_ms away: ten minutes here) ends at
// a second SIGTERM: ktuned exits at once with 128 + SIGTERM, its worker dies with it, and the
// job is back at the next start, which finishes it (its trials cut at 300 ms).
TEST_F(BackgroundTest, ASecondStopSignalExitsAtOnceAndTheJobResumes) {
  const std::string hung = m_dir / "hung.log";
  auto d = daemon(1, {"tuning.gpu_policy=always", "tuning.trial_timeout_ms=600000"},
                  {"FAKE_WORKER_HANG_LOG=" + hung});
  ASSERT_TRUE(d->start());
  Client client(options());
  Client::TuneOptions o;
  o.templates = {"fault"};
  o.seeds = {{{"MODE", 2}, {"THREADS", 128}}};  // after the heuristic's config: a kernel that hangs
  o.budget_trials = 3;
  auto r = client.tune(k_fault, o);
  ASSERT_TRUE(r) << r.error().message;
  const std::string id = (*r)["job"]["id"].get<std::string>();
  ASSERT_TRUE(eventually([&] { return !testing::read_file(hung).empty(); }))
      << "the seed never hung: " << job(id).dump();
  const int worker = status()["lanes"][0]["worker_pid"].get<int>();
  ASSERT_GT(worker, 0);
  const pid_t pid = d->pid();
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  ASSERT_TRUE(eventually([&] {
    return testing::read_file(d->log_path()).find(" shutdown signal=") != std::string::npos;
  })) << testing::read_file(d->log_path());
  // The first stop is under way and waits on the lane: the hung trial has ten minutes left.
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  EXPECT_EQ(d->wait_exit(), 128 + SIGTERM) << testing::read_file(d->log_path());
  EXPECT_NE(testing::read_file(d->log_path()).find(" shutdown_forced signal=15"),
            std::string::npos);
  EXPECT_TRUE(eventually([&] { return process_gone(worker); }, std::chrono::seconds(5)))
      << "worker " << worker << " outlived the forced stop";

  auto again = daemon(1, {"tuning.gpu_policy=always"});
  ASSERT_TRUE(again->start());
  ASSERT_TRUE(eventually([&] {
    return job_in(id, {"done", "failed", "cancelled"});
  })) << job(id).dump(2);
  EXPECT_EQ(job(id)["state"], "done") << job(id).dump(2);
}

TEST_F(BackgroundTest, DuplicateRequestsShareAJobAndCancelStopsIt) {
  auto d = daemon(1, {"tuning.gpu_policy=always"}, {"FAKE_WORKER_DELAY_MS=200"});
  ASSERT_TRUE(d->start());
  Client client(options());
  auto a = client.tune(k_fault, {});
  auto b = client.tune(k_fault, {});
  ASSERT_TRUE(a && b);
  EXPECT_EQ((*a)["job"]["id"], (*b)["job"]["id"]);
  EXPECT_TRUE((*a)["created"].get<bool>());
  EXPECT_FALSE((*b)["created"].get<bool>());
  const std::string id = (*a)["job"]["id"].get<std::string>();
  ASSERT_TRUE(eventually([&] { return job(id).value("trials", 0) >= 1; }));
  // watch on its own connection sees the end the cancel causes.
  std::atomic<int> events{0};
  auto watched = std::async(std::launch::async, [&] {
    Client w(options());
    return w.watch(
        id, [&](const Json&) { ++events; }, std::chrono::seconds(30));
  });
  auto c = client.cancel(id);
  ASSERT_TRUE(c);
  ASSERT_EQ(watched.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  auto final_job = watched.get();
  ASSERT_TRUE(final_job) << final_job.error().message;
  EXPECT_EQ((*final_job)["state"], "cancelled");
  EXPECT_LT((*final_job)["trials"].get<int>(), 10);
  EXPECT_EQ(job(id)["state"], "cancelled");
}

// tune names the templates to search and seeds to measure first: a template of another op, an
// unknown one, or a seed that is no whole config of a searched template is refused before anything
// is queued; a valid request's job carries both (in its record too), and the seed, a config the
// exhaustive order would reach only later, is the trial measured right after the heuristic's.
TEST_F(BackgroundTest, TuneSearchesTheNamedTemplatesAndMeasuresSeedsFirst) {
  auto d = daemon(1, {"tuning.gpu_policy=always"}, {"FAKE_WORKER_LOG=" + fake_log()});
  ASSERT_TRUE(d->start());
  Client client(options());
  auto with = [](std::vector<std::string> templates,
                 std::vector<std::map<std::string, std::int64_t>> seeds) {
    Client::TuneOptions o;
    o.templates = std::move(templates);
    o.seeds = std::move(seeds);
    return o;
  };
  const std::vector<std::pair<Client::TuneOptions, std::string>> refused = {
      {with({"scale"}, {}), "template scale implements scale, not fault"},
      {with({"nope"}, {}), "unknown template 'nope'"},
      {with({}, {{{"THREADS", 256}}}), "missing params.MODE"},
      {with({}, {{{"THREADS", 100}, {"MODE", 0}}}), "outside template fault's space"},
  };
  for (const auto& [o, why] : refused) {
    auto r = client.tune(k_fault, o);
    ASSERT_FALSE(r) << why;
    EXPECT_EQ(r.error().kind, protocol::ErrorKind::bad_request) << r.error().message;
    EXPECT_NE(r.error().message.find(why), std::string::npos) << r.error().message;
  }
  auto none = client.jobs();
  ASSERT_TRUE(none);
  EXPECT_TRUE((*none)["jobs"].empty()) << none->dump();

  Client::TuneOptions o = with({"fault"}, {{{"MODE", 3}, {"THREADS", 128}}});
  o.budget_trials = 2;
  auto r = client.tune(k_fault, o);
  ASSERT_TRUE(r) << r.error().message;
  const Json job0 = (*r)["job"];
  EXPECT_EQ(job0["templates"], Json::array({"fault"}));
  EXPECT_EQ(job0["seeds"], Json::parse(R"([{"MODE": 3, "THREADS": 128}])"));
  const std::string id = job0["id"].get<std::string>();
  ASSERT_TRUE(eventually([&] { return job_in(id, {"done", "failed"}); }));
  EXPECT_EQ(job(id)["state"], "done") << job(id).dump();
  EXPECT_EQ(job(id)["seeds"], job0["seeds"]);
  const auto measured = measured_configs();
  ASSERT_EQ(measured.size(), 2u);
  EXPECT_EQ(measured[0], "MODE=0,THREADS=256");  // the heuristic's
  EXPECT_EQ(measured[1], "MODE=3,THREADS=128");  // the seed, before the exhaustive order's (128, 0)
}

// tuning.finalists: a job's winner carries exactly that many re-timed configs (its exact entries,
// fastest first), where the search measured more configs that passed.
TEST_F(BackgroundTest, FinalistsKeySetsHowManyConfigsAreRetimed) {
  const protocol::ProblemSpec scale{"scale", "fp32", "", "", {{"n", 1 << 16}}};
  for (const int finalists : {2, 6}) {
    auto d =
        daemon(1, {"tuning.gpu_policy=always", "tuning.finalists=" + std::to_string(finalists)});
    ASSERT_TRUE(d->start());
    Client client(options());
    ASSERT_NO_FATAL_FAILURE(tune_until_done(client, scale, 10));
    auto answer = client.lookup({scale, "", 64});
    ASSERT_TRUE(answer) << answer.error().message;
    size_t exact = 0;
    for (const auto& e : answer->entries) exact += e.provenance == "exact";
    EXPECT_EQ(exact, size_t(finalists)) << "finalists=" << finalists;
    d.reset();
    std::filesystem::remove_all(m_dir / "state");  // the next round tunes the key afresh
  }
}

// tuning.retime_rounds: the finalists' re-timing runs that many rounds; 0 (the default) runs three
// per finalist, at least 5. tuning.timing_l2: what L2 holds when the worker times a launch
// (flushed unless set), sent with every timing request.
TEST_F(BackgroundTest, RetimeRoundsAndTimingL2KeysReachTheFinalistsRetime) {
  const protocol::ProblemSpec scale{"scale", "fp32", "", "", {{"n", 1 << 16}}};
  const std::string log = m_dir / "retime.log";
  struct Case {
    int rounds;
    std::string l2;  // empty: the default
    std::string want;
  };
  const Case cases[] = {{0, "", "rounds=12 finalists=4 l2=flushed"},
                        {7, "rotated", "rounds=7 finalists=4 l2=rotated"}};
  for (const auto& [rounds, l2, want] : cases) {
    std::filesystem::remove(log);
    std::vector<std::string> sets = {"tuning.gpu_policy=always", "tuning.finalists=4",
                                     "tuning.retime_rounds=" + std::to_string(rounds)};
    if (!l2.empty()) sets.push_back("tuning.timing_l2=" + l2);
    auto d = daemon(1, sets, {"FAKE_WORKER_RETIME_LOG=" + log});
    ASSERT_TRUE(d->start());
    Client client(options());
    ASSERT_NO_FATAL_FAILURE(tune_until_done(client, scale, 10));
    std::ifstream in(log);
    std::string line;
    ASSERT_TRUE(std::getline(in, line)) << "no retime request, retime_rounds=" << rounds;
    EXPECT_EQ(line, want) << "retime_rounds=" << rounds;
    d.reset();
    std::filesystem::remove_all(m_dir / "state");  // the next round tunes the key afresh
  }
}

// gpu_policy idle: a foreign process on the GPU pauses the lane within a second; it resumes when
// the process leaves, and the job still finishes.
TEST_F(BackgroundTest, ForeignWorkPausesTheLaneWithinASecond) {
  auto d = daemon(1, {"tuning.gpu_policy=idle", "tuning.budget_trials=100"},
                  {"FAKE_WORKER_DELAY_MS=100"});
  ASSERT_TRUE(d->start());
  Client client(options());
  auto tuned = client.tune(k_fault, {});
  ASSERT_TRUE(tuned);
  const std::string id = (*tuned)["job"]["id"].get<std::string>();
  ASSERT_TRUE(eventually([&] { return status()["lanes"][0]["state"] == "tuning"; }));
  foreign_process(0, true);
  const auto t0 = Clock::now();
  ASSERT_TRUE(eventually([&] { return status()["lanes"][0]["state"] == "paused"; },
                         std::chrono::seconds(5)));
  const double paused_after = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_LT(paused_after, 1.0);
  Json lane = status()["lanes"][0];
  EXPECT_NE(lane["reason"].get<std::string>().find("424242"), std::string::npos) << lane.dump();
  // While paused, at most the trial already running completes.
  const int trials_at_pause = job(id)["trials"].get<int>();
  EXPECT_FALSE(eventually([&] { return job(id)["trials"].get<int>() > trials_at_pause + 1; },
                          std::chrono::milliseconds(600)));
  foreign_process(0, false);
  // From its first trial the lane shows the job's own cap: the space's 10 configs, not the 100
  // asked (10 trials of 100 ms each are left to see it in).
  EXPECT_TRUE(eventually([&] { return status()["lanes"][0]["budget_trials"] == 10; }))
      << status()["lanes"][0].dump();
  ASSERT_TRUE(eventually([&] { return job_in(id, {"done", "failed"}); }));
  EXPECT_EQ(job(id)["state"], "done");
  EXPECT_GT(status()["lanes"][0]["seconds"]["paused"].get<double>(), 0.3);
}

TEST_F(BackgroundTest, TwoFakeGpusTuneInParallel) {
  auto d = daemon(2, {"tuning.gpu_policy=always"}, {"FAKE_WORKER_DELAY_MS=100"});
  ASSERT_TRUE(d->start());
  ASSERT_EQ(status()["lanes"].size(), 2u);
  Client client(options());
  std::vector<std::string> ids;
  for (int n : {1024, 2048, 4096, 8192}) {
    auto t = client.tune({"fault", "fp32", "", "", {{"n", n}}}, {});
    ASSERT_TRUE(t);
    ids.push_back((*t)["job"]["id"].get<std::string>());
  }
  EXPECT_TRUE(eventually([&] {
    Json lanes = status()["lanes"];
    return lanes[0]["state"] == "tuning" && lanes[1]["state"] == "tuning";
  })) << "both lanes busy at once";
  for (const auto& id : ids) {
    ASSERT_TRUE(eventually([&] { return job_in(id, {"done", "failed"}); }));
    Json j = job(id);
    EXPECT_EQ(j["state"], "done");
  }
  auto jobs = client.jobs(10);
  ASSERT_TRUE(jobs);
  EXPECT_EQ((*jobs)["counts"]["done"], 4);
}

TEST_F(BackgroundTest, PlanQueuesEveryProblemOnceAndTheCliFollowsIt) {
  auto d = daemon(1, {"tuning.gpu_policy=never"});
  ASSERT_TRUE(d->start());
  const std::string plan = m_dir / "plan.yaml";
  std::ofstream(plan) << "problems:\n"
                         "  - {op: fault, dtype: fp32, dims: {n: 1024}}\n"
                         "  - {op: fault, dtype: fp32, dims: {n: 2048}}\n";
  const std::string cli = testing::ktune_cli_path() + " --socket " + (m_dir / "ktuned.sock");
  auto [rc, out] = testing::run_command(cli + " plan apply " + plan + " 2>&1");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("2 jobs queued, 0 already"), std::string::npos) << out;
  std::tie(rc, out) = testing::run_command(cli + " plan apply " + plan + " 2>&1");
  EXPECT_NE(out.find("0 jobs queued, 2 already"), std::string::npos) << out;
  std::tie(rc, out) = testing::run_command(cli + " --json jobs");
  ASSERT_EQ(rc, 0) << out;
  Json j = Json::parse(out);
  EXPECT_EQ(j["counts"]["queued"], 2);
  for (const auto& job : j["jobs"]) EXPECT_EQ(job["origin"], "plan");
  EXPECT_EQ(status()["lanes"][0]["state"], "idle") << "gpu_policy never: nothing runs";
  // A bad plan queues nothing and says why.
  std::ofstream(plan)
      << "- {op: fault, dtype: fp32, dims: {n: 0}}\n- {op: nosuchop, dtype: fp32, dims: {n: 8}}\n";
  std::tie(rc, out) = testing::run_command(cli + " plan apply " + plan + " 2>&1");
  EXPECT_EQ(rc, 4) << out;  // invalid_problem (docs/cli.md, exit codes)
  EXPECT_NE(out.find("problems[0]"), std::string::npos) << out;
  EXPECT_NE(out.find("problems[1]"), std::string::npos) << out;
}

// The CLI has a command for every op of the op table (watch is how `ktune tune` follows a job;
// the pin family is one command group: `ktune pin delete` is unpin, `pin list|show` is pins).
TEST(CliOpTableTest, EveryOpHasACommand) {
  auto [rc, help] = testing::run_command(testing::ktune_cli_path() + " --help 2>&1");
  EXPECT_EQ(rc, 0) << help;
  auto [pin_rc, pin_help] = testing::run_command(testing::ktune_cli_path() + " pin --help 2>&1");
  EXPECT_EQ(pin_rc, 0) << pin_help;
  const std::map<std::string_view, std::string> subcommand = {{"unpin", "delete"},
                                                              {"pins", "list"}};
  for (const auto& op : protocol::k_ops) {
    if (op.name == "watch") continue;
    if (auto it = subcommand.find(op.name); it != subcommand.end()) {
      EXPECT_NE(pin_help.find("  " + it->second + " "), std::string::npos)
          << "no `ktune pin " << it->second << "` (op " << op.name << ") in:\n"
          << pin_help;
      continue;
    }
    EXPECT_NE(help.find("  " + std::string(op.name) + " "), std::string::npos)
        << "no `ktune " << op.name << "` in:\n"
        << help;
  }
}

// A TCP client without the token is refused whatever the Unix clients made hot in the caches.
TEST_F(BackgroundTest, TokenlessTcpIsRefusedEvenForCachedAnswers) {
  const int port = [] {  // a free loopback port
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    const int p = ntohs(a.sin_port);
    ::close(fd);
    return p;
  }();
  auto d = daemon(1, {"tuning.gpu_policy=never", "server.tcp=127.0.0.1:" + std::to_string(port),
                      "server.tcp_token=s3cret"});
  ASSERT_TRUE(d->start());
  const std::string line =
      R"({"v":1,"id":1,"op":"lookup","problem":{"op":"fault","dtype":"fp32","dims":{"n":4096}}})";
  auto send_line = [&](bool tcp) {
    const int fd = tcp ? testing::loopback_connect("127.0.0.1:" + std::to_string(port))
                       : testing::unix_connect(m_dir / "ktuned.sock");
    if (fd < 0) return std::string("connect");
    const std::string out = line + "\n";
    (void)!::write(fd, out.data(), out.size());
    std::string reply;
    char c;
    while (::read(fd, &c, 1) == 1 && c != '\n') reply += c;
    ::close(fd);
    return reply;
  };
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Json::parse(send_line(false))["ok"], true);
  Json refused = Json::parse(send_line(true));
  EXPECT_EQ(refused["ok"], false) << refused.dump();
  EXPECT_EQ(refused["error"]["code"], "unauthorized") << refused.dump();
}

// A 60,000-record import runs on the executor: another client's cached lookups go on being
// answered while it runs. How fast they stay (their tail beside back-to-back imports) is measured
// by bench/lookup_traffic/run.sh's cached+import point, not timed here.
TEST_F(BackgroundTest, BigImportDoesNotStallCachedLookups) {
#if defined(__SANITIZE_ADDRESS__)
  // Instrumented, the import runs ~20x slower, behind lookups that take both cores: a tenth of it
  // checks the same paths in reasonable time.
  constexpr int k_records = 6'000;
#else
  constexpr int k_records = 60'000;
#endif
  const std::vector<WinnerRecord> records = gemm_winners(k_records);
  const std::string table = render_table(records, TableFormat::json);
  // Imports must name installed templates: the built-in ones (gemm) beside the test templates.
  auto d = daemon(1, {"tuning.gpu_policy=never", "lookup.nearest_radius=0",
                      "templates.dirs=" + builtin_template_dir() + ":" + k_test_templates});
  ASSERT_TRUE(d->start());
  Client seed(options());
  std::vector<WinnerRecord> first(records.begin(), records.begin() + 10);
  ASSERT_TRUE(seed.import_table(render_table(first, TableFormat::json)));
  const protocol::LookupRequest hot{
      {"gemm", "bf16", "", "rr", {{"M", 17}, {"N", 4096}, {"K", 4096}}}, testing::h200().id(), 4};
  std::atomic<bool> importing{true};
  double import_us = 0;  // read after import.get()
  auto import = std::async(std::launch::async, [&] {
    Client c(options(std::chrono::seconds(600)));
    const auto t0 = Clock::now();
    auto r = c.import_table(table);
    import_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    importing = false;
    return r;
  });
  Client reader(options());
  std::vector<double> during;
  while (importing) {
    const auto t0 = Clock::now();
    auto r = reader.lookup(hot);
    ASSERT_TRUE(r) << r.error().message;
    during.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  auto imported = import.get();
  ASSERT_TRUE(imported) << imported.error().message;
  EXPECT_EQ((*imported)["total"], k_records);
  ASSERT_GT(during.size(), 10u) << "lookups kept being answered during the import";
  std::sort(during.begin(), during.end());
  const double p99 = during[during.size() * 99 / 100];
  std::printf(
      "%d-record import in %.0f ms: %zu cached lookups answered meanwhile, p50 %.0f us, p99 %.0f "
      "us, max %.0f us\n",
      k_records, import_us / 1e3, during.size(), during[during.size() / 2], p99, during.back());
  // Not a latency target: a lookup queued behind the import (the import run on the thread that
  // reads the sockets) would wait for most of it, whatever the machine's speed or load.
  EXPECT_LT(during.back(), import_us / 2) << "a lookup waited for the import";
  RecordProperty("lookups_during_import", int(during.size()));
  RecordProperty("p99_us", std::to_string(p99));
  EXPECT_EQ(status()["winners"], k_records);
}

// SIGTERM right after a client has sent a large import: the import is either carried out and
// answered ok, or not run and answered by the `unavailable` line (docs/protocol.md § Shutdown);
// never committed without a reply, and the next start holds exactly what the reply said.
TEST_F(BackgroundTest, AnImportInFlightAtStopIsAnsweredAndWhatItSaidHolds) {
#if defined(__SANITIZE_ADDRESS__)
  constexpr int k_records = 2'000;  // instrumented imports run ~20x slower: within the drain
#else
  constexpr int k_records = 20'000;
#endif
  const std::vector<WinnerRecord> records = gemm_winners(k_records);
  const std::string table = render_table(records, TableFormat::json);
  const std::vector<std::string> sets = {
      "tuning.gpu_policy=never",
      "templates.dirs=" + builtin_template_dir() + ":" + k_test_templates};
  auto d = daemon(1, sets);
  ASSERT_TRUE(d->start());
  const int fd = testing::unix_connect(m_dir / "ktuned.sock");
  ASSERT_GE(fd, 0);
  const std::string out =
      R"({"v":2,"id":7,"op":"import","attach":)" + std::to_string(table.size()) + "}\n" + table;
  for (size_t off = 0; off < out.size();) {  // returns once the daemon has taken most of it
    const ssize_t n = ::write(fd, out.data() + off, out.size() - off);
    ASSERT_GT(n, 0) << std::strerror(errno);
    off += size_t(n);
  }
  EXPECT_EQ(d->stop(), 0);
  std::string reply;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) reply.append(buf, size_t(n));
  ::close(fd);
  ASSERT_FALSE(reply.empty()) << "closed without a reply";
  ASSERT_EQ(reply.back(), '\n');
  const Json r = Json::parse(reply);  // one line
  auto again = daemon(1, sets);
  ASSERT_TRUE(again->start());
  if (r["ok"] == true) {
    EXPECT_EQ(r["id"], 7);
    EXPECT_EQ(r["result"]["total"], k_records);
    EXPECT_EQ(status()["winners"], k_records);
    RecordProperty("outcome", "imported");
  } else {
    EXPECT_EQ(r["error"]["code"], "unavailable") << reply;
    EXPECT_TRUE(r["id"].is_null()) << reply;
    EXPECT_EQ(status()["winners"], 0);
    RecordProperty("outcome", "not run");
  }
}

}  // namespace
}  // namespace ktune
