#include "store/log_replay_check.h"

#include <fcntl.h>
#include <rocksdb/wal_filter.h>
#include <rocksdb/write_batch.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <utility>

namespace ktune {

namespace {
constexpr std::uint64_t k_block = 32768;  // log::kBlockSize
constexpr std::uint64_t k_header = 7;     // log::kHeaderSize (checksum, length, type)
}  // namespace

// Counts, per log number, where the last replayed record ends.
class LogReplayCheck::Filter : public rocksdb::WalFilter {
 public:
  void ColumnFamilyLogNumberMap(const std::map<uint32_t, uint64_t>& cf_log_numbers,
                                const std::map<std::string, uint32_t>&) override {
    for (const auto& [cf, number] : cf_log_numbers) m_min_log = std::min(m_min_log, number);
  }
  WalProcessingOption LogRecordFound(unsigned long long log_number, const std::string&,
                                     const rocksdb::WriteBatch& batch, rocksdb::WriteBatch*,
                                     bool*) override {
    std::uint64_t& end = m_end[log_number];
    end = record_end(end, batch.GetDataSize());
    return WalProcessingOption::kContinueProcessing;
  }
  const char* Name() const override { return "ktune.LogReplayCheck"; }

  std::uint64_t min_log() const { return m_min_log; }
  std::uint64_t end(std::uint64_t log) const {
    auto it = m_end.find(log);
    return it == m_end.end() ? 0 : it->second;
  }

 private:
  std::uint64_t m_min_log = std::numeric_limits<std::uint64_t>::max();
  std::map<std::uint64_t, std::uint64_t> m_end;
};

std::uint64_t LogReplayCheck::record_end(std::uint64_t offset, std::uint64_t payload) {
  std::uint64_t left = payload;
  do {
    const std::uint64_t leftover = k_block - offset % k_block;
    if (leftover < k_header) offset += leftover;  // the writer pads and starts a new block
    const std::uint64_t fragment = std::min(left, k_block - offset % k_block - k_header);
    offset += k_header + fragment;
    left -= fragment;
  } while (left > 0);
  return offset;
}

LogReplayCheck::LogReplayCheck(const std::string& path, const StoreFiles& files)
    : m_path(path), m_filter(std::make_unique<Filter>()) {
  for (const auto& name : files.wals) {
    Log log;
    log.name = name;
    log.fd = ::open((path + "/" + name).c_str(), O_RDONLY | O_CLOEXEC);
    if (log.fd < 0) continue;
    const off_t size = ::lseek(log.fd, 0, SEEK_END);
    log.bytes = size > 0 ? std::uint64_t(size) : 0;
    m_logs.emplace(std::strtoull(name.c_str(), nullptr, 10), std::move(log));
  }
}

LogReplayCheck::~LogReplayCheck() {
  for (auto& [number, log] : m_logs)
    if (log.fd >= 0) ::close(log.fd);
}

rocksdb::WalFilter* LogReplayCheck::filter() {
  return m_filter.get();
}

std::vector<std::string> LogReplayCheck::finish() {
  std::vector<std::string> out;
  for (auto& [number, log] : m_logs) {
    if (log.fd < 0) continue;
    const std::uint64_t end = m_filter->end(number);
    if (number < m_filter->min_log() || end >= log.bytes) continue;
    // Keep what was not replayed (the log itself is deleted once replayed).
    std::string tail(log.bytes - end, '\0');
    const ssize_t n = ::pread(log.fd, tail.data(), tail.size(), off_t(end));
    tail.resize(n > 0 ? size_t(n) : 0);
    const std::string kept = "lost/" + log.name + ".tail-" + std::to_string(end);
    std::error_code ec;
    std::filesystem::create_directories(m_path + "/lost", ec);
    std::ofstream(m_path + "/" + kept, std::ios::binary) << tail;
    out.push_back("log " + log.name + ": replay stopped " + std::to_string(log.bytes - end) +
                  " bytes before its end (at byte " + std::to_string(end) + " of " +
                  std::to_string(log.bytes) +
                  "): a write cut short by a crash (never acknowledged), or a damaged record "
                  "header; the bytes are kept in " +
                  kept);
  }
  return out;
}

}  // namespace ktune
