// Leases, fencing and the fleet's table against a real redis-server (tests/fakes/
// redis_process.h): two or three "nodes" in one process, each with its own store, catalog, link
// and FleetClaims, as ktuned wires them (daemon/fleet/sync.cc). Skips without redis-server.
// Waits poll with deadlines; nothing sleeps to synchronise.
#include <gtest/gtest.h>

#include <csignal>
#include <memory>
#include <thread>

#include "daemon/catalog.h"
#include "daemon/fleet/claims.h"
#include "daemon/fleet/record_codec.h"
#include "daemon/fleet/winners.h"
#include "store/mem_store.h"
#include "templates/space.h"
#include "tests/fakes/daemon_parts.h"
#include "tests/fakes/eventually.h"
#include "tests/fakes/redis_process.h"
#include "tests/fakes/require_tool.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

using namespace std::chrono_literals;
using testing::builtin_templates;
using testing::eventually;
using testing::RedisProcess;
using testing::TempDir;

// A measured winner the installed gemm template can instantiate (its hash, a config of its space).
WinnerRecord measured(const Problem& p, double us, const std::string& node) {
  WinnerRecord w = testing::winner(p, us, node);
  const KernelTemplate* gemm = builtin_templates().find("gemm");
  w.ranked.resize(1);
  w.ranked[0].template_hash = gemm->hash;
  w.ranked[0].params = *heuristic_config(*gemm, p, NodeIdentity{}.limits_for(w.device));
  return w;
}

// One node: what FleetSync gives its FleetClaims, over a MemStore. Merges are checked against
// the built-in templates, as on a real node.
struct Node {
  Node(const std::string& name, const std::string& socket, std::chrono::milliseconds lease)
      : catalog(store, index, templates, identity),
        link({RedisEndpoint{socket, "", 0}, "", 500ms, 100ms}),
        layout("claims-test"),
        winners(link, layout, name,
                [this](const WinnerRecord& stored, const WinnerRecord& incoming, bool news) {
                  return catalog.fleet_replaces(stored, incoming, news);
                }),
        claims({link, layout, winners, store, catalog, identity, counters,
                [this](const std::vector<std::string>& values,
                       const std::string& origin) -> Result<void> {
                  auto report = catalog.import(table_of_values(values), origin);
                  if (!report) return std::unexpected(report.error());
                  return {};
                },
                lease}) {
    identity.node_id = name;
    (void)check_store_format(store, false);
  }

  MemStore store;
  WinnerIndex index;
  // Borrowed (an empty owner): the static registry outlives every node.
  TemplateSet templates{TemplateSet::Snapshot(std::shared_ptr<void>(), &builtin_templates())};
  NodeIdentity identity;
  Catalog catalog;
  FleetCounters counters;
  RedisLink link;
  FleetLayout layout;
  FleetWinners winners;
  FleetClaims claims;
};

JobRecord job_for(const Problem& p) {
  JobRecord j;
  j.id = "000000000001";
  j.device = testing::h200();
  j.problem = p;
  j.state = JobState::running;
  return j;
}

class FleetClaimsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KTUNE_REQUIRE_TOOL(!RedisProcess::binary().empty(), "redis-server");
    ASSERT_TRUE(m_redis.start()) << "redis-server did not start";
  }
  std::unique_ptr<Node> node(const std::string& name, std::chrono::milliseconds lease = 10s) {
    return std::make_unique<Node>(name, m_redis.socket(), lease);
  }
  // The fleet's value for a key, "" when none.
  std::string fleet_value(Node& n, const Problem& p) {
    auto r = n.link.command({"HGET", n.layout.winners(testing::h200().id()), p.key()});
    return r ? r->str : "<error>";
  }

  // Writes a trial of m_key with THREADS `threads` to the node's store, as the tuning job would,
  // and tells the claim about it.
  void record_trial(Node& n, Claim& claim, int threads, Outcome outcome = Outcome::ok) {
    TrialRecord t;
    t.device = testing::h200();
    t.problem = m_key;
    t.template_name = "gemm";
    t.template_hash = "0123456789abcdef";
    t.params = {{"THREADS", threads}};
    t.outcome = outcome;
    t.median_us = 10 + threads / 100.0;
    WriteBatch batch;
    add_trial(batch, t);
    ASSERT_TRUE(n.store.write(batch, Durability::buffered));
    claim.trial_recorded();
  }

  TempDir m_dir;
  RedisProcess m_redis{m_dir.path()};
  const Problem m_key = testing::gemm_problem(4096, 4096, 4096);
};

