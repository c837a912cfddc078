// Metrics: ktuned's counters, exported in Prometheus text format on the metrics port.
//
// Fixed sets of labels (ops, error codes, provenances) so every counter is a plain atomic: cheap
// enough to bump on every request from every I/O thread. Lookup time is a histogram with fixed
// buckets (microseconds to a second). Only series the daemon can move are exported (no error
// code only clients produce, no trial outcome that is a state). Thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "client/protocol.h"

namespace ktune {

// Requests are counted per op of protocol::k_ops, plus "other" (unparsable or unknown).
inline constexpr size_t k_metric_ops = std::size(protocol::k_ops) + 1;
// Upper bounds of the lookup-time histogram's buckets, in seconds (+Inf is implied).
inline constexpr std::array<double, 12> k_lookup_buckets = {1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5,
                                                            1e-4, 2.5e-4, 1e-3, 1e-2, 0.1,    1};
inline constexpr std::array<std::string_view, 4> k_provenances = {"exact", "nearest", "heuristic",
                                                                  "stale"};

class Metrics {
 public:
  void count_request(std::string_view op);
  void count_error(protocol::ErrorKind kind);
  void count_lookup(std::string_view provenance, double seconds);
  // One measured (or failed) trial of a tuning job, by outcome name (store/records.h Outcome).
  void count_trial(std::string_view outcome);
  void connection_opened() {
    m_connections.fetch_add(1);
    m_connections_total.fetch_add(1);
  }
  void connection_closed() { m_connections.fetch_sub(1); }
  void connection_refused() { m_connections_refused.fetch_add(1); }
  // A connection closed because it sent HTTP to the protocol port (a browser page, curl).
  void http_refused() { m_http_refused.fetch_add(1, std::memory_order_relaxed); }
  // A connection to the metrics/health port closed unanswered: that port's connection cap.
  void metrics_port_refused() { m_metrics_port_refused.fetch_add(1, std::memory_order_relaxed); }
  // A connection closed because its client took no reply byte for server.write_stall_timeout_ms.
  void slow_reader_dropped() { m_slow_readers_dropped.fetch_add(1, std::memory_order_relaxed); }
  // A SIGHUP reload finished. failed: a template directory or a seed table did not load (what
  // was served before stays served).
  enum class Reload { ok, failed };
  void count_reload(Reload result) { m_reloads[size_t(result)].fetch_add(1); }
  std::uint64_t reloads(Reload result) const { return m_reloads[size_t(result)].load(); }
  // A session let the others on its I/O thread run before its next line (daemon/session.h).
  void session_yielded() { m_session_yields.fetch_add(1, std::memory_order_relaxed); }

  std::int64_t connections() const { return m_connections.load(); }
  std::uint64_t requests() const;
  std::uint64_t errors() const;

  // Prometheus text exposition (format 0.0.4); `extra` is appended verbatim (gauges owned by
  // others), then ktune_build_info.
  std::string prometheus(const std::string& extra = "") const;

 private:
  static constexpr size_t k_errors = std::size(protocol::k_error_names);
  std::array<std::atomic<std::uint64_t>, k_metric_ops> m_requests{};
  std::array<std::atomic<std::uint64_t>, k_errors> m_errors{};
  std::array<std::atomic<std::uint64_t>, k_provenances.size()> m_lookups{};
  std::atomic<std::uint64_t> m_lookup_nanos{0};
  // Per bucket (not cumulative); the last is +Inf.
  std::array<std::atomic<std::uint64_t>, k_lookup_buckets.size() + 1> m_lookup_buckets{};
  // Outcomes of finished trials ("in_flight" is a trial's state while it runs, never counted).
  static constexpr std::array<std::string_view, 7> k_outcomes = {
      "ok", "invalid", "compile_error", "resource_error", "wrong_result", "crash", "timeout"};
  std::array<std::atomic<std::uint64_t>, k_outcomes.size()> m_trials{};
  std::atomic<std::int64_t> m_connections{0};
  std::atomic<std::uint64_t> m_connections_total{0};
  std::atomic<std::uint64_t> m_connections_refused{0};
  std::atomic<std::uint64_t> m_http_refused{0};
  std::atomic<std::uint64_t> m_metrics_port_refused{0};
  std::atomic<std::uint64_t> m_slow_readers_dropped{0};
  std::array<std::atomic<std::uint64_t>, 2> m_reloads{};  // by Reload
  std::atomic<std::uint64_t> m_session_yields{0};
};

}  // namespace ktune
