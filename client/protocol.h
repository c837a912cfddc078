// ktune wire protocol, versions 1 and 2: the messages ktuned and its clients exchange.
//
// Newline-delimited JSON over a Unix socket (or loopback TCP): one request object per line, one
// reply object per line, replies in request order. docs/protocol.md is the spec; this header is
// its C++ form, shared by the daemon and the C++ client (header-only; needs nlohmann_json).
// Every request carries "v" (protocol version), "id" (echoed in the reply) and "op"; replies
// echo the request's "v". v2 adds launch descriptions to lookup entries (client/launch.h).
// Thread-safety: plain functions and value types.
#pragma once

#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <expected>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ktune::protocol {

inline constexpr int k_version = 2;               // the newest version; what our clients send
inline constexpr int k_min_version = 1;           // the oldest still answered, exactly as before
inline constexpr size_t k_max_frame = 64 * 1024;  // bytes per request line, newline included
inline constexpr int k_cli_schema_version = 1;    // of `ktune ... --json` output

using Json = nlohmann::ordered_json;

// Error codes a reply may carry. Spelled on the wire as below; never renamed.
enum class ErrorKind {
  parse_error,           // the line is not JSON
  bad_request,           // JSON, but a field is missing or has the wrong type
  unsupported_version,   // "v" is not a version this daemon speaks
  unknown_op,            // "op" names no operation
  invalid_problem,       // dims out of range, unknown dtype, op no template implements
  not_found,             // the named thing (device class, template, job) does not exist
  frame_too_large,       // request line over k_max_frame; the connection is closed after
  too_many_connections,  // the daemon is at its connection cap; closed after
  unauthorized,          // TCP token missing or wrong, or peer uid not allowed
  forbidden,             // the peer may connect but not run this op (an admin op, read rights)
  timeout,               // no complete request within the read deadline; closed after
  unavailable,           // the daemon cannot serve this now (e.g. no GPU for a tune)
  internal,              // a bug or a store failure; the daemon keeps serving
  already_exists,        // creating something that exists and may not be replaced (a pin)
  // Client-side only (never sent by the daemon):
  connection_failed,  // could not reach the daemon
};

inline constexpr std::pair<ErrorKind, std::string_view> k_error_names[] = {
    {ErrorKind::parse_error, "parse_error"},
    {ErrorKind::bad_request, "bad_request"},
    {ErrorKind::unsupported_version, "unsupported_version"},
    {ErrorKind::unknown_op, "unknown_op"},
    {ErrorKind::invalid_problem, "invalid_problem"},
    {ErrorKind::not_found, "not_found"},
    {ErrorKind::frame_too_large, "frame_too_large"},
    {ErrorKind::too_many_connections, "too_many_connections"},
    {ErrorKind::unauthorized, "unauthorized"},
    {ErrorKind::forbidden, "forbidden"},
    {ErrorKind::timeout, "timeout"},
    {ErrorKind::unavailable, "unavailable"},
    {ErrorKind::internal, "internal"},
    {ErrorKind::already_exists, "already_exists"},
    {ErrorKind::connection_failed, "connection_failed"},
};

inline std::string_view to_string(ErrorKind k) {
  for (const auto& [kind, name] : k_error_names)
    if (kind == k) return name;
  return "internal";
}

inline ErrorKind error_kind_from(std::string_view name) {
  for (const auto& [kind, n] : k_error_names)
    if (n == name) return kind;
  return ErrorKind::internal;
}

struct Error {
  ErrorKind kind = ErrorKind::internal;
  std::string message;
};

template <typename T>
using Expected = std::expected<T, Error>;

inline std::unexpected<Error> error(ErrorKind kind, std::string message) {
  return std::unexpected<Error>(Error{kind, std::move(message)});
}

// ---- operations -----------------------------------------------------------------------------

// What an op does, for the daemon's policy stage and everything derived from the op table.
enum OpFlag : unsigned {
  op_read = 1u << 0,      // changes nothing
  op_write = 1u << 1,     // changes the store or the job queue
  op_fast = 1u << 2,      // answered on the I/O thread when it can be answered from memory
  op_blocking = 1u << 3,  // runs on the executor, never on an I/O thread
  op_admin = 1u << 4,     // changes what other clients are served (imports, job control);
                          // op_write and op_admin ops need admin rights (daemon/access.h)
  op_stream = 1u << 5,    // replies with a stream of event lines, then a final reply
  op_async = 1u << 6,     // replies later from another pool (compiles); holds no executor thread
};

