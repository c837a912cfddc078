#include "store/rocksdb_store.h"

#include <rocksdb/db.h>
#include <rocksdb/metadata.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <filesystem>

#include "config/text.h"
#include "store/log_replay_check.h"
#include "store/records.h"
#include "store/rocksdb_layout.h"

namespace ktune {
namespace {

rocksdb::Slice slice(std::string_view s) {
  return rocksdb::Slice(s.data(), s.size());
}

rocksdb::WriteOptions write_options(Durability d) {
  rocksdb::WriteOptions o;
  o.sync = d == Durability::sync;
  return o;
}

// A directory that holds no database but files of someone else's is not ours to fill.
Error not_a_store(const std::string& path, const StoreFiles& files) {
  std::string names = joined(files.unknown | std::views::take(3));
  if (files.unknown.size() > 3) names += ", ...";
  return Error{ErrorCode::invalid_argument,
               path + ": not empty and holds no ktune store (" + names +
                   "); move those files aside or choose another store.data_dir"};
}

}  // namespace

Error with_recover_hint(Error error) {
  if (error.code != ErrorCode::corruption || error.message.find("--recover") != std::string::npos)
    return error;
  error.message +=
      "\n  the store is damaged; `ktuned --recover` salvages what RocksDB can still read and "
      "reports what it could not (docs/operations.md, \"Store damage and recovery\"); or move the "
      "directory aside";
  return error;
}

Result<std::unique_ptr<RocksDbStore>> RocksDbStore::open(const std::string& path,
                                                         const RocksDbOptions& options) {
  auto files = list_store_files(path);
  if (!files) return std::unexpected(files.error());
  const bool existed = files->holds_database();
  if (existed && !files->has_current)
    return std::unexpected(with_recover_hint(
        Error{ErrorCode::corruption, path + ": no CURRENT file, but the directory holds a " +
                                         "database (" + files->describe() +
                                         "): the store is damaged, not new"}));
  if (!existed) {
    if (!files->unknown.empty()) return std::unexpected(not_a_store(path, *files));
    if (!options.create_if_missing || options.read_only)
      return fail(ErrorCode::not_found, path + ": no ktune store here");
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) return fail(ErrorCode::io_error, path + ": cannot create directory: " + ec.message());
  }
  std::unique_ptr<RocksDbStore> store(new RocksDbStore());
  store->m_path = path;
  if (auto ok = store->open_db(*files, options.read_only); !ok) return std::unexpected(ok.error());
  return store;
}

Result<void> RocksDbStore::open_db(const StoreFiles& files, bool read_only) {
  const bool existed = files.holds_database();
  rocksdb::Options db_options = store_db_options();
  db_options.create_if_missing = !existed;  // RocksDB never creates a store over a damaged one
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s;
  m_read_only = read_only;
  if (read_only) {
    s = rocksdb::DB::OpenForReadOnly(db_options, m_path, store_column_families(), &handles, &raw);
  } else {
    m_replay = std::make_unique<LogReplayCheck>(m_path, files);
    db_options.wal_filter = m_replay->filter();
    s = rocksdb::DB::Open(db_options, m_path, store_column_families(), &handles, &raw);
  }
  if (!s.ok()) {
    Error e = to_error(s, m_path, "cannot open store");
    if (s.IsIOError() && !is_damage(s) && s.ToString().find("lock") != std::string::npos)
      e.message += "\n  another process (a running ktuned?) holds this store";
    return std::unexpected(with_recover_hint(std::move(e)));
  }
  m_db.reset(raw);
  if (m_replay) m_open_warnings = m_replay->finish();
  // handles[0] is the default family, which ktune does not use.
  for (size_t i = 1; i < handles.size(); ++i) m_handles[i - 1] = handles[i];
  m_db->DestroyColumnFamilyHandle(handles[0]);

  if (auto ok = check_store_format(*this, existed); !ok)
    return std::unexpected(with_recover_hint(ok.error()));
  return read_only ? Result<void>() : ensure_anchors();
}

// Gives every table without a table file (a new store; one a repair left bare) an anchor and
// flushes those tables, so each has a table file from now on. The flush is waited for: one left
// running while writes arrive can leave a log whose records are all in table files already
// (RocksDB keeps it for the tables whose flush was in flight), which a repair would turn into a
// second copy of those records and refuse.
Result<void> RocksDbStore::ensure_anchors() {
  rocksdb::WriteBatch batch;
  std::vector<rocksdb::ColumnFamilyHandle*> added;
  for (Table t : k_all_tables) {
    rocksdb::ColumnFamilyMetaData files;
    m_db->GetColumnFamilyMetaData(handle(t), &files);
    if (files.file_count > 0) continue;
    rocksdb::Status s = batch.DeleteRange(handle(t), slice(k_anchor_begin), slice(k_anchor_end));
    if (!s.ok()) return std::unexpected(to_error(s, m_path, "anchor"));
    added.push_back(handle(t));
  }
  if (added.empty()) return {};
  rocksdb::Status s = m_db->Write(write_options(Durability::sync), &batch);
  if (s.ok()) s = m_db->Flush(rocksdb::FlushOptions(), added);
  if (!s.ok()) return std::unexpected(to_error(s, m_path, "anchor"));
  return {};
}

RocksDbStore::RocksDbStore() = default;

RocksDbStore::~RocksDbStore() {
  if (!m_db) return;
  // Flush memtables so the data lives in table files, which carry their column family's name:
  // that is what lets `--recover` (RepairDB) put records back where they belong even if the
  // MANIFEST is lost. Also makes the next open skip WAL replay.
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  for (auto* h : m_handles)
    if (h) handles.push_back(h);
  if (!m_read_only) m_db->Flush(rocksdb::FlushOptions(), handles);
  for (auto* h : handles) m_db->DestroyColumnFamilyHandle(h);
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

Result<void> RocksDbStore::flush(Table table) {
  if (m_read_only) return {};  // every write fails: nothing in memory to move
  rocksdb::Status s = m_db->Flush(rocksdb::FlushOptions(), handle(table));
  if (!s.ok()) return std::unexpected(to_error(s, m_path, "flush"));
  return {};
}

Result<void> RocksDbStore::verify() {
  rocksdb::Status s = m_db->VerifyChecksum();
  if (!s.ok()) return std::unexpected(to_error(s, m_path, "verify"));
  return {};
}

}  // namespace ktune
