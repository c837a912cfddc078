// RecoveryReport: what counts as a loss, and the report as text for the operator.
#include <ctime>

#include "config/log.h"
#include "store/records.h"
#include "store/recovery.h"

namespace ktune {
namespace {

std::string quoted(std::string_view key) {
  return "'" + json_escape(key) + "'";
}

std::string utc(std::int64_t unix_seconds) {
  return unix_seconds <= 0 ? "unknown" : utc_iso8601(unix_seconds);
}

std::string describe(const RecoveryReport::DroppedFile& d) {
  std::string s = "table file " + d.name + " dropped (RocksDB could not read it: " +
                  (d.reason.empty() ? "no reason given" : d.reason) + ")\n    ";
  s += (d.table.empty() ? "table unknown" : "table " + d.table) + ", " +
       (d.entries < 0 ? "entries unknown" : std::to_string(d.entries) + " entries") + ", " +
       std::to_string(d.bytes) + " bytes, written " + utc(d.written_at);
  if (d.key_range_known)
    s += ", sequence " + std::to_string(d.smallest_seq) + ".." + std::to_string(d.largest_seq) +
         ", keys " + quoted(d.smallest_key) + ".." + quoted(d.largest_key);
  s += "\n    ";
  s += std::to_string(d.readable) +
       " of its entries could still be read: " + std::to_string(d.rolled_back) +
       " rolled back (an older value is served now), " + std::to_string(d.lost) + " lost, " +
       std::to_string(d.unchanged) + " unchanged";
  for (size_t i = 0; i < d.examples.size(); ++i)
    s += (i ? ", " : "; e.g. ") + quoted(d.examples[i]);
  const std::int64_t unread = d.entries < 0 ? -1 : d.entries - d.readable;
  if (unread != 0) {
    s += "\n    " +
         (unread < 0 ? std::string("its other entries") : std::to_string(unread) + " entries") +
         " could not be read: ";
    s += d.now_in_range >= 0 ? "the " + std::to_string(d.now_in_range) +
                                   " records now in its key range may hold older values than before"
                             : "any key of this table may now hold an older value than before";
  }
  return s;
}

std::string describe_counts(const std::vector<RecoveryReport::TableCount>& tables) {
  std::string s = "records per table, before -> after the repair:";
  for (const auto& c : tables) {
    s += "\n    " + std::string(table_name(c.table)) + ": " +
         (c.before ? std::to_string(*c.before) : "?") + " -> " + std::to_string(c.after);
    if (!c.before) s += " (unreadable before: " + c.before_error + ")";
  }
  return s;
}

}  // namespace

bool RecoveryReport::lossy() const {
  if (!dropped_files.empty() || !rocksdb_warnings.empty() || !undecodable.empty() ||
      format_version_restored)
    return true;
  for (const auto& c : tables)
    if (c.before && *c.before != c.after) return true;
  return false;
}

std::string RecoveryReport::summary() const {
  if (damage.empty() && undecodable.empty()) return "no damage found; the store is unchanged\n";
  std::string s;
  for (const auto& d : damage) s += "damage: " + d + "\n";
  if (repaired) s += "repaired with RocksDB's RepairDB (moved what it could not read to lost/)\n";
  for (const auto& d : dropped_files) s += describe(d) + "\n";
  for (const auto& w : rocksdb_warnings) s += "RocksDB: " + w + "\n";
  for (const auto& u : undecodable)
    s += "undecodable " + std::string(table_name(u.table)) + " record " + quoted(u.key) +
         " moved to " + undecodable_file + ": " + u.error + "\n";
  if (format_version_restored)
    s += "the format version was lost with the meta table; written again as " +
         std::to_string(k_store_format_version) + "\n";
  if (!tables.empty()) s += describe_counts(tables) + "\n";
  if (!damaged_copy.empty())
    s += "the damaged store is kept, as it was, at " + damaged_copy +
         " (table files hard-linked: it costs little space; delete it once the recovered store "
         "serves what you expect)\n";
  s += lossy() ? "result: records were lost or rolled back (above); re-import your tables "
                 "(ktune import) and re-tune what is missing\n"
               : "result: nothing was lost\n";
  return s;
}

}  // namespace ktune
