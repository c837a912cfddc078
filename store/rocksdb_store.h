// RocksDbStore: the node-local Store on RocksDB, one column family per Table.
//
// Opening checks the store format version kept in the meta table: a database written by another
// format, or one RocksDB reports corrupt, is a clear error, never silently wiped. `recover`
// runs RocksDB's repair first (salvaging what it can) and is what `ktuned --recover` does.
// Thread-safe; one process at a time may hold a database (RocksDB's LOCK file).
#pragma once

#include <memory>
#include <string>

#include "store/store.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
}  // namespace rocksdb

namespace ktune {

struct RocksDbOptions {
  // Create an empty store when `path` holds none. Default true.
  bool create_if_missing = true;
  // Run RocksDB's RepairDB before opening (salvages a corrupt database). Default false.
  bool recover = false;
};

class RocksDbStore final : public Store {
 public:
  static Result<std::unique_ptr<RocksDbStore>> open(const std::string& path,
                                                    const RocksDbOptions& options = {});
  ~RocksDbStore() override;
  RocksDbStore(const RocksDbStore&) = delete;
  RocksDbStore& operator=(const RocksDbStore&) = delete;

  Result<std::optional<std::string>> get(Table table, std::string_view key) override;
  Result<void> put(Table table, std::string_view key, std::string_view value,
                   Durability durability) override;
  Result<void> remove(Table table, std::string_view key, Durability durability) override;
  Result<void> scan(Table table, std::string_view prefix, const ScanFn& fn) override;
  Result<void> write(const WriteBatch& batch, Durability durability) override;
  std::string describe() const override { return m_path; }

 private:
  RocksDbStore() = default;
  rocksdb::ColumnFamilyHandle* handle(Table t) const { return m_handles[static_cast<size_t>(t)]; }

  std::string m_path;
  std::unique_ptr<rocksdb::DB> m_db;
  rocksdb::ColumnFamilyHandle* m_handles[std::size(k_all_tables)] = {};
};

}  // namespace ktune
