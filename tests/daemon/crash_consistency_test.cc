// Crash consistency: a real ktuned under a workload of imports, lookups and tuning jobs (fake
// workers, fake NVML: no GPU), SIGKILLed at a random moment, again and again. The clients keep a
// ledger of every write the daemon acknowledged; after each kill the store is inspected as the
// next start finds it (read-only: every record of every table must decode), and after each
// restart the ledger is checked against what the daemon serves:
//   - every acknowledged import is there (export) at the version acknowledged or a newer one it
//     was sent, and lookups answer it exact;
//   - every job acknowledged as queued is there, and at the end every one finishes (done).
// Some kills land during startup (the log replay, the flush at open) rather than under load.
//
// KTUNE_CRASH_ITERATIONS (default 120; 30 under ASan) and KTUNE_CRASH_SEED (default fixed) are
// printed and may be overridden for longer soaks. Label "e2e".
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "client/client.h"
#include "store/records.h"
#include "store/rocksdb_store.h"
#include "store/table_io.h"
#include "tests/fakes/daemon_process.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;
using protocol::ErrorKind;
using protocol::Json;
using testing::DaemonProcess;
using testing::TempDir;

const std::string k_fake_worker = std::string(KTUNE_BINARY_DIR) + "/tests/fake-worker";
const std::string k_test_templates = std::string(KTUNE_SOURCE_DIR) + "/tests/data/templates";
constexpr int k_keys = 300;          // problems the importers write (fault, n = 1000 + key)
constexpr int k_tuned_problems = 6;  // problems tune requests name (fault, n = 64 << i)
constexpr std::int64_t k_epoch = 1'790'000'000;  // a record's timestamp is k_epoch + version

