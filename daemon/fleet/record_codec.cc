#include "daemon/fleet/record_codec.h"

#include <nlohmann/json.hpp>

#include "store/table_io.h"

namespace ktune {

std::string winner_value(const WinnerRecord& record) {
  const auto doc = nlohmann::ordered_json::parse(render_table({record}, TableFormat::json));
  return doc["winners"][0].dump();
}

bool well_formed_value(std::string_view value) {
  const auto first = value.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && value[first] == '{' && nlohmann::json::accept(value);
}

std::string table_of_values(const std::vector<std::string>& values) {
  std::string out = "{\"ktune_table\":" + std::to_string(k_table_format_version) +
                    ",\"count\":" + std::to_string(values.size()) + ",\"winners\":[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ",";
    out += values[i];
  }
  return out + "]}";
}

Result<WinnerRecord> parse_winner_value(std::string_view value) {
  if (!well_formed_value(value))
    return fail(ErrorCode::invalid_argument,
                "not a JSON object: " + std::string(value.substr(0, 80)));
  std::vector<ImportRejection> rejected;
  auto records = parse_table(table_of_values({std::string(value)}), "fleet", rejected);
  if (!records) return std::unexpected(records.error());
  if (!rejected.empty()) return fail(ErrorCode::invalid_argument, rejected.front().reason);
  if (records->size() != 1) return fail(ErrorCode::invalid_argument, "not one winner record");
  return std::move(records->front());
}

}  // namespace ktune
