#include "store/records.h"

#include <climits>
#include <cmath>
#include <cstring>
#include <limits>

#include "config/text.h"
#include "store/record_json.h"

namespace ktune {
namespace detail {
namespace {

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw JsonFieldError(path + ": " + what);
}

const Json& field(const Json& j, const char* key, const std::string& path) {
  if (!j.is_object()) bad(path, "expected an object");
  auto it = j.find(key);
  if (it == j.end()) bad(path + "." + key, "missing");
  return *it;
}

std::string get_string(const Json& j, const char* key, const std::string& path) {
  const Json& v = field(j, key, path);
  if (!v.is_string()) bad(path + "." + key, "expected a string");
  return v.get<std::string>();
}

// An integer JSON value as int64; an unsigned one above INT64_MAX is out of range, not wrapped.
std::int64_t as_int64(const Json& v, const std::string& path) {
  if (!v.is_number_integer()) bad(path, "expected an integer");
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > std::uint64_t(INT64_MAX))
    bad(path, v.dump() + " is out of range");
  return v.get<std::int64_t>();
}

std::int64_t get_int(const Json& j, const char* key, const std::string& path) {
  return as_int64(field(j, key, path), path + "." + key);
}

// An int field: range-checked, never truncated (cc 4294967386 is not 90).
int get_int32(const Json& j, const char* key, const std::string& path) {
  const std::int64_t v = get_int(j, key, path);
  if (v < INT_MIN || v > INT_MAX) bad(path + "." + key, std::to_string(v) + " is out of range");
  return int(v);
}

double get_number(const Json& j, const char* key, const std::string& path) {
  const Json& v = field(j, key, path);
  if (!v.is_number()) bad(path + "." + key, "expected a number");
  const double d = v.get<double>();
  if (!std::isfinite(d)) bad(path + "." + key, "not finite");
  return d;
}

// Optional fields default when absent, but must have the right type when present.
template <typename T, typename Get>
T optional_field(const Json& j, const char* key, const std::string& path, T def, Get get) {
  if (!j.is_object() || !j.contains(key)) return def;
  return get(j, key, path);
}

// "timing_l2" is written only when known, so a record of unknown timing encodes as before it
// existed (2026-12-05).
void add_timing_l2(Json& j, TimingL2 t) {
  if (t != TimingL2::unknown) j["timing_l2"] = std::string(to_string(t));
}

TimingL2 timing_l2_from_json(const Json& j, const std::string& path) {
  if (!j.contains("timing_l2")) return TimingL2::unknown;
  auto t = parse_timing_l2(get_string(j, "timing_l2", path));
  if (!t) bad(path + ".timing_l2", t.error().message);
  return *t;
}

}  // namespace

Json to_json(const DeviceClass& d) {
  return Json{
      {"name", d.name}, {"cc", d.cc}, {"sm_count", d.sm_count}, {"memory_gib", d.memory_gib}};
}

DeviceClass device_from_json(const Json& j, const std::string& path) {
  DeviceClass d;
  d.name = get_string(j, "name", path);
  d.cc = get_int32(j, "cc", path);
  d.sm_count = get_int32(j, "sm_count", path);
  d.memory_gib = get_int32(j, "memory_gib", path);
  if (d.name.empty()) bad(path + ".name", "empty");
  if (d.cc < 10 || d.cc > 200) bad(path + ".cc", "expected major*10+minor, e.g. 90");
  if (d.sm_count < 1 || d.memory_gib < 0) bad(path, "sm_count and memory_gib must be positive");
  return d;
}

Json to_json(const Params& p) {
  Json j = Json::object();
  for (const auto& [n, v] : p) j[n] = v;
  return j;
}

Params params_from_json(const Json& j, const std::string& path) {
  if (!j.is_object()) bad(path, "expected an object of name: integer");
  Params p;
  for (auto it = j.begin(); it != j.end(); ++it) {
    p[it.key()] = as_int64(it.value(), path + "." + it.key());
  }
  return p;
}

