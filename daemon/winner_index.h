// WinnerIndex: every winner record in memory, for lookups that never touch disk.
//
// Loaded from the store at start and updated on every write (tuner commits, imports). Exact
// lookups are one hash probe; nearest lookups search one family (same device class, op, dtypes,
// layout and dim names) by log2 distance in a ShapeTree (daemon/shape_tree.h): O(log n) per call
// rather than a scan of the family, with the same answers.
//
// Every change moves the generation, and the last k_change_log changes are kept with what they
// touched (family and log2 dims, issue 14): an answer derived from the index at an older
// generation asks untouched_since whether any change since could alter it. Changes without a
// precise extent (a load, an import larger than the log, a template swap, a record of a device
// class new to the index, which can change how a device name resolves) clear the log: nothing
// made before them is vouched for.
//
// Thread-safe. Readers share a lock. Writers (load, upsert) are serialized by a writer mutex of
// the index's own (so no caller has to), and hold the readers' lock exclusively only briefly:
// a small batch is applied in place, a load or a batch of more than k_in_place_batch records is
// built on a copy of the records' state outside that lock and swapped in under it (bench/NOTES.md,
// "Imports built aside"). Readers see the state before the swap or after it, never a part.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
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
    std::uint64_t config = 0;  // config_hash() of the record's best config, kept beside the tree
  };

  // XXH3-64 over a config's template name and params (names and values, in order): neighbours
  // with equal values offer the same lookup entry, told apart without reading their records.
  // Two different configs share a value with probability 2^-64 per pair (then a lookup lists
  // one neighbour fewer). 0 for a record with no config.
  static std::uint64_t config_hash(const WinnerRecord& record);

  // Replaces the whole content (built aside, then swapped in).
  void load(std::vector<WinnerRecord> records);
  // Inserts or replaces one record (in place).
  void upsert(WinnerRecord record);
  // Inserts or replaces many in one generation step (an import): cached answers are invalidated
  // once, not once per record. Up to k_in_place_batch records in place, more built aside.
  void upsert(std::vector<WinnerRecord> records);
  // The largest batch upsert applies in place, under the readers' lock held exclusively. A
  // bigger one copies the records' state (every entry and family tree, not the records: time and
  // transient memory in the index's size), applies the batch to the copy outside the lock and
  // swaps it in. Measured on the 2-core dev VM with 100,000 winners (bench/index_batch_bench.cc,
  // bench/NOTES.md "Imports built aside"): in place holds the lock ~1-2 us a record, so 1,024
  // records stall a reader 1.2-1.8 ms (median, quiet box; up to 3.8 ms loaded), near cached
  // lookups' own p99.9 there (0.4-0.9 ms); the copy costs ~50 ms of CPU whatever the batch's
  // size, and a 100,000-record batch built aside takes 3-6x the in-place time. Smaller batches (a
  // tuner commit: 1; a fleet stream read: up to 1,000) would pay up to 50x the CPU to save under a
  // millisecond of waiting; larger ones (imports, a fleet resync's 5,000) would wait ~1 ms per
  // 1,000 records (100 ms for 100,000) and are built aside.
  static constexpr size_t k_in_place_batch = 1024;

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
  // Moves whenever device_ids() may have changed (a class new to the index, a load): lets a
  // caller keep what it derived from the set (a resolved device name) until then.
  std::uint64_t device_ids_version() const {
    return m_device_ids_version.load(std::memory_order_acquire);
  }
  // Incremented on every change; lets callers cache answers derived from the index.
  std::uint64_t generation() const { return m_generation.load(std::memory_order_acquire); }
  // Moves the generation with no record changed: something else answers are built from (the
  // templates) changed, so every cached answer is invalid.
  void invalidate_answers();

  // How many changes the log keeps; an import of more records than this clears it.
  static constexpr size_t k_change_log = 4096;
  // Whether a change after generation `since` could alter an answer for `problem` on
  // `device_id` whose nearest shapes are searched within `radius`: a change of a record of the
  // same family at log2 distance <= radius (0: the exact key), or a change the log does not
  // describe (see above). Returns the generation through which none did (the current one,
  // at least as new as any generation read before the call), or nullopt when one may have.
  std::optional<std::uint64_t> untouched_since(const std::string& device_id, const Problem& problem,
                                               std::uint64_t since, double radius) const;
  // The last generation that cleared the change log: what was derived from the index at an
  // older generation may depend on anything; from it on, only the logged changes differ. Read
  // after generation(), it covers every clear up to the generation read.
  std::uint64_t described_since() const {
    return m_described_since.load(std::memory_order_acquire);
  }

  // "device/op|dtype|out|layout|M,N,K": records that can answer for each other.
  static std::string family_key(const std::string& device_id, const Problem& problem);

 private:
  // Records that can answer for each other, and the tree that finds the nearest of them.
  struct Family {
    explicit Family(size_t dims) : shapes(dims) {}
    ShapeTree shapes;
    std::vector<std::shared_ptr<const WinnerRecord>> records;  // by the tree's slot
    std::vector<std::uint64_t> configs;  // by the tree's slot: config_hash(*records[slot])
  };
  struct Entry {
    std::shared_ptr<const WinnerRecord> record;
    Family* family = nullptr;  // the families' map nodes never move
    std::uint32_t slot = 0;
  };
  // The records and what finds them: what a load or a large batch builds aside and swaps in
  // whole. The records are immutable and shared between a state and its copy.
  struct State {
    std::unordered_map<std::string, Entry> by_key;
    std::unordered_map<std::string, Family> families;
    std::set<std::string> device_ids;

    // A copy whose entries point into its own families.
    std::unique_ptr<State> copy() const;
    // Inserts or replaces; returns the family when the record was new to it (to settle).
    Family* insert(WinnerRecord record);
  };
  // One change in the log: what it touched, and the generation it made.
  struct Change {
    std::uint64_t generation = 0;  // set when logged
    std::size_t family = 0;        // hash of family_key: a collision only invalidates more
    std::vector<double> dims;      // log2
  };
  static Change change_of(const WinnerRecord& record);
  // Inserts (or replaces) `records` into `state`, then settles the trees of the families that
  // grew.
  static void apply(State& state, std::vector<WinnerRecord> records);
  enum class DeviceIds { unchanged, changed };
  // Moves the generation one step: logs `changes` at the new generation (dropping the oldest
  // past k_change_log), or clears the log when the change is not described (nullopt); moves
  // device_ids_version when `ids` changed. REQUIRES: the unique lock.
  void publish_locked(std::optional<std::vector<Change>> changes, DeviceIds ids);
  // Clears the log: nothing older than `generation` is described any more.
  void clear_changes_locked(std::uint64_t generation);

  mutable std::shared_mutex m_mutex;  // readers share it; held unique to change what follows
  std::mutex m_write_mutex;           // serializes writers: one state built aside at a time
  // Never null. Written under both mutexes, so a writer reads it holding m_write_mutex alone.
  std::unique_ptr<State> m_state = std::make_unique<State>();
  std::atomic<std::uint64_t> m_device_ids_version{0};  // written under the unique lock
  std::atomic<std::uint64_t> m_generation{0};  // written under the unique lock
  std::deque<Change> m_changes;                // by generation, oldest first
  std::atomic<std::uint64_t> m_described_since{0};
};

}  // namespace ktune
