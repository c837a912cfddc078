// Text for messages: the lists of names that errors and logs give ("unknown strategy 'x'
// (exhaustive, random, anneal, model)"). Header-only, no state.
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

}  // namespace ktune