struct OpInfo {
  std::string_view name;
  unsigned flags;
  std::string_view summary;  // one line, for docs and `ktune --help`
};

// The one table of ops. The daemon binds a handler to each (a test checks both directions);
// metrics count requests by these names; docs/protocol.md has a section per op (tested).
inline constexpr OpInfo k_ops[] = {
    {"lookup", op_read | op_fast, "best kernels for a problem on a device class"},
    {"status", op_read | op_blocking, "the daemon, its store, GPUs, lanes, jobs and traffic"},
    {"templates", op_read | op_blocking, "kernel templates and their search spaces"},
    {"export", op_read | op_blocking, "the tuning table as JSON, YAML or CSV text"},
    {"import", op_write | op_blocking | op_admin, "merge a JSON tuning table sent inline"},
    {"tune", op_write | op_blocking | op_admin, "queue a tuning job for a problem (deduplicated)"},
    {"plan", op_write | op_blocking | op_admin, "queue tuning jobs for a list of problems"},
    {"jobs", op_read | op_blocking, "tuning jobs, newest first, with progress"},
    {"job", op_read | op_blocking, "one tuning job"},
    {"cancel", op_write | op_blocking | op_admin, "cancel a queued or running job"},
    {"watch", op_read | op_stream, "progress events of a job until it ends"},
    {"misses", op_read | op_blocking, "most-missed keys and what tuning them is worth"},
    {"kernel", op_read | op_async, "the compiled cubin of a kernel config, with its launch"},
    {"fleet", op_read | op_blocking, "the fleet: Redis link, nodes seen, keys tuned, claims, lag"},
    {"pin", op_write | op_blocking | op_admin,
     "snapshot the winners as a named, immutable pin (fleet-wide with a fleet)"},
    {"unpin", op_write | op_blocking | op_admin, "delete a pin (fleet-wide with a fleet)"},
    {"pins", op_read | op_blocking, "the pins, or one pin with its records"},
};

inline const OpInfo* find_op(std::string_view name) {
  for (const auto& op : k_ops)
    if (op.name == name) return &op;
  return nullptr;
}

inline std::string op_names() {
  std::string s;
  for (const auto& op : k_ops) s += (s.empty() ? "" : ", ") + std::string(op.name);
  return s;
}

// ---- JSON text (never throws) -----------------------------------------------------------------

// Deepest nesting of arrays and objects a request may have. Deeper values would cost recursion
// (copy, dump, compare) on the daemon's threads; no request needs more than a few levels.
inline constexpr int k_max_depth = 64;

namespace detail {

// Whether arrays and objects nest deeper than `limit` in `text` (strings skipped). Exact for
// valid JSON; on invalid text the parser reports the real error.
inline bool nests_deeper_than(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

// The top-level "id" of a text that failed to parse, when it came before the error: a second,
// callback-driven pass that keeps what it read up to the error. Null when there is none.
inline Json recover_id(std::string_view text) {
  Json id;
  bool in_id = false;  // the last top-level key was "id": the next top-level value is it
  auto cb = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth > k_max_depth) return false;
    if (depth != 1) return true;
    switch (event) {
      case Json::parse_event_t::key:
        in_id = parsed.is_string() && parsed.template get_ref<const std::string&>() == "id";
        break;
      case Json::parse_event_t::value:
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        if (in_id) id = parsed;
        in_id = false;
        break;
      default:
        break;
    }
    return true;
  };
  const Json ignored = Json::parse(text, cb, /*allow_exceptions=*/false);
  (void)ignored;
  return id;
}

}  // namespace detail

