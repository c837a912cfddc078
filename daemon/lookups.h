// LookupService: answers "best kernels for this problem on this device class" from memory.
//
// An answer is built from the catalog's index (exact, stale), the nearest tuned shapes and every
// template's heuristic, then cached twice: by (device, problem key, limit), and by the request
// text after its id so a repeated line is answered without parsing JSON (the fast path, only for
// peers the policy stage already trusts). Both caches are invalid once the index generation
// moves. Building an answer costs up to milliseconds (template expressions): callers on an I/O
// thread ask with Cold::refuse and hand cold keys to the executor. Lookups answered without an
// exact, valid winner are counted as misses, with their expected worth. A v2 request's answer
// also carries each entry's launch description (daemon/launch.h) and is cached apart from the v1
// answer, which stays exactly as it was. Thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "client/protocol.h"
#include "config/config.h"
#include "daemon/catalog.h"
#include "daemon/metrics.h"
#include "daemon/misses.h"
#include "daemon/node.h"

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

  LookupService(const DaemonConfig& config, const TemplateRegistry& templates,
                const Catalog& catalog, const NodeIdentity& node, Metrics& metrics,
                MissTracker& misses);

  // The answer for a lookup body asked in protocol `version`, or nullptr when it is not cached
  // and `cold` is refuse. With a `line`, the answer is also remembered under its text for
  // fast_reply.
  protocol::Expected<std::shared_ptr<const Answer>> lookup(const protocol::Json& body, Cold cold,
                                                           std::string_view line = {},
                                                           int version = protocol::k_min_version);
  // The reply line for `answer` (counts the lookup and, for a miss, the miss).
  std::string reply(const protocol::Json& id, const Answer& answer,
                    std::chrono::steady_clock::time_point t0);
  // A cached answer for a line of the exact shape our clients send ({"v":1|2,"id":..,
  // "op":"lookup",...}), as a reply line; nullopt when the line is not of that shape or not cached.
  std::optional<std::string> fast_reply(std::string_view line);

  // Resolves a device class named by id or unique prefix, or this node's first GPU.
  protocol::Expected<std::pair<DeviceClass, DeviceLimits>> resolve_device(
      const std::string& name) const;
  // Orders dims as the op's templates declare them, fills out_dtype and layout defaults, checks.
  protocol::Expected<Problem> canonical_problem(const protocol::ProblemSpec& spec) const;

 private:
  void remember_line(std::string_view line, std::shared_ptr<const Answer> answer);
  std::shared_ptr<const Answer> cached(const std::string& key, std::uint64_t generation) const;
  protocol::Expected<std::shared_ptr<const Answer>> build(const Problem& problem,
                                                          const DeviceClass& device,
                                                          const DeviceLimits& limits, int limit,
                                                          int version);
  bool complete_entry(protocol::LookupEntry& entry, const Problem& problem,
                      const DeviceClass& device, const DeviceLimits& limits, int version) const;
  // A rough kernel time for a problem no one measured: FLOPs or bytes over the device's rates.
  double estimate_us(const Problem& problem, const DeviceLimits& limits) const;

  const DaemonConfig& m_config;
  const TemplateRegistry& m_templates;
  const Catalog& m_catalog;
  const NodeIdentity& m_node;
  Metrics& m_metrics;
  MissTracker& m_misses;

  mutable std::mutex m_mutex;
  std::unordered_map<std::string, std::shared_ptr<const Answer>> m_by_key;
  std::unordered_map<std::string, std::shared_ptr<const Answer>> m_by_text;
};

}  // namespace ktune