std::uint64_t env_number(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

#if defined(__SANITIZE_ADDRESS__)
constexpr std::uint64_t k_default_iterations = 30;  // instrumented: ~3 s a kill, loaded box
#else
constexpr std::uint64_t k_default_iterations = 120;
#endif

Problem imported_problem(int key) {
  return Problem{"fault", "fp32", "fp32", "", {{"n", 1000 + key}}};
}

std::string imported_key(int key) {
  return testing::h200().id() + "/" + imported_problem(key).key();
}

// Version `version` of key `key`: each version is faster than the one before, so the merge rule
// keeps the newest one written.
WinnerRecord imported(int key, int version, const std::string& hash, const std::string& nvrtc) {
  WinnerRecord w;
  w.device = testing::h200();  // not this node's device: its driver does not matter
  w.problem = imported_problem(key);
  w.validators = Validators{"580.159.03", nvrtc, k_store_format_version};
  RankedConfig c;
  c.template_name = "fault";
  c.template_hash = hash;
  c.params = {{"MODE", 0}, {"THREADS", 128}};
  c.median_us = 100000.0 / (version + 1);
  c.gbps = double(imported_problem(key).dim("n")) * 8 / (c.median_us * 1e3);  // fault's bytes
  w.ranked.push_back(c);
  w.node_id = "crash-harness";
  w.timestamp = k_epoch + version;
  w.trials = 1;
  w.strategy = "import";
  return w;
}

// What the daemon told the clients, and what they sent it. Thread-safe.
class Ledger {
 public:
  Ledger() : m_sent(k_keys, 0), m_acked(k_keys, 0) {}

  // Picks up to `n` distinct keys and gives each its next version: [(key, version)].
  std::vector<std::pair<int, int>> next_versions(std::mt19937_64& rng, int n) {
    std::lock_guard lock(m_mutex);
    std::set<int> keys;
    while (int(keys.size()) < n) keys.insert(int(rng() % k_keys));
    std::vector<std::pair<int, int>> out;
    for (int k : keys) out.emplace_back(k, ++m_sent[size_t(k)]);
    return out;
  }
  void acknowledged(const std::vector<std::pair<int, int>>& batch) {
    {
      std::lock_guard lock(m_mutex);
      for (auto [k, v] : batch) m_acked[size_t(k)] = std::max(m_acked[size_t(k)], v);
      ++m_imports;
      m_records += batch.size();
    }
    m_changed.notify_all();
  }
  // Waits until more than `count` imports were acknowledged; false when `timeout` passed.
  bool wait_imports_past(std::uint64_t count, std::chrono::milliseconds timeout) {
    std::unique_lock lock(m_mutex);
    return m_changed.wait_for(lock, timeout, [&] { return m_imports > count; });
  }
  void job(const std::string& id) {
    std::lock_guard lock(m_mutex);
    m_jobs.insert(id);
  }
  void failure(const std::string& what) {
    std::lock_guard lock(m_mutex);
    m_failures.push_back(what);
  }
  int acked(int key) const {
    std::lock_guard lock(m_mutex);
    return m_acked[size_t(key)];
  }
  int sent(int key) const {
    std::lock_guard lock(m_mutex);
    return m_sent[size_t(key)];
  }
  std::set<std::string> jobs() const {
    std::lock_guard lock(m_mutex);
    return m_jobs;
  }
  std::vector<std::string> failures() const {
    std::lock_guard lock(m_mutex);
    return m_failures;
  }
  std::uint64_t imports() const { return m_imports; }
  std::uint64_t records() const { return m_records; }

 private:
  mutable std::mutex m_mutex;
  std::condition_variable m_changed;
  std::vector<int> m_sent, m_acked;  // per key: newest version sent, newest acknowledged
  std::set<std::string> m_jobs;      // acknowledged as queued
  std::vector<std::string> m_failures;
  std::atomic<std::uint64_t> m_imports{0}, m_records{0};
};

// An error that means the daemon is gone (killed under the request): the client stops.
bool daemon_gone(const protocol::Error& e) {
  return e.kind == ErrorKind::connection_failed || e.kind == ErrorKind::timeout;
}

class CrashConsistencyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(m_dir / "nvml");
    m_seed = env_number("KTUNE_CRASH_SEED", 20261201);
    m_iterations = env_number("KTUNE_CRASH_ITERATIONS", k_default_iterations);
    m_rng.seed(m_seed);
    std::printf(
        "crash harness: seed %llu, %llu iterations (KTUNE_CRASH_SEED, "
        "KTUNE_CRASH_ITERATIONS)\n",
        static_cast<unsigned long long>(m_seed), static_cast<unsigned long long>(m_iterations));
  }
  void TearDown() override {
    if (!HasFailure()) return;
    std::ifstream log(m_dir / "state.log");
    std::stringstream text;
    text << log.rdbuf();
    const std::string all = text.str();
    std::printf("seed %llu; ---- ktuned log (last 6000 bytes) ----\n%s\n",
                static_cast<unsigned long long>(m_seed),
                all.substr(all.size() > 6000 ? all.size() - 6000 : 0).c_str());
  }

  std::unique_ptr<DaemonProcess> daemon() const {
    std::vector<std::string> args;
    for (std::string s :
         {"templates.dirs=" + k_test_templates, "tuning.worker=" + k_fake_worker,
          std::string("tuning.devices=0"), std::string("tuning.gpu_policy=always"),
          std::string("tuning.trial_timeout_ms=200"), std::string("tuning.strategy=exhaustive"),
          std::string("templates.compile_threads=2")}) {
      args.push_back("--set");
      args.push_back(s);
    }
    auto d = std::make_unique<DaemonProcess>(m_dir / "ktuned.sock", m_dir / "state", args);
    d->set_env({"KTUNE_FAKE_NVML_DIR=" + (m_dir / "nvml"), "FAKE_WORKER_DELAY_MS=20"});
    return d;
  }
  ClientOptions options() const {
    ClientOptions o;
    o.socket_path = m_dir / "ktuned.sock";
    o.timeout = std::chrono::seconds(10);
    o.cache_capacity = 0;
    return o;
  }
  // The fault template's hash and the node's NVRTC version, for records served exact.
  void learn_validators() {
    Client c(options());
    auto templates = c.templates();
    ASSERT_TRUE(templates) << templates.error().message;
    for (const auto& t : (*templates)["templates"])
      if (t["name"] == "fault") m_hash = t["hash"].get<std::string>();
    auto status = c.status();
    ASSERT_TRUE(status);
    m_nvrtc = (*status)["validators"]["nvrtc"].get<std::string>();
    ASSERT_FALSE(m_hash.empty());
  }

  void import_loop(std::atomic<bool>& stop, std::uint64_t seed);
  void lookup_loop(std::atomic<bool>& stop, std::uint64_t seed);
  void tune_loop(std::atomic<bool>& stop, std::mutex& m, std::condition_variable& cv,
                 std::uint64_t seed);
  void kill_under_load(DaemonProcess& d);
  void report(int startup_kills, double kill_s, double total_s);
  void check_store_as_found();
  void check_served();
  void wait_for_jobs();

  TempDir m_dir;
  std::uint64_t m_seed = 0, m_iterations = 0;
  std::mt19937_64 m_rng;
  std::string m_hash, m_nvrtc;
  Ledger m_ledger;
  std::uint64_t m_checked_imports = 0;  // acknowledged imports (per key) checked, all restarts
  std::uint64_t m_checked_jobs = 0;
  std::uint64_t m_records_inspected = 0;
};

