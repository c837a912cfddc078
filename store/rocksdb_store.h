// RocksDbStore: the node-local Store on RocksDB, one column family per Table.
//
// A store is new only when its directory is missing or empty: a directory with RocksDB files but
// no CURRENT is damaged, never new, and is refused (opening it as new would make RocksDB delete
// the table files). Opening checks the store format version kept in the meta table: a database
// written by another format, or one RocksDB reports damaged, is a clear error carrying the way
// out (`ktuned --recover`, store/recovery.h), never silently wiped.
// Thread-safe; one process at a time may hold a database (RocksDB's LOCK file).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "store/store.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
}  // namespace rocksdb

namespace ktune {

struct StoreFiles;
class LogReplayCheck;

struct RocksDbOptions {
  // Create an empty store when `path` is missing or an empty directory. Default true.
  bool create_if_missing = true;
  // Open for reading only: nothing in the directory changes (the logs are replayed in memory;
  // no format version, anchor or flush is written) and every write fails. For inspecting a
  // store, e.g. after a crash, exactly as the next start would find it. Default false.
  bool read_only = false;
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
  Result<void> flush(Table table) override;
  std::string describe() const override { return m_path; }

  // Reads every block of every table file and checks its checksum (ErrorCode::corruption
  // naming the file when one fails). Slow: for recovery and tools, not for serving.
  Result<void> verify();
  // What the open found worth telling the operator without refusing: a write-ahead log whose
  // replay stopped before its end (store/log_replay_check.h). Empty for a clean open.
  const std::vector<std::string>& open_warnings() const { return m_open_warnings; }

 private:
  RocksDbStore();
  rocksdb::ColumnFamilyHandle* handle(Table t) const { return m_handles[static_cast<size_t>(t)]; }
  Result<void> open_db(const StoreFiles& files, bool read_only);
  Result<void> ensure_anchors();

  std::string m_path;
  std::unique_ptr<rocksdb::DB> m_db;
  rocksdb::ColumnFamilyHandle* m_handles[std::size(k_all_tables)] = {};
  std::vector<std::string> m_open_warnings;
  std::unique_ptr<LogReplayCheck> m_replay;  // RocksDB keeps a pointer to its filter
  bool m_read_only = false;
};

// The way out of a damaged store, appended to an ErrorCode::corruption error's message (other
// errors are returned unchanged): every startup path that finds damage reports it this way.
Error with_recover_hint(Error error);

}  // namespace ktune