// Parses one JSON text. Errors: parse_error (bad syntax, invalid UTF-8), bad_request (a number
// beyond a double's range, such as 1e400, or nesting deeper than k_max_depth). On an error the
// top-level "id" is recovered into `id_out` when it was read before the error. Never throws.
inline Expected<Json> parse_json(std::string_view text, Json* id_out = nullptr) {
  auto failed = [&](ErrorKind kind, std::string message) {
    if (id_out) *id_out = detail::recover_id(text);
    return error(kind, std::move(message));
  };
  if (detail::nests_deeper_than(text, k_max_depth))
    return failed(ErrorKind::bad_request,
                  "arrays and objects nest deeper than " + std::to_string(k_max_depth));
  // nlohmann takes a NUL byte for the end of the text: "{...}\0anything" would parse.
  if (const auto nul = text.find('\0'); nul != std::string_view::npos)
    return failed(ErrorKind::parse_error, "not JSON: a NUL byte at offset " + std::to_string(nul));
  try {
    return Json::parse(text);
  } catch (const Json::out_of_range& e) {  // 406: a number overflows a double
    return failed(ErrorKind::bad_request, std::string("number out of range: ") + e.what());
  } catch (const Json::exception& e) {  // syntax, invalid UTF-8, bad \u escapes
    return failed(ErrorKind::parse_error, std::string("not JSON: ") + e.what());
  }
}

