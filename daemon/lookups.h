// LookupService: answers "best kernels for this problem on this device class" from memory.
//
// An answer is built from the catalog's index (exact, stale), the nearest tuned shapes and every
// template's heuristic, then cached in a byte-bounded LRU (daemon/lru_cache.h) by (device,
// problem key, limit). A second LRU maps the request text after its id to that same answer
// (shared, and charged in full to both, so an answer one of them let go stays bounded by the
// other), so a repeated line is answered with one probe and without parsing JSON (the fast path,
// only for peers the policy stage already trusts); lines over k_max_cached_line are never cached
// by text. Together they hold at most `server.answer_cache_bytes`, half each. A change to the
// index moves its generation, but only answers
// it could alter are dropped (issue 14): an answer made at an older generation stays while no
// change since was to its family within `lookup.nearest_radius` of its dims (its exact key or a
// shape its nearest search could return) and none was a change the index logs as touching
// everything (WinnerIndex::untouched_since: a template swap, a load, a bulk import, a new device
// class); it is then marked checked through the current generation, so a hit costs one integer
// compare until the next change. A request line's entry is checked the same way, from the
// generation it was last read at: its text maps to its key through the templates and device names
// only, which change only with a change that touches everything (no answer is vouched for across
// one). Building
// an answer costs tens of microseconds to milliseconds: callers on an I/O thread ask with
// Cold::build_if_cheap, which builds on the calling thread only what is measured to be cheap
// (below), and hand the other cold keys to the executor, where concurrent cold lookups of one key
// share one build (the first builds, the others wait for its result). Cheap: the request's limit
// is at most k_inline_max_limit, no build of the key is in flight (the caller never waits), and
// the CPU time of recent builds of its cost class (the op, types, layout and each dim's power of
// two: an average over the last ~8 builds measured with such a limit, wherever they ran: every
// build on the executor, one inline build in 4 per thread; none measured yet = not cheap) is
// within `server.inline_build_us`. A gemm whose heuristic rules all miss costs
// ~10x one whose first rule fits, and which one it is follows the dims' magnitudes. Lookups
// answered without an exact, valid winner are counted as misses, with their expected worth; a
// miss answered by fast_reply is counted on its answer (under the lock its hit holds) and
// recorded in the MissTracker when it folds (this service is one of its sources), so a hit costs
// no probe of the tracker and a key hit many times between folds is recorded once. A v2
// request's answer also carries each entry's launch description (daemon/launch.h) and is cached
// apart from the v1 answer, which stays exactly as it was. Each lookup builds from one snapshot
// of the templates (TemplateSet), taken after the generation it is cached at: the catalog moves
// the generation when it swaps the templates, so no answer of the old ones outlives a reload. A
// lookup naming a pin (daemon/pins.h) is answered from the pin's records alone, built and cached
// the same way under a key of its own; creating or deleting a pin invalidates every answer.
// Thread-safe; one mutex guards both caches and the builds in flight, held only for hash probes
// and list splices.
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
#include <vector>

#include "client/protocol.h"
#include "config/config.h"
#include "daemon/catalog.h"
#include "daemon/lru_cache.h"
#include "daemon/metrics.h"
#include "daemon/misses.h"
#include "daemon/node.h"
#include "daemon/pins.h"

