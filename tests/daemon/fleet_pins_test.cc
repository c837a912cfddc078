// Pins across a fleet, against a real redis-server (tests/fakes/redis_process.h): two nodes in one
// process, each a full set of daemon parts over its own store with a FleetSync, as ktuned wires
// them. A pin created on node A answers identically on node B, also after B's table changed;
// names are unique fleet-wide; creating needs Redis; a Redis that lost its data gets the pins
// back; a delete reaches every node. Skips without redis-server. Waits poll with deadlines.
#include <gtest/gtest.h>

#include <csignal>
#include <thread>

#include "daemon/fleet/sync.h"
#include "store/table_io.h"
#include "templates/space.h"
#include "tests/fakes/daemon_parts.h"
#include "tests/fakes/eventually.h"
#include "tests/fakes/redis_process.h"
#include "tests/fakes/require_tool.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

using namespace std::chrono_literals;
using protocol::Json;
using testing::builtin_templates;
using testing::eventually;
using testing::RedisProcess;
using testing::TempDir;

Problem gemm(std::int64_t m) {
  return Problem{"gemm", "bf16", "bf16", "rc", {{"M", m}, {"N", 4096}, {"K", 4096}}};
}

WinnerRecord measured(const Problem& p, double us, size_t nth, const std::string& node) {
  WinnerRecord w = testing::winner(p, us, node);
  const KernelTemplate* t = builtin_templates().find("gemm");
  w.ranked.resize(1);
  w.ranked[0].template_hash = t->hash;
  w.ranked[0].params = SearchSpace::build(*t, p, DeviceLimits{})->configs().at(nth);
  w.validators.nvrtc = "13.0";
  return w;
}

struct FleetNode {
  FleetNode(const std::string& name, const std::string& socket) {
    DaemonConfig config = default_config();
    config.nearest_radius = 2.0;
    config.fleet_redis = socket;
    config.fleet_namespace = "pins-test";
    config.fleet_timeout_ms = 300;
    NodeIdentity node;
    node.driver = "none";
    node.nvrtc = "13.0";
    node.node_id = name;
    node.gpu_error = "no GPU in tests";
    parts = std::make_unique<testing::DaemonParts>(config, builtin_templates(), node);
    auto f = FleetSync::create(
        {parts->config, parts->catalog, parts->jobs, parts->store, parts->node, parts->pins});
    EXPECT_TRUE(f && *f);
    fleet = std::move(*f);
    parts->ctx.fleet = fleet.get();
    fleet->start();
  }
  ~FleetNode() { fleet->stop(); }

  Json call(const Json& request) {
    return Json::parse(parts->dispatcher.handle(request.dump()).line);
  }
  Json lookup(std::int64_t m, const std::string& pin = "") {
    Json j = {
        {"v", 1},
        {"id", 1},
        {"op", "lookup"},
        {"device", "nvidia-h200"},
        {"problem",
         {{"op", "gemm"}, {"dtype", "bf16"}, {"dims", {{"M", m}, {"N", 4096}, {"K", 4096}}}}}};
    if (!pin.empty()) j["pin"] = pin;
    return call(j);
  }
  std::string pin_id(const std::string& name) {
    auto p = parts->pins.find(name);
    return p ? p->info.id : "";
  }
  bool connected() { return fleet->summary()["connected"].get<bool>(); }

  std::unique_ptr<testing::DaemonParts> parts;
  std::unique_ptr<FleetSync> fleet;
};

Json import_request(const std::vector<WinnerRecord>& records) {
  return {
      {"v", 1}, {"id", 1}, {"op", "import"}, {"table", render_table(records, TableFormat::json)}};
}