TEST_F(FleetClaimsTest, OneNodeTunesAKeyTheOthersWaitUntilItIsGiven) {
  auto a = node("node-a"), b = node("node-b");
  ClaimOutcome first = a->claims.acquire(job_for(m_key));
  ASSERT_EQ(first.kind, ClaimOutcome::Kind::tune) << first.message;
  ASSERT_TRUE(first.claim);
  EXPECT_EQ(a->claims.held(), std::vector<std::string>{testing::h200().id() + "/" + m_key.key()});
  ClaimOutcome second = b->claims.acquire(job_for(m_key));
  EXPECT_EQ(second.kind, ClaimOutcome::Kind::wait);
  EXPECT_NE(second.message.find("node-a"), std::string::npos) << second.message;
  EXPECT_GT(second.wait, 0ms);
  EXPECT_LE(second.wait, 10s + 50ms);
  first.claim.reset();  // given back without a winner (e.g. the job failed)
  EXPECT_TRUE(a->claims.held().empty());
  EXPECT_EQ(b->claims.acquire(job_for(m_key)).kind, ClaimOutcome::Kind::tune);
}

TEST_F(FleetClaimsTest, APublishedWinnerEndsTheOtherNodesJobsAndIsMerged) {
  auto a = node("node-a"), b = node("node-b");
  ClaimOutcome claim = a->claims.acquire(job_for(m_key));
  ASSERT_EQ(claim.kind, ClaimOutcome::Kind::tune);
  const WinnerRecord w = measured(m_key, 10.0, "node-a");
  EXPECT_EQ(claim.claim->publish(w), Claim::Verdict::published);
  claim.claim.reset();
  ClaimOutcome late = b->claims.acquire(job_for(m_key));
  EXPECT_EQ(late.kind, ClaimOutcome::Kind::done) << late.message;
  EXPECT_NE(late.message.find("node-a"), std::string::npos) << late.message;
  auto merged = b->catalog.index().exact(testing::h200().id(), m_key);
  ASSERT_TRUE(merged) << "the fleet's winner is in node b's catalog";
  EXPECT_EQ(*merged, w);
}

TEST_F(FleetClaimsTest, AnExpiredLeaseLetsAnotherNodeTakeTheKeyAndFencesTheOldHolder) {
  auto a = node("node-a", 300ms), b = node("node-b", 300ms);
  // Node a claims the key and then stops renewing (its renewal thread never started): a node
  // that froze or died mid-job.
  ClaimOutcome stale = a->claims.acquire(job_for(m_key));
  ASSERT_EQ(stale.kind, ClaimOutcome::Kind::tune);
  EXPECT_EQ(b->claims.acquire(job_for(m_key)).kind, ClaimOutcome::Kind::wait);
  ClaimOutcome fresh;
  ASSERT_TRUE(eventually([&] {
    fresh = b->claims.acquire(job_for(m_key));
    return fresh.kind == ClaimOutcome::Kind::tune;
  })) << "the lease ran out";
  // Node b's slower result is published; node a's faster one comes too late: fenced.
  EXPECT_EQ(fresh.claim->publish(measured(m_key, 12.0, "node-b")), Claim::Verdict::published);
  EXPECT_EQ(stale.claim->publish(measured(m_key, 9.0, "node-a")), Claim::Verdict::fenced);
  EXPECT_EQ(a->counters.fenced, 1u);
  auto value = parse_winner_value(fleet_value(*a, m_key));
  ASSERT_TRUE(value) << value.error().message;
  EXPECT_EQ(value->node_id, "node-b");
  EXPECT_EQ(value->ranked.front().median_us, 12.0);
}

