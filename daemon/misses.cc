#include "daemon/misses.h"

#include <algorithm>

namespace ktune {

void MissTracker::record(const DeviceClass& device, const Problem& problem,
                         const std::string& reason, double expected_us, double gain) {
  std::lock_guard lock(m_mutex);
  ++m_total;
  auto [it, inserted] = m_misses.try_emplace(device.id() + "/" + problem.key());
  Miss& m = it->second;
  if (inserted) {
    m.device = device;
    m.problem = problem;
  }
  ++m.count;
  m.reason = reason;
  m.expected_us = expected_us;
  m.gain = gain;
  m.worth_us = double(m.count) * expected_us * gain;
  if (inserted && m_misses.size() > k_max_keys) evict_locked();
}

void MissTracker::evict_locked() {
  // Forget the tenth of keys worth least (amortized: one pass per k_max_keys / 10 inserts).
  std::vector<std::pair<double, std::string>> by_worth;
  by_worth.reserve(m_misses.size());
  for (const auto& [k, m] : m_misses) by_worth.emplace_back(m.worth_us, k);
  const size_t drop = m_misses.size() / 10;
  std::nth_element(by_worth.begin(), by_worth.begin() + drop, by_worth.end());
  for (size_t i = 0; i < drop; ++i) m_misses.erase(by_worth[i].second);
}

std::vector<MissTracker::Miss> MissTracker::top(size_t n) const {
  std::vector<Miss> all;
  {
    std::lock_guard lock(m_mutex);
    all.reserve(m_misses.size());
    for (const auto& [_, m] : m_misses) all.push_back(m);
  }
  auto by_worth = [](const Miss& a, const Miss& b) {
    return a.worth_us != b.worth_us ? a.worth_us > b.worth_us : a.count > b.count;
  };
  if (all.size() > n) {
    std::partial_sort(all.begin(), all.begin() + n, all.end(), by_worth);
    all.resize(n);
  } else {
    std::sort(all.begin(), all.end(), by_worth);
  }
  return all;
}

std::vector<MissTracker::Miss> MissTracker::due(double threshold_us) {
  std::vector<Miss> out;
  std::lock_guard lock(m_mutex);
  for (auto& [_, m] : m_misses)
    if (!m.promoted && m.worth_us >= threshold_us) {
      m.promoted = true;
      out.push_back(m);
    }
  std::sort(out.begin(), out.end(),
            [](const Miss& a, const Miss& b) { return a.worth_us > b.worth_us; });
  return out;
}

void MissTracker::release(const std::string& device_id, const Problem& problem) {
  std::lock_guard lock(m_mutex);
  if (auto it = m_misses.find(device_id + "/" + problem.key()); it != m_misses.end())
    it->second.promoted = false;
}

std::uint64_t MissTracker::total() const {
  std::lock_guard lock(m_mutex);
  return m_total;
}

size_t MissTracker::distinct() const {
  std::lock_guard lock(m_mutex);
  return m_misses.size();
}

}  // namespace ktune
