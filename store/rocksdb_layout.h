// What a ktune RocksDB store is made of: the options and column families it is opened with, the
// files its directory holds, and how a RocksDB status maps to an Error. Internal to store/ (used
// by RocksDbStore and by recovery, which must open the database exactly as the store does).
//
// Free functions; thread-safe (they share no state).
#pragma once

#include <rocksdb/options.h>
#include <rocksdb/status.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/error.h"
#include "store/store.h"

namespace rocksdb {
struct ColumnFamilyDescriptor;
}

namespace ktune {

// The options every open of a ktune store uses (recovery included).
rocksdb::Options store_db_options();
// "default" (unused by ktune) first, then one family per Table in k_all_tables order.
std::vector<rocksdb::ColumnFamilyDescriptor> store_column_families();

// The files of a store directory, classified by name before RocksDB touches any of them.
struct StoreFiles {
  bool directory_exists = false;
  bool has_current = false;
  std::vector<std::string> manifests;  // MANIFEST-*
  std::vector<std::string> tables;     // *.sst, sorted by name (= file number)
  std::vector<std::string> wals;       // *.log, sorted by name
  std::vector<std::string> options;    // OPTIONS-*
  std::vector<std::string> unknown;    // not RocksDB's (LOCK, LOG*, IDENTITY and lost/ are ignored)

  // Whether RocksDB ever wrote a database here: anything but an empty, fresh directory.
  bool holds_database() const {
    return has_current || !manifests.empty() || !tables.empty() || !wals.empty() ||
           !options.empty();
  }
  // "3 table files, 1 log, 1 MANIFEST" (what there is, for error messages).
  std::string describe() const;
};
Result<StoreFiles> list_store_files(const std::string& path);

// A RocksDB status that says the store's files are damaged (corrupt, or a file it names is gone),
// as opposed to the system refusing (permissions, disk full, another process holding the lock).
bool is_damage(const rocksdb::Status& s);
Error to_error(const rocksdb::Status& s, const std::string& path, std::string_view what);

// Every table has at least one table file: RepairDB learns the column families from table files
// only, and drops the logged writes of a family it has not seen. A table with none gets an anchor:
// a range deletion over [k_anchor_begin, k_anchor_end), which holds no ktune key (keys are
// text), flushed to a file. Readers never see it (docs/store-format.md, "Anchors").
inline constexpr std::string_view k_anchor_begin = "\xff\xff\xff\xffktune-anchor";
inline constexpr std::string_view k_anchor_end = "\xff\xff\xff\xffktune-anchor\x01";

}  // namespace ktune