// Serializes a reply object as one line. Invalid UTF-8 in a string (a message quoting what a
// client sent) is replaced by U+FFFD instead of throwing: every reply line is valid JSON.
inline std::string dump_line(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

// ---- framing --------------------------------------------------------------------------------

struct LookupRequest;

// A parsed request line: the common fields, and the whole object for op-specific fields.
struct Request {
  int v = k_version;
  Json id;  // any JSON value; echoed
  std::string op;
  Json body;               // the full request object
  std::string raw;         // daemon side: the line as received, when a handler caches by its text
  std::string attachment;  // the bytes announced by "attach" (see attachment_size)
  // Daemon side: a lookup read from a plain line without the JSON parser (daemon/plain_line.h);
  // `body` is then null.
  std::shared_ptr<const LookupRequest> lookup;
};

// Where the 8 bytes "attach" (quotes included) next occur in `line`, at or after `from`; npos
// when they do not. Asked of every line a daemon reads, so it looks for the token's 'h', rare in
// requests (a lookup has one, in "nvidia-h200"), with memchr and compares the 8 bytes around
// each: ~60 instructions for a 200-byte lookup, where glibc's memmem took ~370 and
// string_view::find ~1,100 (it calls memchr once per '"').
inline size_t find_attach_token(std::string_view line, size_t from = 0) {
  constexpr std::string_view key = "\"attach\"";  // 'h' at key[6], the closing quote after it
  for (size_t i = from + 6; i + 1 < line.size(); ++i) {
    const void* h = std::memchr(line.data() + i, 'h', line.size() - 1 - i);
    if (h == nullptr) return std::string_view::npos;
    i = size_t(static_cast<const char*>(h) - line.data());
    if (std::memcmp(line.data() + i - 6, key.data(), key.size()) == 0) return i - 6;
  }
  return std::string_view::npos;
}

// Whether a line that is not valid JSON names "attach" as a key: then the bytes after it may be
// an attachment and the stream cannot be resynchronized.
inline bool mentions_attach_key(std::string_view line) {
  for (size_t at = find_attach_token(line); at != std::string_view::npos;
       at = find_attach_token(line, at + 1)) {
    size_t i = at + 8;
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    if (i < line.size() && line[i] == ':') return true;
  }
  return false;
}

// The version `v` names when it is an integer this side speaks (compared as the 64-bit value
// sent: 4294967297 is not version 1); nullopt otherwise.
inline std::optional<int> spoken_version(const Json& v) {
  if (!v.is_number_integer()) return std::nullopt;
  const bool known =
      v.is_number_unsigned()
          ? v.get<std::uint64_t>() >= std::uint64_t(k_min_version) &&
                v.get<std::uint64_t>() <= std::uint64_t(k_version)
          : v.get<std::int64_t>() >= k_min_version && v.get<std::int64_t>() <= k_version;
  if (!known) return std::nullopt;
  return static_cast<int>(v.get<std::int64_t>());
}

// Requests may carry an attachment: "attach": N (bytes) in the line, and exactly N raw bytes right
// after its newline (an imported table, larger than a frame). Returns N, 0 when the line has no
// attachment, or an error (the stream cannot be resynchronized after it: close). A line that is
// not JSON has no attachment unless it names "attach" as a key (then it is an error). On an error
// the request's "id" goes to `id_out` when it could be read, for the error reply to echo, and its
// version to `v_out` when it is one spoken here.
// The key may be spelled with JSON escapes ("att\u0061ch" is "attach"): a line with a backslash
// is parsed even without the literal token, so its attachment is read, not taken for lines.
inline Expected<size_t> attachment_size(std::string_view line, size_t max_bytes,
                                        Json* id_out = nullptr, int* v_out = nullptr) {
  if (find_attach_token(line) == std::string_view::npos &&
      std::memchr(line.data(), '\\', line.size()) == nullptr)
    return size_t(0);
  auto j = parse_json(line, id_out);
  if (!j) {
    // Answered as a bad line, nothing follows, unless it names "attach", literally or maybe with
    // escapes (a backslash: the key cannot be read, so the stream cannot be trusted either).
    if (!mentions_attach_key(line) && std::memchr(line.data(), '\\', line.size()) == nullptr)
      return size_t(0);
    return error(j.error().kind, j.error().message +
                                     "; a line announcing an attachment must be "
                                     "valid JSON; closing the connection");
  }
  if (!j->is_object() || !j->contains("attach")) return size_t(0);
  const Json& a = (*j)["attach"];
  if (!a.is_number_unsigned() || a.get<std::uint64_t>() == 0 ||
      a.get<std::uint64_t>() > max_bytes) {
    if (auto id = j->find("id"); id_out && id != j->end()) *id_out = *id;
    if (auto v = j->find("v"); v_out && v != j->end()) *v_out = spoken_version(*v).value_or(*v_out);
    return error(ErrorKind::bad_request, "\"attach\" must be a byte count 1.." +
                                             std::to_string(max_bytes) +
                                             "; closing the connection");
  }
  return size_t(a.get<std::uint64_t>());
}

// Parses one request line (without its newline). On failure the Error says what is wrong; the
// `id` out-parameter still receives the request's id when it could be read, so the error reply
// can echo it, and `v_out` the request's version once it was read and is spoken here. Never
// throws.
inline Expected<Request> parse_request(std::string_view line, Json* id_out = nullptr,
                                       int* v_out = nullptr) {
  Request r;
  auto body = parse_json(line, id_out);
  if (!body) return std::unexpected(body.error());
  r.body = std::move(*body);
  if (!r.body.is_object()) return error(ErrorKind::bad_request, "a request is a JSON object");
  if (auto it = r.body.find("id"); it != r.body.end()) {
    r.id = *it;
    if (id_out) *id_out = *it;
  }
  auto v = r.body.find("v");
  if (v == r.body.end()) return error(ErrorKind::bad_request, "missing \"v\" (protocol version)");
  if (!v->is_number_integer()) return error(ErrorKind::bad_request, "\"v\" must be an integer");
  const std::optional<int> spoken = spoken_version(*v);
  if (!spoken)
    return error(ErrorKind::unsupported_version,
                 "protocol version " + v->dump() + " not supported (this daemon speaks " +
                     std::to_string(k_min_version) + ".." + std::to_string(k_version) + ")");
  r.v = *spoken;
  if (v_out) *v_out = r.v;
  auto op = r.body.find("op");
  if (op == r.body.end()) return error(ErrorKind::bad_request, "missing \"op\" (a string)");
  if (!op->is_string())
    return error(ErrorKind::bad_request,
                 "\"op\" must be a string, got " + std::string(op->type_name()));
  r.op = op->get<std::string>();
  return r;
}

// `v`: the version the request was asked in (replies echo it); 1 when the line could not be read.
inline std::string reply_ok(const Json& id, Json result, int v = k_min_version) {
  Json j = {{"v", v}, {"id", id}, {"ok", true}, {"result", std::move(result)}};
  return dump_line(j);
}

inline std::string reply_error(const Json& id, ErrorKind kind, std::string_view message,
                               int v = k_min_version) {
  Json j = {{"v", v},
            {"id", id},
            {"ok", false},
            {"error", {{"code", std::string(to_string(kind))}, {"message", std::string(message)}}}};
  return dump_line(j);
}

// ---- field helpers (throw-free) --------------------------------------------------------------

inline Expected<std::string> get_string(const Json& obj, const char* key, bool required,
                                        std::string fallback = "") {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    if (required) return error(ErrorKind::bad_request, std::string("missing \"") + key + "\"");
    return fallback;
  }
  if (!it->is_string())
    return error(ErrorKind::bad_request, std::string("\"") + key + "\" must be a string");
  return it->get<std::string>();
}

