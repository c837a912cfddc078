#include "daemon/metrics.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "daemon/process.h"
#include "ktune_version.h"

namespace ktune {

namespace {

// Seconds to the microsecond, whatever their size (the stream's 6 digits would step by 10 s past
// a million CPU-seconds).
std::string seconds_text(double s) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.6f", s);
  return buf;
}
// A count of nanoseconds as seconds, every digit kept (a double streamed with 6 digits stepped
// by 10 s past a million seconds, and rate(sum)/rate(count) became noise).
std::string nanos_as_seconds(std::uint64_t nanos) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%llu.%09llu",
                static_cast<unsigned long long>(nanos / 1'000'000'000),
                static_cast<unsigned long long>(nanos % 1'000'000'000));
  return buf;
}
std::string_view op_label(size_t i) {
  return i < std::size(protocol::k_ops) ? protocol::k_ops[i].name : "other";
}
}  // namespace

void Metrics::count_request(std::string_view op) {
  for (size_t i = 0; i < std::size(protocol::k_ops); ++i)
    if (protocol::k_ops[i].name == op)
      return void(m_requests[i].fetch_add(1, std::memory_order_relaxed));
  m_requests.back().fetch_add(1, std::memory_order_relaxed);
}

void Metrics::count_trial(std::string_view outcome) {
  for (size_t i = 0; i < k_outcomes.size(); ++i)
    if (k_outcomes[i] == outcome) return void(m_trials[i].fetch_add(1, std::memory_order_relaxed));
}

void Metrics::count_error(protocol::ErrorKind kind) {
  for (size_t i = 0; i < k_errors; ++i)
    if (protocol::k_error_names[i].first == kind)
      return void(m_errors[i].fetch_add(1, std::memory_order_relaxed));
}

void Metrics::count_lookup(std::string_view provenance, double seconds) {
  for (size_t i = 0; i < k_provenances.size(); ++i)
    if (k_provenances[i] == provenance) m_lookups[i].fetch_add(1, std::memory_order_relaxed);
  m_lookup_nanos.fetch_add(std::uint64_t(seconds * 1e9), std::memory_order_relaxed);
  const size_t bucket =
      size_t(std::lower_bound(k_lookup_buckets.begin(), k_lookup_buckets.end(), seconds) -
             k_lookup_buckets.begin());
  m_lookup_buckets[bucket].fetch_add(1, std::memory_order_relaxed);
}

std::uint64_t Metrics::requests() const {
  std::uint64_t n = 0;
  for (const auto& c : m_requests) n += c.load();
  return n;
}

std::uint64_t Metrics::errors() const {
  std::uint64_t n = 0;
  for (const auto& c : m_errors) n += c.load();
  return n;
}

std::string Metrics::prometheus(const std::string& extra) const {
  std::ostringstream os;
  os << "# HELP ktune_requests_total Requests handled, by op.\n# TYPE ktune_requests_total "
        "counter\n";
  for (size_t i = 0; i < k_metric_ops; ++i)
    os << "ktune_requests_total{op=\"" << op_label(i) << "\"} " << m_requests[i].load() << "\n";
  os << "# HELP ktune_trials_total Trials measured by tuning jobs, by outcome.\n"
        "# TYPE ktune_trials_total counter\n";
  for (size_t i = 0; i < k_outcomes.size(); ++i)
    os << "ktune_trials_total{outcome=\"" << k_outcomes[i] << "\"} " << m_trials[i].load() << "\n";
  os << "# HELP ktune_errors_total Error replies, by code.\n# TYPE ktune_errors_total counter\n";
  for (size_t i = 0; i < k_errors; ++i)
    if (protocol::k_error_names[i].first != protocol::ErrorKind::connection_failed)  // clients'
      os << "ktune_errors_total{code=\"" << protocol::k_error_names[i].second << "\"} "
         << m_errors[i].load() << "\n";
  os << "# HELP ktune_lookups_total Lookups answered, by provenance of the best entry.\n"
        "# TYPE ktune_lookups_total counter\n";
  for (size_t i = 0; i < k_provenances.size(); ++i)
    os << "ktune_lookups_total{provenance=\"" << k_provenances[i] << "\"} " << m_lookups[i].load()
       << "\n";
  os << "# HELP ktune_lookup_seconds Time spent answering lookups (dispatcher only).\n"
        "# TYPE ktune_lookup_seconds histogram\n";
  std::uint64_t cumulative = 0;
  for (size_t i = 0; i < m_lookup_buckets.size(); ++i) {
    cumulative += m_lookup_buckets[i].load();
    os << "ktune_lookup_seconds_bucket{le=\"";
    if (i < k_lookup_buckets.size())
      os << k_lookup_buckets[i];
    else
      os << "+Inf";
    os << "\"} " << cumulative << "\n";
  }
  os << "ktune_lookup_seconds_sum " << nanos_as_seconds(m_lookup_nanos.load()) << "\n"
     << "ktune_lookup_seconds_count " << cumulative << "\n";
  os << "# HELP ktune_connections_open Open client connections.\n"
        "# TYPE ktune_connections_open gauge\n"
     << "ktune_connections_open " << m_connections.load() << "\n";
  os << "# HELP ktune_connections_total Client connections accepted.\n# TYPE "
        "ktune_connections_total counter\n"
     << "ktune_connections_total " << m_connections_total.load() << "\n";
  os << "# HELP ktune_connections_refused_total Connections refused at the cap.\n"
        "# TYPE ktune_connections_refused_total counter\n"
     << "ktune_connections_refused_total " << m_connections_refused.load() << "\n";
  os << "# HELP ktune_http_refused_total Connections closed for sending HTTP to the protocol "
        "port.\n# TYPE ktune_http_refused_total counter\n"
     << "ktune_http_refused_total " << m_http_refused.load() << "\n";
  os << "# HELP ktune_metrics_port_refused_total Connections to the metrics/health port closed "
        "unanswered at its cap.\n# TYPE ktune_metrics_port_refused_total counter\n"
     << "ktune_metrics_port_refused_total " << m_metrics_port_refused.load() << "\n";
  os << "# HELP ktune_slow_readers_dropped_total Connections closed because the client read no "
        "reply for server.write_stall_timeout_ms.\n"
        "# TYPE ktune_slow_readers_dropped_total counter\n"
     << "ktune_slow_readers_dropped_total " << m_slow_readers_dropped.load() << "\n";
  os << "# HELP ktune_reloads_total SIGHUP reloads, by result: failed when a template directory "
        "or a seed table did not load (what was served stays served).\n"
        "# TYPE ktune_reloads_total counter\n"
     << "ktune_reloads_total{result=\"ok\"} " << reloads(Reload::ok) << "\n"
     << "ktune_reloads_total{result=\"failed\"} " << reloads(Reload::failed) << "\n";
  os << "# HELP ktune_session_yields_total Times a connection let the others on its I/O thread run "
        "after using it for more than 50 us in one turn.\n"
        "# TYPE ktune_session_yields_total counter\n"
     << "ktune_session_yields_total " << m_session_yields.load() << "\n";
  os << extra;
  const ProcessStats p = process_stats();
  os << "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
        "# TYPE process_resident_memory_bytes gauge\n"
     << "process_resident_memory_bytes " << std::int64_t(p.resident_bytes) << "\n"
     << "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
        "# TYPE process_cpu_seconds_total counter\n"
     << "process_cpu_seconds_total " << seconds_text(p.cpu_seconds) << "\n"
     << "# HELP process_open_fds Number of open file descriptors.\n"
        "# TYPE process_open_fds gauge\n"
     << "process_open_fds " << p.open_fds << "\n"
     << "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n"
        "# TYPE process_start_time_seconds gauge\n"
     << "process_start_time_seconds " << p.start_time_s << "\n";
  os << "# HELP ktune_build_info The running ktuned's version (always 1).\n"
        "# TYPE ktune_build_info gauge\n"
     << "ktune_build_info{version=\"" << k_version << "\",git=\"" << k_git_describe << "\"} 1\n";
  return os.str();
}

}  // namespace ktune