void CrashConsistencyTest::import_loop(std::atomic<bool>& stop, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Client c(options());
  while (!stop) {
    const auto batch = m_ledger.next_versions(rng, 1 + int(rng() % 40));
    std::vector<WinnerRecord> records;
    for (auto [k, v] : batch) records.push_back(imported(k, v, m_hash, m_nvrtc));
    auto r = c.import_table(render_table(records, TableFormat::json));
    if (!r && daemon_gone(r.error())) return;
    if (!r) return m_ledger.failure("import refused: " + r.error().message);
    m_ledger.acknowledged(batch);
  }
}

// Every acknowledged import is answered exact, at that version or a newer one.
void CrashConsistencyTest::lookup_loop(std::atomic<bool>& stop, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Client c(options());
  while (!stop) {
    const int key = int(rng() % k_keys), acked = m_ledger.acked(key);
    if (acked == 0) continue;
    const Problem p = imported_problem(key);
    auto r = c.lookup({{p.op, p.dtype, "", "", p.dims}, testing::h200().id(), 1});
    if (!r && daemon_gone(r.error())) return;
    if (!r) return m_ledger.failure("lookup failed: " + r.error().message);
    const auto& e = r->entries.front();
    if (e.provenance != "exact" || e.median_us > 100000.0 / (acked + 1) * (1 + 1e-9))
      return m_ledger.failure("key " + std::to_string(key) + " acknowledged at version " +
                              std::to_string(acked) + " answered " + e.provenance + " " +
                              std::to_string(e.median_us) + " us");
  }
}

// Tune requests for a few problems (one job per problem at a time), paced by `cv`'s timeout.
void CrashConsistencyTest::tune_loop(std::atomic<bool>& stop, std::mutex& m,
                                     std::condition_variable& cv, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Client c(options());
  std::unique_lock lock(m);
  while (!stop) {
    lock.unlock();
    const std::int64_t n = std::int64_t(64) << (rng() % k_tuned_problems);
    Client::TuneOptions budget;
    budget.budget_trials = 6;
    auto r = c.tune({"fault", "fp32", "", "", {{"n", n}}}, budget);
    if (!r && daemon_gone(r.error())) return;
    if (!r) return m_ledger.failure("tune refused: " + r.error().message);
    m_ledger.job((*r)["job"]["id"].get<std::string>());
    lock.lock();
    cv.wait_for(lock, std::chrono::milliseconds(30), [&] { return stop.load(); });
  }
}

