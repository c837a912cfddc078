// FleetSync: a node's part in a fleet that shares one Redis (fleet.redis; docs/fleet.md is the
// key layout, docs/operations.md § Fleet how to run it).
//
//   catalog commits a winner ──▶ outbox ──▶ publisher thread ──▶ FleetWinners::publish (CAS)
//   events stream ──▶ reader thread (XREAD BLOCK) ──▶ merge ──▶ Catalog::import (import's rule)
//                     (at most 10 merges/s: each one invalidates every cached lookup answer)
//   (re)connect ──▶ full resync: read every device class's hash, merge it, push what this node
//                   has and the fleet lacks (what it tuned while Redis was gone)
//   lanes ──▶ FleetClaims (leases, fencing, shared trials)
//   pins ──▶ FleetPins (created and deleted fleet-wide; their events share the reader thread)
//
// Lookups never touch Redis: winners reach the local catalog and are served from memory. While
// Redis is unreachable the node serves and tunes alone (claims say `tune`), reports it in
// `status`, `ktune fleet status` and /metrics, retries every 500 ms and resyncs when it is back.
// Owned by the daemon; outlives the scheduler (lanes hold claims). Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client/protocol.h"
#include "config/config.h"
#include "daemon/catalog.h"
#include "daemon/fleet/claims.h"
#include "daemon/fleet/counters.h"
#include "daemon/fleet/layout.h"
#include "daemon/fleet/pins.h"
#include "daemon/fleet/redis_link.h"
#include "daemon/fleet/winners.h"
#include "daemon/jobs/queue.h"
#include "daemon/node.h"

namespace ktune {

class FleetSync {
 public:
  struct Deps {
    const DaemonConfig& config;
    Catalog& catalog;
    JobQueue& jobs;
    Store& store;
    const NodeIdentity& node;
    PinTable& pins;
  };
  // Null when fleet.redis is "" (no fleet); an error when it cannot be parsed.
  static Result<std::unique_ptr<FleetSync>> create(Deps deps);
  FleetSync(Deps deps, RedisEndpoint endpoint);
  ~FleetSync();

  // Listens to the catalog and starts the threads; returns at once (Redis may be down).
  void start();
  // Ends the threads (the reader within one block period, 500 ms).
  void stop();

  WorkClaims& claims() { return m_claims; }
  // Merges winner values read from Redis through the catalog (import's validation and rule).
  // Keys::may_repeat (a stream read that spans two publishes of a key): of several values for
  // one key only the last is merged, since each publish replaced the one before in Redis (this
  // parses every value once more; a hash's values, Keys::unique, skip it). Jobs queued here for
  // keys that now have a fresh winner end as done. Returns the error when the store failed (the
  // values are then not all merged: merge them again); records import refuses are counted, not
  // errors.
  enum class Keys { unique, may_repeat };
  Result<void> merge(const std::vector<std::string>& values, const std::string& origin,
                     Keys keys = Keys::unique);

  // This node's view, without asking Redis (for `status`).
  protocol::Json summary() const;
  // summary() plus what Redis says: nodes seen, winners per device class, claims held, lag
  // (for `ktune fleet status`).
  protocol::Json report();
  // Prometheus text: ktune_fleet_*.
  std::string metrics_text() const;

 private:
  struct Outbox;
  void reader_loop();
  // Pulls every hash and pushes what this node has better; returns the stream id to read from.
  Result<std::string> resync();
  Result<size_t> push_local(const std::string& device,
                            const std::vector<std::pair<std::string, std::string>>& fleet);
  // Winners read from the stream, not merged yet.
  struct Batch {
    std::string last_id;      // of the last entry read (ours included)
    std::string last_pin_id;  // of the last pin event read ("" = none read)
    std::vector<std::map<std::string, std::string>> pin_events;
    std::vector<std::string> values;    // other nodes' winner values
    std::vector<std::int64_t> sent_us;  // when each was committed
  };
  void collect(const RedisReply& streams, Batch& batch) const;
  // Merges a batch read from the stream.
  Result<void> apply(Batch& batch);
  // When the next merge may run: each merge moves the index generation (cached lookup answers
  // near the merged shapes are built again; an import past the change log, all), so merges are a
  // token bucket — 10 at once, 10 a second sustained —
  // and a burst of winners waits for a token and is merged in one go.
  std::chrono::steady_clock::time_point merge_slot();
  void publisher_loop();
  void heartbeat(bool stopped);
  void set_connected(bool up, const std::string& error);
  // Waits k_retry, doubled `attempt` times (at most 128x); false when stopping.
  bool wait_retry(int attempt = 0);
  // What the store said when a merge last failed ("" once one succeeds): for `status`.
  void set_store_error(const std::string& error);

  Deps m_deps;
  const RedisEndpoint m_endpoint;
  const FleetLayout m_layout;
  RedisLink m_link;         // publishes, claims, heartbeats, reports
  RedisLink m_reader_link;  // the blocking stream reads and resyncs
  FleetWinners m_winners;
  FleetWinners m_reader_winners;
  FleetCounters m_counters;
  FleetClaims m_claims;
  FleetPins m_pins;
  std::string m_pin_last_id = "0-0";  // reader thread only: the pin events read so far
  std::shared_ptr<Outbox> m_outbox;   // shared with the catalog listener, which outlives us

  std::atomic<bool> m_stopping{false};
  std::atomic<bool> m_resync{false};  // the publisher missed something: resync
  std::mutex m_wait_mutex;
  std::condition_variable m_wait_cv;
  mutable std::mutex m_state_mutex;
  bool m_connected = false;
  std::string m_error = "not connected yet";
  std::string m_store_error;                // guarded by m_state_mutex
  std::atomic<bool> m_resync_later{false};  // a resync's merge failed: again, backing off
  std::chrono::steady_clock::time_point m_since = std::chrono::steady_clock::now();
  std::thread m_reader, m_publisher;
  double m_merge_tokens = 10;                           // reader thread only
  std::chrono::steady_clock::time_point m_tokens_at{};  // when m_merge_tokens was refilled
};

}  // namespace ktune
