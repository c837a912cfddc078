// A fleet end to end: a real redis-server on a Unix socket in a temp dir and three real ktuned
// processes whose lanes drive fake workers (tests/fakes/fake_worker.cc: no GPU), all of one
// device class. Label "e2e"; skipped when redis-server is not installed, failed under .ci/run
// (tests/fakes/require_tool.h).
//
//   1. 50 keys asked on all three nodes (missed on each that asks before the fleet has the
//      winner): each is tuned exactly once fleet-wide (the jobs that ran, counted on every node)
//      and every node ends with the same table.
//   2. kill -9 of the node tuning a key: another node takes the key over once the lease (1.5 s
//      here) runs out, reusing the trials the dead node shared; the restarted node catches up.
//   3. Redis stopped for KTUNE_FLEET_TEST_OUTAGE_S seconds (default 3; the scenario is
//      10) and restarted empty: the nodes keep serving and tune alone, say so in status and
//      metrics, and afterwards converge on one table with nothing lost.
// Waits poll observable state with deadlines; nothing sleeps to synchronise.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "client/client.h"
#include "tests/fakes/daemon_process.h"
#include "tests/fakes/eventually.h"
#include "tests/fakes/redis_process.h"
#include "tests/fakes/require_tool.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;
using protocol::Json;
using testing::DaemonProcess;
using testing::RedisProcess;
using testing::TempDir;
using namespace std::chrono_literals;

const std::string k_fake_worker = std::string(KTUNE_BINARY_DIR) + "/tests/fake-worker";
const std::string k_test_templates = std::string(KTUNE_SOURCE_DIR) + "/tests/data/templates";
constexpr int k_nodes = 3;
constexpr int k_keys = 50;

template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = 30s) {
  return testing::eventually(pred, timeout,
                             std::chrono::milliseconds(20));  // waits on other processes
}

protocol::ProblemSpec scale(std::int64_t n) {
  return {"scale", "fp32", "", "", {{"n", n}}};
}