Json to_json(const Problem& p) {
  Json dims = Json::object();
  for (const auto& [n, v] : p.dims) dims[n] = v;
  return Json{{"op", p.op},
              {"dtype", p.dtype},
              {"out_dtype", p.out_dtype},
              {"layout", p.layout},
              {"dims", dims}};
}

Problem problem_from_json(const Json& j, const std::string& path) {
  Problem p;
  p.op = get_string(j, "op", path);
  p.dtype = get_string(j, "dtype", path);
  p.out_dtype = optional_field<std::string>(j, "out_dtype", path, p.dtype, get_string);
  p.layout = optional_field<std::string>(j, "layout", path, "", get_string);
  const Json& dims = field(j, "dims", path);
  if (!dims.is_object()) bad(path + ".dims", "expected an object of name: integer");
  for (auto it = dims.begin(); it != dims.end(); ++it) {
    p.dims.emplace_back(it.key(), as_int64(it.value(), path + ".dims." + it.key()));
  }
  if (auto ok = validate_problem(p); !ok) bad(path, ok.error().message);
  return p;
}

Json to_json(const WinnerRecord& r) {
  Json ranked = Json::array();
  for (const auto& c : r.ranked)
    ranked.push_back(Json{{"template", c.template_name},
                          {"template_hash", c.template_hash},
                          {"params", to_json(c.params)},
                          {"median_us", c.median_us},
                          {"spread_pct", c.spread_pct},
                          {"tflops", c.tflops},
                          {"gbps", c.gbps}});
  Json j{{"device", to_json(r.device)},
         {"problem", to_json(r.problem)},
         {"validators", Json{{"driver", r.validators.driver},
                             {"nvrtc", r.validators.nvrtc},
                             {"store_format", r.validators.store_format}}},
         {"ranked", ranked},
         {"ref_error", r.ref_error},
         {"sm_clock_mhz", r.sm_clock_mhz},
         {"mem_clock_mhz", r.mem_clock_mhz},
         {"power_w", r.power_w},
         {"node_id", r.node_id},
         {"timestamp", r.timestamp},
         {"trials", r.trials},
         {"strategy", r.strategy}};
  if (r.sm_clock_counted_mhz != 0) j["sm_clock_counted_mhz"] = r.sm_clock_counted_mhz;
  add_timing_l2(j, r.timing_l2);
  return j;
}

WinnerRecord winner_from_json(const Json& j, const std::string& path) {
  WinnerRecord r;
  r.device = device_from_json(field(j, "device", path), path + ".device");
  r.problem = problem_from_json(field(j, "problem", path), path + ".problem");
  const Json& v = field(j, "validators", path);
  r.validators.driver = get_string(v, "driver", path + ".validators");
  r.validators.nvrtc = get_string(v, "nvrtc", path + ".validators");
  r.validators.store_format = get_int32(v, "store_format", path + ".validators");
  const Json& ranked = field(j, "ranked", path);
  if (!ranked.is_array() || ranked.empty()) bad(path + ".ranked", "expected a non-empty array");
  for (size_t i = 0; i < ranked.size(); ++i) {
    const std::string p = path + ".ranked[" + std::to_string(i) + "]";
    RankedConfig c;
    c.template_name = get_string(ranked[i], "template", p);
    c.template_hash = get_string(ranked[i], "template_hash", p);
    c.params = params_from_json(field(ranked[i], "params", p), p + ".params");
    c.median_us = get_number(ranked[i], "median_us", p);
    c.spread_pct = optional_field<double>(ranked[i], "spread_pct", p, 0.0, get_number);
    c.tflops = optional_field<double>(ranked[i], "tflops", p, 0.0, get_number);
    c.gbps = optional_field<double>(ranked[i], "gbps", p, 0.0, get_number);
    r.ranked.push_back(std::move(c));
  }
  r.ref_error = optional_field<double>(j, "ref_error", path, 0.0, get_number);
  r.sm_clock_mhz = optional_field<int>(j, "sm_clock_mhz", path, 0, get_int32);
  r.mem_clock_mhz = optional_field<int>(j, "mem_clock_mhz", path, 0, get_int32);
  r.power_w = optional_field<double>(j, "power_w", path, 0.0, get_number);
  r.sm_clock_counted_mhz = optional_field<int>(j, "sm_clock_counted_mhz", path, 0, get_int32);
  r.node_id = optional_field<std::string>(j, "node_id", path, "", get_string);
  r.timestamp = optional_field<std::int64_t>(j, "timestamp", path, 0, get_int);
  r.trials = optional_field<int>(j, "trials", path, 0, get_int32);
  r.strategy = optional_field<std::string>(j, "strategy", path, "", get_string);
  r.timing_l2 = timing_l2_from_json(j, path);
  if (auto ok = validate_winner(r); !ok) bad(path, ok.error().message);
  return r;
}

