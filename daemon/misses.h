// MissTracker: lookups that found no exact, valid answer, per key — what background tuning works
// through.
//
// Each miss adds its expected worth: the kernel's expected runtime times the gain tuning is
// expected to bring over the answer given (a heuristic gains more than a nearby tuned shape).
// Keys whose summed worth passes the threshold are handed to the scheduler once (due()). Bounded:
// past k_max_keys distinct keys the least worth is forgotten. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/problem.h"

namespace ktune {

class MissTracker {
 public:
  static constexpr size_t k_max_keys = 100'000;

  struct Miss {
    DeviceClass device;
    Problem problem;
    std::uint64_t count = 0;
    std::string reason;      // "no winner", "stale: ..."
    double expected_us = 0;  // expected kernel time (measured nearby, or a roofline estimate)
    double gain = 0;         // expected fraction of that time tuning saves
    double worth_us = 0;     // count x expected_us x gain: GPU time tuning would save
    bool promoted = false;   // handed to the scheduler
  };

  void record(const DeviceClass& device, const Problem& problem, const std::string& reason,
              double expected_us, double gain);
  // Most worth first.
  std::vector<Miss> top(size_t n) const;
  // Keys whose worth reached `threshold_us` and were not handed out before; marks them promoted.
  std::vector<Miss> due(double threshold_us);
  // Lets a key be promoted again (its job failed or was cancelled, and it is still missed).
  void release(const std::string& device_id, const Problem& problem);
  std::uint64_t total() const;
  size_t distinct() const;

 private:
  void evict_locked();
  mutable std::mutex m_mutex;
  std::unordered_map<std::string, Miss> m_misses;
  std::uint64_t m_total = 0;
};

}  // namespace ktune
