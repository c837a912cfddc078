#include "config/config.h"

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <variant>

#include "config/text.h"

extern char** environ;

namespace ktune {
namespace {

namespace fs = std::filesystem;

// What a key stores into, and the bounds its value must respect.
using Member =
    std::variant<std::string DaemonConfig::*, int DaemonConfig::*, double DaemonConfig::*,
                 bool DaemonConfig::*, std::vector<std::string> DaemonConfig::*,
                 std::vector<int> DaemonConfig::*, LogLevel DaemonConfig::*,
                 LogFormat DaemonConfig::*>;

enum class Check {
  none,
  host_port,
  host_port_or_empty,
  choice,  // one of ConfigKey::choices
  redis,
  name
};

// tuner/strategy/registry.h, tuner/gpu_policy.h, store/records.h (TimingL2): the names their
// parsers accept (tests/tuner/config_choices_test.cc).
constexpr std::string_view k_strategies[] = {"exhaustive", "random", "anneal", "model"};
constexpr std::string_view k_gpu_policies[] = {"idle", "always", "never"};
constexpr std::string_view k_l2_timings[] = {"flushed", "rotated"};

struct KeySpec {
  ConfigKey key;
  Member member;
  double min = 0;
  double max = 0;  // min == max == 0: no numeric bound
  Check check = Check::none;
};

// The one table of keys. Keep in step with config/ktuned.yaml (a test checks both directions).
const std::vector<KeySpec>& key_specs() {
  static const std::vector<KeySpec> specs = {
      {{"server.socket", "KTUNE_SOCKET", "Unix socket path clients connect to"},
       &DaemonConfig::socket_path},
      {{"server.tcp", "KTUNE_TCP", "optional TCP listener host:port (\"\" = off)"},
       &DaemonConfig::tcp_address,
       0,
       0,
       Check::host_port_or_empty},
      {{"server.tcp_token", "KTUNE_TCP_TOKEN", "token TCP clients send (grants read ops)"},
       &DaemonConfig::tcp_token},
      {{"server.tcp_admin_token", "KTUNE_TCP_ADMIN_TOKEN",
        "token granting admin ops over TCP (\"\" = none)"},
       &DaemonConfig::tcp_admin_token},
      {{"server.admin_group", "KTUNE_ADMIN_GROUP",
        "group whose members may run admin ops over the Unix socket"},
       &DaemonConfig::admin_group},
      {{"server.max_connections", "KTUNE_MAX_CONNECTIONS", "most simultaneous connections"},
       &DaemonConfig::max_connections,
       1,
       1'000'000},
      {{"server.read_timeout_ms", "KTUNE_READ_TIMEOUT_MS", "deadline for the next request line"},
       &DaemonConfig::read_timeout_ms,
       100,
       3'600'000},
      {{"server.io_threads", "KTUNE_IO_THREADS", "threads serving client sessions"},
       &DaemonConfig::io_threads,
       1,
       64},
      {{"server.metrics", "KTUNE_METRICS", "metrics/health HTTP host:port (\"\" = off)"},
       &DaemonConfig::metrics_address,
       0,
       0,
       Check::host_port_or_empty},
      {{"server.report", "KTUNE_REPORT",
        "serve /report on the metrics listener (no access check there)"},
       &DaemonConfig::report_page},
      {{"server.max_attachment_bytes", "KTUNE_MAX_ATTACHMENT_BYTES",
        "largest attachment a request may carry (an imported table)"},
       &DaemonConfig::max_attachment_bytes,
       1024,
       2'000'000'000},
      {{"server.executor_threads", "KTUNE_EXECUTOR_THREADS",
        "threads for imports, exports, cold lookups and job control"},
       &DaemonConfig::executor_threads,
       1,
       256},
      {{"server.inline_build_us", "KTUNE_INLINE_BUILD_US",
        "cold lookups whose cost class builds in at most this CPU time (us) run on the I/O thread"},
       &DaemonConfig::inline_build_us,
       0,
       1000},
      {{"server.max_output_bytes", "KTUNE_MAX_OUTPUT_BYTES",
        "unsent reply bytes per connection past which its requests are not read"},
       &DaemonConfig::max_output_bytes,
       65536,
       1 << 30},
      {{"server.write_stall_timeout_ms", "KTUNE_WRITE_STALL_TIMEOUT_MS",
        "a client that reads no reply byte for this long is disconnected"},
       &DaemonConfig::write_stall_timeout_ms,
       100,
       3'600'000},
      {{"server.drain_timeout_ms", "KTUNE_DRAIN_TIMEOUT_MS",
        "on stop, the time running requests have to send their replies before connections close"},
       &DaemonConfig::drain_timeout_ms,
       0,
       600'000},
      {{"server.answer_cache_bytes", "KTUNE_ANSWER_CACHE_BYTES",
        "memory for cached lookup answers (least recently used go first)"},
       &DaemonConfig::answer_cache_bytes,
       0,
       2'000'000'000},
      {{"store.data_dir", "KTUNE_DATA_DIR", "RocksDB database and state directory"},
       &DaemonConfig::data_dir},
      {{"store.seed_tables", "KTUNE_SEED_TABLES", "tables merged into the store at start"},
       &DaemonConfig::seed_tables},
      {{"templates.dirs", "KTUNE_TEMPLATE_DIRS", "directories scanned for template manifests"},
       &DaemonConfig::template_dirs},
      {{"templates.compile_threads", "KTUNE_COMPILE_THREADS", "NVRTC threads (0 = all cores)"},
       &DaemonConfig::compile_threads,
       0,
       1024},
      {{"tuning.devices", "KTUNE_DEVICES", "GPU ordinals to tune on (empty = all)"},
       &DaemonConfig::devices,
       0,
       1023},
      {{"tuning.strategy", "KTUNE_STRATEGY", "exhaustive | random | anneal | model", k_strategies},
       &DaemonConfig::strategy,
       0,
       0,
       Check::choice},
      {{"tuning.budget_trials", "KTUNE_BUDGET_TRIALS", "most configs measured per job"},
       &DaemonConfig::budget_trials,
       1,
       10'000'000},
      {{"tuning.budget_seconds", "KTUNE_BUDGET_SECONDS", "most seconds per job"},
       &DaemonConfig::budget_seconds,
       0.001,
       7 * 86400.0},
      {{"tuning.finalists", "KTUNE_FINALISTS",
        "fastest configs of a search re-timed interleaved before the winner"},
       &DaemonConfig::finalists,
       1,
       64},
      {{"tuning.retime_rounds", "KTUNE_RETIME_ROUNDS",
        "rounds of the finalists' interleaved re-timing (0: three per finalist, at least 5)"},
       &DaemonConfig::retime_rounds,
       0,
       1000},
      {{"tuning.timing_l2", "KTUNE_TIMING_L2",
        "L2 when a timed launch starts: flushed (a write over 2x L2 before it) | rotated",
        k_l2_timings},
       &DaemonConfig::timing_l2,
       0,
       0,
       Check::choice},
      {{"tuning.gpu_policy", "KTUNE_GPU_POLICY", "idle | always | never", k_gpu_policies},
       &DaemonConfig::gpu_policy,
       0,
       0,
       Check::choice},
      {{"tuning.idle_threshold_percent", "KTUNE_IDLE_THRESHOLD",
        "tune only while GPU utilization is at or under this"},
       &DaemonConfig::idle_threshold_percent,
       0,
       100},
      {{"tuning.idle_settle_seconds", "KTUNE_IDLE_SETTLE_SECONDS",
        "seconds a GPU must stay idle before tuning resumes"},
       &DaemonConfig::idle_settle_seconds,
       0,
       3600},
      {{"tuning.idle_poll_ms", "KTUNE_IDLE_POLL_MS", "how often each lane samples its GPU"},
       &DaemonConfig::idle_poll_ms,
       10,
       60'000},
      {{"tuning.on_miss", "KTUNE_TUNE_ON_MISS", "missed lookups become tuning jobs"},
       &DaemonConfig::tune_on_miss},
      {{"tuning.miss_threshold_us", "KTUNE_MISS_THRESHOLD_US",
        "expected GPU us saved at which a missed key becomes a job"},
       &DaemonConfig::miss_threshold_us,
       0,
       1e15},
      {{"tuning.max_queued_jobs", "KTUNE_MAX_QUEUED_JOBS", "most jobs waiting in the queue"},
       &DaemonConfig::max_queued_jobs,
       1,
       1'000'000},
      {{"tuning.miss_tracker_bytes", "KTUNE_MISS_TRACKER_BYTES",
        "memory for missed keys (the key worth least is forgotten first)"},
       &DaemonConfig::miss_tracker_bytes,
       65536,
       2'000'000'000},
      {{"tuning.miss_retry_seconds", "KTUNE_MISS_RETRY_SECONDS",
        "after a missed key's job failed, seconds before it may be a job again (doubling)"},
       &DaemonConfig::miss_retry_seconds,
       0,
       86400},
      {{"tuning.worker", "KTUNE_WORKER_BINARY", "GPU worker executable (\"\" = beside ktuned)"},
       &DaemonConfig::worker_binary},
      {{"tuning.trial_timeout_ms", "KTUNE_TRIAL_TIMEOUT_MS",
        "deadline for one candidate; the worker is killed past it"},
       &DaemonConfig::trial_timeout_ms,
       100,
       3'600'000},
      {{"lookup.nearest_radius", "KTUNE_NEAREST_RADIUS", "largest log2 distance for nearest"},
       &DaemonConfig::nearest_radius,
       0,
       64},
      {{"log.level", "KTUNE_LOG_LEVEL", "debug | info | warn | error | off"},
       &DaemonConfig::log_level},
      {{"log.format", "KTUNE_LOG_FORMAT", "text | json"}, &DaemonConfig::log_format},
      {{"log.file", "KTUNE_LOG_FILE", "file to log to instead of stderr, reopened on SIGHUP"},
       &DaemonConfig::log_file},
      {{"fleet.redis", "KTUNE_FLEET_REDIS",
        "the fleet's Redis: a Unix socket path or host:port (\"\" = no fleet)"},
       &DaemonConfig::fleet_redis,
       0,
       0,
       Check::redis},
      {{"fleet.password", "KTUNE_FLEET_PASSWORD", "password for Redis AUTH (\"\" = none)"},
       &DaemonConfig::fleet_password},
      {{"fleet.namespace", "KTUNE_FLEET_NAMESPACE", "prefix of every Redis key ktune uses"},
       &DaemonConfig::fleet_namespace,
       0,
       0,
       Check::name},
      {{"fleet.node_name", "KTUNE_FLEET_NODE_NAME",
        "this node's name in the fleet and its winners (\"\" = host name)"},
       &DaemonConfig::fleet_node_name},
      {{"fleet.lease_ms", "KTUNE_FLEET_LEASE_MS", "how long a claim on a key lasts unrenewed"},
       &DaemonConfig::fleet_lease_ms,
       100,
       3'600'000},
      {{"fleet.timeout_ms", "KTUNE_FLEET_TIMEOUT_MS",
        "deadline for connecting to Redis and each command"},
       &DaemonConfig::fleet_timeout_ms,
       10,
       60'000},
  };
  return specs;
}

const KeySpec* find_spec(std::string_view name) {
  for (const auto& s : key_specs())
    if (s.key.name == name) return &s;
  return nullptr;
}

// Suggests the closest known key for an unknown one (same last component, or same section).
std::string suggestion(std::string_view name) {
  const auto dot = name.rfind('.');
  const std::string_view leaf = dot == std::string_view::npos ? name : name.substr(dot + 1);
  for (const auto& s : key_specs()) {
    const auto sdot = s.key.name.rfind('.');
    if (s.key.name.substr(sdot + 1) == leaf)
      return " (did you mean '" + std::string(s.key.name) + "'?)";
  }
  return "";
}

// A value as read from YAML, the environment or a flag: one scalar or a list of scalars.
struct RawValue {
  bool is_list = false;
  std::vector<std::string> items;  // one item when !is_list
};

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

Result<long long> parse_integer(const std::string& s) {
  long long v = 0;
  const auto t = trim(s);
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || p != t.data() + t.size() || t.empty())
    return fail(ErrorCode::invalid_argument, "expected an integer, got '" + s + "'");
  return v;
}

Result<double> parse_number(const std::string& s) {
  const auto t = trim(s);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(t.c_str(), &end);
  // strtod also reads "nan" and "inf"; a setting is a finite number.
  if (t.empty() || end != t.c_str() + t.size() || errno == ERANGE || !std::isfinite(v))
    return fail(ErrorCode::invalid_argument, "expected a number, got '" + s + "'");
  return v;
}

Result<bool> parse_bool(const std::string& s) {
  const auto t = trim(s);
  if (t == "true" || t == "yes" || t == "on" || t == "1") return true;
  if (t == "false" || t == "no" || t == "off" || t == "0") return false;
  return fail(ErrorCode::invalid_argument, "expected true or false, got '" + s + "'");
}

Result<void> check_bounds(const KeySpec& spec, double v) {
  if (spec.min == 0 && spec.max == 0) return {};
  if (!(v >= spec.min && v <= spec.max)) {  // NaN too
    std::ostringstream os;
    os << "value " << v << " out of range [" << spec.min << ", " << spec.max << "]";
    return fail(ErrorCode::invalid_argument, os.str());
  }
  return {};
}

Result<void> check_host_port(const std::string& v) {
  const auto colon = v.rfind(':');
  if (colon == std::string::npos || colon == 0)
    return fail(ErrorCode::invalid_argument, "expected host:port, got '" + v + "'");
  auto port = parse_integer(v.substr(colon + 1));
  if (!port || *port < 0 || *port > 65535)
    return fail(ErrorCode::invalid_argument, "port must be 0..65535 in '" + v + "'");
  return {};
}

Result<void> check_string(const KeySpec& spec, const std::string& v) {
  switch (spec.check) {
    case Check::none:
      return {};
    case Check::host_port:
      return check_host_port(v);
    case Check::host_port_or_empty:
      return v.empty() ? Result<void>{} : check_host_port(v);
    case Check::choice: {
      const auto& choices = spec.key.choices;
      if (std::find(choices.begin(), choices.end(), v) != choices.end()) return {};
      // "unknown strategy 'genetic' (exhaustive, random, anneal, model)"
      const std::string list = joined(choices);
      const std::string_view name = spec.key.name.substr(spec.key.name.rfind('.') + 1);
      return fail(ErrorCode::invalid_argument,
                  "unknown " + std::string(name) + " '" + v + "' (" + list + ")");
    }
    case Check::redis:
      if (v.empty() || v.starts_with("/") || v.starts_with("unix:/")) return {};
      if (auto ok = check_host_port(v); !ok)
        return fail(ErrorCode::invalid_argument,
                    "expected a Unix socket path (/...) or host:port, got '" + v + "'");
      return {};
    case Check::name:
      if (!v.empty() && v.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789_-.") == std::string::npos)
        return {};
      return fail(ErrorCode::invalid_argument,
                  "'" + v + "': use letters, digits, '_', '-' and '.' (not empty)");
  }
  return {};
}

Result<std::string> single(const RawValue& raw) {
  if (raw.is_list) return fail(ErrorCode::invalid_argument, "expected a single value, got a list");
  return raw.items.empty() ? std::string() : raw.items.front();
}

// Stores `raw` into the member `spec` names, converting and checking it.
Result<void> assign(DaemonConfig& config, const KeySpec& spec, const RawValue& raw) {
  return std::visit(
      [&](auto member) -> Result<void> {
        using M = std::remove_cvref_t<decltype(config.*member)>;
        if constexpr (std::is_same_v<M, std::string>) {
          auto s = single(raw);
          if (!s) return std::unexpected(s.error());
          if (auto ok = check_string(spec, *s); !ok) return ok;
          config.*member = *s;
        } else if constexpr (std::is_same_v<M, int>) {
          auto s = single(raw);
          if (!s) return std::unexpected(s.error());
          auto v = parse_integer(*s);
          if (!v) return std::unexpected(v.error());
          if (auto ok = check_bounds(spec, double(*v)); !ok) return ok;
          config.*member = int(*v);
        } else if constexpr (std::is_same_v<M, double>) {
          auto s = single(raw);
          if (!s) return std::unexpected(s.error());
          auto v = parse_number(*s);
          if (!v) return std::unexpected(v.error());
          if (auto ok = check_bounds(spec, *v); !ok) return ok;
          config.*member = *v;
        } else if constexpr (std::is_same_v<M, bool>) {
          auto s = single(raw);
          if (!s) return std::unexpected(s.error());
          auto v = parse_bool(*s);
          if (!v) return std::unexpected(v.error());
          config.*member = *v;
        } else if constexpr (std::is_same_v<M, std::vector<std::string>>) {
          std::vector<std::string> out;
          for (const auto& item : raw.items)
            if (!trim(item).empty()) out.push_back(trim(item));
          config.*member = std::move(out);
        } else if constexpr (std::is_same_v<M, std::vector<int>>) {
          std::vector<int> out;
          for (const auto& item : raw.items) {
            if (trim(item).empty()) continue;
            auto v = parse_integer(item);
            if (!v) return std::unexpected(v.error());
            if (auto ok = check_bounds(spec, double(*v)); !ok) return ok;
            out.push_back(int(*v));
          }
          config.*member = std::move(out);
        } else if constexpr (std::is_same_v<M, LogLevel>) {
          auto s = single(raw);
          if (!s) return std::unexpected(s.error());
          for (auto l :
               {LogLevel::debug, LogLevel::info, LogLevel::warn, LogLevel::error, LogLevel::off})
            if (to_string(l) == *s) return (config.*member = l, Result<void>{});
          return fail(ErrorCode::invalid_argument,
                      "unknown level '" + *s + "' (debug, info, warn, error, off)");
        } else if constexpr (std::is_same_v<M, LogFormat>) {
          auto s = single(raw);
          if (!s) return std::unexpected(s.error());
          if (*s == "text") return (config.*member = LogFormat::text, Result<void>{});
          if (*s == "json") return (config.*member = LogFormat::json, Result<void>{});
          return fail(ErrorCode::invalid_argument, "unknown format '" + *s + "' (text, json)");
        }
        return {};
      },
      spec.member);
}

// Splits an environment or flag value into list items on ':' or ','; "[a, b]" YAML style too.
RawValue raw_from_text(const KeySpec& spec, std::string_view text) {
  const bool list = std::holds_alternative<std::vector<std::string> DaemonConfig::*>(spec.member) ||
                    std::holds_alternative<std::vector<int> DaemonConfig::*>(spec.member);
  RawValue raw;
  if (!list) {
    raw.items.push_back(std::string(text));
    return raw;
  }
  raw.is_list = true;
  std::string t = trim(text);
  if (t.size() >= 2 && t.front() == '[' && t.back() == ']') t = t.substr(1, t.size() - 2);
  std::string cur;
  for (char c : t) {
    if (c == ':' || c == ',') {
      raw.items.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  raw.items.push_back(cur);
  return raw;
}

std::string yaml_error_prefix(std::string_view origin, const YAML::Node& node,
                              std::string_view key) {
  std::string out(origin);
  if (node.Mark().line >= 0) out += ":" + std::to_string(node.Mark().line + 1);
  out += ": ";
  out += key;
  out += ": ";
  return out;
}

Result<RawValue> raw_from_yaml(const YAML::Node& node) {
  RawValue raw;
  if (node.IsNull()) {
    raw.is_list = false;
    raw.items.push_back("");
    return raw;
  }
  if (node.IsScalar()) {
    raw.items.push_back(node.Scalar());
    return raw;
  }
  if (node.IsSequence()) {
    raw.is_list = true;
    for (const auto& item : node) {
      if (!item.IsScalar())
        return fail(ErrorCode::invalid_argument, "list items must be plain values");
      raw.items.push_back(item.Scalar());
    }
    return raw;
  }
  return fail(ErrorCode::invalid_argument, "expected a value or a list, got a mapping");
}

bool spec_is_list(const KeySpec& spec) {
  return std::holds_alternative<std::vector<std::string> DaemonConfig::*>(spec.member) ||
         std::holds_alternative<std::vector<int> DaemonConfig::*>(spec.member);
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

fs::path executable_dir() {
  std::error_code ec;
  const auto exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

std::string installed_or_source(std::string_view share_sub, const char* source_dir) {
  // $KTUNE_HOME (a checkout or an install's share/ktune) wins: binaries built on one machine and
  // run from another checkout (the GPU machine) find their templates there.
  if (const char* home = std::getenv("KTUNE_HOME"); home && *home)
    return (fs::path(home) / share_sub).string();
  const auto installed = executable_dir() / ".." / "share" / "ktune" / share_sub;
  std::error_code ec;
  if (fs::is_directory(installed, ec)) return fs::weakly_canonical(installed, ec).string();
  return source_dir;
}

}  // namespace

std::span<const ConfigKey> config_keys() {
  static const std::vector<ConfigKey> keys = [] {
    std::vector<ConfigKey> out;
    for (const auto& s : key_specs()) out.push_back(s.key);
    return out;
  }();
  return keys;
}

std::string expand_home(std::string_view path) {
  if (path.starts_with("~/")) return env_or("HOME", "/tmp") + std::string(path.substr(1));
  return std::string(path);
}

std::string builtin_template_dir() {
  return installed_or_source("templates", KTUNE_SOURCE_TEMPLATE_DIR);
}
std::string builtin_table_dir() {
  return installed_or_source("tables", KTUNE_SOURCE_TABLE_DIR);
}

DaemonConfig default_config() {
  DaemonConfig c;
  const std::string runtime = env_or("XDG_RUNTIME_DIR", "");
  c.socket_path = runtime.empty() ? "/tmp/ktune-" + std::to_string(::getuid()) + "/ktuned.sock"
                                  : runtime + "/ktune/ktuned.sock";
  const std::string state = env_or("XDG_STATE_HOME", "");
  c.data_dir = state.empty() ? env_or("HOME", "/tmp") + "/.local/state/ktune" : state + "/ktune";
  c.template_dirs = {builtin_template_dir()};
  std::error_code ec;
  std::vector<std::string> tables;
  for (const auto& entry : fs::directory_iterator(builtin_table_dir(), ec))
    if (entry.path().extension() == ".json") tables.push_back(entry.path().string());
  std::sort(tables.begin(), tables.end());
  c.seed_tables = std::move(tables);
  return c;
}

Result<void> apply_config_yaml(DaemonConfig& config, std::string_view yaml,
                               std::string_view origin) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return fail(ErrorCode::invalid_argument,
                std::string(origin) + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  if (root.IsNull()) return {};  // an empty file changes nothing
  if (!root.IsMap())
    return fail(ErrorCode::invalid_argument,
                std::string(origin) + ":1: the file must be a mapping of sections");
  DaemonConfig next = config;
  // yaml-cpp keeps both of a key given twice, and the later one would win silently.
  std::map<std::string, int> seen;  // section or key -> its line
  auto twice = [&](const YAML::Node& key, const std::string& name) -> std::optional<Error> {
    auto [it, fresh] = seen.emplace(name, key.Mark().line + 1);
    if (fresh) return std::nullopt;
    return Error{ErrorCode::invalid_argument, yaml_error_prefix(origin, key, name) +
                                                  "given twice (first at line " +
                                                  std::to_string(it->second) + ")"};
  };
  for (const auto& section : root) {
    const std::string sname = section.first.as<std::string>();
    if (auto e = twice(section.first, sname)) return std::unexpected(*e);
    bool known = false;
    for (const auto& s : key_specs()) known |= s.key.name.starts_with(sname + ".");
    if (!known)
      return fail(ErrorCode::invalid_argument,
                  yaml_error_prefix(origin, section.first, sname) + "unknown section");
    if (section.second.IsNull()) continue;
    if (!section.second.IsMap())
      return fail(ErrorCode::invalid_argument,
                  yaml_error_prefix(origin, section.first, sname) + "expected a mapping of keys");
    for (const auto& item : section.second) {
      const std::string full = sname + "." + item.first.as<std::string>();
      if (auto e = twice(item.first, full)) return std::unexpected(*e);
      const KeySpec* spec = find_spec(full);
      if (!spec)
        return fail(ErrorCode::invalid_argument,
                    yaml_error_prefix(origin, item.first, full) + "unknown key" + suggestion(full));
      auto raw = raw_from_yaml(item.second);
      if (raw && !raw->is_list && spec_is_list(*spec) && !item.second.IsNull())
        raw = fail(ErrorCode::invalid_argument, "expected a list, e.g. [a, b]");
      if (raw && item.second.IsNull() && spec_is_list(*spec)) raw = RawValue{true, {}};
      Result<void> ok =
          raw ? assign(next, *spec, *raw) : Result<void>(std::unexpected(raw.error()));
      if (!ok)
        return fail(ErrorCode::invalid_argument,
                    yaml_error_prefix(origin, item.second, full) + ok.error().message);
    }
  }
  config = std::move(next);
  return {};
}

Result<void> apply_config_file(DaemonConfig& config, const std::string& path) {
  std::ifstream in(path);
  if (!in) return fail(ErrorCode::io_error, path + ": cannot open config file");
  std::stringstream ss;
  ss << in.rdbuf();
  return apply_config_yaml(config, ss.str(), path);
}

std::map<std::string, std::string> ktune_environment() {
  std::map<std::string, std::string> out;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    if (!kv.starts_with("KTUNE_")) continue;
    const auto eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    out.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return out;
}

namespace {

// Levenshtein distance, for suggestions between short names.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// KTUNE_* variables read outside the key table: the data root (config/paths), the worker
// binary, and three test hooks (a fake NVML, a fleet outage, CI's demand for the tests' tools,
// which reaches the ktuneds the tests start). KTUNE_SOCKET, which the clients read too, is
// server.socket's override. ConfigTest.OtherEnvironmentIsWhatTheSourcesRead keeps this list
// equal to what the sources read.
constexpr std::string_view k_other_environment[] = {
    "KTUNE_HOME", "KTUNE_WORKER", "KTUNE_FAKE_NVML_DIR", "KTUNE_FLEET_TEST_OUTAGE_S",
    "KTUNE_REQUIRE_TEST_TOOLS"};

}  // namespace

std::span<const std::string_view> other_environment() {
  return k_other_environment;
}

std::vector<std::string> unknown_environment(const std::map<std::string, std::string>& env) {
  std::vector<std::string> out;
  for (const auto& [name, value] : env) {
    if (std::ranges::find(k_other_environment, name) != std::end(k_other_environment)) continue;
    std::string_view best;
    size_t best_distance = 3;  // a typo or two, not another word
    bool known = false;
    for (const auto& spec : key_specs()) {
      const size_t d = edit_distance(name, spec.key.env);
      known = known || d == 0;
      if (d < best_distance) {
        best_distance = d;
        best = spec.key.env;
      }
    }
    if (known) continue;
    out.push_back(name);
    if (!best.empty()) out.back() += " (did you mean " + std::string(best) + "?)";
  }
  return out;
}

Result<void> apply_config_env(DaemonConfig& config, const std::map<std::string, std::string>& env) {
  DaemonConfig next = config;
  for (const auto& spec : key_specs()) {
    auto it = env.find(std::string(spec.key.env));
    if (it == env.end()) continue;
    if (auto ok = assign(next, spec, raw_from_text(spec, it->second)); !ok)
      return fail(ErrorCode::invalid_argument, "environment " + it->first + ": " +
                                                   std::string(spec.key.name) + ": " +
                                                   ok.error().message);
  }
  config = std::move(next);
  return {};
}

Result<void> apply_config_assignment(DaemonConfig& config, std::string_view assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string_view::npos)
    return fail(ErrorCode::invalid_argument,
                "--set " + std::string(assignment) + ": expected key=value");
  const std::string key = trim(assignment.substr(0, eq));
  const KeySpec* spec = find_spec(key);
  if (!spec)
    return fail(ErrorCode::invalid_argument, "--set " + key + ": unknown key" + suggestion(key));
  if (auto ok = assign(config, *spec, raw_from_text(*spec, assignment.substr(eq + 1))); !ok)
    return fail(ErrorCode::invalid_argument, "--set " + key + ": " + ok.error().message);
  return {};
}

Result<void> validate_config(const DaemonConfig& c) {
  if (c.socket_path.empty() && c.tcp_address.empty())
    return fail(ErrorCode::invalid_argument,
                "server.socket and server.tcp are both empty: no listener");
  if (c.data_dir.empty()) return fail(ErrorCode::invalid_argument, "store.data_dir is empty");
  if (!c.tcp_address.empty() && c.tcp_token.empty())
    return fail(ErrorCode::invalid_argument,
                "server.tcp is " + c.tcp_address +
                    " but server.tcp_token is empty: TCP peers have no credentials, so every TCP "
                    "request must carry a token (loopback too: any local user or browser page "
                    "can reach it). Generate one with `openssl rand -hex 32` and set "
                    "server.tcp_token (or KTUNE_TCP_TOKEN), or leave server.tcp empty");
  if (!c.tcp_admin_token.empty() && c.tcp_admin_token == c.tcp_token)
    return fail(ErrorCode::invalid_argument,
                "server.tcp_admin_token equals server.tcp_token: the read token would grant "
                "admin ops; generate another with `openssl rand -hex 32`");
  return {};
}

std::string config_to_yaml(const DaemonConfig& config) {
  std::ostringstream os;
  std::string section;
  for (const auto& spec : key_specs()) {
    const auto dot = spec.key.name.find('.');
    const std::string sec(spec.key.name.substr(0, dot));
    if (sec != section) {
      os << sec << ":\n";
      section = sec;
    }
    os << "  " << spec.key.name.substr(dot + 1) << ": ";
    std::visit(
        [&](auto member) {
          using M = std::remove_cvref_t<decltype(config.*member)>;
          const auto& v = config.*member;
          if constexpr (std::is_same_v<M, std::string>) {
            os << '"' << json_escape(v) << '"';
          } else if constexpr (std::is_same_v<M, bool>) {
            os << (v ? "true" : "false");
          } else if constexpr (std::is_same_v<M, std::vector<std::string>> ||
                               std::is_same_v<M, std::vector<int>>) {
            os << '[';
            for (size_t i = 0; i < v.size(); ++i) {
              if (i) os << ", ";
              if constexpr (std::is_same_v<M, std::vector<std::string>>)
                os << '"' << json_escape(v[i]) << '"';
              else
                os << v[i];
            }
            os << ']';
          } else if constexpr (std::is_same_v<M, LogLevel> || std::is_same_v<M, LogFormat>) {
            if constexpr (std::is_same_v<M, LogLevel>)
              os << to_string(v);
            else
              os << (v == LogFormat::json ? "json" : "text");
          } else {
            os << v;
          }
        },
        spec.member);
    os << "\n";
  }
  return os.str();
}

}  // namespace ktune
