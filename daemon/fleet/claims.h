// FleetClaims: leases on keys in the fleet's Redis, so each key is tuned by one node at a time
// and once fleet-wide (docs/fleet.md, "Claims").
//
// acquire() runs one Lua script: when the fleet's hash has a winner for the key that is fresh
// on this node, it is merged here and the job ends (`done`); when another node holds the key's
// lease, the job waits until that lease would end (`wait`); otherwise the key's lease is set
// (SET ... PX lease_ms) with a new token "<counter>.<nonce>", which also becomes the key's
// fence. While the job runs a thread renews each lease every third of lease_ms and publishes
// the job's trials, so a node that takes the key over after a crash resumes from them. The
// winner is published fenced: refused when the fence moved on (the key was claimed again after
// this node's lease ran out). A renewal that finds the lease gone re-takes it when the key is
// free (Redis restarted, or a long pause) and marks the claim lost when another node has it.
//
// Redis unreachable: acquire() says `tune` with a claim that publishes nothing now (the node
// tunes alone; the catch-up after Redis returns publishes its winner under the merge rule).
// Thread-safe.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/catalog.h"
#include "daemon/fleet/counters.h"
#include "daemon/fleet/layout.h"
#include "daemon/fleet/redis_link.h"
#include "daemon/fleet/winners.h"
#include "daemon/jobs/claims.h"
#include "daemon/node.h"

namespace ktune {

class FleetClaims final : public WorkClaims {
 public:
  // Merges winner values read from Redis into the catalog (FleetSync::merge); an error when the
  // store failed.
  using Merge =
      std::function<Result<void>(const std::vector<std::string>& values, const std::string&)>;

  struct Deps {
    RedisLink& link;
    const FleetLayout& layout;
    FleetWinners& winners;
    Store& store;
    const Catalog& catalog;
    const NodeIdentity& node;
    FleetCounters& counters;
    Merge merge;
    std::chrono::milliseconds lease;
  };
  explicit FleetClaims(Deps deps);
  ~FleetClaims() override;

  // Starts the renewal thread (again, after stop()).
  void start();
  // Stops it; leases still held run out unless it starts again.
  void stop();

  ClaimOutcome acquire(const JobRecord& job) override;

  // Keys ("<device id>/<problem key>") this node holds now.
  std::vector<std::string> held() const;

  struct State;  // one held key (claims.cc)

 private:
  class Held;
  enum class Take { acquired, held, tuned, error };
  struct TakeResult {
    Take take = Take::error;
    std::string token, holder, winner, previous;  // previous: the fence before ours
    long long pttl = 0, shared = 0;               // the holder's lease; trials shared
    Error error;
  };
  // One run of the claim script for `key`; `skip_winner` ignores a winner in the hash.
  TakeResult take(const std::string& device, const std::string& field, bool skip_winner);
  // The fleet's winner value as a record this node can serve as exact, or nullopt.
  std::optional<WinnerRecord> usable_here(const std::string& value,
                                          const std::string& device) const;
  // Copies the trials another node shared for `key` into the local store; how many.
  int take_trials(const std::string& key);
  void renew_loop();
  void renew(State& state);
  void share_trials(State& state);
  void release(State& state);

  Deps m_deps;
  mutable std::mutex m_mutex;
  std::condition_variable m_cv;
  std::vector<std::shared_ptr<State>> m_held;
  bool m_stopping = false;
  bool m_wake = false;
  std::thread m_renewer;
};

}  // namespace ktune
