#include "store/pins.h"

#include <cctype>
#include <nlohmann/json.hpp>

#include "store/table_io.h"

namespace ktune {
namespace {

using Json = nlohmann::ordered_json;

bool printable(std::string_view s, size_t max) {
  if (s.size() > max) return false;
  for (char c : s)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) return false;
  return true;
}

}  // namespace

Result<void> validate_pin_name(std::string_view name) {
  auto bad = [&](const std::string& why) {
    return fail(ErrorCode::invalid_argument, "pin name '" + std::string(name) + "' " + why);
  };
  if (name.empty()) return fail(ErrorCode::invalid_argument, "a pin needs a name");
  if (name.size() > k_max_pin_name)
    return bad("is longer than " + std::to_string(k_max_pin_name) + " characters");
  if (!std::isalnum(static_cast<unsigned char>(name[0])))
    return bad("must start with a letter or digit");
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-')
      return bad("may hold only letters, digits, '_', '.' and '-'");
  return {};
}

std::string pin_document(const PinRecord& pin) {
  Json doc = Json::parse(render_table(pin.winners, TableFormat::json));
  doc["pin"] = {{"format", k_pin_format_version},
                {"name", pin.info.name},
                {"id", pin.info.id},
                {"node", pin.info.node},
                {"created", pin.info.created},
                {"device", pin.info.device},
                {"op", pin.info.op}};
  return doc.dump();
}

Result<PinRecord> parse_pin_document(std::string_view text) {
  const Json doc = Json::parse(text, nullptr, false);
  if (!doc.is_object() || !doc.contains("pin") || !doc["pin"].is_object())
    return fail(ErrorCode::corruption, "not a pin document (no \"pin\" object)");
  const Json& p = doc["pin"];
  PinRecord pin;
  try {
    if (p.at("format").get<int>() != k_pin_format_version)
      return fail(ErrorCode::format_mismatch, "pin format " + p.at("format").dump() +
                                                  ", this ktune reads " +
                                                  std::to_string(k_pin_format_version));
    pin.info.name = p.at("name").get<std::string>();
    pin.info.id = p.at("id").get<std::string>();
    pin.info.node = p.at("node").get<std::string>();
    pin.info.created = p.at("created").get<std::int64_t>();
    pin.info.device = p.at("device").get<std::string>();
    pin.info.op = p.at("op").get<std::string>();
  } catch (const Json::exception& e) {
    return fail(ErrorCode::corruption, std::string("pin document: ") + e.what());
  }
  if (auto ok = validate_pin_name(pin.info.name); !ok) return std::unexpected(ok.error());
  if (pin.info.id.empty() || !printable(pin.info.id, 128) || !printable(pin.info.node, 128) ||
      !printable(pin.info.device, 128) || !printable(pin.info.op, 128))
    return fail(ErrorCode::corruption, "pin " + pin.info.name + ": a field is not printable text");
  std::vector<ImportRejection> rejected;
  auto winners = parse_table(text, "pin " + pin.info.name, rejected);
  if (!winners) return std::unexpected(winners.error());
  if (!rejected.empty())
    return fail(ErrorCode::corruption, "pin " + pin.info.name + ": winners[" +
                                           std::to_string(rejected.front().index) +
                                           "]: " + rejected.front().reason);
  if (winners->size() > k_max_pin_records)
    return fail(ErrorCode::invalid_argument,
                "pin " + pin.info.name + " holds " + std::to_string(winners->size()) +
                    " records, over the limit of " + std::to_string(k_max_pin_records));
  pin.winners = std::move(*winners);
  pin.info.count = pin.winners.size();
  return pin;
}

std::string pin_key(std::string_view name) {
  return std::string(k_pin_key_prefix) + std::string(name);
}

Result<void> put_pin(Store& store, const PinRecord& pin) {
  std::string value(1, char(k_record_encoding));
  value += pin_document(pin);
  return store.put(Table::meta, pin_key(pin.info.name), value, Durability::sync);
}

Result<void> delete_pin(Store& store, std::string_view name) {
  return store.remove(Table::meta, pin_key(name), Durability::sync);
}

Result<std::vector<PinRecord>> scan_pins(Store& store, std::vector<std::string>& unreadable) {
  std::vector<PinRecord> out;
  auto ok =
      store.scan(Table::meta, k_pin_key_prefix, [&](std::string_view key, std::string_view value) {
        if (value.empty() || std::uint8_t(value[0]) != k_record_encoding) {
          unreadable.push_back(std::string(key) + ": unknown record encoding");
          return true;
        }
        auto pin = parse_pin_document(value.substr(1));
        if (!pin)
          unreadable.push_back(std::string(key) + ": " + pin.error().message);
        else if (pin_key(pin->info.name) != key)
          unreadable.push_back(std::string(key) + ": holds pin '" + pin->info.name + "'");
        else
          out.push_back(std::move(*pin));
        return true;
      });
  if (!ok) return std::unexpected(ok.error());
  return out;
}

}  // namespace ktune
