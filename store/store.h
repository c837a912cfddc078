// Store: the persistence interface every ktune component writes through.
//
// A Store holds byte-string keys and values in a fixed set of tables (RocksDB column families).
// Implementations: RocksDbStore (store/rocksdb_store.h), the real one, and MemStore
// (store/mem_store.h), for tests; both pass tests/store/store_conformance_test.cc.
// Typed access to the records in each table lives in store/records.h.
//
// Thread-safety: every method may be called concurrently from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/error.h"

namespace ktune {

// The tables. Values are persisted as column-family names; the numbers are used in memory and in
// WriteBatch only, but keep them stable all the same: do not renumber.
enum class Table : std::uint8_t {
  winners = 0,    // best configs per (device class, problem): one record per key
  trials = 1,     // every measured config, failures included
  cubins = 2,     // compiled kernels keyed by source hash + options + arch + NVRTC version
  jobs = 3,       // durable tuning queue
  blocklist = 4,  // configs that crashed or hung, per template hash + arch + driver
  meta = 5,       // store format version and other whole-store facts
};
inline constexpr Table k_all_tables[] = {Table::winners, Table::trials,    Table::cubins,
                                         Table::jobs,    Table::blocklist, Table::meta};

std::string_view table_name(Table table);

// sync: the write is on stable storage when the call returns (winners, jobs).
// buffered: the write may be lost in a power cut (trials, cubins: they can be measured again).
enum class Durability { sync, buffered };

// Writes applied atomically by Store::write.
class WriteBatch {
 public:
  struct Op {
    Table table;
    std::string key;
    std::optional<std::string> value;  // nullopt: delete
  };

  void put(Table table, std::string key, std::string value) {
    m_ops.push_back({table, std::move(key), std::move(value)});
  }
  void remove(Table table, std::string key) { m_ops.push_back({table, std::move(key), {}}); }
  const std::vector<Op>& ops() const { return m_ops; }
  bool empty() const { return m_ops.empty(); }
  size_t size() const { return m_ops.size(); }

 private:
  std::vector<Op> m_ops;
};

// Called per record in key order; return false to stop the scan early.
using ScanFn = std::function<bool(std::string_view key, std::string_view value)>;

class Store {
 public:
  virtual ~Store() = default;

  // nullopt when the key is absent; an Error only when the store could not be read.
  virtual Result<std::optional<std::string>> get(Table table, std::string_view key) = 0;
  virtual Result<void> put(Table table, std::string_view key, std::string_view value,
                           Durability durability) = 0;
  // Removing an absent key succeeds.
  virtual Result<void> remove(Table table, std::string_view key, Durability durability) = 0;
  // Visits every record whose key starts with `prefix` ("" = all), in byte order of the keys.
  // REQUIRES: fn does not write to this store.
  virtual Result<void> scan(Table table, std::string_view prefix, const ScanFn& fn) = 0;
  // Applies every op in `batch` or none.
  virtual Result<void> write(const WriteBatch& batch, Durability durability) = 0;
  // Moves what `table` keeps in memory of its recent writes (RocksDB's memtable, up to its 64 MB
  // write buffer) into its files, freeing that memory: after a large write that no read needs
  // from memory (an import; the daemon serves from its own index). Where there is nothing to
  // move (MemStore) it succeeds at once.
  virtual Result<void> flush(Table table) {
    (void)table;
    return {};
  }
  // Human-readable location ("/var/lib/ktune/db", "memory").
  virtual std::string describe() const = 0;
};

}  // namespace ktune
