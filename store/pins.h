// Pins: named, immutable snapshots of winner records (docs/store-format.md § Pins).
//
// A pin freezes the answers a distributed job will use: every rank that looks up with the pin is
// answered from the same records, whatever is tuned or imported afterwards. A pin is kept as one
// document — a table document (the `ktune export` JSON, so a pin's text imports like any table)
// with a "pin" object added — under the key "pin/<name>" of the meta table, written with
// Durability::sync. Older ktuneds never read those keys: adding them is no store format change.
// Free functions over a Store&; thread-safe as the Store is.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "store/records.h"

namespace ktune {

// Names: 1..k_max_pin_name characters of [A-Za-z0-9_.-], the first a letter or digit.
inline constexpr size_t k_max_pin_name = 64;
// At most this many records per pin and pins per node: a pin is held in memory on every node.
inline constexpr size_t k_max_pin_records = 50'000;
inline constexpr size_t k_max_pins = 32;
// The version of the "pin" object of a pin document.
inline constexpr int k_pin_format_version = 1;

// What a pin is, without its records.
struct PinInfo {
  std::string name;
  std::string id;            // unique per creation: "<node>.<unix ms>.<8 hex random>"
  std::string node;          // the node it was created on
  std::int64_t created = 0;  // unix seconds
  std::string device;        // filter it was taken with: a device class id, "" = every class
  std::string op;            // filter: an op, "" = every op
  std::uint64_t count = 0;   // records
  friend bool operator==(const PinInfo&, const PinInfo&) = default;
};

struct PinRecord {
  PinInfo info;
  std::vector<WinnerRecord> winners;  // by key
};

// invalid_argument naming what is wrong with `name` ("" is an error).
Result<void> validate_pin_name(std::string_view name);

// A pin as its document: {"ktune_table":1, ..., "winners":[...], "pin":{...}}.
std::string pin_document(const PinRecord& pin);
// A pin document back into a pin. Every record passes import's validation; the count matches.
Result<PinRecord> parse_pin_document(std::string_view text);

// Meta-table key of a pin: "pin/<name>".
std::string pin_key(std::string_view name);
inline constexpr std::string_view k_pin_key_prefix = "pin/";

// Writes (or replaces) a pin, sync.
Result<void> put_pin(Store& store, const PinRecord& pin);
// Removes a pin; removing an absent one succeeds.
Result<void> delete_pin(Store& store, std::string_view name);
// Every pin, by name. A pin whose document does not read is returned in `unreadable`
// ("<key>: why") and left out; the others are still returned.
Result<std::vector<PinRecord>> scan_pins(Store& store, std::vector<std::string>& unreadable);

}  // namespace ktune