inline Expected<std::int64_t> get_int(const Json& obj, const char* key, std::int64_t fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_number_integer() ||
      (it->is_number_unsigned() && it->get<std::uint64_t>() > std::uint64_t(INT64_MAX)))
    return error(ErrorKind::bad_request, std::string("\"") + key + "\" must be a 64-bit integer");
  return it->get<std::int64_t>();
}

// ---- lookup ---------------------------------------------------------------------------------

// What is computed. Mirrors ktune::Problem without depending on it.
struct ProblemSpec {
  std::string op;
  std::string dtype;
  std::string out_dtype;  // "" = same as dtype
  std::string layout;
  std::vector<std::pair<std::string, std::int64_t>> dims;
};

inline Json to_json(const ProblemSpec& p) {
  Json dims = Json::object();
  for (const auto& [n, v] : p.dims) dims[n] = v;
  Json j = {{"op", p.op}, {"dtype", p.dtype}};
  if (!p.out_dtype.empty()) j["out_dtype"] = p.out_dtype;
  if (!p.layout.empty()) j["layout"] = p.layout;
  j["dims"] = dims;
  return j;
}

inline Expected<ProblemSpec> problem_from_json(const Json& j) {
  if (!j.is_object()) return error(ErrorKind::bad_request, "\"problem\" must be an object");
  ProblemSpec p;
  auto op = get_string(j, "op", true);
  if (!op) return std::unexpected(op.error());
  p.op = *op;
  auto dtype = get_string(j, "dtype", true);
  if (!dtype) return std::unexpected(dtype.error());
  p.dtype = *dtype;
  auto out = get_string(j, "out_dtype", false);
  if (!out) return std::unexpected(out.error());
  p.out_dtype = *out;
  auto layout = get_string(j, "layout", false);
  if (!layout) return std::unexpected(layout.error());
  p.layout = *layout;
  auto dims = j.find("dims");
  if (dims == j.end() || !dims->is_object() || dims->empty())
    return error(ErrorKind::bad_request, "\"problem.dims\" must be an object of name: integer");
  for (auto it = dims->begin(); it != dims->end(); ++it) {
    if (it.value().is_number_unsigned() || it.value().is_number_integer()) {
      if (it.value().is_number_unsigned() &&
          it.value().get<std::uint64_t>() > std::uint64_t(INT64_MAX))
        return error(ErrorKind::invalid_problem, "dims." + it.key() + " overflows");
      p.dims.emplace_back(it.key(), it.value().get<std::int64_t>());
    } else if (it.value().is_number_float()) {
      // 4096.0 (a float that is whole) and 1.8e19 (a whole number beyond 64 bits) are floats to
      // the parser: say which it is.
      const double v = it.value().get<double>();
      if (std::abs(v) >= 9.2e18)
        return error(ErrorKind::invalid_problem,
                     "dims." + it.key() + " = " + it.value().dump() + " is out of range [1, 2^31)");
      return error(ErrorKind::invalid_problem,
                   "dims." + it.key() + " must be an integer, got " + it.value().dump());
    } else {
      return error(ErrorKind::bad_request, "dims." + it.key() + " must be an integer");
    }
  }
  return p;
}

struct LookupRequest {
  ProblemSpec problem;
  std::string device;  // device class id or unique prefix; "" = this node's GPU
  int limit = 4;       // most entries in the reply
  std::string pin{};   // answer from this pin's records only ("" = the live table)
};

inline Json to_json(const LookupRequest& r) {
  Json j = {{"problem", to_json(r.problem)}};
  if (!r.device.empty()) j["device"] = r.device;
  j["limit"] = r.limit;
  if (!r.pin.empty()) j["pin"] = r.pin;
  return j;
}