Json to_json(const TrialRecord& r) {
  Json j{{"device", to_json(r.device)},
         {"problem", to_json(r.problem)},
         {"template", r.template_name},
         {"template_hash", r.template_hash},
         {"params", to_json(r.params)},
         {"outcome", to_string(r.outcome)},
         {"median_us", r.median_us},
         {"spread_pct", r.spread_pct},
         {"ref_error", storable_ref_error(r.ref_error)},
         {"registers", r.registers},
         {"spill_bytes", r.spill_bytes},
         {"smem_bytes", r.smem_bytes},
         {"compile_ms", r.compile_ms},
         {"message", r.message},
         {"timestamp", r.timestamp},
         {"job_id", r.job_id}};
  // Written only when sampled: a trial without telemetry encodes as before 2026-12-04.
  if (r.sm_clock_mhz != 0) j["sm_clock_mhz"] = r.sm_clock_mhz;
  if (r.power_w != 0) j["power_w"] = r.power_w;
  if (r.sm_clock_counted_mhz != 0) j["sm_clock_counted_mhz"] = r.sm_clock_counted_mhz;
  if (r.mem_clock_mhz != 0) j["mem_clock_mhz"] = r.mem_clock_mhz;
  add_timing_l2(j, r.timing_l2);
  return j;
}

TrialRecord trial_from_json(const Json& j, const std::string& path) {
  TrialRecord r;
  r.device = device_from_json(field(j, "device", path), path + ".device");
  r.problem = problem_from_json(field(j, "problem", path), path + ".problem");
  r.template_name = get_string(j, "template", path);
  r.template_hash = get_string(j, "template_hash", path);
  r.params = params_from_json(field(j, "params", path), path + ".params");
  auto outcome = parse_outcome(get_string(j, "outcome", path));
  if (!outcome) bad(path + ".outcome", outcome.error().message);
  r.outcome = *outcome;
  r.median_us = get_number(j, "median_us", path);
  r.spread_pct = get_number(j, "spread_pct", path);
  r.ref_error = ref_error_from_storable(get_number(j, "ref_error", path));
  r.registers = get_int32(j, "registers", path);
  r.spill_bytes = get_int32(j, "spill_bytes", path);
  r.smem_bytes = get_int32(j, "smem_bytes", path);
  r.compile_ms = get_number(j, "compile_ms", path);
  r.message = get_string(j, "message", path);
  r.timestamp = get_int(j, "timestamp", path);
  r.job_id = get_string(j, "job_id", path);
  r.sm_clock_mhz = optional_field<int>(j, "sm_clock_mhz", path, 0, get_int32);
  r.power_w = optional_field<double>(j, "power_w", path, 0.0, get_number);
  r.sm_clock_counted_mhz = optional_field<int>(j, "sm_clock_counted_mhz", path, 0, get_int32);
  r.mem_clock_mhz = optional_field<int>(j, "mem_clock_mhz", path, 0, get_int32);
  r.timing_l2 = timing_l2_from_json(j, path);
  return r;
}

