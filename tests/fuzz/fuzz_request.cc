// Fuzz target: the request decoder and every op handler, through Dispatcher::handle on a
// dispatcher built from fakes (MemStore, no GPU). Input: one request line; the bytes after its
// first newline, if any, are the line's attachment (as a session would pass them).
//
// Checks: every reply line is a well-formed protocol object in valid UTF-8 and no bad input is
// answered "internal" (fuzz_support.h); a lookup answered twice (the second time from the text
// cache when its id qualifies) gives the same reply.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_support.h"

using namespace ktune;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nl = in.find('\n');
  const std::string_view line = in.substr(0, nl);
  const std::string attachment = nl == std::string_view::npos ? "" : std::string(in.substr(nl + 1));
  auto parts = fuzz::make_parts();
  const std::string first = parts->dispatcher.handle(line, {}, attachment).line;
  if (fuzz::check_replies(first) == 0) fuzz::violated("no reply", line);
  const fuzz::Json reply = fuzz::Json::parse(first);
  if (!attachment.empty() || !reply["ok"].get<bool>() || !reply.contains("result") ||
      !reply["result"].is_object() || !reply["result"].contains("problem_key"))
    return 0;
  const std::string second = parts->dispatcher.handle(line).line;
  fuzz::check_replies(second);
  if (fuzz::Json::parse(second) != reply) fuzz::violated("a repeated lookup answered otherwise", second);
  return 0;
}
