// How winners are written in Redis: each value is the record exactly as one element of an export
// table's "winners" array (docs/store-format.md, compact JSON), so a fleet's hash reads like a
// table, and records from Redis enter a node through the import path (Catalog::import: the same
// validation and the same deterministic merge rule as `ktune import`). Pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "store/records.h"

namespace ktune {

// The Redis value of a winner record.
std::string winner_value(const WinnerRecord& record);
// Whether `value` is one complete JSON object (what may be placed in a table document as is).
bool well_formed_value(std::string_view value);
// A JSON table document (the import format) whose winners are `values`, as they are.
// REQUIRES: every value is well_formed_value (else it could change the document's structure).
std::string table_of_values(const std::vector<std::string>& values);
// One value back into a record; invalid_argument naming what is wrong.
Result<WinnerRecord> parse_winner_value(std::string_view value);

}  // namespace ktune
