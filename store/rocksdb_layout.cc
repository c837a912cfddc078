#include "store/rocksdb_layout.h"

#include <rocksdb/db.h>

#include <algorithm>
#include <filesystem>

#include "config/text.h"

namespace ktune {

rocksdb::Options store_db_options() {
  rocksdb::Options o;
  o.create_if_missing = true;
  o.create_missing_column_families = true;
  o.paranoid_checks = true;
  o.max_open_files = 256;
  o.keep_log_file_num = 4;
  // A record cut short at the end of the last log is a write that never completed (sync writes
  // return only once the whole record is on disk): dropped, as RocksDB does by default. Unlike
  // the default (kPointInTimeRecovery), a record that fails its checksum, anywhere, refuses to
  // open: it may be an acknowledged write, and point-in-time recovery would silently drop it and
  // every write after it. `--recover` then salvages every intact record and reports the rest.
  o.wal_recovery_mode = rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
  o.IncreaseParallelism(2);
  return o;
}

std::vector<rocksdb::ColumnFamilyDescriptor> store_column_families() {
  std::vector<rocksdb::ColumnFamilyDescriptor> families;
  families.emplace_back(rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions());
  for (Table t : k_all_tables)
    families.emplace_back(std::string(table_name(t)), rocksdb::ColumnFamilyOptions());
  return families;
}

namespace {

bool ignorable(const std::string& name) {
  return name == "LOCK" || name == "LOG" || name.starts_with("LOG.old.") || name == "IDENTITY" ||
         name == "lost";
}

std::string count(size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

std::string StoreFiles::describe() const {
  std::vector<std::string> parts;
  if (!tables.empty()) parts.push_back(count(tables.size(), "table file", "table files"));
  if (!wals.empty()) parts.push_back(count(wals.size(), "log", "logs"));
  if (!manifests.empty()) parts.push_back(count(manifests.size(), "MANIFEST", "MANIFESTs"));
  if (!options.empty()) parts.push_back(count(options.size(), "OPTIONS file", "OPTIONS files"));
  if (!unknown.empty()) parts.push_back(count(unknown.size(), "other file", "other files"));
  return parts.empty() ? "nothing" : joined(parts);
}

Result<StoreFiles> list_store_files(const std::string& path) {
  namespace fs = std::filesystem;
  StoreFiles files;
  std::error_code ec;
  if (!fs::exists(path, ec)) return files;
  files.directory_exists = true;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name == "CURRENT")
      files.has_current = true;
    else if (name.starts_with("MANIFEST-"))
      files.manifests.push_back(name);
    else if (name.ends_with(".sst"))
      files.tables.push_back(name);
    else if (name.ends_with(".log"))
      files.wals.push_back(name);
    else if (name.starts_with("OPTIONS-"))
      files.options.push_back(name);
    else if (!ignorable(name))
      files.unknown.push_back(name);
  }
  if (ec) return fail(ErrorCode::io_error, path + ": cannot list: " + ec.message());
  for (auto* v : {&files.manifests, &files.tables, &files.wals, &files.options, &files.unknown})
    std::sort(v->begin(), v->end());
  return files;
}

bool is_damage(const rocksdb::Status& s) {
  return s.IsCorruption() || s.IsPathNotFound() ||
         (s.IsIOError() && s.ToString().find("No such file") != std::string::npos);
}

Error to_error(const rocksdb::Status& s, const std::string& path, std::string_view what) {
  ErrorCode code = ErrorCode::io_error;
  if (is_damage(s)) code = ErrorCode::corruption;
  if (s.IsInvalidArgument()) code = ErrorCode::invalid_argument;
  if (s.IsNotFound() && !s.IsPathNotFound()) code = ErrorCode::not_found;
  return Error{code, path + ": " + std::string(what) + ": " + s.ToString()};
}

}  // namespace ktune