// Redis restarts empty under a running job, before a renewal put the lease back: the key has no
// fence, and nobody else claimed it, so the holder takes it again and publishes. (Its result was
// dropped as fenced, the job's GPU time lost and no winner anywhere.)
TEST_F(FleetClaimsTest, AHolderPublishesAfterRedisLostTheKeysFence) {
  ::signal(SIGPIPE, SIG_IGN);  // as ktuned does: Redis is stopped under a live connection
  auto a = node("node-a");
  ClaimOutcome claim = a->claims.acquire(job_for(m_key));
  ASSERT_EQ(claim.kind, ClaimOutcome::Kind::tune);
  m_redis.stop();
  ASSERT_TRUE(m_redis.start()) << "redis-server did not start again";
  ASSERT_TRUE(eventually([&] { return bool(a->link.command({"PING"})); })) << "reconnected";
  EXPECT_EQ(claim.claim->publish(measured(m_key, 10.0, "node-a")), Claim::Verdict::published);
  EXPECT_EQ(a->counters.fenced, 0u);
  auto value = parse_winner_value(fleet_value(*a, m_key));
  ASSERT_TRUE(value) << value.error().message;
  EXPECT_EQ(value->node_id, "node-a");
  claim.claim.reset();
  EXPECT_TRUE(a->claims.held().empty());
  // The fleet has the key's winner again: another node's job for it ends with it merged.
  auto b = node("node-b");
  EXPECT_EQ(b->claims.acquire(job_for(m_key)).kind, ClaimOutcome::Kind::done);
  EXPECT_TRUE(b->catalog.index().exact(testing::h200().id(), m_key));
}

// A lane that waits for its GPU (a training job took it) stops renewing its lease: after a lease
// another node may take the key, and the paused holder learns it lost the key when it resumes.
// Nobody wanting the key meanwhile, the holder takes it again on resuming. (The renewal went on
// for as long as the pause lasted, hours under gpu_policy idle, and the key waited fleet-wide.)
TEST_F(FleetClaimsTest, APausedHolderLetsItsLeaseRunOutAndLearnsOnResume) {
  auto a = node("node-a", 300ms), b = node("node-b", 300ms);
  a->claims.start();
  const std::string lease = a->layout.lease(testing::h200().id() + "/" + m_key.key());
  auto lease_exists = [&] {
    auto r = a->link.command({"EXISTS", lease});
    return r && r->integer == 1;
  };
  ClaimOutcome first = a->claims.acquire(job_for(m_key));
  ASSERT_EQ(first.kind, ClaimOutcome::Kind::tune);
  first.claim->pause();
  ASSERT_TRUE(eventually([&] { return !lease_exists(); })) << "not renewed while paused";
  first.claim->resume();
  EXPECT_FALSE(first.claim->lost()) << "nobody took it: taken again";
  EXPECT_TRUE(lease_exists());
  EXPECT_EQ(b->claims.acquire(job_for(m_key)).kind, ClaimOutcome::Kind::wait);

  first.claim->pause();
  ClaimOutcome second;
  ASSERT_TRUE(eventually([&] {
    second = b->claims.acquire(job_for(m_key));
    return second.kind == ClaimOutcome::Kind::tune;
  })) << "node b takes the key a lease after node a paused";
  first.claim->resume();
  EXPECT_TRUE(first.claim->lost());
  EXPECT_EQ(a->counters.leases_lost, 1u);
}

// The key is finished elsewhere while its holder is paused: on resuming the holder does not take
// the free key back (it would tune a key the fleet has), its claim is lost, and its job's next
// acquire ends with the fleet's winner.
TEST_F(FleetClaimsTest, APausedHolderWhoseKeyWasFinishedElsewhereStops) {
  auto a = node("node-a", 300ms), b = node("node-b", 300ms);
  a->claims.start();
  ClaimOutcome first = a->claims.acquire(job_for(m_key));
  ASSERT_EQ(first.kind, ClaimOutcome::Kind::tune);
  first.claim->pause();
  ClaimOutcome second;
  ASSERT_TRUE(eventually([&] {
    second = b->claims.acquire(job_for(m_key));
    return second.kind == ClaimOutcome::Kind::tune;
  }));
  EXPECT_EQ(second.claim->publish(measured(m_key, 10.0, "node-b")), Claim::Verdict::published);
  second.claim.reset();  // b is done with the key: its lease released
  first.claim->resume();
  EXPECT_TRUE(first.claim->lost());
  first.claim.reset();
  EXPECT_EQ(a->claims.acquire(job_for(m_key)).kind, ClaimOutcome::Kind::done);
}

