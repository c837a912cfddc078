// ByteLru: a least-recently-used map from text keys to values, bounded in bytes.
//
// Every entry is charged what it holds: its key's length, the value's size as the caller states
// it, and k_entry_overhead for the list and hash nodes around them. Inserting past the bound
// evicts least-recently-used entries one by one until the total fits again (never a wholesale
// clear); an entry that alone exceeds the bound is not stored. A hit moves the entry to the front
// and allocates nothing (the index is keyed by views into the entries' own keys), unless the entry
// is already among the most recent quarter: fewer than size()/4 entries were moved to the front
// since it was, so fewer than that are ahead of it (each move stamps the entry with a counter).
// The order is then LRU but for that quarter, where a hit costs no writes to its neighbours' list
// links (cache misses on every warm lookup, bench/NOTES.md): a hit entry is still not evicted
// before three quarters of the cache's entries have been added or hit after it. Counters
// (hits, misses, evictions, refusals) let callers export metrics that move.
//
// Thread-compatible: the owner serializes calls (LookupService holds one mutex around its two
// caches); const methods may run concurrently with each other only. put() can hand what it
// removes to the caller (a Graveyard), so the entries are freed after the owner's lock is released.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace ktune {

// XXH3-64 of a key's bytes (lru_cache.cc). The answer caches are keyed by request text of ~200
// bytes, where std::hash<string_view> (murmur) took ~280 instructions a lookup (bench/NOTES.md).
// Deliberately not noexcept: libstdc++ keeps a node's hash beside it only for a hash that may
// throw (or is not "fast"), and without it a probe compares the keys of every node in the bucket
// and hashes the next node's key again to find the bucket's end (lru_cache.cc checks).
struct KeyHash {
  std::size_t operator()(std::string_view key) const;
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
  // the value, the charge), a hash node (link, view, iterator, cached hash), a bucket slot, and
  // the allocator's headers of those blocks and of the key's buffer.
  static constexpr std::size_t k_entry_overhead = 160;

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
    auto it = m_index.find(key);
    if (it == m_index.end()) {
      ++m_stats.misses;
      return nullptr;
    }
    if (!valid(it->second->value)) {
      remove(it);
      ++m_stats.misses;
      return nullptr;
    }
    if (m_moves - it->second->moved_at >= m_entries.size() / 4) {
      m_entries.splice(m_entries.begin(), m_entries, it->second);
      it->second->moved_at = ++m_moves;
    }
    ++m_stats.hits;
    return &it->second->value;
  }
  const Value* find(std::string_view key) {
    return find(key, [](const Value&) { return true; });
  }

  // Stores `value` under `key` (replacing any entry there) as the most recently used, charged
  // key.size() + value_bytes + k_entry_overhead, then evicts from the cold end until the total
  // fits. Returns false, storing nothing and dropping any old entry, when the charge alone is
  // over the bound.
  // With `dead`, removed entries are spliced there whole (key, value, list node): only their
  // index nodes are freed here.
  bool put(std::string_view key, Value value, std::size_t value_bytes, Graveyard* dead = nullptr) {
    const std::size_t charge = key.size() + value_bytes + k_entry_overhead;
    if (auto it = m_index.find(key); it != m_index.end()) remove(it, dead);
    if (charge > m_max_bytes) {
      ++m_stats.refused;
      return false;
    }
    m_entries.push_front(Entry{std::string(key), std::move(value), charge, ++m_moves});
    m_index.emplace(std::string_view(m_entries.front().key), m_entries.begin());
    m_stats.bytes += charge;
    while (m_stats.bytes > m_max_bytes) {
      remove(m_index.find(std::string_view(m_entries.back().key)), dead);
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
  using Index = std::unordered_map<std::string_view, Iterator, KeyHash>;

  void remove(typename Index::iterator it, Graveyard* dead = nullptr) {
    const Iterator entry = it->second;
    m_stats.bytes -= entry->charge;
    m_index.erase(it);  // before the entry: the index's key views the entry's key
    if (dead)
      dead->splice(dead->end(), m_entries, entry);
    else
      m_entries.erase(entry);
  }

  std::size_t m_max_bytes;
  std::list<Entry> m_entries;  // most recently used first (but for the front quarter: above)
  std::uint64_t m_moves = 0;   // entries put or moved to the front so far
  Index m_index;
  LruStats m_stats;
};

}  // namespace ktune