namespace ktune {

struct Instance;  // templates/space.h

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
    std::string miss_key;    // MissTracker::key_of(device, problem), when `miss`
    double expected_us = 0;  // for the miss tracker
    double gain = 0;
    // Misses answered by fast_reply and not yet recorded in the tracker: guarded by the
    // service's mutex (an answer is otherwise immutable once cached).
    mutable std::uint64_t unrecorded_misses = 0;
  };
  enum class Cold { build, refuse, build_if_cheap };

  // Requests with a larger limit are never built on an I/O thread: the build instantiates up to
  // `limit` entries, so its cost grows with it.
  static constexpr int k_inline_max_limit = 8;
  // Cost classes measured at most (~100 bytes each); a class past it is never built inline.
  static constexpr size_t k_max_cost_classes = 16384;

  // Request text (after the id) longer than this is never cached by text: a line padded with a
  // large unknown field must not pin its size in memory for every distinct padding.
  static constexpr size_t k_max_cached_line = 4096;

  // Answers counting misses for the tracker's next fold at most: they hold the answers (an
  // evicted one too) until then. The scheduler folds every second; a hit past this many records
  // its miss at once.
  static constexpr size_t k_max_unrecorded = 16384;

  // What the answer caches hold and did (metrics, status).
  struct CacheStats {
    LruStats answers;                  // by (device, problem key, limit)
    LruStats lines;                    // request text -> the same answers
    std::uint64_t lines_too_long = 0;  // not cached by text: over k_max_cached_line
    std::uint64_t built = 0;           // answers built (cold lookups that did the work)
    std::uint64_t joined = 0;          // cold lookups that waited for another's build of their key
    std::uint64_t built_inline = 0;  // of `built`: on the asking thread under Cold::build_if_cheap
    // Per op: the average CPU time of its recent builds (limit <= k_inline_max_limit), us.
    std::vector<std::pair<std::string, double>> build_cpu_us;
    std::uint64_t kept = 0;  // answers of an older generation that no change since touched
  };

  // Test seam: on_build runs on the building thread before it builds `key`; on_join runs on a
  // thread that is about to wait for another's build of `key`. Set before concurrent use.
  struct BuildObserver {
    std::function<void(const std::string& key)> on_build;
    std::function<void(const std::string& key)> on_join;
  };

  LookupService(const DaemonConfig& config, const TemplateSet& templates, const Catalog& catalog,
                const PinTable& pins, const NodeIdentity& node, Metrics& metrics,
                MissTracker& misses);
  // Records the misses counted on answers first.
  ~LookupService();
  LookupService(const LookupService&) = delete;
  LookupService& operator=(const LookupService&) = delete;

  // The answer for a lookup body, or nullptr when it is not cached and `cold` is refuse (or
  // build_if_cheap and the build is not cheap). With a
  // `line`, the answer is also remembered under its text for fast_reply.
  protocol::Expected<std::shared_ptr<const Answer>> lookup(const protocol::Json& body, Cold cold,
                                                           std::string_view line = {},
                                                           int version = protocol::k_min_version);
  // The same for a request already read (a plain line's, daemon/plain_line.h).
  protocol::Expected<std::shared_ptr<const Answer>> lookup(const protocol::LookupRequest& request,
                                                           Cold cold, std::string_view line = {},
                                                           int version = protocol::k_min_version);
  // The reply line for `answer` (counts the lookup and, for a miss, the miss).
  std::string reply(const protocol::Json& id, const Answer& answer,
                    std::chrono::steady_clock::time_point t0);
  // A cached answer for a line of the exact shape our clients send ({"v":1,"id":..,"op":"lookup",
  // ...}), as a reply line appended to `out`; false (`out` untouched) when the line is not of
  // that shape or not cached.
  bool fast_reply(std::string_view line, std::string& out);
  // The same reply line as a string of its own, or nullopt.
  std::optional<std::string> fast_reply(std::string_view line) {
    std::string out;
    if (!fast_reply(line, out)) return std::nullopt;
    return out;
  }

  // Resolves a device class named by id or unique prefix, or this node's first GPU.
  protocol::Expected<std::pair<DeviceClass, DeviceLimits>> resolve_device(
      const std::string& name) const;
  // A resolved device name with its class's id (DeviceClass::id, built once).
  struct ResolvedDevice {
    DeviceClass device;
    DeviceLimits limits;
    std::string id;
  };
  // resolve_device, remembered per name until the index's set of device classes changes (what
  // else a resolution reads, this node's GPUs, never does): every lookup names a device, and
  // resolving one compares the name with every known class's id.
  protocol::Expected<std::shared_ptr<const ResolvedDevice>> resolve_device_cached(
      const std::string& name) const;
  // Names remembered at most; past it the memory starts afresh (a client naming many distinct
  // prefixes costs resolutions, not memory).
  static constexpr size_t k_max_resolved_names = 64;
  // Orders dims as the op's templates declare them, fills out_dtype and layout defaults (the
  // layout: TemplateRegistry::default_layout, `rc` for gemm), checks.
  // By the templates served now, or by a snapshot the caller holds.
  protocol::Expected<Problem> canonical_problem(const protocol::ProblemSpec& spec) const;
  protocol::Expected<Problem> canonical_problem(const protocol::ProblemSpec& spec,
                                                const TemplateRegistry& templates) const;

  CacheStats cache_stats() const;
  // The average CPU time of a recent build of `op` with a limit <= k_inline_max_limit, in us;
  // nullopt before the first.
  std::optional<double> build_cpu_us(const std::string& op) const;
  // What cached answers are checked against: the index's generation, which pin changes move too
  // (PinTable invalidates every answer when a pin is created or deleted).
  std::uint64_t generation() const { return m_catalog.index().generation(); }
  void set_build_observer(BuildObserver observer) { m_observer = std::move(observer); }

 private:
  using Built = protocol::Expected<std::shared_ptr<const Answer>>;
  // A build in flight: cold lookups of its key at its generation or older wait for its result.
  struct InFlight {
    std::uint64_t generation = 0;
    std::promise<Built> promise;
    std::shared_future<Built> result = promise.get_future().share();
  };
  // A cached answer, and the generation through which it is known valid: its own, or a newer one
  // it was checked at (no change in between touched it). Under a request line: the generation the
  // line was read at, or a newer one it was checked at (the line's key, and its answer, valid).
  struct CachedAnswer {
    CachedAnswer(std::shared_ptr<const Answer> a)  // implicit: the cache is put an answer
        : answer(std::move(a)), valid_through(answer->generation) {}
    CachedAnswer(std::shared_ptr<const Answer> a, std::uint64_t through)
        : answer(std::move(a)), valid_through(through) {}
    std::shared_ptr<const Answer> answer;
    std::uint64_t valid_through = 0;
  };
  // Whether `cached` is valid at index generation `generation` (read before the call); a kept
  // one is marked valid through it. REQUIRES: m_mutex held.
  bool still_valid_locked(CachedAnswer& cached, std::uint64_t generation);

  // Remembers `answer` under the line's text, as valid at `generation` (the lookup's).
  void remember_line(std::string_view line, std::shared_ptr<const Answer> answer,
                     std::uint64_t generation);
  // Records in the tracker the misses counted on answers since the last call (its fold).
  void record_unrecorded_misses();
  // Records `times` misses of the key `answer` answered (its miss key, device, problem, reason
  // and worth) in the tracker.
  void record_misses(const Answer& answer, std::uint64_t times);
  // The build of `key` to wait for, and whether the caller is to run it (none in flight yet, or
  // only one for an older generation). REQUIRES: m_mutex held.
  std::pair<std::shared_ptr<InFlight>, bool> join_build_locked(const std::string& key,
                                                               std::uint64_t generation);
  // Runs `flight`'s build, caches a success, and hands the result to every thread waiting on it.
  // `assumed_layout`: the layout filled in for a v2 request that named none ("" otherwise).
  // What one build works from: the generation its answer is cached at and the templates read
  // after it.
  struct BuildInput {
    std::uint64_t generation = 0;
    const TemplateRegistry& templates;
    const PinTable::Pin* pin = nullptr;  // answer from its records only (null: the live index)
  };
  // `inline_build`: on the asking thread under Cold::build_if_cheap (counted apart). `cost_key`:
  // cost_class(problem) when the caller made it, else empty.
  Built run_build(const std::string& key, InFlight& flight, const BuildInput& in,
                  const Problem& problem, const ResolvedDevice& device, int limit, int version,
                  const std::string& assumed_layout, bool inline_build, std::string cost_key);
  // Whether a cold build of `key` may run on the caller's thread now (see the header comment).
  // REQUIRES: m_mutex held.
  bool cheap_locked(const std::string& key, const std::string& cost_key, int limit,
                    std::uint64_t generation) const;
  // The cost class of a problem (see the header comment).
  static std::string cost_class(const Problem& p);
  Built build(const BuildInput& in, const Problem& problem, const ResolvedDevice& device, int limit,
              int version, const std::string& assumed_layout);
  // Fills the entry's kernel details from `ready` when given, else from instantiate(); false
  // when the template is not installed here or the config does not instantiate.
  bool complete_entry(const TemplateRegistry& templates, protocol::LookupEntry& entry,
                      const Problem& problem, const DeviceClass& device, const DeviceLimits& limits,
                      int version, const Instance* ready = nullptr) const;
  // Whether a neighbour's config (`entry`, completed for `problem`) keeps the GPU less busy here
  // than at `tuned`, the shape it was measured on: it runs fewer blocks here than there, and fewer
  // than the device's SMs; or, where its waves can be counted without the GPU (a persistent grid,
  // or blocks over half the per-block shared-memory limit: one a SM), its work units fill their
  // waves 1.1 times worse here, or it ran one wave there but needs more here and is persistent
  // or sums k-slices (the manifest's k_slices) of tiles that alone fill over half a wave here.
  // Its measurement then says little here (H100, graphed against the heuristics: 7-51 % longer
  // at six decode shapes, 25-29 % at two persistent ones, 0.49-0.65 of torch against 0.71-0.89
  // at mid-size ones, 0.60 against 0.91 for a split one at 512x4096x4096; bench/NOTES.md).
  static bool idles_here(const TemplateRegistry& templates, const protocol::LookupEntry& entry,
                         const Problem& problem, const Problem& tuned, const DeviceLimits& limits,
                         int version);
  // A rough kernel time for a problem no one measured: FLOPs or bytes over the device's rates,
  // for the first template's heuristic config.
  double estimate_us(const TemplateRegistry& templates, const Problem& problem,
                     const DeviceLimits& limits) const;
  static double kernel_us(const Instance& inst, const DeviceLimits& limits);

  const DaemonConfig& m_config;
  const TemplateSet& m_templates;
  const Catalog& m_catalog;
  const PinTable& m_pins;
  const NodeIdentity& m_node;
  Metrics& m_metrics;
  MissTracker& m_misses;

  BuildObserver m_observer;

  // resolve_device_cached's memory: valid for the index's device_ids_version m_resolved_for.
  mutable std::mutex m_resolved_mutex;
  mutable std::uint64_t m_resolved_for = 0;
  mutable std::unordered_map<std::string, std::shared_ptr<const ResolvedDevice>> m_resolved;

  mutable std::mutex m_mutex;  // guards the eleven below
  ByteLru<CachedAnswer> m_by_key;
  ByteLru<CachedAnswer> m_by_text;
  std::unordered_map<std::string, std::shared_ptr<InFlight>> m_building;
  std::uint64_t m_lines_too_long = 0;
  std::uint64_t m_built = 0;
  std::uint64_t m_joined = 0;
  std::uint64_t m_built_inline = 0;
  std::unordered_map<std::string, double> m_build_cpu_us;  // op -> recent builds' CPU time
  std::unordered_map<std::string, double> m_class_cpu_us;  // cost class -> the same
  std::uint64_t m_kept = 0;
  // Answers whose unrecorded_misses went from 0 since the last fold, each once: held here, an
  // answer evicted from the cache meanwhile keeps its count.
  std::vector<std::shared_ptr<const Answer>> m_unrecorded;
};

}  // namespace ktune
