#include "store/recovery_inventory.h"

#include <rocksdb/db.h>
#include <rocksdb/sst_file_reader.h>
#include <rocksdb/table_properties.h>
#include <sys/stat.h>

#include <filesystem>
#include <functional>
#include <memory>

namespace ktune {
namespace {

namespace fs = std::filesystem;

// Discards RocksDB's messages: the inventory reads the store without writing into it.
class SilentLog : public rocksdb::Logger {
 public:
  SilentLog() : rocksdb::Logger(rocksdb::InfoLogLevel::HEADER_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const char*, va_list) override {}
  void Logv(const rocksdb::InfoLogLevel, const char*, va_list) override {}
};

rocksdb::Options reading_options() {
  rocksdb::Options o = store_db_options();
  o.create_if_missing = false;
  o.create_missing_column_families = false;
  o.info_log = std::make_shared<SilentLog>();
  return o;
}

std::int64_t mtime_seconds(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? std::int64_t(st.st_mtime) : 0;
}

// Opens one table file on its own: its properties, its checksums, and (when damaged) what of it
// can still be read.
TableFileInventory inspect_table_file(const std::string& path, const std::string& name) {
  TableFileInventory f;
  f.name = name;
  const fs::path file = fs::path(path) / name;
  std::error_code ec;
  f.bytes = fs::file_size(file, ec);
  f.written_at = mtime_seconds(file);
  rocksdb::SstFileReader reader(reading_options());
  rocksdb::Status s = reader.Open(file.string());
  if (!s.ok()) {
    f.damage = s.ToString();
    return f;
  }
  if (auto props = reader.GetTableProperties()) {
    f.table = props->column_family_name;
    f.entries = std::int64_t(props->num_entries);
  }
  s = reader.VerifyChecksum();
  if (s.ok()) return f;
  f.damage = s.ToString();
  std::unique_ptr<rocksdb::Iterator> it(reader.NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const std::string_view key(it->key().data(), it->key().size());
    f.readable.emplace_back(std::string(key),
                            value_hash(std::string_view(it->value().data(), it->value().size())));
  }
  return f;
}

// Counts the records of one column family until the first read error.
void count_records(rocksdb::DB& db, rocksdb::ColumnFamilyHandle* cf, StoreInventory& inv) {
  std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(rocksdb::ReadOptions(), cf));
  std::int64_t n = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next()) ++n;
  if (it->status().ok())
    inv.records[cf->GetName()] = n;
  else
    inv.record_errors[cf->GetName()] = it->status().ToString();
}

// Opens the damaged store read-only, as leniently as RocksDB allows, for what its MANIFEST says
// about each table file and for the records per table.
void read_through_manifest(const std::string& path, StoreInventory& inv) {
  rocksdb::Options o = reading_options();
  o.paranoid_checks = false;
  o.skip_checking_sst_file_sizes_on_db_open = true;
  o.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  std::vector<std::string> names;
  rocksdb::Status s = rocksdb::DB::ListColumnFamilies(o, path, &names);
  std::vector<rocksdb::ColumnFamilyDescriptor> families;
  for (const auto& n : names) families.emplace_back(n, rocksdb::ColumnFamilyOptions());
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  if (s.ok()) s = rocksdb::DB::OpenForReadOnly(o, path, families, &handles, &raw);
  if (!s.ok()) {
    inv.manifest_error = s.ToString();
    return;
  }
  std::unique_ptr<rocksdb::DB> db(raw);
  std::vector<rocksdb::LiveFileMetaData> live;
  db->GetLiveFilesMetaData(&live);
  for (const auto& m : live) {
    auto it = inv.table_files.find(m.relative_filename);
    if (it == inv.table_files.end()) continue;
    TableFileInventory& f = it->second;
    if (f.table.empty()) f.table = m.column_family_name;
    f.smallest_seq = m.smallest_seqno;
    f.largest_seq = m.largest_seqno;
    f.smallest_key = m.smallestkey;
    f.largest_key = m.largestkey;
    f.key_range_known = true;
  }
  for (auto* h : handles) {
    if (h->GetName() != rocksdb::kDefaultColumnFamilyName) count_records(*db, h, inv);
    db->DestroyColumnFamilyHandle(h);
  }
}

}  // namespace

std::size_t value_hash(std::string_view value) {
  return std::hash<std::string_view>{}(value);
}

std::set<std::string> lost_files(const std::string& path) {
  std::set<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(fs::path(path) / "lost", ec), end; !ec && it != end;
       it.increment(ec))
    out.insert(it->path().filename().string());
  return out;
}

StoreInventory take_inventory(const std::string& path, StoreFiles files) {
  StoreInventory inv;
  inv.files = std::move(files);
  for (const auto& name : inv.files.tables)
    inv.table_files.emplace(name, inspect_table_file(path, name));
  if (inv.files.has_current)
    read_through_manifest(path, inv);
  else
    inv.manifest_error = "no CURRENT file";
  return inv;
}

}  // namespace ktune
