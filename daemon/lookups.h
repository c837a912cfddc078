// LookupService: answers "best kernels for this problem on this device class" from memory.
//
// An answer is built from the catalog's index (exact, stale), the nearest tuned shapes and every
// template's heuristic, then cached in a byte-bounded LRU (daemon/lru_cache.h) by (device,
// problem key, limit). A second LRU maps the request text after its id to that key, so a
// repeated line is answered without parsing JSON (the fast path, only for peers the policy stage
// already trusts); lines over k_max_cached_line are never cached by text. Together they hold at
// most `server.answer_cache_bytes`; both are invalid once the index generation moves. Building
// an answer costs tens of microseconds to milliseconds: callers on an I/O thread ask with
// Cold::refuse and hand cold keys to the executor, where concurrent cold lookups of one key
// share one build (the first builds, the others wait for its result). Lookups answered without
// an exact, valid winner are counted as misses, with their expected worth. A v2 request's answer
// also carries each entry's launch description (daemon/launch.h) and is cached apart from the v1
// answer, which stays exactly as it was. A lookup naming a pin (daemon/pins.h) is answered from
// the pin's records alone, built and cached the same way under a key of its own; pin changes
// move the generation answers are checked against, as index changes do. Thread-safe; one
// mutex guards both caches and the builds in flight, held only for hash probes and list splices.
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "client/protocol.h"
#include "config/config.h"
#include "daemon/catalog.h"
#include "daemon/lru_cache.h"
#include "daemon/metrics.h"
#include "daemon/misses.h"
#include "daemon/node.h"
#include "daemon/pins.h"

namespace ktune {

class LookupService {
 public:
  struct Answer {
    std::uint64_t generation = 0;
    int version = protocol::k_min_version;  // of the request; echoed in the reply
    std::string result;                     // the "result" object, serialized once
    std::string provenance;                 // of the best entry
    bool miss = false;
    DeviceClass device;
    Problem problem;
    std::string miss_reason;
    double expected_us = 0;  // for the miss tracker
    double gain = 0;
  };
  enum class Cold { build, refuse };

  // Request text (after the id) longer than this is never cached by text: a line padded with a
  // large unknown field must not pin its size in memory for every distinct padding.
  static constexpr size_t k_max_cached_line = 4096;

  // What the answer caches hold and did (metrics, status).
  struct CacheStats {
    LruStats answers;                  // by (device, problem key, limit)
    LruStats lines;                    // request text -> answer key
    std::uint64_t lines_too_long = 0;  // not cached by text: over k_max_cached_line
    std::uint64_t built = 0;           // answers built (cold lookups that did the work)
    std::uint64_t joined = 0;          // cold lookups that waited for another's build of their key
  };

  // Test seam: on_build runs on the building thread before it builds `key`; on_join runs on a
  // thread that is about to wait for another's build of `key`. Set before concurrent use.
  struct BuildObserver {
    std::function<void(const std::string& key)> on_build;
    std::function<void(const std::string& key)> on_join;
  };

  LookupService(const DaemonConfig& config, const TemplateRegistry& templates,
                const Catalog& catalog, const PinTable& pins, const NodeIdentity& node,
                Metrics& metrics, MissTracker& misses);

  // The answer for a lookup body, or nullptr when it is not cached and `cold` is refuse. With a
  // `line`, the answer is also remembered under its text for fast_reply.
  protocol::Expected<std::shared_ptr<const Answer>> lookup(const protocol::Json& body, Cold cold,
                                                           std::string_view line = {},
                                                           int version = protocol::k_min_version);
  // The reply line for `answer` (counts the lookup and, for a miss, the miss).
  std::string reply(const protocol::Json& id, const Answer& answer,
                    std::chrono::steady_clock::time_point t0);
  // A cached answer for a line of the exact shape our clients send ({"v":1,"id":..,"op":"lookup",
  // ...}), as a reply line; nullopt when the line is not of that shape or not cached.
  std::optional<std::string> fast_reply(std::string_view line);

  // Resolves a device class named by id or unique prefix, or this node's first GPU.
  protocol::Expected<std::pair<DeviceClass, DeviceLimits>> resolve_device(
      const std::string& name) const;
  // Orders dims as the op's templates declare them, fills out_dtype and layout defaults (the
  // layout: TemplateRegistry::default_layout, `rc` for gemm), checks.
  protocol::Expected<Problem> canonical_problem(const protocol::ProblemSpec& spec) const;

  CacheStats cache_stats() const;
  // What cached answers are checked against: moves with every change of the index or the pins.
  std::uint64_t generation() const { return m_catalog.index().generation() + m_pins.generation(); }
  void set_build_observer(BuildObserver observer) { m_observer = std::move(observer); }

 private:
  using Built = protocol::Expected<std::shared_ptr<const Answer>>;
  // A build in flight: cold lookups of its key at its generation or older wait for its result.
  struct InFlight {
    std::uint64_t generation = 0;
    std::promise<Built> promise;
    std::shared_future<Built> result = promise.get_future().share();
  };
  // The request text after the id -> the answer key it asked for, as of an index generation.
  struct LineEntry {
    std::string key;
    std::uint64_t generation = 0;
  };

  void remember_line(std::string_view line, const std::string& key, std::uint64_t generation);
  // The build of `key` to wait for, and whether the caller is to run it (none in flight yet, or
  // only one for an older generation). REQUIRES: m_mutex held.
  std::pair<std::shared_ptr<InFlight>, bool> join_build_locked(const std::string& key,
                                                               std::uint64_t generation);
  // Runs `flight`'s build, caches a success, and hands the result to every thread waiting on it.
  // `assumed_layout`: the layout filled in for a v2 request that named none ("" otherwise).
  // `pin`: answer from its records only (null: the live index).
  Built run_build(const std::string& key, InFlight& flight, const Problem& problem,
                  const DeviceClass& device, const DeviceLimits& limits, int limit, int version,
                  const std::string& assumed_layout, const PinTable::Pin* pin);
  // `generation`: read by lookup() before the key and the pin were resolved; the answer is
  // tagged with it (never with a newer one, which a pin replaced meanwhile could carry).
  Built build(const Problem& problem, const DeviceClass& device, const DeviceLimits& limits,
              int limit, int version, const std::string& assumed_layout, const PinTable::Pin* pin,
              std::uint64_t generation);
  bool complete_entry(protocol::LookupEntry& entry, const Problem& problem,
                      const DeviceClass& device, const DeviceLimits& limits, int version) const;
  // A rough kernel time for a problem no one measured: FLOPs or bytes over the device's rates.
  double estimate_us(const Problem& problem, const DeviceLimits& limits) const;

  const DaemonConfig& m_config;
  const TemplateRegistry& m_templates;
  const Catalog& m_catalog;
  const PinTable& m_pins;
  const NodeIdentity& m_node;
  Metrics& m_metrics;
  MissTracker& m_misses;

  BuildObserver m_observer;

  mutable std::mutex m_mutex;  // guards the six below
  ByteLru<std::shared_ptr<const Answer>> m_by_key;
  ByteLru<LineEntry> m_by_text;
  std::unordered_map<std::string, std::shared_ptr<InFlight>> m_building;
  std::uint64_t m_lines_too_long = 0;
  std::uint64_t m_built = 0;
  std::uint64_t m_joined = 0;
};

}  // namespace ktune
