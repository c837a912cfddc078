#include "store/recovery.h"

#include <rocksdb/db.h>
#include <rocksdb/env.h>

#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>

#include "config/log.h"
#include "store/records.h"
#include "store/recovery_inventory.h"

namespace ktune {
namespace {

namespace fs = std::filesystem;

// Collects what RepairDB warns about: log bytes dropped, logged writes ignored, table files
// ignored. Repeats of one message are counted, not listed.
class RepairLog : public rocksdb::Logger {
 public:
  RepairLog() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}
  void Logv(const char* format, va_list ap) override {
    Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
  }
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < rocksdb::InfoLogLevel::WARN_LEVEL) return;
    char buf[2048];
    std::vsnprintf(buf, sizeof buf, format, ap);
    std::string line = buf;
    if (line.starts_with("[")) line.erase(0, std::min(line.size(), line.find("] ") + 2));
    while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
    if (line.starts_with("**** Repaired")) return;  // a banner; the report says what was lost
    std::lock_guard lock(m_mutex);
    for (auto& [text, n] : m_lines)
      if (text == line) return void(++n);
    m_lines.emplace_back(std::move(line), 1);
  }
  std::vector<std::string> lines() const {
    std::lock_guard lock(m_mutex);
    std::vector<std::string> out;
    for (const auto& [text, n] : m_lines)
      out.push_back(n == 1 ? text : text + " (" + std::to_string(n) + " times)");
    return out;
  }

 private:
  mutable std::mutex m_mutex;
  std::vector<std::pair<std::string, int>> m_lines;
};

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

// Opens the store as ktuned would and checks every block. nullptr (with what failed in
// report.damage) when it is damaged; an error when it cannot be opened for another reason.
Result<std::unique_ptr<RocksDbStore>> open_if_healthy(const std::string& path,
                                                      RecoveryReport& report) {
  auto store = RocksDbStore::open(path, {.create_if_missing = false});
  if (!store) {
    if (store.error().code != ErrorCode::corruption) return std::unexpected(store.error());
    report.damage.push_back(first_line(store.error().message));
    return nullptr;
  }
  if (auto ok = (*store)->verify(); !ok) {
    report.damage.push_back(first_line(ok.error().message));
    return nullptr;
  }
  return std::move(*store);
}

Result<std::vector<std::string>> run_repair(const std::string& path) {
  rocksdb::Options o = store_db_options();
  auto log = std::make_shared<RepairLog>();
  o.info_log = log;
  rocksdb::Status s = rocksdb::RepairDB(path, o, store_column_families());
  if (!s.ok()) return std::unexpected(to_error(s, path, "repair failed"));
  return log->lines();
}

// Brings the repaired store to what ktuned expects. RepairDB leaves every table file in level 0
// (past 36 files there, RocksDB stops writes until compaction catches up): compacted. A repair
// that lost the meta table's file leaves records but no format version, which no ktuned would
// open: written again. Returns whether it was.
Result<bool> settle_repaired_store(const std::string& path) {
  rocksdb::Options o = store_db_options();
  o.create_if_missing = false;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(o, path, store_column_families(), &handles, &raw);
  if (!s.ok()) return std::unexpected(to_error(s, path, "cannot open the repaired store"));
  std::unique_ptr<rocksdb::DB> db(raw);
  for (size_t i = 0; i < handles.size() && s.ok(); ++i)
    s = db->CompactRange(rocksdb::CompactRangeOptions(), handles[i], nullptr, nullptr);
  rocksdb::ColumnFamilyHandle* meta = handles[1 + size_t(Table::meta)];
  std::string value;
  if (s.ok()) s = db->Get(rocksdb::ReadOptions(), meta, "format_version", &value);
  bool restored = false;
  if (s.IsNotFound()) {
    rocksdb::WriteOptions w;
    w.sync = true;
    s = db->Put(w, meta, "format_version", std::to_string(k_store_format_version));
    restored = s.ok();
  }
  for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
  if (!s.ok()) return std::unexpected(to_error(s, path, "settling the repaired store"));
  return restored;
}

