// MemStore: an in-memory Store for tests and tools. Same semantics as RocksDbStore (ordered keys,
// atomic batches), no persistence. Thread-safe.
#pragma once

#include <map>
#include <mutex>

#include "store/store.h"

namespace ktune {

class MemStore final : public Store {
 public:
  Result<std::optional<std::string>> get(Table table, std::string_view key) override;
  Result<void> put(Table table, std::string_view key, std::string_view value,
                   Durability durability) override;
  Result<void> remove(Table table, std::string_view key, Durability durability) override;
  Result<void> scan(Table table, std::string_view prefix, const ScanFn& fn) override;
  Result<void> write(const WriteBatch& batch, Durability durability) override;
  std::string describe() const override { return "memory"; }

 private:
  using Map = std::map<std::string, std::string, std::less<>>;
  Map& table(Table t) { return m_tables[static_cast<size_t>(t)]; }

  std::mutex m_mutex;
  Map m_tables[std::size(k_all_tables)];
};

}  // namespace ktune