// The store as the next start will find it: every record of every table decodes.
void CrashConsistencyTest::check_store_as_found() {
  auto store = RocksDbStore::open(m_dir / "state/db", {.read_only = true});
  ASSERT_TRUE(store) << store.error().message;
  for (Table t : k_all_tables) {
    auto scanned = (*store)->scan(t, "", [&](std::string_view key, std::string_view value) {
      ++m_records_inspected;
      auto ok = check_record(t, value);
      EXPECT_TRUE(ok) << table_name(t) << " '" << key << "': " << ok.error().message;
      return bool(ok);
    });
    ASSERT_TRUE(scanned) << scanned.error().message;
  }
}

// What the restarted daemon serves against the ledger.
void CrashConsistencyTest::check_served() {
  Client c(options());
  auto exported = c.export_table("json");
  ASSERT_TRUE(exported) << exported.error().message;
  std::vector<ImportRejection> rejected;
  auto records = parse_table((*exported)["content"].get<std::string>(), "export", rejected);
  ASSERT_TRUE(records) << records.error().message;
  ASSERT_TRUE(rejected.empty()) << rejected.front().reason;
  std::map<std::string, int> served;  // imported key (device/problem) -> version
  for (const auto& w : *records)
    if (w.device == testing::h200()) served[w.key()] = int(w.timestamp - k_epoch);
  for (int k = 0; k < k_keys; ++k) {
    const int acked = m_ledger.acked(k), sent = m_ledger.sent(k);
    auto it = served.find(imported_key(k));
    if (acked > 0) {
      ++m_checked_imports;
      ASSERT_NE(it, served.end()) << "key " << k << " acknowledged, lost";
    }
    if (it == served.end()) continue;
    EXPECT_GE(it->second, acked) << "key " << k << " rolled back";
    EXPECT_LE(it->second, sent) << "key " << k << " at a version never sent";
  }
  for (int i = 0; i < 10; ++i) {  // lookups answer what export says
    const int k = int(m_rng() % k_keys);
    auto it = served.find(imported_key(k));
    if (it == served.end()) continue;
    const Problem p = imported_problem(k);
    auto r = c.lookup({{p.op, p.dtype, "", "", p.dims}, testing::h200().id(), 1});
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->entries.front().provenance, "exact");
    EXPECT_DOUBLE_EQ(r->entries.front().median_us, 100000.0 / (it->second + 1));
  }
  auto jobs = c.jobs(100'000);
  ASSERT_TRUE(jobs) << jobs.error().message;
  std::map<std::string, std::string> states;  // id -> state
  for (const auto& j : (*jobs)["jobs"]) states[j["id"].get<std::string>()] = j["state"];
  for (const auto& id : m_ledger.jobs()) {
    ++m_checked_jobs;
    ASSERT_TRUE(states.count(id)) << "job " << id << " acknowledged, lost";
    EXPECT_NE(states[id], "cancelled") << id;
  }
}

void CrashConsistencyTest::wait_for_jobs() {
  Client c(options());
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  for (const auto& id : m_ledger.jobs()) {
    Json state;
    while (Clock::now() < deadline) {
      auto j = c.job(id);
      ASSERT_TRUE(j) << j.error().message;
      state = (*j)["state"];
      if (state != "queued" && state != "running") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling, with a deadline
    }
    EXPECT_EQ(state, "done") << "job " << id;
  }
}

