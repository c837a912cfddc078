// Export and import of tuning tables: how winners travel between nodes.
//
// JSON is canonical; YAML and CSV are views for people and spreadsheets that import back to the
// same winners (the format is detected from the text). docs/store-format.md specifies them.
// Rendering writes the text record by record (no tree of the whole table: 50,000 winners are ~70 MB
// of JSON, not gigabytes of nodes). Exports are written to a temporary file in the target directory
// and renamed, so a reader never sees half a table. Imports validate every record first and write
// nothing unless all pass; merging is deterministic (the same inputs give the same store in any
// order), so every rank of a job that imports one table answers alike.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "store/records.h"

namespace ktune {

inline constexpr int k_table_format_version = 1;
// Deepest nesting of arrays and objects a table may have (a record needs four levels).
inline constexpr int k_max_table_depth = 64;

enum class TableFormat { json, yaml, csv };
Result<TableFormat> parse_table_format(std::string_view name);
// The format of a table document, by its first bytes: JSON starts with '{', CSV with the export's
// header ("device,"), anything else is read as YAML.
TableFormat detect_table_format(std::string_view text);

// Renders winners as a table document; the text is the only copy of the table it builds.
std::string render_table(const std::vector<WinnerRecord>& winners, TableFormat format);

// Writes `content` to `path` through a temporary file in the same directory and a rename, so a
// reader never sees half a file. A symbolic link is followed (the file it names is replaced); an
// existing file that is not a regular one (/dev/null, a FIFO) is written in place, never
// replaced; a directory is refused.
Result<void> write_file_atomic(const std::string& path, std::string_view content);

// Exports every winner (or one device class's) to `path`; returns how many were written.
Result<size_t> export_table(Store& store, const std::string& path, TableFormat format,
                            const std::string& device_id = "");

// What an imported record must satisfy beyond validate_winner. Stricter than what the store
// reads back, so a store written by an older ktune still opens; what it refuses would poison
// lookups or keys:
// - device: name of 1..64 characters from [A-Za-z0-9 ._-] (no '/', which separates key parts),
//   its id parsing back to itself; 1..10000 SMs, 0..65536 GiB;
// - ranked: at most k_max_ranked configs; template names [A-Za-z0-9_-], at most 64 params;
//   median_us in [k_min_median_us, k_max_median_us];
// - ref_error, power, clocks, trials >= 0; timestamp in [0, 4102444800] (before 2100);
// - text fields (driver, nvrtc, node_id, strategy): printable ASCII, at most 128 bytes.
inline constexpr double k_min_median_us = 0.1;  // 100 ns: no kernel launch completes faster
inline constexpr double k_max_median_us = 1e9;  // 1000 s: beyond any worker's trial deadline
inline constexpr size_t k_max_ranked = 64;      // a lookup returns at most 64 entries
Result<void> validate_imported_winner(const WinnerRecord& r);

// A check of each imported record by what the store does not know (the daemon checks params
// against its templates). Returns the reason a record is refused.
using RecordCheck = std::function<Result<void>(const WinnerRecord&)>;

struct ImportRejection {
  size_t index = 0;    // position in the file's "winners" array
  std::string key;     // the record's key when it could be read that far, else ""
  std::string reason;  // JSON path and what is wrong
};

struct ImportReport {
  size_t total = 0;                       // records in the file
  size_t added = 0;                       // keys the store did not have
  size_t replaced = 0;                    // keys where the imported record won the merge
  size_t kept = 0;                        // keys where the stored record won (or was identical)
  std::vector<ImportRejection> rejected;  // non-empty: nothing was written
  std::vector<WinnerRecord> written;      // records now in the store (added + replaced)

  bool applied() const { return rejected.empty(); }
  // "3 of 10 records rejected; nothing imported:" and the first `max_reasons` reasons, one per
  // line ("... and N more" after them).
  std::string rejection_summary(size_t max_reasons = 20) const;
};

// Parses a table document (JSON, YAML or CSV, detected). A document that does not parse or lacks
// the header is an Error;
// bad records are listed in `rejected` (the valid ones are returned all the same).
// Every record passes validate_imported_winner and `check` (when given).
Result<std::vector<WinnerRecord>> parse_table(std::string_view text, std::string_view origin,
                                              std::vector<ImportRejection>& rejected,
                                              const RecordCheck& check = {});

// Validates and merges a table (any format) into the store. A malformed document is an Error; a
// well-formed one with bad records returns a report listing them, having written nothing.
// Whether `incoming` replaces `stored` (same key, different records): prefer_incoming when
// none is given.
using ReplaceRule = std::function<bool(const WinnerRecord& stored, const WinnerRecord& incoming)>;
Result<ImportReport> import_table(Store& store, std::string_view text, std::string_view origin,
                                  const RecordCheck& check = {}, const ReplaceRule& replace = {});
Result<ImportReport> import_table_file(Store& store, const std::string& path);

// The merge rule: true when `incoming` should replace `stored`. Records timed differently are
// not compared by time: flushed outranks rotated, which outranks a record that does not say how
// it was timed. Between records timed the same way the faster ranked[0] wins; ties go to the
// newer timestamp, then the larger node id, then the larger encoding (a total order).
bool prefer_incoming(const WinnerRecord& stored, const WinnerRecord& incoming);

}  // namespace ktune