Json to_json(const JobRecord& r) {
  Json j{{"id", r.id},
              {"device", to_json(r.device)},
              {"problem", to_json(r.problem)},
              {"strategy", r.strategy},
              {"budget_trials", r.budget_trials},
              {"budget_seconds", r.budget_seconds},
              {"state", to_string(r.state)},
              {"priority", r.priority},
              {"origin", r.origin},
              {"created", r.created},
              {"updated", r.updated},
              {"trials_done", r.trials_done},
              {"best_us", r.best_us},
              {"message", r.message},
              {"best", r.best},
              {"reused", r.reused},
              {"started", r.started},
              {"finished", r.finished},
              {"lane", r.lane}};
  // Written only when set, so a record without them reads as every template, no seeds.
  if (!r.templates.empty()) j["templates"] = r.templates;
  if (!r.seeds.empty()) {
    Json seeds = Json::array();
    for (const auto& p : r.seeds) seeds.push_back(to_json(p));
    j["seeds"] = std::move(seeds);
  }
  return j;
}

JobRecord job_from_json(const Json& j, const std::string& path) {
  JobRecord r;
  r.id = get_string(j, "id", path);
  r.device = device_from_json(field(j, "device", path), path + ".device");
  r.problem = problem_from_json(field(j, "problem", path), path + ".problem");
  r.strategy = get_string(j, "strategy", path);
  r.budget_trials = get_int32(j, "budget_trials", path);
  r.budget_seconds = get_number(j, "budget_seconds", path);
  auto state = parse_job_state(get_string(j, "state", path));
  if (!state) bad(path + ".state", state.error().message);
  r.state = *state;
  r.priority = get_number(j, "priority", path);
  r.origin = get_string(j, "origin", path);
  r.created = get_int(j, "created", path);
  r.updated = get_int(j, "updated", path);
  r.trials_done = get_int32(j, "trials_done", path);
  r.best_us = get_number(j, "best_us", path);
  r.message = get_string(j, "message", path);
  r.best = optional_field(j, "best", path, std::string(), get_string);
  r.reused = optional_field(j, "reused", path, 0, get_int32);
  r.started = optional_field(j, "started", path, std::int64_t(0), get_int);
  r.finished = optional_field(j, "finished", path, std::int64_t(0), get_int);
  r.lane = optional_field(j, "lane", path, -1, get_int32);
  if (auto it = j.find("templates"); it != j.end()) {
    if (!it->is_array()) bad(path + ".templates", "expected an array of template names");
    for (size_t i = 0; i < it->size(); ++i) {
      if (!(*it)[i].is_string()) bad(path + ".templates[" + std::to_string(i) + "]", "expected a string");
      r.templates.push_back((*it)[i].get<std::string>());
    }
  }
  if (auto it = j.find("seeds"); it != j.end()) {
    if (!it->is_array()) bad(path + ".seeds", "expected an array of configs");
    for (size_t i = 0; i < it->size(); ++i)
      r.seeds.push_back(params_from_json((*it)[i], path + ".seeds[" + std::to_string(i) + "]"));
  }
  return r;
}

Json to_json(const BlockEntry& r) {
  return Json{{"template_hash", r.template_hash},
              {"arch", r.arch},
              {"driver", r.driver},
              {"params", to_json(r.params)},
              {"outcome", to_string(r.outcome)},
              {"message", r.message},
              {"timestamp", r.timestamp}};
}