inline Expected<LookupRequest> lookup_from_json(const Json& body) {
  LookupRequest r;
  auto pj = body.find("problem");
  if (pj == body.end()) return error(ErrorKind::bad_request, "missing \"problem\"");
  auto p = problem_from_json(*pj);
  if (!p) return std::unexpected(p.error());
  r.problem = std::move(*p);
  auto device = get_string(body, "device", false);
  if (!device) return std::unexpected(device.error());
  r.device = *device;
  auto limit = get_int(body, "limit", 4);
  if (!limit) return std::unexpected(limit.error());
  if (*limit < 1 || *limit > 64) return error(ErrorKind::bad_request, "\"limit\" must be 1..64");
  r.limit = int(*limit);
  auto pin = get_string(body, "pin", false);
  if (!pin) return std::unexpected(pin.error());
  r.pin = *pin;
  return r;
}

// One ranked answer.
struct LookupEntry {
  std::string provenance;  // exact | nearest | heuristic | stale
  std::string template_name;
  std::string template_hash;
  std::vector<std::pair<std::string, std::int64_t>> params;
  double median_us = 0;  // measured (exact, stale) or measured at the nearest shape; 0 = unknown
  std::string timing_l2;  // how median_us was timed: "flushed" | "rotated"; "" = not said
  double tflops = 0;
  double gbps = 0;
  double distance = 0;          // nearest: log2 distance to the tuned shape
  std::string from;             // nearest/stale: the measured problem's key; why stale
  std::string name_expression;  // what to ask NVRTC for
  std::string arch;             // what to compile for
  std::vector<std::uint32_t> grid, block;
  std::uint32_t smem = 0;
  std::vector<std::uint32_t> cluster;  // thread-block cluster dims; empty = no cluster (1, 1, 1)
  Json launch;  // v2: the launch description (client/launch.h reads it); null in v1 replies
};

inline Json to_json(const LookupEntry& e) {
  Json params = Json::object();
  for (const auto& [n, v] : e.params) params[n] = v;
  Json j = {{"provenance", e.provenance},
            {"template", e.template_name},
            {"template_hash", e.template_hash},
            {"params", params}};
  if (e.median_us > 0) j["median_us"] = e.median_us;
  if (!e.timing_l2.empty()) j["timing_l2"] = e.timing_l2;
  if (e.tflops > 0) j["tflops"] = e.tflops;
  if (e.gbps > 0) j["gbps"] = e.gbps;
  if (e.provenance == "nearest") j["distance"] = e.distance;
  if (!e.from.empty()) j["from"] = e.from;
  j["kernel"] = {{"name_expression", e.name_expression},
                 {"arch", e.arch},
                 {"grid", e.grid},
                 {"block", e.block},
                 {"smem", e.smem}};
  if (!e.cluster.empty()) j["kernel"]["cluster"] = e.cluster;
  if (!e.launch.is_null()) j["launch"] = e.launch;
  return j;
}

inline Expected<LookupEntry> lookup_entry_from_json(const Json& j) {
  LookupEntry e;
  try {
    e.provenance = j.at("provenance").get<std::string>();
    e.template_name = j.at("template").get<std::string>();
    e.template_hash = j.value("template_hash", "");
    for (auto it = j.at("params").begin(); it != j.at("params").end(); ++it)
      e.params.emplace_back(it.key(), it.value().get<std::int64_t>());
    e.median_us = j.value("median_us", 0.0);
    e.timing_l2 = j.value("timing_l2", "");
    e.tflops = j.value("tflops", 0.0);
    e.gbps = j.value("gbps", 0.0);
    e.distance = j.value("distance", 0.0);
    e.from = j.value("from", "");
    if (auto k = j.find("kernel"); k != j.end()) {
      e.name_expression = k->value("name_expression", "");
      e.arch = k->value("arch", "");
      e.grid = k->value("grid", std::vector<std::uint32_t>{});
      e.block = k->value("block", std::vector<std::uint32_t>{});
      e.smem = k->value("smem", 0u);
      e.cluster = k->value("cluster", std::vector<std::uint32_t>{});
    }
    if (auto l = j.find("launch"); l != j.end()) e.launch = *l;
  } catch (const std::exception& ex) {
    return error(ErrorKind::bad_request, std::string("malformed lookup entry: ") + ex.what());
  }
  return e;
}

