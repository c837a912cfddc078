#include "store/yaml_writer.h"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace ktune::detail {
namespace {

using Json = nlohmann::ordered_json;

bool reserved_word(std::string_view s) {
  static constexpr std::array<std::string_view, 9> k_words = {"true", "false", "yes", "no",  "on",
                                                              "off",  "y",     "n",   "null"};
  if (s.size() > 5) return false;
  std::string lower(s);
  for (auto& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  for (auto w : k_words)
    if (lower == w) return true;
  return false;
}

bool plain_ok(std::string_view s) {
  if (s.empty() || s.back() == ' ') return false;
  const auto first = static_cast<unsigned char>(s.front());
  if (!std::isalpha(first) && first != '_') return false;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (!std::isalnum(c) && c != ' ' && c != '_' && c != '.' && c != '-' && c != '/' && c != '+')
      return false;
  }
  return !reserved_word(s);
}

void append_double(std::string& out, double v) {
  if (std::isnan(v)) return void(out += ".nan");
  if (std::isinf(v)) return void(out += v > 0 ? ".inf" : "-.inf");
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  const std::string_view text(buf, size_t(r.ptr - buf));
  out += text;
  if (text.find_first_of(".e") == std::string_view::npos) out += ".0";  // stays a float
}

// After "key:": the value on the same line, or a nested block below.
void append_value(std::string& out, const Json& v, int indent) {
  if (v.is_object() && !v.empty()) {
    out += '\n';
    append_yaml(out, v, indent + 2);
  } else if (v.is_array() && !v.empty()) {
    out += '\n';
    append_yaml(out, v, indent + 2);
  } else {
    out += ' ';
    append_yaml_scalar(out, v);
    out += '\n';
  }
}

void append_entries(std::string& out, const Json& object, int indent, bool first_on_line) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (!first_on_line) out.append(size_t(indent), ' ');
    first_on_line = false;
    append_yaml_string(out, it.key());
    out += ':';
    append_value(out, it.value(), indent);
  }
}

}  // namespace

void append_yaml_string(std::string& out, std::string_view s) {
  if (plain_ok(s)) return void(out += s);
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[5];
          std::snprintf(buf, sizeof buf, "\\x%02X", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

void append_yaml_scalar(std::string& out, const Json& v) {
  char buf[24];
  switch (v.type()) {
    case Json::value_t::string:
      return append_yaml_string(out, v.get_ref<const std::string&>());
    case Json::value_t::number_integer:
      out.append(buf, std::to_chars(buf, buf + sizeof buf, v.get<std::int64_t>()).ptr);
      return;
    case Json::value_t::number_unsigned:
      out.append(buf, std::to_chars(buf, buf + sizeof buf, v.get<std::uint64_t>()).ptr);
      return;
    case Json::value_t::number_float:
      return append_double(out, v.get<double>());
    case Json::value_t::boolean:
      out += v.get<bool>() ? "true" : "false";
      return;
    case Json::value_t::object:
      out += "{}";
      return;
    case Json::value_t::array:
      out += "[]";
      return;
    default:
      out += "null";
  }
}

void append_yaml_item(std::string& out, const Json& object, int indent) {
  out.append(size_t(indent), ' ');
  out += "- ";
  if (!object.is_object() || object.empty()) {
    append_yaml_scalar(out, object);
    out += '\n';
    return;
  }
  append_entries(out, object, indent + 2, true);
}

void append_yaml(std::string& out, const Json& value, int indent) {
  if (value.is_object() && !value.empty()) return append_entries(out, value, indent, false);
  if (value.is_array() && !value.empty()) {
    for (const auto& item : value) {
      if (item.is_array() && !item.empty()) {
        out.append(size_t(indent), ' ');
        out += "-\n";
        append_yaml(out, item, indent + 2);
      } else {
        append_yaml_item(out, item, indent);
      }
    }
    return;
  }
  out.append(size_t(indent), ' ');
  append_yaml_scalar(out, value);
  out += '\n';
}

}  // namespace ktune::detail
