// MissTracker: lookups that found no exact, valid answer, per key — what background tuning works
// through.
//
// Each miss adds its expected worth: the kernel's expected runtime times the gain tuning is
// expected to bring over the answer given (a heuristic gains more than a nearby tuned shape).
// Keys whose summed worth passes the threshold are handed to the scheduler once (due()).
//
// Bounded in bytes (`tuning.miss_tracker_bytes`): every key is charged what it holds (its key
// text, problem, device and reason, and its nodes in the two indexes); past the bound the key
// worth least is forgotten, one at a time, never the key being recorded. Keys are kept ordered
// by worth (one ordered set for keys waiting, one for keys handed to the scheduler), so a record,
// an eviction and a promotion cost O(log n), and top(n) costs O(n) whatever the number of keys.
// Misses may also be counted elsewhere first (LookupService counts a cached answer's misses on the
// answer, under the lock its hit holds anyway) and recorded here in one go: such a holder is a
// source, and fold() has every source record what it holds. Every read (top, due, total,
// distinct, stats) folds first, so it sees every miss counted before it began; the scheduler also
// folds every second. A key recorded n times in one go gets the same count and worth as n records;
// its reason, expected time and gain are the last recorded, as of the fold.
// Thread-safe: one mutex, held for a hash probe and a few set operations per call; folds are
// serialized by a second one (held while sources record; never taken by record()).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/problem.h"

namespace ktune {

class MissTracker {
 public:
  static constexpr size_t k_default_max_bytes = 32 << 20;

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
  struct Stats {
    std::uint64_t total = 0;    // misses recorded
    size_t distinct = 0;        // keys held
    size_t bytes = 0;           // charged to them, at most max_bytes (but for one key)
    size_t max_bytes = 0;       // the bound
    std::uint64_t evicted = 0;  // keys forgotten to stay under it
  };

  // `retry_base`: the first backoff after a failed job (tuning.miss_retry_seconds).
  explicit MissTracker(size_t max_bytes = k_default_max_bytes,
                       std::chrono::milliseconds retry_base = std::chrono::seconds(60));

  void record(const DeviceClass& device, const Problem& problem, const std::string& reason,
              double expected_us, double gain);
  // The same with the key already made (key_of(device, problem)): what a cached answer keeps, so
  // a repeated miss answered from memory builds no text.
  // `times`: misses of the key counted elsewhere, recorded in one go (a fold).
  void record(const std::string& key, const DeviceClass& device, const Problem& problem,
              const std::string& reason, double expected_us, double gain, std::uint64_t times = 1);
  // A holder of misses not recorded yet: fold() calls `record_pending`, which records them (with
  // record()) and forgets them. `owner` names it for remove_source. A source must not read the
  // tracker from `record_pending` (a read folds).
  void add_source(const void* owner, std::function<void()> record_pending);
  // Stops asking `owner`; returns after any fold that is asking it.
  void remove_source(const void* owner);
  // Has every source record what it holds. Reads do it first; the scheduler every second, so
  // what sources hold stays small.
  void fold() const;
  // The key a miss is counted under.
  static std::string key_of(const DeviceClass& device, const Problem& problem);
  // The same from the device's id (DeviceClass::id), when the caller has it already.
  static std::string key_of(std::string_view device_id, const Problem& problem);
  // Most worth first (ties: more misses first, then by key).
  std::vector<Miss> top(size_t n) const;
  // Keys whose worth reached `threshold_us` and were not handed out before, most worth first;
  // marks them promoted.
  std::vector<Miss> due(double threshold_us);
  // Lets a key be promoted again at once, with the worth it has (the queue had no room for it).
  void release(const std::string& device_id, const Problem& problem);
  // The key's job failed: it may be promoted again, not before a backoff that doubles with each
  // failure in a row (retry_base, 2x, 4x, ... at most 64x). A key whose job was cancelled stays
  // promoted: a cancel holds until the daemon restarts.
  void failed(const std::string& device_id, const Problem& problem);
  // When a key whose job failed may be promoted again (nullopt: it may now, or it is unknown).
  std::optional<std::chrono::steady_clock::time_point> retry_at(const std::string& device_id,
                                                                const Problem& problem) const;
  std::uint64_t total() const;
  size_t distinct() const;
  Stats stats() const;

 private:
  // One key's place in a ranking. `key` points at the key held by m_misses (stable: map nodes
  // never move).
  struct Rank {
    double worth = 0;
    std::uint64_t count = 0;
    const std::string* key = nullptr;
  };
  struct MoreWorth {
    bool operator()(const Rank& a, const Rank& b) const {
      if (a.worth != b.worth) return a.worth > b.worth;
      if (a.count != b.count) return a.count > b.count;
      return *a.key < *b.key;
    }
  };
  using Ranking = std::set<Rank, MoreWorth>;
  struct Slot {
    Miss miss;
    size_t bytes = 0;
    Ranking::iterator rank;  // in m_waiting, or in m_promoted when miss.promoted
    int failures = 0;        // failed jobs in a row
    std::chrono::steady_clock::time_point retry_at{};  // not promoted before this
  };
  using Map = std::unordered_map<std::string, Slot>;

  Ranking& ranking_of(const Slot& slot) { return slot.miss.promoted ? m_promoted : m_waiting; }
  // Moves the key's rank to match its miss (worth, count, promoted) without allocating.
  void rerank_locked(Map::iterator it, bool was_promoted);
  // Forgets keys worth least until the charge fits the bound, never `keep`.
  void evict_locked(const std::string* keep);

  const size_t m_max_bytes;
  const std::chrono::milliseconds m_retry_base;
  // Guards m_sources; held through a fold, so a read that folds sees what an earlier fold took
  // from a source (a second fold waits for the first to have recorded it).
  mutable std::mutex m_fold_mutex;
  std::vector<std::pair<const void*, std::function<void()>>> m_sources;
  mutable std::mutex m_mutex;
  Map m_misses;
  Ranking m_waiting;   // not promoted, most worth first
  Ranking m_promoted;  // handed to the scheduler, most worth first
  size_t m_bytes = 0;
  std::uint64_t m_total = 0;
  std::uint64_t m_evicted = 0;
};

}  // namespace ktune
