// Store faults for tests: damage a RocksDB store directory the way a disk, an operator or a crash
// would (garbled or truncated files, a file removed, a crash image), and find the file to damage.
// Header-only; tests using table_file_of link RocksDB (PkgConfig::ROCKSDB).
#pragma once

#include <rocksdb/options.h>
#include <rocksdb/sst_file_reader.h>
#include <rocksdb/table_properties.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace ktune::testing {

// The paths of the files in `dir` whose names start with `prefix` and end with `suffix`, sorted
// by name (RocksDB numbers files in creation order, so the last is the newest).
inline std::vector<std::string> store_files(const std::string& dir, const std::string& prefix,
                                            const std::string& suffix = "") {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.starts_with(prefix) && name.ends_with(suffix))
      out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Overwrites `n` bytes at `offset` (from the end when negative) with 0xEE.
inline void garble(const std::string& file, std::int64_t offset, size_t n) {
  const auto size = std::int64_t(std::filesystem::file_size(file));
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(offset < 0 ? size + offset : offset);
  f << std::string(n, '\xee');
}

inline void truncate_to(const std::string& file, std::uint64_t size) {
  std::filesystem::resize_file(file, size);
}

// What a SIGKILL at this moment would leave: a copy of the directory of a store that is open
// (its unflushed writes exist only in the write-ahead log).
inline void crash_image(const std::string& open_store, const std::string& image) {
  std::filesystem::copy(open_store, image, std::filesystem::copy_options::recursive);
}

// The newest table file (*.sst) holding records of column family `table` (a file holding none,
// such as a table's anchor, counts only with `any_file`); "" when none.
inline std::string newest_table_file(const std::string& dir, const std::string& table,
                                     bool any_file = false) {
  std::string newest;
  for (const auto& file : store_files(dir, "", ".sst")) {
    rocksdb::SstFileReader reader{rocksdb::Options()};
    if (!reader.Open(file).ok() || reader.GetTableProperties()->column_family_name != table)
      continue;
    std::unique_ptr<rocksdb::Iterator> it(reader.NewIterator(rocksdb::ReadOptions()));
    it->SeekToFirst();
    if (any_file || it->Valid()) newest = file;
  }
  return newest;
}

}  // namespace ktune::testing
