// ByteLru: a least-recently-used map from text keys to values, bounded in bytes.
//
// Every entry is charged what it holds: its key's length, the value's size as the caller states
// it, and k_entry_overhead for the list node and index slots around them. Inserting past the bound
// evicts least-recently-used entries one by one until the total fits again (never a wholesale
// clear); an entry that alone exceeds the bound is not stored. A hit moves the entry to the front
// and allocates nothing (the index holds each entry's hash and list position, nothing else),
// unless the entry is already among the most recent quarter: fewer than size()/4 entries were
// moved to the front since it was, so fewer than that are ahead of it (each move stamps the entry
// with a counter). The order is then LRU but for that quarter, where a hit costs no writes to its
// neighbours' list links (cache misses on every warm lookup, bench/NOTES.md): a hit entry is
// still not evicted before three quarters of the cache's entries have been added or hit after
// it. Counters (hits, misses, evictions, refusals) let callers export metrics that move.
//
// Thread-compatible: the owner serializes calls (LookupService holds one mutex around its two
// caches); const methods may run concurrently with each other only. put() can hand what it
// removes to the caller (a Graveyard), so the entries are freed after the owner's lock is released.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ktune {

// XXH3-64 of a key's bytes (lru_cache.cc). The answer caches are keyed by request text of ~200
// bytes, where std::hash<string_view> (murmur) took ~280 instructions a lookup (bench/NOTES.md).
struct KeyHash {
  std::size_t operator()(std::string_view key) const noexcept;
};

struct LruStats {
  std::size_t entries = 0;
  std::size_t bytes = 0;      // charged, at most max_bytes
  std::size_t max_bytes = 0;  // the bound
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;     // absent, or present but no longer valid
  std::uint64_t evictions = 0;  // removed to make room
  std::uint64_t refused = 0;    // not stored: larger than the bound alone
};

template <class Value>
class ByteLru {
 public:
  // What one entry costs beyond its key and value: a list node (two links, the key's std::string,
  // the charge, the stamp), up to four index slots of 16 bytes (the index is kept at
  // most half full and grows by doubling), and the allocator's headers of the node and of the
  // key's buffer.
  static constexpr std::size_t k_entry_overhead = 192;

  struct Entry {
    std::string key;
    Value value;
    std::size_t charge = 0;
    std::uint64_t moved_at = 0;  // m_moves when it last went to the front
  };
  // Entries put() removed, still allocated: destroying them (strings, the answers they may hold
  // the last reference to) is left to the caller, outside its lock.
  using Graveyard = std::list<Entry>;

  explicit ByteLru(std::size_t max_bytes) : m_max_bytes(max_bytes) {}
  ByteLru(const ByteLru&) = delete;
  ByteLru& operator=(const ByteLru&) = delete;

  // The value under `key`, now most recently used, or nullptr. An entry `valid` rejects (e.g. an
  // answer of an older index generation) is dropped and counted as a miss.
  template <class Valid>
  const Value* find(std::string_view key, Valid valid) {
    const std::size_t slot = find_slot(key, KeyHash{}(key));
    if (slot == k_absent) {
      ++m_stats.misses;
      return nullptr;
    }
    const Iterator entry = m_slots[slot].entry;
    if (!valid(entry->value)) {
      remove(slot);
      ++m_stats.misses;
      return nullptr;
    }
    if (m_moves - entry->moved_at >= m_entries.size() / 4) {
      m_entries.splice(m_entries.begin(), m_entries, entry);
      entry->moved_at = ++m_moves;
    }
    ++m_stats.hits;
    return &entry->value;
  }
  const Value* find(std::string_view key) {
    return find(key, [](const Value&) { return true; });
  }

