// LogReplayCheck: says when RocksDB's replay of the write-ahead logs at open stopped before the end
// of a log, and keeps the bytes it did not replay.
//
// The store opens with WALRecoveryMode::kTolerateCorruptedTailRecords: a record that fails its
// checksum refuses to open, but a record whose header points past the end of the log is dropped
// without a word, with everything after it. That is what a write cut short by a crash looks like
// (never acknowledged: sync writes return once the whole record is on disk), and also what a
// damaged length field in a log's last 32 KiB block looks like. RocksDB deletes the log once it
// has replayed it, so the check counts the bytes of every replayed record (a WalFilter, laid out
// as log::Writer writes them), holds each log open across the replay, and afterwards copies what
// was not replayed to <store>/lost/<log>.tail-<offset> and says so.
//
// Use: construct before DB::Open, pass filter() as Options::wal_filter, call finish() after.
// Not thread-safe (one open at a time).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "store/rocksdb_layout.h"

namespace rocksdb {
class WalFilter;
}

namespace ktune {

class LogReplayCheck {
 public:
  // Opens (for reading) every *.log of the store at `path`, listed in `files`.
  LogReplayCheck(const std::string& path, const StoreFiles& files);
  ~LogReplayCheck();
  LogReplayCheck(const LogReplayCheck&) = delete;
  LogReplayCheck& operator=(const LogReplayCheck&) = delete;

  rocksdb::WalFilter* filter();
  // After a successful DB::Open: one message per log whose replay stopped early (its tail kept
  // in lost/). Empty when every replayed log was replayed to its end. Closes the logs.
  std::vector<std::string> finish();

  // Where a record of `payload` bytes written at `offset` of a log ends (log::Writer's layout:
  // 32 KiB blocks, a 7-byte header per fragment, a block's last < 7 bytes zero-filled).
  static std::uint64_t record_end(std::uint64_t offset, std::uint64_t payload);

 private:
  class Filter;
  struct Log {
    std::string name;
    int fd = -1;
    std::uint64_t bytes = 0;
  };
  std::string m_path;
  std::map<std::uint64_t, Log> m_logs;  // by log number
  std::unique_ptr<Filter> m_filter;
};

}  // namespace ktune