class FleetE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    KTUNE_REQUIRE_TOOL(!RedisProcess::binary().empty(), "redis-server");
    std::filesystem::create_directories(m_dir / "nvml");
    ASSERT_TRUE(m_redis.start()) << "redis-server did not start";
    for (int i = 0; i < k_nodes; ++i) m_nodes.push_back(make_node(i));
  }
  void TearDown() override {
    if (!HasFailure()) return;
    for (int i = 0; i < k_nodes; ++i) {
      std::ifstream log(m_dir / ("n" + std::to_string(i) + ".log"));
      std::stringstream text;
      text << log.rdbuf();
      const std::string all = text.str();
      std::printf("---- node-%d log (last 4000 bytes) ----\n%s\n", i,
                  all.substr(all.size() > 4000 ? all.size() - 4000 : 0).c_str());
    }
  }

  std::unique_ptr<DaemonProcess> make_node(int i) {
    const std::string n = std::to_string(i);
    std::vector<std::string> sets = {"templates.dirs=" + k_test_templates,
                                     "tuning.worker=" + k_fake_worker,
                                     "tuning.devices=0",
                                     "tuning.gpu_policy=always",
                                     "tuning.strategy=exhaustive",
                                     "tuning.budget_trials=3",
                                     "tuning.miss_threshold_us=0",
                                     "tuning.trial_timeout_ms=5000",
                                     "templates.compile_threads=1",
                                     "lookup.nearest_radius=0",
                                     "fleet.redis=" + m_redis.socket(),
                                     "fleet.namespace=e2e",
                                     "fleet.node_name=node-" + n,
                                     "fleet.lease_ms=1500",
                                     "fleet.timeout_ms=300"};
    std::vector<std::string> args;
    for (auto& s : sets) args.insert(args.end(), {"--set", s});
    auto d = std::make_unique<DaemonProcess>(m_dir / ("n" + n + ".sock"), m_dir / ("n" + n), args);
    d->set_env({"KTUNE_FAKE_NVML_DIR=" + (m_dir / "nvml"), "FAKE_WORKER_DELAY_MS=60",
                "FAKE_WORKER_LOG=" + (m_dir / ("worker-" + n + ".log"))});
    return d;
  }
  void start_all() {
    for (auto& d : m_nodes) ASSERT_TRUE(d->start());
  }

  ClientOptions options(int i) const {
    ClientOptions o;
    o.socket_path = m_dir / ("n" + std::to_string(i) + ".sock");
    o.timeout = 10s;
    o.cache_capacity = 0;
    return o;
  }
  Json call(int i, const std::string& op, Json body = Json::object()) {
    Client c(options(i));
    auto r = c.call(op, std::move(body));
    return r ? *r : Json{{"error", r.error().message}};
  }
  Json job(int i, const std::string& id) { return call(i, "job", {{"job", id}}); }
  // Node i's fleet report as soon as one is whole: a report whose Redis reads failed (a command
  // timed out on a loaded machine) carries `fleet_error` and no `nodes`/`keys_tuned`, and says
  // nothing about what the fleet converged to. The last reply when none came whole within 10 s.
  Json fleet_report(int i) {
    Json f;
    (void)eventually(
        [&] {
          f = call(i, "fleet");
          return f.is_object() && !f.contains("fleet_error") && !f.contains("error");
        },
        10s);
    return f;
  }
  std::string provenance(int i, std::int64_t n) {
    Client c(options(i));
    auto r = c.lookup({scale(n), "", 1});
    return r ? r->entries.front().provenance : "error: " + r.error().message;
  }
  // Every winner of a node's table, without the export's timestamp.
  Json table(int i) {
    Json t = call(i, "export");
    if (!t.is_object()) return Json();
    return Json::parse(t["content"].get<std::string>())["winners"];
  }
  size_t winners(int i) { return call(i, "status").value("winners", size_t(0)); }
  // Problem keys of the jobs a node ran to a winner itself (not ended by the fleet's winner).
  std::vector<std::string> tuned_here(int i) {
    std::vector<std::string> out;
    Json jobs = call(i, "jobs", {{"limit", 1000}});
    for (const auto& j : jobs["jobs"])
      if (j["state"] == "done" && !j["message"].get<std::string>().starts_with("tuned by node"))
        out.push_back(j["problem"].get<std::string>());
    return out;
  }
  bool converged(size_t expected) {
    const Json first = table(0);
    if (!first.is_array() || first.size() != expected) return false;
    for (int i = 1; i < k_nodes; ++i)
      if (table(i) != first) return false;
    return true;
  }
  std::string http_metrics(int i) const {
    std::ifstream log(m_dir / ("n" + std::to_string(i) + ".log"));
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    const auto at = text.rfind("metrics=127.0.0.1:");
    if (at == std::string::npos) return "";
    const int port = std::atoi(text.c_str() + at + 18);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(std::uint16_t(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string out;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      const std::string req = "GET /metrics HTTP/1.0\r\n\r\n";
      (void)!::write(fd, req.data(), req.size());
      char buf[4096];
      for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
    }
    ::close(fd);
    return out;
  }

  TempDir m_dir;
  RedisProcess m_redis{m_dir.path()};
  std::vector<std::unique_ptr<DaemonProcess>> m_nodes;
};

