// YAML text for JSON values, written straight into a string: how tables are exported as YAML
// without building a YAML node tree (yaml-cpp's emitter took 86 s and 4 GB for 50,000 winners).
//
// Block style, two-space indents, as yaml-cpp wrote it. Strings are plain when no YAML 1.1 or 1.2
// reader can take them for anything but a string (a letter or '_' first, then letters, digits,
// ' ', '_', '.', '-', '/', '+', and not true/false/yes/no/on/off/y/n/null in any case); every
// other string is double-quoted with escapes, so "13.0", "0123abcd" and "n" stay strings.
// Floats are written shortest round-trip with a '.' or an exponent (1.0, not 1). Internal to
// ktune_store. Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace ktune::detail {

// Appends `value` (an object or array; a scalar gets one line) as a block at `indent` spaces,
// ending with a newline.
void append_yaml(std::string& out, const nlohmann::ordered_json& value, int indent = 0);

// Appends the entries of `object` as one item of a block sequence at `indent` ("- " first).
void append_yaml_item(std::string& out, const nlohmann::ordered_json& object, int indent);

// Appends one scalar (string, number, bool or null) as YAML.
void append_yaml_scalar(std::string& out, const nlohmann::ordered_json& value);
void append_yaml_string(std::string& out, std::string_view s);

}  // namespace ktune::detail
