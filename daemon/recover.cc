// `ktuned --recover`: repairs the store (store/recovery.h), reports what was found, dropped and
// rolled back as structured log lines and as a summary on stderr, and exits.
#include <cstdio>

#include "config/log.h"
#include "daemon/daemon.h"
#include "store/records.h"
#include "store/recovery.h"

namespace ktune {
namespace {

void log_report(const std::string& path, const RecoveryReport& r) {
  for (const auto& d : r.damage)
    log(LogLevel::warn, "recovery_damage", {{"store", path}, {"found", d}});
  for (const auto& d : r.dropped_files)
    log(LogLevel::error, "recovery_dropped_file",
        {{"file", d.name},
         {"table", d.table.empty() ? "unknown" : d.table},
         {"entries", d.entries},
         {"bytes", d.bytes},
         {"written_at", d.written_at},
         {"smallest_seq", d.smallest_seq},
         {"largest_seq", d.largest_seq},
         {"readable", d.readable},
         {"rolled_back", d.rolled_back},
         {"lost", d.lost},
         {"unchanged", d.unchanged},
         {"now_in_key_range", d.now_in_range},
         {"reason", d.reason}});
  for (const auto& w : r.rocksdb_warnings)
    log(LogLevel::error, "recovery_rocksdb", {{"message", w}});
  for (const auto& u : r.undecodable)
    log(LogLevel::error, "recovery_undecodable",
        {{"table", table_name(u.table)},
         {"key", u.key},
         {"error", u.error},
         {"moved_to", r.undecodable_file}});
  if (r.format_version_restored)
    log(LogLevel::warn, "recovery_format_version_restored", {{"version", k_store_format_version}});
  for (const auto& c : r.tables)
    log(LogLevel::info, "recovery_table",
        {{"table", table_name(c.table)},
         {"before", c.before ? std::to_string(*c.before) : "unknown"},
         {"after", c.after}});
}

}  // namespace

int run_recovery(const DaemonConfig& config) {
  const std::string path = config.data_dir + "/db";
  auto recovered = recover_store(path);
  if (!recovered) {
    log(LogLevel::error, "recovery_failed",
        {{"store", path}, {"error", recovered.error().message}});
    std::fprintf(stderr, "ktuned --recover: %s\n", recovered.error().message.c_str());
    return 1;
  }
  const RecoveryReport& report = recovered->report;
  log_report(path, report);
  const int code = report.lossy() ? 2 : 0;
  log(code ? LogLevel::warn : LogLevel::info, "recovery_done",
      {{"store", path},
       {"repaired", report.repaired ? "yes" : "no"},
       {"lossy", report.lossy() ? "yes" : "no"},
       {"exit", code}});
  std::fprintf(stderr, "ktuned --recover: %s\n%s", path.c_str(), report.summary().c_str());
  return code;
}

}  // namespace ktune
