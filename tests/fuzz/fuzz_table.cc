// Fuzz target: the table importer (store/table_io through Catalog::import: the document, every
// record rule, the template checks, the merge) into a MemStore, then the exporters. Input: a
// table document as `ktune import` sends it.
//
// Checks: an import is either an Error, a report that rejects at least one record and wrote
// nothing, or applied; what was applied exports as JSON, YAML and CSV, the YAML parses back with
// the same records' text fields, every CSV row has the header's columns, and the JSON export
// imports into a fresh store unchanged (the store round-trips what it accepted).
#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>

#include "store/table_io.h"
#include "store/table_readers.h"
#include "tests/fuzz/fuzz_support.h"

using namespace ktune;

namespace {

// Fields per CSV row (RFC 4180 quoting), each row ending in '\n'.
std::vector<size_t> csv_columns(std::string_view csv) {
  std::vector<size_t> rows;
  size_t fields = 1;
  bool quoted = false;
  for (size_t i = 0; i < csv.size(); ++i) {
    const char c = csv[i];
    if (quoted) {
      if (c == '"' && i + 1 < csv.size() && csv[i + 1] == '"')
        ++i;
      else if (c == '"')
        quoted = false;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      ++fields;
    } else if (c == '\n') {
      rows.push_back(fields);
      fields = 1;
    }
  }
  if (quoted) fuzz::violated("CSV ends inside a quoted field", csv);
  return rows;
}

void check_yaml(const std::string& yaml, const std::vector<WinnerRecord>& winners) {
  YAML::Node doc;
  try {
    doc = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    fuzz::violated(std::string("YAML export does not parse: ") + e.what(), yaml);
  }
  const YAML::Node list = doc["winners"];
  if (!list.IsSequence() || list.size() != winners.size())
    fuzz::violated("YAML export has another number of winners", yaml);
  for (size_t i = 0; i < winners.size(); ++i) {
    const auto& w = winners[i];
    if (list[i]["node_id"].as<std::string>("") != w.node_id ||
        list[i]["strategy"].as<std::string>("") != w.strategy ||
        list[i]["device"]["name"].as<std::string>("") != w.device.name ||
        list[i]["validators"]["driver"].as<std::string>("") != w.validators.driver)
      fuzz::violated("YAML export reads back other text", yaml);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parts = fuzz::make_parts();
  auto report = parts->catalog.import(text, "fuzz");
  if (!report) return 0;  // an unreadable document is an Error: the right answer
  if (!report->applied()) {
    if (report->rejected.empty() || scan_winners(parts->store)->size() != 2)
      fuzz::violated("a rejected import wrote something", text);
    (void)report->rejection_summary();
    return 0;
  }
  auto winners = scan_winners(parts->store);
  if (!winners) fuzz::violated("the store does not read back what it accepted", text);
  const std::string json = render_table(*winners, TableFormat::json);
  check_yaml(render_table(*winners, TableFormat::yaml), *winners);
  const std::string csv = render_table(*winners, TableFormat::csv);
  for (size_t columns : csv_columns(csv))
    if (columns != detail::k_csv_columns.size())
      fuzz::violated("a CSV row has another number of columns", csv);
  // Every export format imports into a fresh store as the same records.
  for (auto format : {TableFormat::json, TableFormat::yaml, TableFormat::csv}) {
    const std::string exported = format == TableFormat::json ? json
                                 : format == TableFormat::csv ? csv
                                                              : render_table(*winners, format);
    auto again = fuzz::make_parts();
    auto reimported = again->catalog.import(exported, "export");
    if (!reimported || !reimported->applied())
      fuzz::violated("an export of an accepted table does not import",
                     reimported ? reimported->rejection_summary() : reimported.error().message);
    if (*scan_winners(again->store) != *winners)
      fuzz::violated("an export imports as other records", exported);
  }
  return 0;
}