struct LookupReply {
  std::string device;                // the device class answered for
  std::string problem_key;           // canonical key of the problem
  std::vector<LookupEntry> entries;  // best first; never empty on success
  // v2: the layout the daemon assumed because the request named none ("" when it named one);
  // on the wire {"assumed": {"layout": "rc"}}, absent when nothing was assumed.
  std::string assumed_layout;
  // The pin that answered, and its id (the same on every node of a fleet); on the wire
  // {"pin": {"name": ..., "id": ...}}, absent for a lookup without a pin.
  std::string pin, pin_id;
};

inline Json to_json(const LookupReply& r) {
  Json entries = Json::array();
  for (const auto& e : r.entries) entries.push_back(to_json(e));
  Json j = {{"device", r.device}, {"problem_key", r.problem_key}, {"entries", entries}};
  if (!r.assumed_layout.empty()) j["assumed"] = {{"layout", r.assumed_layout}};
  if (!r.pin.empty()) j["pin"] = {{"name", r.pin}, {"id", r.pin_id}};
  return j;
}

// The text of to_json(r).dump(-1, ' ', false, replace), byte for byte, written straight into
// one string: a cold lookup answer is serialized once, and building the ordered_json tree first
// (one allocation per node, the launch description copied into it) was a fifth of its cost
// (bench/NOTES.md § Cold lookups under traffic). Tests compare the two over many replies.
namespace detail {
// Whether `s` is printable ASCII without '"' or '\\' (written as is between quotes). Eight bytes
// a step (SWAR): a reply holds a few hundred short strings and a byte loop was 6 % of a cold
// lookup's instructions. Each test below is exact for the word as a whole (a borrow or carry
// only spills past a byte that already matched).
inline bool json_plain(std::string_view s) {
  constexpr std::uint64_t k_ones = 0x0101010101010101ull, k_highs = 0x8080808080808080ull;
  const auto has_zero = [](std::uint64_t v) { return (v - k_ones) & ~v & k_highs; };
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    std::uint64_t x;
    std::memcpy(&x, s.data() + i, 8);
    const std::uint64_t below_space = (x - k_ones * 0x20) & ~x & k_highs;
    const std::uint64_t del_or_high = ((x + k_ones) | x) & k_highs;  // a byte >= 0x7f
    if (below_space | del_or_high | has_zero(x ^ (k_ones * '"')) | has_zero(x ^ (k_ones * '\\')))
      return false;
  }
  for (; i < s.size(); ++i) {
    const auto u = static_cast<unsigned char>(s[i]);
    if (u < 0x20 || u >= 0x7f || u == '"' || u == '\\') return false;
  }
  return true;
}
inline void append_json_string(std::string& out, std::string_view s) {
  if (!json_plain(s)) {  // escapes, non-ASCII: the library's
    out += Json(std::string(s)).dump(-1, ' ', false, Json::error_handler_t::replace);
    return;
  }
  out += '"';
  out += s;
  out += '"';
}
// Json(v).dump() without the Json and the string it returns (2-3 % of a cold lookup's CPU): the
// library's serializer writes a finite double with its detail::to_chars (Grisu2, ".0" after an
// integral value) into a 64-byte buffer, and anything else as null. Tests compare the two.
inline void append_json_number(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  std::array<char, 64> buf;
  out.append(buf.data(), nlohmann::detail::to_chars(buf.data(), buf.data() + buf.size(), v));
}
// An integer as std::to_string (and the library) writes it, without the temporary string.
inline void append_json_int(std::string& out, std::int64_t v) {
  std::array<char, 24> buf;
  out.append(buf.data(), std::to_chars(buf.data(), buf.data() + buf.size(), v).ptr);
}
template <class T>
inline void append_json_uints(std::string& out, const std::vector<T>& v) {
  out += '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ',';
    append_json_int(out, std::int64_t(v[i]));
  }
  out += ']';
}
}  // namespace detail