BlockEntry block_from_json(const Json& j, const std::string& path) {
  BlockEntry r;
  r.template_hash = get_string(j, "template_hash", path);
  r.arch = get_string(j, "arch", path);
  r.driver = get_string(j, "driver", path);
  r.params = params_from_json(field(j, "params", path), path + ".params");
  auto outcome = parse_outcome(get_string(j, "outcome", path));
  if (!outcome) bad(path + ".outcome", outcome.error().message);
  r.outcome = *outcome;
  r.message = get_string(j, "message", path);
  r.timestamp = get_int(j, "timestamp", path);
  return r;
}

}  // namespace detail

namespace {

using detail::Json;

std::string with_version(const Json& j) {
  std::string out(1, char(k_record_encoding));
  out += j.dump();
  return out;
}

// Strips and checks the version byte, parses the JSON and runs `from` over it.
template <typename T, typename From>
Result<T> decode_json(std::string_view bytes, const char* kind, From from) {
  if (bytes.empty()) return fail(ErrorCode::corruption, std::string(kind) + " record: empty value");
  if (std::uint8_t(bytes[0]) != k_record_encoding)
    return fail(ErrorCode::corruption, std::string(kind) + " record: unknown encoding version " +
                                           std::to_string(std::uint8_t(bytes[0])));
  try {
    return from(Json::parse(bytes.substr(1)), std::string(kind));
  } catch (const std::exception& e) {
    return fail(ErrorCode::corruption, std::string(kind) + " record: " + e.what());
  }
}

std::int64_t now_seconds() {
  return std::int64_t(std::time(nullptr));
}

}  // namespace

double storable_ref_error(double error) {
  return std::isfinite(error) ? error : std::numeric_limits<double>::max();
}
double ref_error_from_storable(double stored) {
  return stored == std::numeric_limits<double>::max() ? std::numeric_limits<double>::infinity()
                                                      : stored;
}

std::string_view to_string(Outcome o) {
  switch (o) {
    case Outcome::ok:
      return "ok";
    case Outcome::invalid:
      return "invalid";
    case Outcome::compile_error:
      return "compile_error";
    case Outcome::resource_error:
      return "resource_error";
    case Outcome::wrong_result:
      return "wrong_result";
    case Outcome::crash:
      return "crash";
    case Outcome::timeout:
      return "timeout";
    case Outcome::in_flight:
      return "in_flight";
  }
  return "unknown";
}

Result<Outcome> parse_outcome(std::string_view text) {
  for (auto o : {Outcome::ok, Outcome::invalid, Outcome::compile_error, Outcome::resource_error,
                 Outcome::wrong_result, Outcome::crash, Outcome::timeout, Outcome::in_flight})
    if (to_string(o) == text) return o;
  return fail(ErrorCode::invalid_argument, "unknown outcome '" + std::string(text) + "'");
}

std::string_view to_string(TimingL2 t) {
  switch (t) {
    case TimingL2::unknown:
      return "unknown";
    case TimingL2::flushed:
      return "flushed";
    case TimingL2::rotated:
      return "rotated";
  }
  return "unknown";
}

Result<TimingL2> parse_timing_l2(std::string_view text) {
  for (auto t : {TimingL2::flushed, TimingL2::rotated})
    if (to_string(t) == text) return t;
  return fail(ErrorCode::invalid_argument,
              "unknown timing_l2 '" + std::string(text) + "' (flushed or rotated)");
}

std::string_view to_string(JobState s) {
  switch (s) {
    case JobState::queued:
      return "queued";
    case JobState::running:
      return "running";
    case JobState::done:
      return "done";
    case JobState::failed:
      return "failed";
    case JobState::cancelled:
      return "cancelled";
  }
  return "unknown";
}

Result<JobState> parse_job_state(std::string_view text) {
  for (auto s :
       {JobState::queued, JobState::running, JobState::done, JobState::failed, JobState::cancelled})
    if (to_string(s) == text) return s;
  return fail(ErrorCode::invalid_argument, "unknown job state '" + std::string(text) + "'");
}

std::string WinnerRecord::key() const {
  return device.id() + "/" + problem.key();
}

