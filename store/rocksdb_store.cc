#include "store/rocksdb_store.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <filesystem>

#include "store/records.h"

namespace ktune {
namespace {

rocksdb::Slice slice(std::string_view s) {
  return rocksdb::Slice(s.data(), s.size());
}

Error to_error(const rocksdb::Status& s, const std::string& path, std::string_view what) {
  ErrorCode code = ErrorCode::io_error;
  if (s.IsCorruption()) code = ErrorCode::corruption;
  if (s.IsInvalidArgument()) code = ErrorCode::invalid_argument;
  if (s.IsNotFound()) code = ErrorCode::not_found;
  return Error{code, path + ": " + std::string(what) + ": " + s.ToString()};
}

rocksdb::WriteOptions write_options(Durability d) {
  rocksdb::WriteOptions o;
  o.sync = d == Durability::sync;
  return o;
}

}  // namespace

Result<std::unique_ptr<RocksDbStore>> RocksDbStore::open(const std::string& path,
                                                         const RocksDbOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool existed = fs::exists(fs::path(path) / "CURRENT", ec);
  if (!existed && !options.create_if_missing)
    return fail(ErrorCode::not_found, path + ": no ktune store here");
  if (!existed) {
    fs::create_directories(path, ec);
    if (ec) return fail(ErrorCode::io_error, path + ": cannot create directory: " + ec.message());
  }

  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.paranoid_checks = true;
  db_options.max_open_files = 256;
  db_options.keep_log_file_num = 4;
  db_options.IncreaseParallelism(2);

  std::vector<rocksdb::ColumnFamilyDescriptor> families;
  families.emplace_back(rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions());
  for (Table t : k_all_tables)
    families.emplace_back(std::string(table_name(t)), rocksdb::ColumnFamilyOptions());

  if (options.recover && existed) {
    rocksdb::Status s = rocksdb::RepairDB(path, db_options, families);
    if (!s.ok()) return std::unexpected(to_error(s, path, "repair failed"));
  }

  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(db_options, path, families, &handles, &raw);
  if (!s.ok()) {
    Error e = to_error(s, path, "cannot open store");
    if (s.IsCorruption())
      e.message +=
          "\n  the database is damaged; `ktuned --recover` salvages what RocksDB can "
          "read (see docs/operations.md), or move the directory aside";
    else if (s.IsIOError() && s.ToString().find("lock") != std::string::npos)
      e.message += "\n  another process (a running ktuned?) holds this store";
    return std::unexpected(e);
  }

  std::unique_ptr<RocksDbStore> store(new RocksDbStore());
  store->m_path = path;
  store->m_db.reset(raw);
  // handles[0] is the default family, which ktune does not use.
  for (size_t i = 1; i < handles.size(); ++i) store->m_handles[i - 1] = handles[i];
  store->m_db->DestroyColumnFamilyHandle(handles[0]);

  auto checked = check_store_format(*store, existed);
  if (!checked) return std::unexpected(checked.error());
  return store;
}

RocksDbStore::~RocksDbStore() {
  if (!m_db) return;
  // Flush memtables so the data lives in table files, which carry their column family's name:
  // that is what lets `--recover` (RepairDB) put records back where they belong even if the
  // MANIFEST is lost. Also makes the next open skip WAL replay.
  std::vector<rocksdb::ColumnFamilyHandle*> handles(std::begin(m_handles), std::end(m_handles));
  m_db->Flush(rocksdb::FlushOptions(), handles);
  for (auto* h : m_handles)
    if (h) m_db->DestroyColumnFamilyHandle(h);
  m_db->Close();
}

Result<std::optional<std::string>> RocksDbStore::get(Table table, std::string_view key) {
  std::string value;
  rocksdb::Status s = m_db->Get(rocksdb::ReadOptions(), handle(table), slice(key), &value);
  if (s.IsNotFound()) return std::optional<std::string>();
  if (!s.ok()) return std::unexpected(to_error(s, m_path, "get"));
  return std::optional<std::string>(std::move(value));
}

Result<void> RocksDbStore::put(Table table, std::string_view key, std::string_view value,
                               Durability durability) {
  rocksdb::Status s = m_db->Put(write_options(durability), handle(table), slice(key), slice(value));
  if (!s.ok()) return std::unexpected(to_error(s, m_path, "put"));
  return {};
}

Result<void> RocksDbStore::remove(Table table, std::string_view key, Durability durability) {
  rocksdb::Status s = m_db->Delete(write_options(durability), handle(table), slice(key));
  if (!s.ok()) return std::unexpected(to_error(s, m_path, "delete"));
  return {};
}

Result<void> RocksDbStore::scan(Table table, std::string_view prefix, const ScanFn& fn) {
  std::unique_ptr<rocksdb::Iterator> it(m_db->NewIterator(rocksdb::ReadOptions(), handle(table)));
  for (it->Seek(slice(prefix)); it->Valid(); it->Next()) {
    const std::string_view key(it->key().data(), it->key().size());
    if (!key.starts_with(prefix)) break;
    if (!fn(key, std::string_view(it->value().data(), it->value().size()))) break;
  }
  if (!it->status().ok()) return std::unexpected(to_error(it->status(), m_path, "scan"));
  return {};
}

Result<void> RocksDbStore::write(const WriteBatch& batch, Durability durability) {
  rocksdb::WriteBatch wb;
  for (const auto& op : batch.ops()) {
    rocksdb::Status s = op.value ? wb.Put(handle(op.table), slice(op.key), slice(*op.value))
                                 : wb.Delete(handle(op.table), slice(op.key));
    if (!s.ok()) return std::unexpected(to_error(s, m_path, "batch"));
  }
  rocksdb::Status s = m_db->Write(write_options(durability), &wb);
  if (!s.ok()) return std::unexpected(to_error(s, m_path, "write"));
  return {};
}

}  // namespace ktune