// The fleet's winner names a template this node does not have: it cannot be merged here, so the
// job tunes the key itself instead of ending `done` with nothing to serve (which it did for every
// job of the key, for good).
TEST_F(FleetClaimsTest, AFleetWinnerThisNodeCannotServeIsTunedHere) {
  auto a = node("node-a"), b = node("node-b");
  WinnerRecord w = measured(m_key, 10.0, "node-a");
  w.ranked[0].template_name = "gemm_next";  // installed on node a only
  ASSERT_TRUE(a->winners.publish(w, "", 1));
  ClaimOutcome c = b->claims.acquire(job_for(m_key));
  EXPECT_EQ(c.kind, ClaimOutcome::Kind::tune) << c.message;
  EXPECT_FALSE(b->catalog.index().exact(testing::h200().id(), m_key));
}

TEST_F(FleetClaimsTest, RenewalKeepsTheLeaseAndAnUnrenewedHolderLearnsItLostIt) {
  auto a = node("node-a", 300ms), b = node("node-b", 300ms);
  a->claims.start();
  ClaimOutcome held = a->claims.acquire(job_for(m_key));
  ASSERT_EQ(held.kind, ClaimOutcome::Kind::tune);
  // Three lease periods later the lease is still a's: renewed every 100 ms.
  EXPECT_FALSE(eventually(
      [&] { return b->claims.acquire(job_for(m_key)).kind == ClaimOutcome::Kind::tune; }, 900ms));
  EXPECT_FALSE(held.claim->lost());
  // Renewals stop (a froze); b takes the key; when a wakes up it finds the lease lost.
  a->claims.stop();
  ClaimOutcome taken;
  ASSERT_TRUE(eventually([&] {
    taken = b->claims.acquire(job_for(m_key));
    return taken.kind == ClaimOutcome::Kind::tune;
  }));
  a->claims.start();
  EXPECT_TRUE(eventually([&] { return held.claim->lost(); }, 5s));
  EXPECT_EQ(a->counters.leases_lost, 1u);
}

TEST_F(FleetClaimsTest, ANodeThatTakesOverReusesTheTrialsTheHolderShared) {
  auto a = node("node-a", 300ms), b = node("node-b", 300ms);
  a->claims.start();
  ClaimOutcome held = a->claims.acquire(job_for(m_key));
  ASSERT_EQ(held.kind, ClaimOutcome::Kind::tune);
  record_trial(*a, *held.claim, 128);
  record_trial(*a, *held.claim, 256);
  record_trial(*a, *held.claim, 512, Outcome::in_flight);  // 512 died mid-trial
  ASSERT_TRUE(eventually([&] { return a->counters.trials_shared == 2; }))
      << a->counters.trials_shared;
  a->claims.stop();  // a dies: no renewal, no release
  ClaimOutcome taken;
  ASSERT_TRUE(eventually([&] {
    taken = b->claims.acquire(job_for(m_key));
    return taken.kind == ClaimOutcome::Kind::tune;
  }));
  EXPECT_EQ(taken.shared_trials, 2) << "the two finished trials; not the one in flight";
  auto trials = scan_trials(b->store, testing::h200().id() + "/" + m_key.key() + "/");
  ASSERT_TRUE(trials);
  ASSERT_EQ(trials->size(), 2u);
  for (const auto& t : *trials) EXPECT_EQ(t.outcome, Outcome::ok);
  held.claim.reset();
}

