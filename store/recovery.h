// Recovery of a damaged RocksDbStore: what `ktuned --recover` runs.
//
// RocksDB's RepairDB rebuilds a database from the table files and logs it can read: it needs no
// CURRENT or MANIFEST, skips log records that fail their checksum and moves table files it cannot
// read to <store>/lost/. It says nothing about what that cost, and a dropped table file does not
// only lose records: older versions of the same keys, kept in older files, are served again
// (rolled back). recover_store wraps it and reports, for the operator:
//   - records per table before (where the damaged store could still be read) and after;
//   - each table file moved to lost/: its table, entries, sequence and key range, write time;
//     of its entries that could still be read, how many keys are now gone (lost), hold another
//     value (rolled back) or are unchanged; how many records now fall in its key range (any of
//     them may hold an older value than before the damage);
//   - RocksDB's own warnings during the repair (log bytes dropped, logged writes ignored);
//   - records ktune cannot decode, moved out of the store to lost/undecodable-<time>.jsonl;
//   - a format version lost with the meta table and written again.
// A store that opens, passes every checksum and decodes cleanly is left untouched. Otherwise the
// repair runs on a copy beside the store (<store>.repairing; table files hard-linked): when it
// fails the store is as it was, still refused; when it succeeds the copy takes the store's place
// and the damaged store is kept, as it was, at <store>.damaged-<UTC time>.
//
// One caller at a time per directory (RocksDB's LOCK keeps a running ktuned out).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "store/rocksdb_store.h"

namespace ktune {

struct RecoveryReport {
  // Records of one table before the repair (nullopt: could not be read) and after.
  struct TableCount {
    Table table = Table::winners;
    std::optional<std::int64_t> before;
    std::string before_error;  // why `before` is unknown
    std::int64_t after = 0;
  };
  // A table file RocksDB could not read and moved to lost/.
  struct DroppedFile {
    std::string name;                // "lost/000025.sst"
    std::uint64_t bytes = 0;         // its size
    std::int64_t written_at = 0;     // its modification time, unix seconds
    std::string table;               // "" when unknown (the file and the MANIFEST unreadable)
    std::int64_t entries = -1;       // RocksDB entries it held, -1 when unknown
    std::uint64_t smallest_seq = 0;  // sequence range of its writes (0, 0: unknown)
    std::uint64_t largest_seq = 0;
    std::string smallest_key;  // key range, when the MANIFEST or the file could say
    std::string largest_key;
    bool key_range_known = false;
    std::string reason;  // why RocksDB could not read it
    // Its entries that could still be read, compared with the repaired store.
    std::int64_t readable = 0;
    std::int64_t lost = 0;              // the key is gone
    std::int64_t rolled_back = 0;       // the key holds another value: an older version resurfaced
    std::int64_t unchanged = 0;         // the same value survived elsewhere
    std::vector<std::string> examples;  // a few lost or rolled-back keys
    // Records now within its key range (-1: range unknown); any may hold an older value.
    std::int64_t now_in_range = -1;
  };
  struct UndecodableRecord {
    Table table = Table::winners;
    std::string key;
    std::string error;
  };

  bool repaired = false;            // false: the store was healthy and left untouched
  std::vector<std::string> damage;  // what was found wrong before the repair
  std::vector<TableCount> tables;   // one per Table (filled when repaired)
  std::vector<DroppedFile> dropped_files;
  std::vector<std::string> rocksdb_warnings;  // RepairDB's: dropped log bytes, ignored writes
  std::vector<UndecodableRecord> undecodable;
  std::string undecodable_file;  // where they were written ("" when none)
  bool format_version_restored = false;
  std::string damaged_copy;  // where the damaged store was kept ("" when not repaired)

  // Whether records may have been lost or rolled back (what `ktuned --recover` exits 2 for).
  bool lossy() const;
  // The report as text for the operator, one fact per line.
  std::string summary() const;
};

struct RecoveredStore {
  std::unique_ptr<RocksDbStore> store;
  RecoveryReport report;
};

// Repairs the store at `path` if it needs it and opens it. ErrorCode::not_found when `path` holds
// no store at all (nothing to recover: an empty store is never created in its place).
Result<RecoveredStore> recover_store(const std::string& path);

}  // namespace ktune
