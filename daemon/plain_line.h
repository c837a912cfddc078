// Lookup request lines of the exact shape ktune's clients send, read without a JSON parser.
//
// Every client (client/, client/python, ktune-lookup-load) writes a lookup as compact JSON that
// starts {"v":1,"id":..,"op":"lookup", (or "v":2). Two readers of that shape spare the hot paths
// the general parser (nlohmann::json builds a document of allocated nodes: ~25k instructions of
// a ~170k-instruction cold lookup, bench/NOTES.md):
//   split_lookup_line   the version, the id as written and the rest of the text, for the answer
//                       cache keyed by request text (LookupService::fast_reply);
//   parse_plain_lookup  the whole request, for a lookup that is not cached by its text.
// Both accept a subset of JSON on purpose and say nullopt for anything else (whitespace, escapes,
// non-ASCII, unknown or repeated members, values out of range): such a line takes the general
// parser, which answers it (errors included) exactly as before. What they accept, they read as
// the general parser would (tests/daemon/plain_line_test.cc compares the two). Stateless.
#pragma once

#include <optional>
#include <string_view>

#include "client/protocol.h"

namespace ktune {

// A lookup line cut after its id.
struct SplitLine {
  char version;           // '1' or '2', as written
  std::string_view id;    // the id token as written: echoed verbatim, so always valid JSON
  std::string_view rest;  // from the comma after the id to the end
};
// Only ids that are JSON as written qualify: a string of printable ASCII without escapes, or
// digits without a leading zero. Anything else (escapes, control bytes, non-ASCII, "007", 1-2-3)
// is nullopt.
std::optional<SplitLine> split_lookup_line(std::string_view line);

// A plain lookup line, read whole: the version, the id (a number of at most 19 digits that fits
// 64 bits, or a plain string) and the request. Members after "op" in any order: "device", "pin"
// (plain strings), "limit" (1..64), "problem" {"op", "dtype" (required), "out_dtype", "layout"
// (plain strings), "dims" (a non-empty object of plain names: integers 0..10^18 - 1)}.
struct PlainLookup {
  int version = 0;
  protocol::Json id;
  protocol::LookupRequest request;
};
std::optional<PlainLookup> parse_plain_lookup(std::string_view line);

}  // namespace ktune