bool TrialRecord::plausible() const {
  return outcome != Outcome::ok || (std::isfinite(median_us) && median_us > 0);
}

std::string TrialRecord::key() const {
  return device.id() + "/" + problem.key() + "/" + template_name + "/" + params_to_string(params);
}

std::string BlockEntry::key() const {
  return template_hash + "/" + arch + "/" + driver + "/" + params_to_string(params);
}

Result<void> validate_winner(const WinnerRecord& r) {
  if (auto ok = validate_problem(r.problem); !ok) return ok;
  if (r.device.name.empty() || r.device.sm_count < 1)
    return fail(ErrorCode::invalid_argument, "device: name and sm_count are required");
  if (r.ranked.empty()) return fail(ErrorCode::invalid_argument, "ranked: at least one config");
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    const auto& c = r.ranked[i];
    const std::string at = "ranked[" + std::to_string(i) + "]";
    if (c.template_name.empty()) return fail(ErrorCode::invalid_argument, at + ".template: empty");
    if (!is_template_hash(c.template_hash))
      return fail(ErrorCode::invalid_argument, at + ".template_hash: expected 16 hex digits");
    if (!(c.median_us > 0) || !std::isfinite(c.median_us))
      return fail(ErrorCode::invalid_argument, at + ".median_us: must be > 0");
    // `!(x >= 0)` holds for NaN too: a non-finite number would encode as JSON null, which no
    // reader takes back (the store's own scan included).
    for (double x : {c.spread_pct, c.tflops, c.gbps})
      if (!(x >= 0) || !std::isfinite(x))
        return fail(ErrorCode::invalid_argument,
                    at + ": spread and throughput must be finite and >= 0");
    if (i > 0 && c.median_us < r.ranked[i - 1].median_us)
      return fail(ErrorCode::invalid_argument, at + ": ranked must be sorted fastest first");
  }
  if (r.validators.store_format < 1)
    return fail(ErrorCode::invalid_argument, "validators.store_format: must be >= 1");
  if (r.validators.store_format > k_store_format_version)
    return fail(ErrorCode::format_mismatch, "validators.store_format " +
                                                std::to_string(r.validators.store_format) +
                                                " is newer than this ktune reads (" +
                                                std::to_string(k_store_format_version) + ")");
  return {};
}

std::string encode(const WinnerRecord& r) {
  return with_version(detail::to_json(r));
}
std::string encode(const TrialRecord& r) {
  return with_version(detail::to_json(r));
}
std::string encode(const JobRecord& r) {
  return with_version(detail::to_json(r));
}
std::string encode(const BlockEntry& r) {
  return with_version(detail::to_json(r));
}

std::string encode(const CubinEntry& r) {
  const std::string header = Json{{"lowered_name", r.lowered_name}, {"registers", r.registers},
                                  {"spill_stores", r.spill_stores}, {"spill_loads", r.spill_loads},
                                  {"smem_bytes", r.smem_bytes},     {"stack_bytes", r.stack_bytes},
                                  {"compile_ms", r.compile_ms},     {"cubin_bytes", r.cubin.size()}}
                                 .dump();
  std::string out(1, char(k_record_encoding));
  const std::uint32_t len = std::uint32_t(header.size());
  char len_bytes[4] = {char(len & 0xff), char((len >> 8) & 0xff), char((len >> 16) & 0xff),
                       char((len >> 24) & 0xff)};
  out.append(len_bytes, 4);
  out += header;
  out += r.cubin;
  return out;
}

Result<WinnerRecord> decode_winner(std::string_view b) {
  return decode_json<WinnerRecord>(b, "winner", detail::winner_from_json);
}
Result<TrialRecord> decode_trial(std::string_view b) {
  return decode_json<TrialRecord>(b, "trial", detail::trial_from_json);
}
Result<JobRecord> decode_job(std::string_view b) {
  return decode_json<JobRecord>(b, "job", detail::job_from_json);
}
Result<BlockEntry> decode_block(std::string_view b) {
  return decode_json<BlockEntry>(b, "blocklist", detail::block_from_json);
}

