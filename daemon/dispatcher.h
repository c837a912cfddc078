// Dispatcher: turns one request into one reply, with no socket in sight.
//
// The server hands it each request line; it parses, checks, runs the op and returns the reply
// line. Lookups read only the in-memory WinnerIndex and a reply cache, so they never wait on disk,
// compilation or tuning. Ops: lookup, status, templates, export, import (docs/protocol.md).
// Never throws; every failure is an error reply with a specific code.
//
// Thread-safety: handle() may be called concurrently from every I/O thread.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "client/protocol.h"
#include "config/config.h"
#include "daemon/metrics.h"
#include "daemon/winner_index.h"
#include "store/store.h"
#include "templates/registry.h"
#include "tuner/cuda_driver.h"

namespace ktune {

// What this node is: its GPUs (if any) and the validators its measurements carry.
struct NodeIdentity {
  std::vector<GpuInfo> gpus;  // empty on a node without a GPU
  std::string gpu_error;      // why there is none
  std::string driver;         // validator: driver version, "none" without a driver
  std::string nvrtc;          // validator: NVRTC version
  std::string node_id;        // host name

  // Detects GPUs (driver via dlopen), driver and NVRTC versions and the host name.
  static NodeIdentity detect(const std::vector<int>& devices);
};

// Lookups that found no exact, valid answer, per key: what background tuning works through.
class MissTracker {
 public:
  struct Miss {
    DeviceClass device;
    Problem problem;
    std::uint64_t count = 0;
    std::string reason;  // "no winner", "stale: ..."
  };
  void record(const DeviceClass& device, const Problem& problem, const std::string& reason);
  // Most-missed first.
  std::vector<Miss> top(size_t n) const;
  std::uint64_t total() const;
  size_t distinct() const;

 private:
  mutable std::mutex m_mutex;
  std::map<std::string, Miss> m_misses;
  std::uint64_t m_total = 0;
};

// Who is asking: transport facts the dispatcher needs without seeing the socket.
struct Peer {
  bool tcp = false;  // TCP peers must present the token when one is configured
};

struct Response {
  std::string line;    // the reply, newline included
  bool close = false;  // close the connection after sending (fatal request errors)
};

class Dispatcher {
 public:
  Dispatcher(const DaemonConfig& config, Store& store, const TemplateRegistry& templates,
             WinnerIndex& index, NodeIdentity node, Metrics& metrics);

  // Handles one request line (without its newline).
  Response handle(std::string_view line, const Peer& peer = {});
  // Handles a parsed request.
  Response handle(const protocol::Request& request, const Peer& peer = {});

  const NodeIdentity& node() const { return m_node; }
  MissTracker& misses() { return m_misses; }
  // Gauges for the metrics endpoint (winners, templates, misses, uptime).
  std::string metrics_gauges() const;

 private:
  using Json = protocol::Json;
  using Reply = protocol::Expected<Json>;

  // handle() for a parsed request; hands back the lookup answer (when there is one) for the
  // text cache of fast_lookup.
  struct CachedAnswer;
  Response dispatch(const protocol::Request& request, const Peer& peer,
                    std::shared_ptr<const CachedAnswer>* answer_out);

  protocol::Expected<std::shared_ptr<const CachedAnswer>> lookup(const Json& body);
  // Counts a lookup answered from `answer` and formats its reply line.
  Response lookup_reply(const Json& id, const CachedAnswer& answer,
                        std::chrono::steady_clock::time_point t0);
  // Lines of the form {"v":1,"id":<id>,"op":"lookup",...} whose text after the id was answered
  // before (and the index has not changed since) are answered without parsing JSON.
  std::optional<Response> fast_lookup(std::string_view line);
  Reply status(const Json& body);
  Reply templates(const Json& body);
  Reply export_table(const Json& body);
  Reply import_table(const Json& body);

  // Resolves a device class named by id or unique prefix, or this node's first GPU.
  protocol::Expected<std::pair<DeviceClass, DeviceLimits>> resolve_device(
      const std::string& name) const;
  // Orders dims as the op's templates declare them, fills out_dtype and layout defaults, checks.
  protocol::Expected<Problem> canonical_problem(const protocol::ProblemSpec& spec) const;
  // Why a record cannot be served as exact on this node ("" when it can).
  std::string staleness(const WinnerRecord& record, bool own_device) const;
  // Fills kernel name, arch and launch geometry for a config; false if it is invalid for the
  // problem (e.g. a nearest shape's config that breaks this shape's alignment).
  bool complete_entry(protocol::LookupEntry& entry, const Problem& problem,
                      const DeviceClass& device, const DeviceLimits& limits) const;

  const DaemonConfig& m_config;
  Store& m_store;
  const TemplateRegistry& m_templates;
  WinnerIndex& m_index;
  NodeIdentity m_node;
  Metrics& m_metrics;
  MissTracker m_misses;
  const std::chrono::steady_clock::time_point m_started = std::chrono::steady_clock::now();

  // Lookup answers by (device, problem key, limit), valid while the index generation holds.
  struct CachedAnswer {
    std::uint64_t generation;
    std::string result;      // the "result" object, serialized once
    std::string provenance;  // of the best entry
    bool miss;
    DeviceClass device;
    Problem problem;
    std::string miss_reason;
  };
  mutable std::mutex m_cache_mutex;
  std::unordered_map<std::string, std::shared_ptr<const CachedAnswer>> m_cache;
  // The same answers by request text after the id (see fast_lookup).
  std::unordered_map<std::string, std::shared_ptr<const CachedAnswer>> m_fast;
};

}  // namespace ktune