// Redis restarts empty under a holder: the renewal takes the key again and shares every trial
// again, since trials:K went with the lease. (It shared only trials recorded after the loss, so a
// node taking the key over later measured the others again.)
TEST_F(FleetClaimsTest, AHolderSharesItsTrialsAgainAfterRedisLostThem) {
  ::signal(SIGPIPE, SIG_IGN);  // as ktuned does: Redis is stopped under a live connection
  auto a = node("node-a", 300ms);
  a->claims.start();
  ClaimOutcome held = a->claims.acquire(job_for(m_key));
  ASSERT_EQ(held.kind, ClaimOutcome::Kind::tune);
  record_trial(*a, *held.claim, 128);
  record_trial(*a, *held.claim, 256);
  ASSERT_TRUE(eventually([&] { return a->counters.trials_shared == 2; }));
  const std::string trials = a->layout.trials(testing::h200().id() + "/" + m_key.key());
  m_redis.stop();
  ASSERT_TRUE(m_redis.start()) << "redis-server did not start again";
  auto hlen = [&] {
    auto r = a->link.command({"HLEN", trials});
    return r ? r->integer : -1;
  };
  ASSERT_TRUE(eventually([&] { return hlen() == 2; }, 5s)) << hlen();
  EXPECT_TRUE(eventually([&] { return a->counters.trials_shared == 4; }))  // counted after PEXPIRE
      << a->counters.trials_shared;
  EXPECT_FALSE(held.claim->lost());
  EXPECT_EQ(a->counters.leases_lost, 0u);

  // A failover to a replica behind the primary: the lease is gone, trials:K holds as many fields
  // as this node shared but not all of them (another holder's, one of ours missing). Taken
  // again, the key's trials are all shared again (counting fields missed this).
  const std::string key = testing::h200().id() + "/" + m_key.key();
  auto fields = a->link.command({"HKEYS", trials});
  ASSERT_TRUE(fields && fields->elements.size() == 2u);
  const std::string lost_field = fields->elements[0].str;
  ASSERT_TRUE(a->link.command({"HDEL", trials, lost_field}));
  ASSERT_TRUE(a->link.command({"HSET", trials, "gemm/THREADS=64", "a trial of another holder"}));
  ASSERT_TRUE(a->link.command({"DEL", a->layout.lease(key)}));
  EXPECT_TRUE(eventually(
      [&] {
        auto r = a->link.command({"HEXISTS", trials, lost_field});
        return r && r->integer == 1;
      },
      5s))
      << lost_field << " shared again";
  EXPECT_FALSE(held.claim->lost());
  held.claim.reset();
}

// The holder's result loses to a record the fleet already has (kept, not written): the key is
// done all the same, so the trials it shared are deleted with the publication, not left for a
// day.
TEST_F(FleetClaimsTest, AKeptResultDeletesTheTrialsItShared) {
  auto a = node("node-a"), b = node("node-b");
  a->claims.start();
  ClaimOutcome held = a->claims.acquire(job_for(m_key));
  ASSERT_EQ(held.kind, ClaimOutcome::Kind::tune);
  record_trial(*a, *held.claim, 128);
  ASSERT_TRUE(eventually([&] { return a->counters.trials_shared == 1; }));
  const std::string trials = a->layout.trials(testing::h200().id() + "/" + m_key.key());
  ASSERT_EQ(a->link.command({"EXISTS", trials})->integer, 1);
  ASSERT_TRUE(b->winners.publish(measured(m_key, 9.0, "node-b"), "", 1));  // better, unfenced
  EXPECT_EQ(held.claim->publish(measured(m_key, 12.0, "node-a")), Claim::Verdict::kept);
  EXPECT_EQ(a->link.command({"EXISTS", trials})->integer, 0);
  held.claim.reset();
}

TEST_F(FleetClaimsTest, TheFleetsTableKeepsTheBestRecordWhateverTheOrder) {
  auto a = node("node-a");
  auto publish = [&](double us, const std::string& who) {
    auto r = a->winners.publish(measured(m_key, us, who), "", 1);
    return r ? *r : FleetWinners::Published::fenced;
  };
  EXPECT_EQ(publish(11.0, "node-b"), FleetWinners::Published::written);
  EXPECT_EQ(publish(12.0, "node-c"), FleetWinners::Published::kept);
  EXPECT_EQ(publish(11.0, "node-b"), FleetWinners::Published::kept) << "identical";
  EXPECT_EQ(publish(10.0, "node-a"), FleetWinners::Published::written);
  auto value = parse_winner_value(fleet_value(*a, m_key));
  ASSERT_TRUE(value);
  EXPECT_EQ(value->node_id, "node-a");
  // Each write went out as one event.
  auto events = a->link.command({"XLEN", a->layout.events()});
  ASSERT_TRUE(events);
  EXPECT_EQ(events->integer, 2);
}