Result<CubinEntry> decode_cubin(std::string_view b) {
  if (b.size() < 5 || std::uint8_t(b[0]) != k_record_encoding)
    return fail(ErrorCode::corruption, "cubin record: bad header");
  const auto u = [&](size_t i) { return std::uint32_t(std::uint8_t(b[i])); };
  const std::uint32_t len = u(1) | (u(2) << 8) | (u(3) << 16) | (u(4) << 24);
  if (5 + size_t(len) > b.size()) return fail(ErrorCode::corruption, "cubin record: truncated");
  try {
    const Json h = Json::parse(b.substr(5, len));
    CubinEntry r;
    r.lowered_name = h.at("lowered_name").get<std::string>();
    r.registers = h.at("registers").get<int>();
    r.spill_stores = h.at("spill_stores").get<int>();
    r.spill_loads = h.at("spill_loads").get<int>();
    r.smem_bytes = h.at("smem_bytes").get<int>();
    r.stack_bytes = h.at("stack_bytes").get<int>();
    r.compile_ms = h.at("compile_ms").get<double>();
    r.cubin = std::string(b.substr(5 + len));
    if (r.cubin.size() != h.at("cubin_bytes").get<size_t>())
      return fail(ErrorCode::corruption, "cubin record: image size does not match its header");
    return r;
  } catch (const std::exception& e) {
    return fail(ErrorCode::corruption, std::string("cubin record: ") + e.what());
  }
}

Result<void> check_record(Table table, std::string_view bytes) {
  const auto check = [](const auto& decoded) -> Result<void> {
    if (!decoded) return std::unexpected(decoded.error());
    return {};
  };
  switch (table) {
    case Table::winners:
      return check(decode_winner(bytes));
    case Table::trials:
      return check(decode_trial(bytes));
    case Table::cubins:
      return check(decode_cubin(bytes));
    case Table::jobs:
      return check(decode_job(bytes));
    case Table::blocklist:
      return check(decode_block(bytes));
    case Table::meta:
      return {};
  }
  return fail(ErrorCode::internal, "unknown table");
}

// --- typed access ---

Result<void> put_winner(Store& store, const WinnerRecord& r) {
  if (auto ok = validate_winner(r); !ok) return ok;
  return store.put(Table::winners, r.key(), encode(r), Durability::sync);
}

Result<std::optional<WinnerRecord>> get_winner(Store& store, const DeviceClass& device,
                                               const Problem& problem) {
  auto v = store.get(Table::winners, device.id() + "/" + problem.key());
  if (!v) return std::unexpected(v.error());
  if (!*v) return std::optional<WinnerRecord>();
  auto r = decode_winner(**v);
  if (!r) return std::unexpected(r.error());
  return std::optional<WinnerRecord>(std::move(*r));
}

namespace {

// Scans a table, decoding every value; the first undecodable one fails the scan with its key,
// or, with `skipped`, is counted there and passed over.
template <typename T, typename Decode>
Result<std::vector<T>> scan_decoded(Store& store, Table table, const std::string& prefix,
                                    Decode decode, Skipped* skipped = nullptr) {
  std::vector<T> out;
  std::optional<Error> error;
  auto scanned = store.scan(table, prefix, [&](std::string_view key, std::string_view value) {
    auto r = decode(value);
    if (!r) {
      error = Error{r.error().code, std::string(table_name(table)) + " key '" + std::string(key) +
                                        "': " + r.error().message};
      if (!skipped) return false;
      if (skipped->count++ == 0) skipped->first = std::move(error->message);
      error.reset();
      return true;
    }
    out.push_back(std::move(*r));
    return true;
  });
  if (!scanned) return std::unexpected(scanned.error());
  if (error) return std::unexpected(*error);
  return out;
}

}  // namespace

