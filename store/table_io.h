// Export and import of tuning tables: how winners travel between nodes.
//
// JSON is canonical (it imports); YAML and CSV are export-only views for people and spreadsheets.
// docs/store-format.md specifies the JSON document. Exports are written to a temporary file in
// the target directory and renamed, so a reader never sees half a table. Imports validate every
// record first and write nothing unless all pass; merging is deterministic (the same inputs give
// the same store in any order), so every rank of a job that imports one table answers alike.
#pragma once

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

// Renders winners as a table document.
std::string render_table(const std::vector<WinnerRecord>& winners, TableFormat format);

// Writes `content` to `path` through a temporary file in the same directory and a rename.
Result<void> write_file_atomic(const std::string& path, std::string_view content);

// Exports every winner (or one device class's) to `path`; returns how many were written.
Result<size_t> export_table(Store& store, const std::string& path, TableFormat format,
                            const std::string& device_id = "");

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
};

// Parses a JSON table document. A document that is not JSON or lacks the header is an Error;
// bad records are listed in `rejected` (the valid ones are returned all the same).
Result<std::vector<WinnerRecord>> parse_table(std::string_view text, std::string_view origin,
                                              std::vector<ImportRejection>& rejected);

// Validates and merges a JSON table into the store. A malformed document is an Error; a
// well-formed one with bad records returns a report listing them, having written nothing.
Result<ImportReport> import_table(Store& store, std::string_view text, std::string_view origin);
Result<ImportReport> import_table_file(Store& store, const std::string& path);

// The merge rule: true when `incoming` should replace `stored`. Faster ranked[0] wins; ties go
// to the newer timestamp, then the larger node id, then the larger encoding (total order).
bool prefer_incoming(const WinnerRecord& stored, const WinnerRecord& incoming);

}  // namespace ktune
