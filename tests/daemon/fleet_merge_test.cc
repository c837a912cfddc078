// What a node merges from the fleet (FleetSync::merge, the path of both the event stream and a
// resync), without Redis: one node's parts over a store that can be made to fail its writes.
#include <gtest/gtest.h>

#include <atomic>

#include "daemon/fleet/record_codec.h"
#include "daemon/fleet/sync.h"
#include "store/mem_store.h"
#include "templates/space.h"
#include "tests/fakes/daemon_parts.h"
#include "tests/fakes/eventually.h"
#include "tests/fakes/flaky_store.h"
#include "tests/fakes/redis_process.h"
#include "tests/fakes/require_tool.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

using testing::builtin_templates;
using testing::FlakyStore;

// One node as ktuned wires it, with a FleetSync that is not started unless a test starts it (then
// on `redis`, a Unix socket).
struct Node {
  explicit Node(const std::string& name, std::string redis = "/nonexistent/redis.sock")
      : redis_path(std::move(redis)) {
    identity.node_id = name;
    identity.nvrtc = "13.0";
    (void)check_store_format(store, false);
  }
  std::string redis_path;
  DaemonConfig config = default_config();
  FlakyStore store;
  WinnerIndex index;
  TemplateSet templates{TemplateSet::Snapshot(std::shared_ptr<void>(), &builtin_templates())};
  NodeIdentity identity;
  Catalog catalog{store, index, templates, identity};
  JobQueue jobs{store, 16};
  PinTable pins{store, index, identity};
  FleetSync fleet{{config, catalog, jobs, store, identity, pins}, RedisEndpoint{redis_path, "", 0}};

  std::shared_ptr<const WinnerRecord> winner(const Problem& p) {
    return index.exact(testing::h200().id(), p);
  }
};

WinnerRecord measured(const Problem& p, double us, const std::string& node,
                      const std::string& nvrtc = "13.0") {
  WinnerRecord w = testing::winner(p, us, node);
  const KernelTemplate* gemm = builtin_templates().find("gemm");
  w.ranked.resize(1);
  w.ranked[0].template_hash = gemm->hash;
  w.ranked[0].params = *heuristic_config(*gemm, p, DeviceLimits{});
  w.validators.nvrtc = nvrtc;
  return w;
}

const Problem k_key = testing::gemm_problem(4096, 4096, 4096);

// One stream read can span two publishes of a key (a burst gathered for one merge, a catch-up
// after an outage). Each publish replaced the one before in Redis: the node merges the last, as
// a resync would, and a superseded value is not a rejected one. (Import refuses two records of
// one key, so the later, better one was dropped and the earlier served until the next resync.)
TEST(FleetMergeTest, TwoValuesOfOneKeyInOneReadMergeTheLast) {
  Node c("node-c");
  const Problem other = testing::gemm_problem(2048, 4096, 4096);
  ASSERT_TRUE(c.fleet.merge(
      {winner_value(measured(k_key, 12.0, "node-a")), winner_value(measured(other, 5.0, "node-a")),
       winner_value(measured(k_key, 10.0, "node-b"))},
      "fleet", FleetSync::Keys::may_repeat));
  ASSERT_TRUE(c.winner(k_key));
  EXPECT_EQ(c.winner(k_key)->ranked[0].median_us, 10.0);
  EXPECT_EQ(c.winner(k_key)->node_id, "node-b");
  ASSERT_TRUE(c.winner(other));
  EXPECT_EQ(c.fleet.summary()["rejected"], 0);
  EXPECT_EQ(c.fleet.summary()["merged"], 2);
}

// A store that cannot take the merge is an error the caller sees (the reader then reads the
// fleet's table again later), not a log line after which the values are gone.
TEST(FleetMergeTest, AMergeTheStoreCannotTakeIsAnErrorAndTheValuesMergeLater) {
  Node c("node-c");
  const std::vector<std::string> values = {winner_value(measured(k_key, 10.0, "node-b"))};
  c.store.failing = true;
  auto failed = c.fleet.merge(values, "fleet");
  ASSERT_FALSE(failed);
  EXPECT_NE(failed.error().message.find("no space left"), std::string::npos)
      << failed.error().message;
  EXPECT_FALSE(c.winner(k_key));
  c.store.failing = false;
  ASSERT_TRUE(c.fleet.merge(values, "fleet"));
  ASSERT_TRUE(c.winner(k_key));
  EXPECT_EQ(c.winner(k_key)->node_id, "node-b");
}