  // Stores `value` under `key` (replacing any entry there) as the most recently used, charged
  // key.size() + value_bytes + k_entry_overhead, then evicts from the cold end until the total
  // fits. Returns false, storing nothing and dropping any old entry, when the charge alone is
  // over the bound.
  // With `dead`, removed entries are spliced there whole (key, value, list node): only their
  // index slots are cleared here.
  bool put(std::string_view key, Value value, std::size_t value_bytes, Graveyard* dead = nullptr) {
    const std::size_t charge = key.size() + value_bytes + k_entry_overhead;
    const std::size_t hash = KeyHash{}(key);
    if (const std::size_t slot = find_slot(key, hash); slot != k_absent) remove(slot, dead);
    if (charge > m_max_bytes) {
      ++m_stats.refused;
      return false;
    }
    m_entries.push_front(Entry{std::string(key), std::move(value), charge, ++m_moves});
    if (2 * (m_entries.size()) > m_slots.size()) grow();
    place(Slot{hash, m_entries.begin()});
    m_stats.bytes += charge;
    while (m_stats.bytes > m_max_bytes) {
      const std::string& coldest = m_entries.back().key;
      remove(find_slot(coldest, KeyHash{}(coldest)), dead);
      ++m_stats.evictions;
    }
    return true;
  }

  LruStats stats() const {
    LruStats s = m_stats;
    s.entries = m_entries.size();
    s.max_bytes = m_max_bytes;
    return s;
  }

 private:
  using Iterator = typename std::list<Entry>::iterator;
  // The index: open addressing with linear probing over a power-of-two array of (hash, position)
  // pairs, at most half full. A probe reads one slot (usually one cache line) and compares the
  // key of an entry only when the whole hash matches; std::unordered_map read a bucket, the node
  // before the bucket's first and that node before reaching the entry (bench/NOTES.md).
  struct Slot {
    std::size_t hash = 0;
    Iterator entry;  // m_entries.end(): empty
  };
  static constexpr std::size_t k_absent = std::size_t(-1);

  Slot empty_slot() { return Slot{0, m_entries.end()}; }
  bool empty(const Slot& slot) const { return slot.entry == m_entries.end(); }
  // The slot holding `key`, or k_absent.
  std::size_t find_slot(std::string_view key, std::size_t hash) const {
    if (m_slots.empty()) return k_absent;
    const std::size_t mask = m_slots.size() - 1;
    for (std::size_t i = hash & mask;; i = (i + 1) & mask) {
      const Slot& slot = m_slots[i];
      if (empty(slot)) return k_absent;
      if (slot.hash == hash && slot.entry->key == key) return i;
    }
  }
  // Puts `slot` in the first empty place of its probe sequence. REQUIRES: the array has room.
  void place(Slot slot) {
    const std::size_t mask = m_slots.size() - 1;
    std::size_t i = slot.hash & mask;
    while (!empty(m_slots[i])) i = (i + 1) & mask;
    m_slots[i] = slot;
  }
  void grow() {
    std::vector<Slot> old(std::max<std::size_t>(16, 2 * m_slots.size()), empty_slot());
    old.swap(m_slots);
    for (const Slot& slot : old)
      if (!empty(slot)) place(slot);
  }
  // Empties slot `hole` and moves later slots of the probe run back over it (no tombstones): a
  // slot moves into the hole when its home position is not cyclically inside (hole, slot].
  void erase_slot(std::size_t hole) {
    const std::size_t mask = m_slots.size() - 1;
    for (std::size_t i = (hole + 1) & mask; !empty(m_slots[i]); i = (i + 1) & mask) {
      const std::size_t home = m_slots[i].hash & mask;
      if (((i - home) & mask) >= ((i - hole) & mask)) {
        m_slots[hole] = m_slots[i];
        hole = i;
      }
    }
    m_slots[hole] = empty_slot();
  }
  void remove(std::size_t slot, Graveyard* dead = nullptr) {
    const Iterator entry = m_slots[slot].entry;
    m_stats.bytes -= entry->charge;
    erase_slot(slot);
    if (dead)
      dead->splice(dead->end(), m_entries, entry);
    else
      m_entries.erase(entry);
  }

  std::size_t m_max_bytes;
  std::list<Entry> m_entries;  // most recently used first (but for the front quarter: above)
  std::uint64_t m_moves = 0;   // entries put or moved to the front so far
  std::vector<Slot> m_slots;   // the index (above)
  LruStats m_stats;
};

}  // namespace ktune