// A rolling NVRTC upgrade and its rollback. The first upgraded node's result replaces the faster
// record of the old NVRTC, stale on every upgraded node (it kept that record, and each upgraded
// node tuned the key again for itself); a node of the old NVRTC republishing its record (a resync)
// does not move the hash back unless it was measured later, but a fresh commit of its own does
// (a rollback's result, an import), whatever its time. Between records of one NVRTC, the faster.
TEST_F(FleetClaimsTest, TheFleetsTableTakesNewsAcrossNvrtcVersionsAndTheFasterWithinOne) {
  auto upgraded = node("node-new"), old = node("node-old");
  upgraded->identity.nvrtc = "13.1";
  old->identity.nvrtc = "13.0";
  auto with = [&](double us, const std::string& nvrtc, std::int64_t when) {
    WinnerRecord w = measured(m_key, us, "node-" + nvrtc);
    w.validators.nvrtc = nvrtc;
    w.timestamp = when;
    return w;
  };
  enum class As { commit, resync };  // a fresh commit (news), or a resync's republication
  auto publish = [&](Node& n, const WinnerRecord& w, As as) {
    auto r = n.winners.publish(w, "", as == As::commit ? 1 : 0);
    return r ? *r : FleetWinners::Published::fenced;
  };
  auto fleet_nvrtc = [&] {
    auto value = parse_winner_value(fleet_value(*old, m_key));
    return value ? value->validators.nvrtc + "@" + std::to_string(value->timestamp) : "<none>";
  };
  using P = FleetWinners::Published;
  const WinnerRecord before = with(9.0, "13.0", 100);
  ASSERT_EQ(publish(*old, before, As::commit), P::written);
  EXPECT_EQ(publish(*upgraded, with(12.0, "13.1", 200), As::commit), P::written);
  EXPECT_EQ(fleet_nvrtc(), "13.1@200");
  EXPECT_EQ(publish(*old, before, As::resync), P::kept) << "an older record republished";
  EXPECT_EQ(publish(*upgraded, with(13.0, "13.1", 300), As::commit), P::kept)
      << "one NVRTC: the faster stays";
  EXPECT_EQ(publish(*upgraded, with(11.0, "13.1", 50), As::commit), P::written)
      << "one NVRTC: the faster replaces, whatever its time";
  EXPECT_EQ(publish(*old, with(10.0, "13.0", 40), As::commit), P::written)
      << "a fresh commit of the old version (an import of an older table): news";
  EXPECT_EQ(fleet_nvrtc(), "13.0@40");
  EXPECT_EQ(publish(*upgraded, with(11.0, "13.1", 50), As::resync), P::written)
      << "republished, but measured after the hash's record";
  EXPECT_EQ(publish(*old, with(10.0, "13.0", 40), As::resync), P::kept);
  EXPECT_EQ(fleet_nvrtc(), "13.1@50");
}

TEST_F(FleetClaimsTest, WithoutRedisEveryKeyIsTunedAlone) {
  auto a = node("node-a");
  m_redis.stop();
  ClaimOutcome alone = a->claims.acquire(job_for(m_key));
  ASSERT_EQ(alone.kind, ClaimOutcome::Kind::tune);
  EXPECT_NE(alone.message.find("unreachable"), std::string::npos) << alone.message;
  EXPECT_EQ(alone.claim->publish(measured(m_key, 10.0, "node-a")), Claim::Verdict::local);
  EXPECT_EQ(a->counters.claims_alone, 1u);
  EXPECT_FALSE(a->link.up());
}

}  // namespace
}  // namespace ktune
