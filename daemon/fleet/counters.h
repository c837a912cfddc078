// FleetCounters: what the fleet parts of a node count, for `ktune fleet status`, `status` and
// /metrics. Plain atomics plus a window of recent propagation delays. Thread-safe.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace ktune {

struct FleetCounters {
  std::atomic<std::uint64_t> published{0};        // winners this node wrote to the fleet's hash
  std::atomic<std::uint64_t> received{0};         // winners other nodes published, read here
  std::atomic<std::uint64_t> merged{0};           // of those, ones that changed this node's table
  std::atomic<std::uint64_t> rejected{0};         // values in Redis the import path refused
  std::atomic<std::uint64_t> tuned{0};            // jobs this node tuned to a winner
  std::atomic<std::uint64_t> fenced{0};           // results dropped: the key was claimed again
  std::atomic<std::uint64_t> claims_acquired{0};  // keys claimed before tuning them
  std::atomic<std::uint64_t> claims_waited{0};    // jobs deferred: another node held the key
  std::atomic<std::uint64_t> claims_done{0};      // jobs ended: the fleet had the winner
  std::atomic<std::uint64_t> claims_alone{0};     // jobs tuned unclaimed: Redis unreachable
  std::atomic<std::uint64_t> leases_lost{0};      // claims another node took over mid-job
  std::atomic<std::uint64_t> trials_shared{0};    // trials published for a takeover
  std::atomic<std::uint64_t> trials_taken{0};     // trials of another node reused here
  std::atomic<std::uint64_t> resyncs{0};          // full reads of the fleet's table
  std::atomic<std::uint64_t> disconnects{0};      // times Redis became unreachable

  // Milliseconds from a winner's commit on its node to its merge here.
  void record_delay(double ms) {
    std::lock_guard lock(m_mutex);
    if (m_delays.size() < k_window) {
      m_delays.push_back(ms);
    } else {
      m_delays[m_next] = ms;
      m_next = (m_next + 1) % k_window;
    }
    ++m_delay_count;
  }
  struct Delays {
    std::uint64_t count = 0;                     // ever recorded
    double p50 = 0, p99 = 0, max = 0, last = 0;  // over the window
  };
  Delays delays() const {
    std::lock_guard lock(m_mutex);
    Delays d;
    d.count = m_delay_count;
    if (m_delays.empty()) return d;
    d.last = m_delays[(m_next + m_delays.size() - 1) % m_delays.size()];
    std::vector<double> v = m_delays;
    std::sort(v.begin(), v.end());
    d.p50 = v[v.size() / 2];
    d.p99 = v[std::min(v.size() - 1, v.size() * 99 / 100)];
    d.max = v.back();
    return d;
  }

 private:
  static constexpr size_t k_window = 1024;
  mutable std::mutex m_mutex;
  std::vector<double> m_delays;
  size_t m_next = 0;  // the oldest entry, once the window is full
  std::uint64_t m_delay_count = 0;
};

}  // namespace ktune