TEST_F(FleetE2ETest, KeysAreTunedOnceCrashesAreTakenOverAndOutagesConverge) {
  start_all();
  const auto t0 = Clock::now();
  // ---- 1. every node asks for the same 50 keys, each in its own order ----
  std::vector<std::int64_t> keys;
  for (int k = 0; k < k_keys; ++k) keys.push_back(1024 + 8 * k);
  std::map<std::int64_t, int> missed;  // key -> nodes that answered it heuristic
  for (int i = 0; i < k_nodes; ++i) {
    std::vector<std::int64_t> order = keys;
    std::rotate(order.begin(), order.begin() + i * k_keys / k_nodes, order.end());
    for (auto n : order) {
      // exact when another node tuned it already (a slow build asks late): not a miss here
      const std::string p = provenance(i, n);
      EXPECT_TRUE(p == "heuristic" || p == "exact") << "n=" << n << ": " << p;
      missed[n] += p == "heuristic";
    }
  }
  for (auto n : keys) EXPECT_GE(missed[n], 1) << "n=" << n << " was missed somewhere";
  ASSERT_TRUE(eventually(
      [&] {
        for (int i = 0; i < k_nodes; ++i)
          if (winners(i) < k_keys) return false;
        return true;
      },
      90s))
      << call(0, "fleet").dump(2);
  std::map<std::string, int> tuned;  // problem key -> nodes that tuned it
  size_t counted = 0;
  for (int i = 0; i < k_nodes; ++i)
    for (const auto& key : tuned_here(i)) ++tuned[key], ++counted;
  EXPECT_EQ(tuned.size(), size_t(k_keys));
  EXPECT_EQ(counted, size_t(k_keys)) << "each key tuned exactly once fleet-wide";
  for (const auto& [key, n] : tuned) EXPECT_EQ(n, 1) << key;
  std::uint64_t tuned_total = 0;
  for (int i = 0; i < k_nodes; ++i) {
    const Json f = fleet_report(i);
    tuned_total += f["tuned"].get<std::uint64_t>();
    EXPECT_EQ(f["connected"], true) << f.dump(2);
    EXPECT_EQ(f["nodes"].size(), size_t(k_nodes)) << f.dump(2);
    EXPECT_EQ(f["keys_tuned"], k_keys) << f.dump(2);
    // Every key this node did not tune reached its table through a merge, and was counted.
    EXPECT_GE(f["merged"].get<std::uint64_t>(), k_keys - tuned_here(i).size()) << f.dump(2);
    for (auto n : keys) EXPECT_EQ(provenance(i, n), "exact") << "node " << i << " n=" << n;
  }
  EXPECT_EQ(tuned_total, std::uint64_t(k_keys));
  ASSERT_TRUE(eventually([&] { return converged(k_keys); }, 10s)) << "same table on every node";
  const double phase1_s = std::chrono::duration<double>(Clock::now() - t0).count();

  // ---- 2. kill -9 the node tuning a key; another finishes it after the lease ----
  const protocol::ProblemSpec big = scale(1 << 20);
  Client::TuneOptions budget;
  budget.budget_trials = 20;
  const int shared_before = call(0, "fleet")["trials"]["shared"].get<int>();
  std::string victim_job;
  {
    Client c(options(0));
    auto t = c.tune(big, budget);
    ASSERT_TRUE(t) << t.error().message;
    victim_job = (*t)["job"]["id"].get<std::string>();
  }
  ASSERT_TRUE(eventually([&] { return job(0, victim_job).value("trials", 0) >= 3; }))
      << job(0, victim_job).dump(2);
  std::map<int, std::string> waiting;  // the other nodes want the key too: they wait
  for (int i = 1; i < k_nodes; ++i) {
    Client c(options(i));
    auto t = c.tune(big, budget);
    ASSERT_TRUE(t) << t.error().message;
    waiting[i] = (*t)["job"]["id"].get<std::string>();
  }
  ASSERT_TRUE(eventually([&] {
    return call(0, "fleet")["trials"]["shared"].get<int>() >= shared_before + 3;
  })) << "node-0 shares its trials as it measures them";
  m_nodes[0]->crash();
  const auto killed = Clock::now();
  ASSERT_TRUE(eventually(
      [&] {
        for (const auto& [i, id] : waiting) {
          const Json j = job(i, id);
          if (j.value("state", "") != "done") return false;
        }
        return true;
      },
      30s))
      << job(1, waiting[1]).dump(2) << job(2, waiting[2]).dump(2);
  const double takeover_s = std::chrono::duration<double>(Clock::now() - killed).count();
  int took_over = 0;
  for (const auto& [i, id] : waiting) {
    const Json j = job(i, id);
    if (j["message"].get<std::string>().starts_with("tuned by node")) continue;
    ++took_over;
    EXPECT_GE(j["reused"].get<int>(), 3) << "trials node-0 measured were reused: " << j.dump(2);
  }
  EXPECT_EQ(took_over, 1) << "one node finished the key, the other took its winner";
  EXPECT_GE(takeover_s, 0.5) << "the lease (1.5 s, renewed every 0.5 s) had to run out first";
  for (int i = 1; i < k_nodes; ++i) EXPECT_EQ(provenance(i, 1 << 20), "exact");
  // The killed node comes back: it catches up, and its interrupted job ends with the winner.
  m_nodes[0] = make_node(0);
  ASSERT_TRUE(m_nodes[0]->start());
  ASSERT_TRUE(eventually([&] { return converged(k_keys + 1); }, 20s)) << "node-0 caught up";
  EXPECT_TRUE(eventually([&] { return job(0, victim_job).value("state", "") == "done"; }))
      << job(0, victim_job).dump(2);

  // ---- 3. Redis goes away; the nodes serve and tune alone, then converge ----
  const char* outage_env = std::getenv("KTUNE_FLEET_TEST_OUTAGE_S");
  const double outage_s = outage_env ? std::atof(outage_env) : 3.0;
  m_redis.stop();
  const auto down = Clock::now();
  ASSERT_TRUE(eventually(
      [&] {
        for (int i = 0; i < k_nodes; ++i)
          if (call(i, "status")["fleet"].value("connected", true)) return false;
        return true;
      },
      10s))
      << call(0, "status")["fleet"].dump(2);
  EXPECT_NE(http_metrics(1).find("ktune_fleet_connected 0.000000\n"), std::string::npos);
  std::vector<std::int64_t> outage_keys;
  for (int i = 0; i < k_nodes; ++i)
    for (int k = 0; k < 2; ++k) {
      outage_keys.push_back(1 << (12 + 2 * i + k));
      EXPECT_EQ(provenance(i, outage_keys.back()), "heuristic");
    }
  ASSERT_TRUE(eventually([&] {
    for (int i = 0; i < k_nodes; ++i)
      for (int k = 0; k < 2; ++k)
        if (provenance(i, outage_keys[size_t(2 * i + k)]) != "exact") return false;
    return true;
  })) << "each node tuned its keys alone";
  // Lookups keep being answered for the whole outage: at least one round even when tuning the
  // outage keys outlasted outage_s, so the check below never runs on nothing.
  size_t asked = 0, served = 0;
  do {
    for (int i = 0; i < k_nodes; ++i, ++asked) served += provenance(i, keys[size_t(i)]) == "exact";
    std::this_thread::sleep_for(50ms);  // pacing, not synchronisation: the outage lasts outage_s
  } while (Clock::now() - down < std::chrono::duration<double>(outage_s));
  EXPECT_EQ(served, asked) << "every lookup during the outage answers from the node's own table";
  const Json alone = call(2, "fleet");
  EXPECT_EQ(alone["connected"], false) << alone.dump(2);
  EXPECT_GE(alone["claims"]["alone"].get<int>(), 2) << alone.dump(2);
  ASSERT_TRUE(m_redis.start());  // empty: it lost everything
  const auto back = Clock::now();
  ASSERT_TRUE(eventually([&] { return converged(k_keys + 1 + outage_keys.size()); }, 30s))
      << call(0, "fleet").dump(2);
  const double converge_s = std::chrono::duration<double>(Clock::now() - back).count();
  for (int i = 0; i < k_nodes; ++i) {
    const Json f = fleet_report(i);
    EXPECT_EQ(f["connected"], true) << f.dump(2);
    EXPECT_GE(f["disconnects"].get<int>(), 1);
    EXPECT_EQ(f["keys_tuned"], k_keys + 1 + outage_keys.size()) << f.dump(2);
  }
  std::printf(
      "fleet e2e: %d keys on %d nodes in %.1f s; takeover %.1f s after kill -9; "
      "converged %.1f s after Redis returned (outage %.1f s)\n",
      k_keys, k_nodes, phase1_s, takeover_s, converge_s, outage_s);
  RecordProperty("takeover_s", std::to_string(takeover_s));
  RecordProperty("converge_s", std::to_string(converge_s));
}

}  // namespace
}  // namespace ktune
