// WinnerIndex: every winner record in memory, for lookups that never touch disk.
//
// Loaded from the store at start and updated on every write (tuner commits, imports). Exact
// lookups are one hash probe; nearest lookups search one family (same device class, op, dtypes,
// layout and dim names) by log2 distance in a ShapeTree (daemon/shape_tree.h): O(log n) per call
// rather than a scan of the family, with the same answers. Readers share a lock; writers are rare.
// Thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <set>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/shape_tree.h"
#include "store/records.h"

namespace ktune {

class WinnerIndex {
 public:
  struct Near {
    std::shared_ptr<const WinnerRecord> record;
    double distance = 0;  // sum over dims of |log2 a - log2 b|
  };

  // Replaces the whole content.
  void load(std::vector<WinnerRecord> records);
  // Inserts or replaces one record.
  void upsert(WinnerRecord record);
  // Inserts or replaces many under one lock and one generation step (an import): cached answers
  // are invalidated once, not once per record.
  void upsert(std::vector<WinnerRecord> records);

  std::shared_ptr<const WinnerRecord> exact(const std::string& device_id,
                                            const Problem& problem) const;
  // Records of the same family within `radius`, nearest first (ties by key), excluding an exact
  // match; at most `max` of them.
  std::vector<Near> nearest(const std::string& device_id, const Problem& problem, double radius,
                            size_t max) const;

  size_t size() const;
  // Every record, in key order (a pin's snapshot; `ktune pins NAME`). O(n) under the read lock.
  std::vector<std::shared_ptr<const WinnerRecord>> all() const;
  // Distinct device class ids, sorted. Kept as records arrive: no scan of the index (every
  // lookup naming a device asks).
  std::vector<std::string> device_ids() const;
  // Incremented on every change; lets callers cache answers derived from the index.
  std::uint64_t generation() const { return m_generation.load(std::memory_order_acquire); }

  // "device/op|dtype|out|layout|M,N,K": records that can answer for each other.
  static std::string family_key(const std::string& device_id, const Problem& problem);

 private:
  // Records that can answer for each other, and the tree that finds the nearest of them.
  struct Family {
    explicit Family(size_t dims) : shapes(dims) {}
    ShapeTree shapes;
    std::vector<std::shared_ptr<const WinnerRecord>> records;  // by the tree's slot
  };
  struct Entry {
    std::shared_ptr<const WinnerRecord> record;
    Family* family = nullptr;  // m_families' nodes never move
    std::uint32_t slot = 0;
  };
  // Inserts or replaces; returns the family when the record was new to it (to settle).
  Family* insert_locked(WinnerRecord record);

  mutable std::shared_mutex m_mutex;
  std::unordered_map<std::string, Entry> m_by_key;
  std::unordered_map<std::string, Family> m_families;
  std::set<std::string> m_device_ids;
  std::atomic<std::uint64_t> m_generation{0};
};

}  // namespace ktune