TEST(FleetPinsTest, APinMadeOnOneNodeAnswersIdenticallyOnEvery) {
  KTUNE_REQUIRE_TOOL(!RedisProcess::binary().empty(), "redis-server");
  ::signal(SIGPIPE, SIG_IGN);  // as ktuned does: Redis is stopped under a live connection below
  TempDir dir;
  RedisProcess redis(dir.path());
  ASSERT_TRUE(redis.start());
  FleetNode a("node-a", redis.socket()), b("node-b", redis.socket());
  ASSERT_TRUE(eventually([&] { return a.connected() && b.connected(); }));

  // A table both nodes share, then a pin of it made on A.
  ASSERT_TRUE(a.call(import_request(
      {measured(gemm(4096), 190.0, 0, "node-a"), measured(gemm(16), 22.0, 0, "node-a")}))["ok"]);
  ASSERT_TRUE(eventually([&] { return b.parts->index.size() == 2; }));
  const Json created = a.call({{"v", 1}, {"id", 1}, {"op", "pin"}, {"name", "run1"}});
  ASSERT_TRUE(created["ok"]) << created.dump();
  const std::string id = created["result"]["id"];
  ASSERT_TRUE(eventually([&] { return b.pin_id("run1") == id; })) << "the pin reaches node B";
  // Counted just after the pin is installed (and visible): poll for it too.
  EXPECT_TRUE(eventually([&] { return b.fleet->summary()["pins_received"] == 1; }));
  EXPECT_EQ(a.fleet->summary()["pins_received"], 0) << "its own pin is not received back";

  const Json on_a = a.lookup(4096, "run1"), on_b = b.lookup(4096, "run1");
  ASSERT_TRUE(on_a["ok"]) << on_a.dump();
  EXPECT_EQ(on_a, on_b) << "the same reply, byte for byte";
  EXPECT_EQ(on_b["result"]["pin"]["id"], id);
  EXPECT_EQ(a.lookup(32, "run1"), b.lookup(32, "run1")) << "the same fallback too";

  // B's table moves on (a faster winner imported there, which reaches A too): the pin does not.
  ASSERT_TRUE(b.call(import_request({measured(gemm(4096), 150.0, 1, "node-b")}))["ok"]);
  EXPECT_EQ(b.lookup(4096)["result"]["entries"][0]["median_us"], 150.0);
  ASSERT_TRUE(
      eventually([&] { return a.lookup(4096)["result"]["entries"][0]["median_us"] == 150.0; }));
  EXPECT_EQ(b.lookup(4096, "run1"), on_b);
  EXPECT_EQ(a.lookup(4096, "run1"), on_a);

  // Names are unique fleet-wide: B cannot make another "run1", even after dropping its copy.
  const Json again = b.call({{"v", 1}, {"id", 1}, {"op", "pin"}, {"name", "run1"}});
  EXPECT_EQ(again["error"]["code"], "already_exists") << again.dump();
  ASSERT_TRUE(b.parts->pins.drop("run1"));
  const Json elsewhere = b.call({{"v", 1}, {"id", 1}, {"op", "pin"}, {"name", "run1"}});
  EXPECT_EQ(elsewhere["error"]["code"], "already_exists") << elsewhere.dump();
  EXPECT_NE(elsewhere["error"]["message"].get<std::string>().find("node-a"), std::string::npos);

  // Redis gone: pins keep answering; a new pin is refused (other nodes could not see it).
  redis.stop();
  ASSERT_TRUE(eventually([&] { return !a.connected(); }));
  EXPECT_EQ(a.lookup(4096, "run1"), on_a);
  const Json offline = a.call({{"v", 1}, {"id", 1}, {"op", "pin"}, {"name", "run2"}});
  EXPECT_EQ(offline["error"]["code"], "unavailable") << offline.dump();
  EXPECT_FALSE(a.parts->pins.find("run2"));

  // Redis back, empty: A publishes its pin again; B, which had lost its copy, gets it back.
  ASSERT_TRUE(redis.start());
  ASSERT_TRUE(eventually([&] { return b.pin_id("run1") == id; }, 15s));
  EXPECT_EQ(b.lookup(4096, "run1"), on_b);

  // A delete on B reaches A; a lookup with the pin is then not_found on both.
  const Json deleted = b.call({{"v", 1}, {"id", 1}, {"op", "unpin"}, {"name", "run1"}});
  ASSERT_TRUE(deleted["ok"]) << deleted.dump();
  ASSERT_TRUE(eventually([&] { return a.pin_id("run1").empty(); }));
  EXPECT_EQ(a.lookup(4096, "run1")["error"]["code"], "not_found");
  EXPECT_EQ(b.lookup(4096, "run1")["error"]["code"], "not_found");
  // And the name is free again, fleet-wide.
  const Json remade = b.call({{"v", 1}, {"id", 1}, {"op", "pin"}, {"name", "run1"}});
  ASSERT_TRUE(remade["ok"]) << remade.dump();
  ASSERT_TRUE(eventually([&] { return a.pin_id("run1") == remade["result"]["id"]; }));
  EXPECT_EQ(a.lookup(4096, "run1")["result"]["entries"][0]["median_us"], 150.0);
}

}  // namespace
}  // namespace ktune