// A rolling NVRTC upgrade: this node (13.0) re-tuned a key whose fleet record was measured with
// 12.4 and is stale here. The fleet's faster 12.4 record, read again (a resync, a restart), does
// not replace the winner this node can serve as exact; the other way round a record fresh here
// replaces a stale one, however fast that was. (Import ranked them by time alone.)
TEST(FleetMergeTest, ARecordStaleHereNeverReplacesOneFreshHereAndAlwaysGivesWayToOne) {
  Node b("node-b");
  const WinnerRecord fresh = measured(k_key, 20.0, "node-b", "13.0");
  const WinnerRecord stale = measured(k_key, 10.0, "node-a", "12.4");
  ASSERT_FALSE(b.catalog.staleness(stale, false).empty());
  ASSERT_TRUE(*b.catalog.commit(fresh, "job"));
  ASSERT_TRUE(b.fleet.merge({winner_value(stale)}, "fleet"));
  EXPECT_EQ(b.winner(k_key)->validators.nvrtc, "13.0");

  Node c("node-c");
  const Problem other = testing::gemm_problem(2048, 4096, 4096);
  ASSERT_TRUE(c.fleet.merge({winner_value(measured(other, 10.0, "node-a", "12.4"))}, "fleet"));
  ASSERT_EQ(c.winner(other)->validators.nvrtc, "12.4");  // all it has: served as stale
  ASSERT_TRUE(c.fleet.merge({winner_value(measured(other, 20.0, "node-b", "13.0"))}, "fleet"));
  EXPECT_EQ(c.winner(other)->validators.nvrtc, "13.0");
  EXPECT_EQ(c.winner(other)->ranked[0].median_us, 20.0);
}

// A resync republishes this node's records of a GPU class it has no GPU of only where the hash
// has none: it does not judge them by that class's driver, so the faster record of an older
// driver, kept here, moved that class's hash back at every resync of this node, and that class's
// upgraded nodes tuned the key again.
TEST(FleetResyncTest, RecordsOfAClassThisNodeDoesNotOwnOnlyFillWhatTheHashLacks) {
  KTUNE_REQUIRE_TOOL(!testing::RedisProcess::binary().empty(), "redis-server");
  testing::TempDir dir;
  testing::RedisProcess redis(dir.path());
  ASSERT_TRUE(redis.start()) << "redis-server did not start";
  Node node("node-b", redis.socket());
  ASSERT_FALSE(node.identity.owns(testing::h200().id()));
  WinnerRecord upgraded = measured(k_key, 12.0, "node-h200");
  upgraded.validators.driver = "580.159.04";
  const Problem other = testing::gemm_problem(2048, 4096, 4096);
  WinnerRecord older = measured(k_key, 9.0, "node-b"), lacking = measured(other, 9.0, "node-b");
  older.validators.driver = lacking.validators.driver = "570.86.10";
  ASSERT_TRUE(*node.catalog.commit(older, "test"));
  ASSERT_TRUE(*node.catalog.commit(lacking, "test"));
  RedisLink link({RedisEndpoint{redis.socket(), "", 0}, "", std::chrono::milliseconds(500),
                  std::chrono::milliseconds(100)});
  FleetLayout layout(node.config.fleet_namespace);
  FleetWinners winners(link, layout, "node-h200");
  ASSERT_TRUE(winners.publish(upgraded, "", 1));
  node.fleet.start();
  ASSERT_TRUE(testing::eventually([&] { return node.fleet.summary()["resyncs"] >= 1; }));
  node.fleet.stop();
  auto value = [&](const Problem& p) {
    auto r = link.command({"HGET", layout.winners(testing::h200().id()), p.key()});
    auto w = r ? parse_winner_value(r->str) : std::unexpected(r.error());
    return w ? w->validators.driver + "/" + w->node_id : "<" + w.error().message + ">";
  };
  EXPECT_EQ(value(k_key), "580.159.04/node-h200") << "not moved back to the older driver's";
  EXPECT_EQ(value(other), "570.86.10/node-b") << "what the hash lacked is filled";
}

}  // namespace
}  // namespace ktune
