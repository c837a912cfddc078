// What a damaged store held before its repair, read without changing anything: each table file's
// properties and checksums (and, in a damaged one, the entries that can still be read), the
// MANIFEST's view of the files where it can be read, and the records per table. Internal to
// store/recovery.cc, which compares it with the repaired store.
//
// Free functions over a directory; one caller at a time per directory.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "store/rocksdb_layout.h"

namespace ktune {

struct TableFileInventory {
  std::string name;  // "000025.sst"
  std::uint64_t bytes = 0;
  std::int64_t written_at = 0;  // modification time, unix seconds
  std::string table;            // column family, "" when unknown
  std::int64_t entries = -1;    // -1 when unknown
  std::string damage;           // why it fails to open or verify; "" when it passes
  std::uint64_t smallest_seq = 0, largest_seq = 0;
  std::string smallest_key, largest_key;
  bool key_range_known = false;
  // Damaged files only: the entries still readable, as (key, value_hash(value)).
  std::vector<std::pair<std::string, std::size_t>> readable;
};

struct StoreInventory {
  StoreFiles files;
  std::map<std::string, TableFileInventory> table_files;  // by file name
  std::map<std::string, std::int64_t> records;            // by table name, where readable
  std::map<std::string, std::string> record_errors;       // by table name: why not readable
  std::string manifest_error;                             // "" when the MANIFEST could be read
};

// REQUIRES: no process holds the store.
StoreInventory take_inventory(const std::string& path, StoreFiles files);

// Identifies a value for comparison before and after a repair (not persisted).
std::size_t value_hash(std::string_view value);

// The names of the files in <path>/lost (empty when there is none).
std::set<std::string> lost_files(const std::string& path);

}  // namespace ktune
