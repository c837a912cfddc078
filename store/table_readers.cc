#include "store/table_readers.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <vector>

#include "store/table_io.h"

namespace ktune::detail {
namespace {

// ---- YAML ----------------------------------------------------------------------------------

// A plain scalar's value under the YAML 1.2 core schema, as the writer relies on it.
Json plain_scalar(const std::string& s) {
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  if (s == ".inf" || s == "+.inf" || s == ".Inf") return std::numeric_limits<double>::infinity();
  if (s == "-.inf" || s == "-.Inf") return -std::numeric_limits<double>::infinity();
  if (s == ".nan" || s == ".NaN") return std::numeric_limits<double>::quiet_NaN();
  // Numbers: digits, sign, '.', exponent only (from_chars would also take "inf" and "nan").
  if (s.find_first_not_of("0123456789+-.eE") != std::string::npos) return s;
  const char* end = s.data() + s.size();
  const char* begin = s.data() + (s.front() == '+' ? 1 : 0);
  // Non-negative integers are unsigned, as nlohmann reads them from JSON text.
  std::uint64_t u = 0;
  if (auto r = std::from_chars(begin, end, u); r.ec == std::errc() && r.ptr == end) return u;
  std::int64_t i = 0;
  if (auto r = std::from_chars(begin, end, i); r.ec == std::errc() && r.ptr == end) return i;
  double d = 0;
  if (auto r = std::from_chars(begin, end, d); r.ec == std::errc() && r.ptr == end) return d;
  return s;
}

Json yaml_node_to_json(const YAML::Node& n, int depth) {
  if (depth > k_max_table_depth)
    throw JsonFieldError("mappings and sequences nest deeper than " +
                         std::to_string(k_max_table_depth));
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      Json j = Json::object();
      for (const auto& kv : n) j[kv.first.Scalar()] = yaml_node_to_json(kv.second, depth + 1);
      return j;
    }
    case YAML::NodeType::Sequence: {
      Json j = Json::array();
      for (const auto& item : n) j.push_back(yaml_node_to_json(item, depth + 1));
      return j;
    }
    case YAML::NodeType::Scalar:
      // "!" is yaml-cpp's tag for a quoted (non-plain) scalar: always a string.
      return n.Tag() == "!" ? Json(n.Scalar()) : plain_scalar(n.Scalar());
    default:
      return nullptr;
  }
}

// ---- CSV -----------------------------------------------------------------------------------

// Splits CSV text into rows of fields (RFC 4180: quoted fields may hold commas, quotes as "",
// and newlines). Each row remembers the line it starts on.
struct CsvRow {
  size_t line = 0;
  std::vector<std::string> fields;
};

Result<std::vector<CsvRow>> split_csv(std::string_view text, const std::string& origin) {
  std::vector<CsvRow> rows;
  CsvRow row{1, {}};
  std::string field;
  bool quoted = false, any = false;
  size_t line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        if (c == '\n') ++line;
        field += c;
      }
      continue;
    }
    if (c == '"' && field.empty()) {
      quoted = any = true;
    } else if (c == ',') {
      row.fields.push_back(std::move(field));
      field.clear();
      any = true;
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      if (any || !field.empty()) {
        row.fields.push_back(std::move(field));
        rows.push_back(std::move(row));
      }
      field.clear();
      any = false;
      row = CsvRow{++line, {}};
    } else {
      field += c;
      any = true;
    }
  }
  if (quoted)
    return fail(ErrorCode::invalid_argument,
                origin + ":" + std::to_string(row.line) + ": unterminated quoted field");
  if (any || !field.empty()) {
    row.fields.push_back(std::move(field));
    rows.push_back(std::move(row));
  }
  return rows;
}

// A cell as a JSON number when it reads as one in full, else the text itself (the record check
// then names the field: "expected a number").
Json number_cell(const std::string& s, bool integer) {
  const char* end = s.data() + s.size();
  if (integer) {
    std::int64_t i = 0;
    if (auto r = std::from_chars(s.data(), end, i);
        !s.empty() && r.ec == std::errc() && r.ptr == end)
      return i;
    return s;
  }
  double d = 0;
  if (auto r = std::from_chars(s.data(), end, d); !s.empty() && r.ec == std::errc() && r.ptr == end)
    return d;
  return s;
}

// "a=1,b=2" as {"a":1,"b":2}, in order; the text itself when it does not read (the record check
// then names the field).
Json assignments_cell(const std::string& s) {
  auto parsed = parse_dims(s);  // the same "name=integer,..." grammar as params
  if (!parsed) return s;
  Json j = Json::object();
  for (const auto& [n, v] : *parsed) j[n] = v;
  return j;
}

}  // namespace