Result<std::vector<WinnerRecord>> scan_winners(Store& store, const std::string& device_id,
                                               Skipped* skipped) {
  return scan_decoded<WinnerRecord>(store, Table::winners, device_id.empty() ? "" : device_id + "/",
                                    decode_winner, skipped);
}

void add_trial(WriteBatch& batch, const TrialRecord& r) {
  batch.put(Table::trials, r.key(), encode(r));
}

Result<std::vector<TrialRecord>> scan_trials(Store& store, const std::string& prefix,
                                             Skipped* skipped) {
  return scan_decoded<TrialRecord>(store, Table::trials, prefix, decode_trial, skipped);
}

Result<void> put_job(Store& store, const JobRecord& r) {
  if (r.id.empty()) return fail(ErrorCode::invalid_argument, "job: empty id");
  return store.put(Table::jobs, r.key(), encode(r), Durability::sync);
}

Result<std::optional<JobRecord>> get_job(Store& store, const std::string& id) {
  auto v = store.get(Table::jobs, id);
  if (!v) return std::unexpected(v.error());
  if (!*v) return std::optional<JobRecord>();
  auto r = decode_job(**v);
  if (!r) return std::unexpected(r.error());
  return std::optional<JobRecord>(std::move(*r));
}

Result<std::vector<JobRecord>> scan_jobs(Store& store) {
  return scan_decoded<JobRecord>(store, Table::jobs, "", decode_job);
}

Result<void> put_block(Store& store, const BlockEntry& r) {
  return store.put(Table::blocklist, r.key(), encode(r), Durability::sync);
}

Result<bool> is_blocked(Store& store, const BlockEntry& probe) {
  auto v = store.get(Table::blocklist, probe.key());
  if (!v) return std::unexpected(v.error());
  return v->has_value();
}

Result<std::vector<BlockEntry>> scan_blocklist(Store& store) {
  return scan_decoded<BlockEntry>(store, Table::blocklist, "", decode_block);
}

Result<void> put_cubin(Store& store, const std::string& cache_key, const CubinEntry& r) {
  return store.put(Table::cubins, cache_key, encode(r), Durability::buffered);
}

Result<std::optional<CubinEntry>> get_cubin(Store& store, const std::string& cache_key) {
  auto v = store.get(Table::cubins, cache_key);
  if (!v) return std::unexpected(v.error());
  if (!*v) return std::optional<CubinEntry>();
  auto r = decode_cubin(**v);
  if (!r) return std::unexpected(r.error());
  return std::optional<CubinEntry>(std::move(*r));
}

Result<void> check_store_format(Store& store, bool existing) {
  auto v = store.get(Table::meta, "format_version");
  if (!v) return std::unexpected(v.error());
  if (!*v) {
    if (existing) {
      // A database with no format record: not written by ktune, or damaged.
      bool any = false;
      for (Table t : k_all_tables) {
        auto s = store.scan(t, "", [&](std::string_view, std::string_view) {
          any = true;
          return false;
        });
        if (!s) return s;
      }
      if (any)
        return fail(ErrorCode::corruption,
                    store.describe() + ": holds data but no format version; not a ktune store?");
    }
    WriteBatch b;
    b.put(Table::meta, "format_version", std::to_string(k_store_format_version));
    b.put(Table::meta, "created_at", std::to_string(now_seconds()));
    return store.write(b, Durability::sync);
  }
  if (**v != std::to_string(k_store_format_version))
    return fail(ErrorCode::format_mismatch,
                store.describe() + ": store format version " + **v + ", this ktune reads " +
                    std::to_string(k_store_format_version) +
                    "; export the tables with the ktune that wrote them and import them here, or "
                    "move the directory aside (docs/store-format.md)");
  return {};
}

}  // namespace ktune
