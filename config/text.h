// Text for messages: the lists of names that errors and logs give ("unknown strategy 'x'
// (exhaustive, random, anneal, model)"), and the form of a template hash. Header-only, no state.
#pragma once

#include <functional>
#include <ranges>
#include <string>
#include <string_view>

namespace ktune {

// "a, b, c": `text(item)` of each item in order (the item itself by default; anything a
// std::string can append), separated by `sep`.
template <std::ranges::input_range Range, typename Text = std::identity>
std::string joined(Range&& items, Text text = {}, std::string_view sep = ", ") {
  std::string out;
  bool first = true;
  for (auto&& item : items) {
    if (!first) out += sep;
    first = false;
    out += std::invoke(text, item);
  }
  return out;
}

// A template hash as records and manifests write it: 16 lowercase hex digits (XXH3-64).
inline bool is_template_hash(std::string_view s) {
  return s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

}  // namespace ktune