std::string hex(std::string_view bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

// Moves records ktune cannot decode out of the store, into lost/undecodable-<time>.jsonl (key and
// value in hex, with the decoder's error), so that the daemon can load what remains.
Result<void> quarantine_undecodable(RocksDbStore& store, const std::string& path,
                                    RecoveryReport& report) {
  WriteBatch removals;
  std::vector<std::string> lines;
  for (Table t : k_all_tables) {
    auto scanned = store.scan(t, "", [&](std::string_view key, std::string_view value) {
      auto ok = check_record(t, value);
      if (ok) return true;
      report.undecodable.push_back({t, std::string(key), ok.error().message});
      nlohmann::json line = {{"table", table_name(t)},
                             {"key_hex", hex(key)},
                             {"value_hex", hex(value)},
                             {"error", ok.error().message}};
      lines.push_back(line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
      removals.remove(t, std::string(key));
      return true;
    });
    if (!scanned) return std::unexpected(scanned.error());
  }
  if (lines.empty()) return {};
  const fs::path file =
      fs::path(path) / "lost" / ("undecodable-" + std::to_string(std::time(nullptr)) + ".jsonl");
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  std::ofstream out(file, std::ios::app);
  for (const auto& l : lines) out << l << "\n";
  out.close();
  if (!out) return fail(ErrorCode::io_error, file.string() + ": cannot write");
  report.undecodable_file = "lost/" + file.filename().string();
  return store.write(removals, Durability::sync);
}

void count_tables(RocksDbStore& store, const StoreInventory& before, RecoveryReport& report) {
  for (Table t : k_all_tables) {
    RecoveryReport::TableCount c;
    c.table = t;
    const std::string name(table_name(t));
    if (auto it = before.records.find(name); it != before.records.end()) c.before = it->second;
    if (auto it = before.record_errors.find(name); it != before.record_errors.end())
      c.before_error = it->second;
    else if (!c.before)
      c.before_error =
          before.manifest_error.empty() ? "not in the MANIFEST" : before.manifest_error;
    (void)store.scan(t, "", [&](std::string_view, std::string_view) {
      ++c.after;
      return true;
    });
    report.tables.push_back(c);
  }
}

std::optional<Table> table_named(std::string_view name) {
  for (Table t : k_all_tables)
    if (table_name(t) == name) return t;
  return std::nullopt;
}

// Compares what could still be read of a dropped file with the repaired store.
void compare_with_store(RocksDbStore& store, const TableFileInventory& f,
                        RecoveryReport::DroppedFile& d) {
  const auto table = table_named(f.table);
  if (!table) return;
  for (const auto& [key, hash] : f.readable) {
    auto now = store.get(*table, key);
    if (!now) continue;
    ++d.readable;
    const bool gone = !*now, same = !gone && value_hash(**now) == hash;
    if (gone) ++d.lost;
    if (same) ++d.unchanged;
    if (!gone && !same) ++d.rolled_back;
    if (!same && d.examples.size() < 5) d.examples.push_back(key);
  }
  if (!f.key_range_known) return;
  d.now_in_range = 0;
  (void)store.scan(*table, "", [&](std::string_view key, std::string_view) {
    if (key >= f.smallest_key && key <= f.largest_key) ++d.now_in_range;
    return key <= f.largest_key;
  });
}

void describe_dropped_files(RocksDbStore& store, const std::string& path,
                            const StoreInventory& before, RecoveryReport& report) {
  for (const auto& name : lost_files(path)) {
    if (!name.ends_with(".sst")) continue;
    RecoveryReport::DroppedFile d;
    d.name = "lost/" + name;
    if (auto it = before.table_files.find(name); it != before.table_files.end()) {
      const TableFileInventory& f = it->second;
      d.bytes = f.bytes;
      d.written_at = f.written_at;
      d.table = f.table;
      d.entries = f.entries;
      d.smallest_seq = f.smallest_seq;
      d.largest_seq = f.largest_seq;
      d.smallest_key = f.smallest_key;
      d.largest_key = f.largest_key;
      d.key_range_known = f.key_range_known;
      d.reason = f.damage;
      compare_with_store(store, f, d);
    }
    report.dropped_files.push_back(std::move(d));
  }
}

// RocksDB's lock on a store directory, held by recovery while it works beside the store, so that
// no ktuned opens it meanwhile.
struct UnlockStore {
  void operator()(rocksdb::FileLock* lock) const {
    (void)rocksdb::Env::Default()->UnlockFile(lock);
  }
};
using StoreLock = std::unique_ptr<rocksdb::FileLock, UnlockStore>;

Result<StoreLock> lock_store(const std::string& path) {
  rocksdb::FileLock* lock = nullptr;
  rocksdb::Status s = rocksdb::Env::Default()->LockFile(path + "/LOCK", &lock);
  if (!s.ok())
    return fail(ErrorCode::io_error, path + ": " + s.ToString() +
                                         "\n  another process (a running ktuned?) holds this store");
  return StoreLock(lock);
}

// A copy of the store to repair, so that a repair that fails leaves the store as it was: table
// files are hard links (RocksDB never changes one in place), the rest is copied (RocksDB's LOCK,
// its info logs and lost/ stay behind).
Result<void> stage_copy(const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::remove_all(to, ec);  // what an interrupted recovery left
  fs::create_directories(to, ec);
  if (ec) return fail(ErrorCode::io_error, to + ": " + ec.message());
  for (fs::directory_iterator it(from, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!it->is_regular_file() || name == "LOCK" || name.starts_with("LOG")) continue;
    const fs::path target = fs::path(to) / name;
    std::error_code link_ec;
    if (name.ends_with(".sst")) fs::create_hard_link(it->path(), target, link_ec);
    if (!name.ends_with(".sst") || link_ec) fs::copy_file(it->path(), target, ec);
    if (ec) return fail(ErrorCode::io_error, target.string() + ": " + ec.message());
  }
  if (ec) return fail(ErrorCode::io_error, from + ": " + ec.message());
  return {};
}

// Repairs the copy at `staging` and fills the report from it (see the header).
Result<void> repair_copy(const std::string& path, const std::string& staging,
                         const StoreInventory& before, RecoveryReport& report) {
  if (auto ok = stage_copy(path, staging); !ok) return ok;
  auto warnings = run_repair(staging);
  if (!warnings) return std::unexpected(warnings.error());
  report.repaired = true;
  report.rocksdb_warnings = std::move(*warnings);
  auto restored = settle_repaired_store(staging);
  if (!restored) return std::unexpected(restored.error());
  report.format_version_restored = *restored;
  auto store = RocksDbStore::open(staging, {.create_if_missing = false});
  if (!store) return std::unexpected(store.error());
  if (auto ok = quarantine_undecodable(**store, staging, report); !ok) return ok;
  count_tables(**store, before, report);
  describe_dropped_files(**store, staging, before, report);
  return {};
}

std::string timestamp() {
  return utc_strftime(std::int64_t(std::time(nullptr)), "%Y%m%dT%H%M%SZ");
}

// Puts the repaired copy in the store's place and keeps the damaged store beside it, as it was.
Result<std::string> swap_in(const std::string& path, const std::string& staging) {
  const std::string kept = path + ".damaged-" + timestamp();
  std::error_code ec;
  fs::rename(path, kept, ec);
  if (ec) return fail(ErrorCode::io_error, path + ": cannot move aside: " + ec.message());
  fs::rename(staging, path, ec);
  if (ec) {
    std::error_code back;
    fs::rename(kept, path, back);
    return fail(ErrorCode::io_error, staging + ": cannot move into place: " + ec.message());
  }
  return kept;
}

}  // namespace

Result<RecoveredStore> recover_store(const std::string& path) {
  auto files = list_store_files(path);
  if (!files) return std::unexpected(files.error());
  if (!files->holds_database())
    return fail(ErrorCode::not_found,
                path + ": no ktune store here (" + files->describe() + "): nothing to recover");
  RecoveryReport report;
  auto healthy = open_if_healthy(path, report);
  if (!healthy) return std::unexpected(healthy.error());
  if (*healthy) {
    if (auto ok = quarantine_undecodable(**healthy, path, report); !ok)
      return std::unexpected(ok.error());
    return RecoveredStore{std::move(*healthy), std::move(report)};
  }
  {
    auto lock = lock_store(path);
    if (!lock) return std::unexpected(lock.error());
    const StoreInventory before = take_inventory(path, *files);
    const std::string staging = path + ".repairing";
    auto repaired = repair_copy(path, staging, before, report);
    if (!repaired) {
      std::error_code ec;
      fs::remove_all(staging, ec);
      return fail(
          repaired.error().code,
          repaired.error().message + "\n  the store was not changed (the repair ran on a copy)");
    }
    auto kept = swap_in(path, staging);
    if (!kept) return std::unexpected(kept.error());
    report.damaged_copy = *kept;
  }
  auto store = RocksDbStore::open(path, {.create_if_missing = false});
  if (!store) return std::unexpected(store.error());
  return RecoveredStore{std::move(*store), std::move(report)};
}

}  // namespace ktune
