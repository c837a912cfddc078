// Readers for the YAML and CSV views of a tuning table: each turns the text back into the JSON
// document that parse_table (store/table_io.h) checks record by record, so a table exported in
// any format imports to the same winners through one validation path.
//
// YAML: the writer's block style (store/yaml_writer.h) or any YAML with the same structure. A
// quoted scalar is a string; a plain one is null, true/false, an integer or a float when it reads
// as one in full (YAML 1.2 core schema), else a string — so `nvrtc: "13.0"` stays a string.
// CSV: the export's columns (k_csv_columns), one row per ranked config; rows of one device class
// and problem key form one record, ranked by their `rank` column. Columns are found by header
// name, so their order does not matter; the ones before `device_name` are required.
// Internal to ktune_store. Thread-safety: pure functions.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "store/record_json.h"
#include "store/records.h"

namespace ktune::detail {

// The CSV export's header, in order. Columns are only ever appended.
// `timing_l2` is empty for a record that does not say how it was timed.
inline constexpr std::array<std::string_view, 28> k_csv_columns = {
    "device",        "op",           "dtype",        "out_dtype",
    "layout",        "dims",         "rank",         "template",
    "template_hash", "params",       "median_us",    "spread_pct",
    "tflops",        "gbps",         "driver",       "nvrtc",
    "node_id",       "timestamp",    "strategy",     "trials",
    "device_name",   "ref_error",    "sm_clock_mhz", "mem_clock_mhz",
    "power_w",       "store_format", "timing_l2",    "sm_clock_counted_mhz"};
// The first optional column: tables written before it was added lack it and those after.
inline constexpr size_t k_csv_first_optional = 20;

// A double as the shortest text that reads back to the same value.
std::string exact_number(double v);

// The JSON table document ({"ktune_table", "winners"}) a YAML or CSV table holds; an Error names
// origin:line:column (YAML syntax) or origin:line (CSV) where the text cannot be read.
Result<Json> yaml_table_to_json(std::string_view text, const std::string& origin);
Result<Json> csv_table_to_json(std::string_view text, const std::string& origin);

}  // namespace ktune::detail