// Runs the clients against a ready daemon and SIGKILLs it at a random moment of the workload,
// whatever the clients are doing then.
void CrashConsistencyTest::kill_under_load(DaemonProcess& d) {
  std::atomic<bool> stop{false};
  std::mutex m;
  std::condition_variable cv;
  std::vector<std::thread> clients;
  clients.emplace_back([&, s = m_rng()] { import_loop(stop, s); });
  clients.emplace_back([&, s = m_rng()] { import_loop(stop, s); });
  clients.emplace_back([&, s = m_rng()] { lookup_loop(stop, s); });
  clients.emplace_back([&, s = m_rng()] { tune_loop(stop, m, cv, s); });
  // Three kills in four come once this life has acknowledged an import (so that every life
  // writes something, however slow the machine); the fourth at any time.
  const std::uint64_t imports = m_ledger.imports();
  if (m_rng() % 4 != 0) {
    EXPECT_TRUE(m_ledger.wait_imports_past(imports, std::chrono::seconds(30)))
        << "no import acknowledged in 30 s";
  }
  std::this_thread::sleep_for(std::chrono::microseconds(m_rng() % 150'000));
  d.crash();
  {
    std::lock_guard lock(m);
    stop = true;
  }
  cv.notify_all();
  for (auto& t : clients) t.join();
}

// The figures of the run, for docs/reliability.md.
void CrashConsistencyTest::report(int startup_kills, double kill_s, double total_s) {
  std::ifstream log(m_dir / "state.log");
  int torn = 0;  // restarts that found a log cut short by the kill (a write never acknowledged)
  for (std::string line; std::getline(log, line);)
    if (line.find("store_log_tail_dropped") != std::string::npos) ++torn;
  std::printf(
      "crash harness: seed %llu: %llu kills (%d during startup) in %.1f s, %.1f s in all; %llu "
      "imports (%llu records) acknowledged; %llu acknowledged-import checks after restarts; %zu "
      "jobs acknowledged, %llu job checks, all done; %llu records inspected after kills; %d "
      "restarts found a log cut short\n",
      static_cast<unsigned long long>(m_seed), static_cast<unsigned long long>(m_iterations),
      startup_kills, kill_s, total_s, static_cast<unsigned long long>(m_ledger.imports()),
      static_cast<unsigned long long>(m_ledger.records()),
      static_cast<unsigned long long>(m_checked_imports), m_ledger.jobs().size(),
      static_cast<unsigned long long>(m_checked_jobs),
      static_cast<unsigned long long>(m_records_inspected), torn);
  RecordProperty("seed", std::to_string(m_seed));
  RecordProperty("kills", int(m_iterations));
  RecordProperty("imports_acknowledged", std::to_string(m_ledger.imports()));
}

TEST_F(CrashConsistencyTest, SigkillUnderLoadLosesNothingAcknowledged) {
  const auto t0 = Clock::now();
  int startup_kills = 0;
  for (std::uint64_t i = 0; i < m_iterations && !HasFatalFailure(); ++i) {
    auto d = daemon();
    d->spawn();
    if (i > 0 && m_rng() % 100 < 15) {  // kill while it starts: log replay, flush at open
      ++startup_kills;
      std::this_thread::sleep_for(std::chrono::microseconds(m_rng() % 150'000));
      ASSERT_TRUE(d->running()) << "iteration " << i << ": ktuned exited by itself, code "
                                << d->wait_exit();
      d->crash();
    } else {
      ASSERT_TRUE(d->wait_ready(std::chrono::seconds(30), std::chrono::milliseconds(5)))
          << "iteration " << i << ": ktuned did not start";
      if (i == 0) learn_validators();
      check_served();
      kill_under_load(*d);
    }
    check_store_as_found();
  }
  const double kill_s = std::chrono::duration<double>(Clock::now() - t0).count();
  auto d = daemon();
  d->spawn();
  ASSERT_TRUE(d->wait_ready(std::chrono::seconds(30), std::chrono::milliseconds(5)));
  check_served();
  wait_for_jobs();
  EXPECT_EQ(d->stop(), 0);
  check_store_as_found();
  for (const auto& f : m_ledger.failures()) ADD_FAILURE() << f;
  report(startup_kills, kill_s, std::chrono::duration<double>(Clock::now() - t0).count());
}

}  // namespace
}  // namespace ktune