std::string exact_number(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

Result<Json> yaml_table_to_json(std::string_view text, const std::string& origin) {
  try {
    const YAML::Node root = YAML::Load(std::string(text));
    return yaml_node_to_json(root, 0);
  } catch (const YAML::Exception& e) {
    return fail(ErrorCode::invalid_argument, origin + ":" + std::to_string(e.mark.line + 1) + ":" +
                                                 std::to_string(e.mark.column + 1) +
                                                 ": not a YAML table: " + e.msg);
  } catch (const JsonFieldError& e) {
    return fail(ErrorCode::invalid_argument, origin + ": not a ktune table: " + e.what());
  }
}

Result<Json> csv_table_to_json(std::string_view text, const std::string& origin) {
  auto rows = split_csv(text, origin);
  if (!rows) return std::unexpected(rows.error());
  if (rows->empty()) return fail(ErrorCode::invalid_argument, origin + ": empty CSV table");
  std::map<std::string_view, size_t> column;
  const auto& header = rows->front().fields;
  for (size_t i = 0; i < header.size(); ++i) column.emplace(header[i], i);
  for (size_t i = 0; i < k_csv_first_optional; ++i)
    if (!column.count(k_csv_columns[i]))
      return fail(ErrorCode::invalid_argument, origin + ":1: not a ktune CSV table: no column '" +
                                                   std::string(k_csv_columns[i]) + "'");
  Json winners = Json::array();
  std::map<std::string, size_t> record_of;  // "<device id>/<problem>" -> index in winners
  std::vector<std::vector<std::pair<std::int64_t, Json>>> ranked;  // (rank, config) per record
  for (size_t r = 1; r < rows->size(); ++r) {
    const CsvRow& row = (*rows)[r];
    if (row.fields.size() != header.size())
      return fail(ErrorCode::invalid_argument, origin + ":" + std::to_string(row.line) + ": " +
                                                   std::to_string(row.fields.size()) +
                                                   " fields, the header has " +
                                                   std::to_string(header.size()));
    auto cell = [&](std::string_view name) -> std::string {
      auto it = column.find(name);
      return it == column.end() ? std::string() : row.fields[it->second];
    };
    auto has = [&](std::string_view name) { return column.count(name) > 0; };
    const std::string key = cell("device") + "/" + cell("op") + "|" + cell("dtype") + "|" +
                            cell("out_dtype") + "|" + cell("layout") + "|" + cell("dims");
    auto [it, inserted] = record_of.emplace(key, winners.size());
    if (inserted) {
      Json device = Json::object();
      if (auto d = parse_device_class_id(cell("device")); d) {
        if (has("device_name")) d->name = cell("device_name");
        device = to_json(*d);
      } else {
        device = cell("device");  // the record check says it is not a device
      }
      Json record = {
          {"device", device},
          {"problem",
           {{"op", cell("op")},
            {"dtype", cell("dtype")},
            {"out_dtype", cell("out_dtype")},
            {"layout", cell("layout")},
            {"dims", assignments_cell(cell("dims"))}}},
          {"validators",
           {{"driver", cell("driver")},
            {"nvrtc", cell("nvrtc")},
            {"store_format", has("store_format") ? number_cell(cell("store_format"), true)
                                                 : Json(k_store_format_version)}}},
          {"ranked", Json::array()},
          {"ref_error", has("ref_error") ? number_cell(cell("ref_error"), false) : Json(0.0)},
          {"sm_clock_mhz", has("sm_clock_mhz") ? number_cell(cell("sm_clock_mhz"), true) : Json(0)},
          {"mem_clock_mhz",
           has("mem_clock_mhz") ? number_cell(cell("mem_clock_mhz"), true) : Json(0)},
          {"power_w", has("power_w") ? number_cell(cell("power_w"), false) : Json(0.0)},
          {"node_id", cell("node_id")},
          {"timestamp", number_cell(cell("timestamp"), true)},
          {"trials", number_cell(cell("trials"), true)},
          {"strategy", cell("strategy")}};
      if (!cell("timing_l2").empty()) record["timing_l2"] = cell("timing_l2");
      if (has("sm_clock_counted_mhz"))
        record["sm_clock_counted_mhz"] = number_cell(cell("sm_clock_counted_mhz"), true);
      winners.push_back(std::move(record));
      ranked.emplace_back();
    }
    const Json rank = number_cell(cell("rank"), true);
    if (!rank.is_number_integer())
      return fail(ErrorCode::invalid_argument,
                  origin + ":" + std::to_string(row.line) + ": rank: expected an integer");
    ranked[it->second].emplace_back(rank.get<std::int64_t>(),
                                    Json{{"template", cell("template")},
                                         {"template_hash", cell("template_hash")},
                                         {"params", assignments_cell(cell("params"))},
                                         {"median_us", number_cell(cell("median_us"), false)},
                                         {"spread_pct", number_cell(cell("spread_pct"), false)},
                                         {"tflops", number_cell(cell("tflops"), false)},
                                         {"gbps", number_cell(cell("gbps"), false)}});
  }
  for (size_t i = 0; i < winners.size(); ++i) {
    auto& configs = ranked[i];
    std::stable_sort(configs.begin(), configs.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [_, c] : configs) winners[i]["ranked"].push_back(std::move(c));
  }
  return Json{{"ktune_table", k_table_format_version}, {"winners", std::move(winners)}};
}

}  // namespace ktune::detail