inline void append_lookup_entry_text(std::string& out, const LookupEntry& e) {
  using namespace detail;
  out += R"({"provenance":)";
  append_json_string(out, e.provenance);
  out += R"(,"template":)";
  append_json_string(out, e.template_name);
  out += R"(,"template_hash":)";
  append_json_string(out, e.template_hash);
  out += R"(,"params":{)";
  for (size_t i = 0; i < e.params.size(); ++i) {  // unique names: they come from a Params map
    if (i) out += ',';
    append_json_string(out, e.params[i].first);
    out += ':';
    append_json_int(out, e.params[i].second);
  }
  out += '}';
  const auto number = [&out](const char* name, double v) {
    out += name;
    append_json_number(out, v);
  };
  if (e.median_us > 0) number(R"(,"median_us":)", e.median_us);
  if (!e.timing_l2.empty()) {
    out += R"(,"timing_l2":)";
    append_json_string(out, e.timing_l2);
  }
  if (e.tflops > 0) number(R"(,"tflops":)", e.tflops);
  if (e.gbps > 0) number(R"(,"gbps":)", e.gbps);
  if (e.provenance == "nearest") number(R"(,"distance":)", e.distance);
  if (!e.from.empty()) {
    out += R"(,"from":)";
    append_json_string(out, e.from);
  }
  out += R"(,"kernel":{"name_expression":)";
  append_json_string(out, e.name_expression);
  out += R"(,"arch":)";
  append_json_string(out, e.arch);
  out += R"(,"grid":)";
  append_json_uints(out, e.grid);
  out += R"(,"block":)";
  append_json_uints(out, e.block);
  out += R"(,"smem":)";
  append_json_int(out, std::int64_t(e.smem));
  if (!e.cluster.empty()) {
    out += R"(,"cluster":)";
    append_json_uints(out, e.cluster);
  }
  out += '}';
  if (!e.launch.is_null()) {
    out += R"(,"launch":)";
    out += e.launch.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  out += '}';
}

inline std::string lookup_reply_text(const LookupReply& r) {
  std::string out;
  out.reserve(256 + r.entries.size() * 512);
  out += R"({"device":)";
  detail::append_json_string(out, r.device);
  out += R"(,"problem_key":)";
  detail::append_json_string(out, r.problem_key);
  out += R"(,"entries":[)";
  for (size_t i = 0; i < r.entries.size(); ++i) {
    if (i) out += ',';
    append_lookup_entry_text(out, r.entries[i]);
  }
  out += ']';
  if (!r.assumed_layout.empty()) {
    out += R"(,"assumed":{"layout":)";
    detail::append_json_string(out, r.assumed_layout);
    out += '}';
  }
  if (!r.pin.empty()) {
    out += R"(,"pin":{"name":)";
    detail::append_json_string(out, r.pin);
    out += R"(,"id":)";
    detail::append_json_string(out, r.pin_id);
    out += '}';
  }
  out += '}';
  return out;
}

inline Expected<LookupReply> lookup_reply_from_json(const Json& j) {
  LookupReply r;
  if (!j.is_object() || !j.contains("entries") || !j["entries"].is_array())
    return error(ErrorKind::bad_request, "malformed lookup reply");
  r.device = j.value("device", "");
  r.problem_key = j.value("problem_key", "");
  if (auto it = j.find("assumed"); it != j.end() && it->is_object())
    if (auto l = it->find("layout"); l != it->end() && l->is_string())
      r.assumed_layout = l->get<std::string>();
  if (auto it = j.find("pin"); it != j.end() && it->is_object()) {
    r.pin = it->value("name", "");
    r.pin_id = it->value("id", "");
  }
  for (const auto& e : j["entries"]) {
    auto entry = lookup_entry_from_json(e);
    if (!entry) return std::unexpected(entry.error());
    r.entries.push_back(std::move(*entry));
  }
  return r;
}

// A reply line parsed back (client side).
struct Reply {
  Json id;
  bool ok = false;
  Json result;
  Error error;
};

inline Expected<Reply> parse_reply(std::string_view line) {
  Reply r;
  Json j;
  try {
    j = Json::parse(line);
  } catch (const Json::exception& e) {  // syntax, invalid UTF-8, a number out of range
    return error(ErrorKind::parse_error, std::string("daemon reply is not JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("ok") || !j["ok"].is_boolean())
    return error(ErrorKind::bad_request, "daemon reply has no \"ok\"");
  r.id = j.value("id", Json());
  r.ok = j["ok"].get<bool>();
  if (r.ok) {
    auto result = j.find("result");  // moved out: an export's result is the whole table
    r.result = result == j.end() ? Json::object() : std::move(*result);
  } else {
    const Json err = j.value("error", Json::object());
    r.error.kind = error_kind_from(err.value("code", "internal"));
    r.error.message = err.value("message", "");
  }
  return r;
}

}  // namespace ktune::protocol
