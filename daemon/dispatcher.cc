#include "daemon/dispatcher.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "config/log.h"
#include "store/records.h"
#include "store/table_io.h"
#include "templates/space.h"
#include "tuner/compiler.h"
#include "tuner/nvml.h"

namespace ktune {
namespace {

using protocol::ErrorKind;
using Json = protocol::Json;

constexpr size_t k_max_cached_answers = 100'000;

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::vector<std::pair<std::string, std::int64_t>> params_list(const Params& p) {
  return {p.begin(), p.end()};
}

// A lookup entry carrying what was measured for `c`.
protocol::LookupEntry measured_entry(const RankedConfig& c, std::string provenance) {
  protocol::LookupEntry e;
  e.provenance = std::move(provenance);
  e.template_name = c.template_name;
  e.template_hash = c.template_hash;
  e.params = params_list(c.params);
  e.median_us = c.median_us;
  e.tflops = c.tflops;
  e.gbps = c.gbps;
  return e;
}

DeviceLimits limits_for_class(const DeviceClass& d) {
  auto l = DeviceLimits::for_arch("sm_" + std::to_string(d.cc));
  DeviceLimits out = l ? *l : DeviceLimits{};
  out.cc = d.cc;
  out.sm_count = d.sm_count;
  return out;
}

}  // namespace

// ---- NodeIdentity ------------------------------------------------------------------------

NodeIdentity NodeIdentity::detect(const std::vector<int>& devices) {
  NodeIdentity n;
  n.node_id = host_name();
  n.nvrtc = Compiler::nvrtc_version();
  n.driver = node_driver_version();
  auto gpus = query_gpus();
  if (!gpus) {
    n.gpu_error = gpus.error().message;
    return n;
  }
  for (auto& g : *gpus)
    if (devices.empty() || std::find(devices.begin(), devices.end(), g.ordinal) != devices.end())
      n.gpus.push_back(std::move(g));
  if (n.gpus.empty()) n.gpu_error = "no GPU matches tuning.devices";
  return n;
}

// ---- MissTracker -------------------------------------------------------------------------

void MissTracker::record(const DeviceClass& device, const Problem& problem,
                         const std::string& reason) {
  std::lock_guard lock(m_mutex);
  ++m_total;
  auto [it, inserted] = m_misses.try_emplace(device.id() + "/" + problem.key());
  if (inserted) {
    it->second.device = device;
    it->second.problem = problem;
  }
  ++it->second.count;
  it->second.reason = reason;
}

std::vector<MissTracker::Miss> MissTracker::top(size_t n) const {
  std::vector<Miss> all;
  {
    std::lock_guard lock(m_mutex);
    for (const auto& [_, m] : m_misses) all.push_back(m);
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const Miss& a, const Miss& b) { return a.count > b.count; });
  if (all.size() > n) all.resize(n);
  return all;
}

std::uint64_t MissTracker::total() const {
  std::lock_guard lock(m_mutex);
  return m_total;
}

size_t MissTracker::distinct() const {
  std::lock_guard lock(m_mutex);
  return m_misses.size();
}

// ---- Dispatcher --------------------------------------------------------------------------

Dispatcher::Dispatcher(const DaemonConfig& config, Store& store, const TemplateRegistry& templates,
                       WinnerIndex& index, NodeIdentity node, Metrics& metrics)
    : m_config(config),
      m_store(store),
      m_templates(templates),
      m_index(index),
      m_node(std::move(node)),
      m_metrics(metrics) {}

// The request text after the id, when the line has the shape our clients send.
namespace {
struct SplitLine {
  std::string_view id;    // the id token as written
  std::string_view rest;  // from the comma after the id to the end
};
std::optional<SplitLine> split_lookup_line(std::string_view line) {
  constexpr std::string_view head = R"({"v":1,"id":)";
  if (!line.starts_with(head)) return std::nullopt;
  size_t i = head.size();
  if (i < line.size() && line[i] == '"') {
    const size_t end = line.find('"', i + 1);
    if (end == std::string_view::npos ||
        line.substr(i, end - i).find('\\') != std::string_view::npos)
      return std::nullopt;
    i = end + 1;
  } else {
    while (i < line.size() && (std::isdigit(static_cast<unsigned char>(line[i])) || line[i] == '-'))
      ++i;
  }
  if (i == head.size()) return std::nullopt;
  const std::string_view rest = line.substr(i);
  if (!rest.starts_with(R"(,"op":"lookup",)")) return std::nullopt;
  return SplitLine{line.substr(head.size(), i - head.size()), rest};
}
}  // namespace

std::optional<Response> Dispatcher::fast_lookup(std::string_view line) {
  const auto split = split_lookup_line(line);
  if (!split) return std::nullopt;
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<const CachedAnswer> answer;
  {
    std::lock_guard lock(m_cache_mutex);
    auto it = m_fast.find(std::string(split->rest));
    if (it == m_fast.end() || it->second->generation != m_index.generation()) return std::nullopt;
    answer = it->second;
  }
  m_metrics.count_request("lookup");
  if (answer->miss) m_misses.record(answer->device, answer->problem, answer->miss_reason);
  m_metrics.count_lookup(
      answer->provenance,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  std::string out;
  out.reserve(answer->result.size() + split->id.size() + 40);
  out += R"({"v":1,"id":)";
  out += split->id;
  out += R"(,"ok":true,"result":)";
  out += answer->result;
  out += "}\n";
  return Response{std::move(out), false};
}

Response Dispatcher::lookup_reply(const Json& id, const CachedAnswer& answer,
                                  std::chrono::steady_clock::time_point t0) {
  if (answer.miss) m_misses.record(answer.device, answer.problem, answer.miss_reason);
  m_metrics.count_lookup(
      answer.provenance,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return {R"({"v":1,"id":)" + id.dump() + R"(,"ok":true,"result":)" + answer.result + "}\n", false};
}

Response Dispatcher::handle(std::string_view line, const Peer& peer) {
  if (auto fast = fast_lookup(line)) return std::move(*fast);
  Json id;
  auto request = protocol::parse_request(line, &id);
  if (!request) {
    m_metrics.count_request("other");
    m_metrics.count_error(request.error().kind);
    return {protocol::reply_error(id, request.error().kind, request.error().message), false};
  }
  std::shared_ptr<const CachedAnswer> answer;
  Response r = dispatch(*request, peer, &answer);
  // Remember lookup answers by their text so repeats skip the parse (see fast_lookup).
  if (answer)
    if (const auto split = split_lookup_line(line)) {
      std::lock_guard lock(m_cache_mutex);
      if (m_fast.size() >= k_max_cached_answers) m_fast.clear();
      m_fast[std::string(split->rest)] = answer;
    }
  return r;
}

Response Dispatcher::handle(const protocol::Request& req, const Peer& peer) {
  return dispatch(req, peer, nullptr);
}

Response Dispatcher::dispatch(const protocol::Request& req, const Peer& peer,
                              std::shared_ptr<const CachedAnswer>* answer_out) {
  const auto t0 = std::chrono::steady_clock::now();
  m_metrics.count_request(req.op);
  Reply result;
  if (peer.tcp && !m_config.tcp_token.empty() &&
      (!req.body.contains("token") || req.body["token"] != m_config.tcp_token)) {
    result = protocol::error(ErrorKind::unauthorized,
                             "TCP requests must carry the configured \"token\"");
  } else if (req.op == "lookup") {
    auto answer = lookup(req.body);
    if (answer) {
      if (answer_out) *answer_out = *answer;
      return lookup_reply(req.id, **answer, t0);
    }
    result = std::unexpected(answer.error());
  } else if (req.op == "status") {
    result = status(req.body);
  } else if (req.op == "templates") {
    result = templates(req.body);
  } else if (req.op == "export") {
    result = export_table(req.body);
  } else if (req.op == "import") {
    result = import_table(req.body);
  } else {
    result =
        protocol::error(ErrorKind::unknown_op,
                        "unknown op '" + req.op + "' (lookup, status, templates, export, import)");
  }
  if (result) return {protocol::reply_ok(req.id, std::move(*result)), false};
  m_metrics.count_error(result.error().kind);
  Json err = {{"v", protocol::k_version},
              {"id", req.id},
              {"ok", false},
              {"error",
               {{"code", std::string(to_string(result.error().kind))},
                {"message", result.error().message}}}};
  return {err.dump() + "\n", false};
}

protocol::Expected<std::pair<DeviceClass, DeviceLimits>> Dispatcher::resolve_device(
    const std::string& name) const {
  if (name.empty()) {
    if (m_node.gpus.empty()) {
      std::string known;
      for (const auto& id : m_index.device_ids()) known += (known.empty() ? "" : ", ") + id;
      return protocol::error(ErrorKind::unavailable,
                             "this node has no GPU (" + m_node.gpu_error +
                                 "); name a device class with "
                                 "\"device\"" +
                                 (known.empty() ? std::string() : " (known: " + known + ")"));
    }
    return std::make_pair(m_node.gpus.front().device_class, m_node.gpus.front().limits);
  }
  // Exact id or unique prefix among this node's GPUs and the classes the index holds.
  std::vector<std::pair<DeviceClass, DeviceLimits>> known;
  for (const auto& g : m_node.gpus) known.emplace_back(g.device_class, g.limits);
  for (const auto& id : m_index.device_ids()) {
    auto d = parse_device_class_id(id);
    if (d &&
        std::none_of(known.begin(), known.end(), [&](const auto& k) { return k.first.id() == id; }))
      known.emplace_back(*d, limits_for_class(*d));
  }
  std::vector<std::pair<DeviceClass, DeviceLimits>> matches;
  for (const auto& k : known) {
    if (k.first.id() == name) return k;
    if (k.first.id().starts_with(name)) matches.push_back(k);
  }
  if (matches.size() == 1) return matches.front();
  if (auto d = parse_device_class_id(name)) return std::make_pair(*d, limits_for_class(*d));
  std::string list;
  for (const auto& k : (matches.empty() ? known : matches))
    list += (list.empty() ? "" : ", ") + k.first.id();
  return protocol::error(ErrorKind::not_found,
                         "device class '" + name + "' " +
                             (matches.empty() ? "is unknown" : "is ambiguous") +
                             (list.empty() ? std::string() : " (known: " + list + ")"));
}

protocol::Expected<Problem> Dispatcher::canonical_problem(const protocol::ProblemSpec& spec) const {
  Problem p;
  p.op = spec.op;
  p.dtype = spec.dtype;
  p.out_dtype = spec.out_dtype.empty() ? spec.dtype : spec.out_dtype;
  p.layout = spec.layout;
  // The op's dims order and default layout come from its templates.
  const KernelTemplate* first = nullptr;
  for (const auto& t : m_templates.all())
    if (t->manifest.op == spec.op) {
      first = t.get();
      break;
    }
  if (first) {
    const auto& names = first->manifest.dims;
    std::set<std::string> given;
    for (const auto& [n, _] : spec.dims) given.insert(n);
    if (given.size() != spec.dims.size() ||
        given != std::set<std::string>(names.begin(), names.end())) {
      std::string want;
      for (const auto& n : names) want += (want.empty() ? "" : ", ") + n;
      return protocol::error(ErrorKind::invalid_problem, spec.op + " takes dims " + want);
    }
    for (const auto& n : names)
      for (const auto& d : spec.dims)
        if (d.first == n) p.dims.push_back(d);
    if (p.layout.empty()) p.layout = first->manifest.default_layout;
  } else {
    p.dims = spec.dims;
  }
  if (auto ok = validate_problem(p); !ok)
    return protocol::error(ErrorKind::invalid_problem, ok.error().message);
  return p;
}

std::string Dispatcher::staleness(const WinnerRecord& r, bool own_device) const {
  for (const auto& c : r.ranked) {
    const KernelTemplate* t = m_templates.find(c.template_name);
    if (t && t->hash != c.template_hash)
      return "template " + c.template_name + " changed since it was measured";
  }
  if (!m_node.nvrtc.empty() && r.validators.nvrtc != m_node.nvrtc)
    return "measured with NVRTC " + r.validators.nvrtc + ", this node has " + m_node.nvrtc;
  if (own_device && m_node.driver != "none" && r.validators.driver != m_node.driver)
    return "measured with driver " + r.validators.driver + ", this node has " + m_node.driver;
  return "";
}

bool Dispatcher::complete_entry(protocol::LookupEntry& e, const Problem& problem,
                                const DeviceClass& device, const DeviceLimits& limits) const {
  const KernelTemplate* t = m_templates.find(e.template_name);
  if (!t)
    return true;  // not installed here: the config is still the answer, without kernel details
  Params params(e.params.begin(), e.params.end());
  auto inst = instantiate(*t, problem, limits, params);
  if (!inst) return false;
  e.name_expression = inst->name_expression;
  e.arch = target_arch(t->manifest, device.cc);
  e.grid.assign(inst->launch.grid.begin(), inst->launch.grid.end());
  e.block.assign(inst->launch.block.begin(), inst->launch.block.end());
  e.smem = inst->launch.smem;
  return true;
}

protocol::Expected<std::shared_ptr<const Dispatcher::CachedAnswer>> Dispatcher::lookup(
    const Json& body) {
  auto req = protocol::lookup_from_json(body);
  if (!req) return std::unexpected(req.error());
  auto problem = canonical_problem(req->problem);
  if (!problem) return std::unexpected(problem.error());
  auto device = resolve_device(req->device);
  if (!device) return std::unexpected(device.error());
  const auto& [dev, limits] = *device;
  const std::string device_id = dev.id();
  const std::string cache_key =
      device_id + "\n" + problem->key() + "\n" + std::to_string(req->limit);

  const std::uint64_t generation = m_index.generation();
  std::shared_ptr<const CachedAnswer> answer;
  {
    std::lock_guard lock(m_cache_mutex);
    if (auto it = m_cache.find(cache_key);
        it != m_cache.end() && it->second->generation == generation)
      answer = it->second;
  }
  if (!answer) {
    auto fresh = std::make_shared<CachedAnswer>();
    fresh->generation = generation;
    fresh->device = dev;
    fresh->problem = *problem;
    protocol::LookupReply reply;
    reply.device = device_id;
    reply.problem_key = problem->key();
    std::set<std::string> seen;  // template + params already listed
    auto add = [&](protocol::LookupEntry e) {
      if (reply.entries.size() >= size_t(req->limit)) return;
      const std::string k =
          e.template_name + "/" + params_to_string(Params(e.params.begin(), e.params.end()));
      if (!seen.insert(k).second) return;
      if (!complete_entry(e, *problem, dev, limits)) return;
      reply.entries.push_back(std::move(e));
    };
    const bool own = std::any_of(m_node.gpus.begin(), m_node.gpus.end(), [&](const GpuInfo& g) {
      return g.device_class.id() == device_id;
    });
    bool exact = false;
    if (auto record = m_index.exact(device_id, *problem)) {
      const std::string stale = staleness(*record, own);
      exact = stale.empty();
      if (!exact) fresh->miss_reason = "stale: " + stale;
      for (const auto& c : record->ranked) {
        auto e = measured_entry(c, exact ? "exact" : "stale");
        e.from = stale;
        add(std::move(e));
      }
    }
    if (!exact) {
      if (fresh->miss_reason.empty()) fresh->miss_reason = "no winner";
      for (const auto& near :
           m_index.nearest(device_id, *problem, m_config.nearest_radius, size_t(req->limit))) {
        if (!staleness(*near.record, own).empty()) continue;
        auto e = measured_entry(near.record->ranked.front(), "nearest");
        e.distance = near.distance;
        e.from = near.record->problem.key();
        add(std::move(e));
      }
      for (const KernelTemplate* t : m_templates.for_problem(*problem, dev.cc)) {
        auto h = heuristic_config(*t, *problem, limits);
        if (!h) continue;
        protocol::LookupEntry e;
        e.provenance = "heuristic";
        e.template_name = t->name();
        e.template_hash = t->hash;
        e.params = params_list(*h);
        add(std::move(e));
      }
    }
    fresh->miss = !exact;
    if (reply.entries.empty())
      return protocol::error(ErrorKind::invalid_problem,
                             "no template implements " + problem->describe() + " on sm_" +
                                 std::to_string(dev.cc) + " and nothing was tuned for it");
    fresh->provenance = reply.entries.front().provenance;
    fresh->result = protocol::to_json(reply).dump();
    answer = fresh;
    std::lock_guard lock(m_cache_mutex);
    if (m_cache.size() >= k_max_cached_answers) m_cache.clear();
    m_cache[cache_key] = answer;
  }
  return answer;
}

Dispatcher::Reply Dispatcher::status(const Json&) {
  Json gpus = Json::array();
  for (const auto& g : m_node.gpus)
    gpus.push_back({{"ordinal", g.ordinal},
                    {"device_class", g.device_class.id()},
                    {"name", g.device_class.name},
                    {"pci_bus_id", g.pci_bus_id}});
  Json misses = Json::array();
  for (const auto& m : m_misses.top(10))
    misses.push_back({{"device", m.device.id()},
                      {"problem", m.problem.key()},
                      {"count", m.count},
                      {"reason", m.reason}});
  Json template_errors = Json::array();
  for (const auto& e : m_templates.errors()) template_errors.push_back(e.message);
  const double uptime =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - m_started).count();
  return Json{{"version", KTUNE_VERSION},
              {"protocol", protocol::k_version},
              {"pid", ::getpid()},
              {"node_id", m_node.node_id},
              {"uptime_s", std::round(uptime * 10) / 10},
              {"socket", m_config.socket_path},
              {"tcp", m_config.tcp_address},
              {"data_dir", m_config.data_dir},
              {"store", m_store.describe()},
              {"winners", m_index.size()},
              {"device_classes", m_index.device_ids()},
              {"templates", m_templates.all().size()},
              {"template_errors", template_errors},
              {"gpus", gpus},
              {"gpu_error", m_node.gpu_error},
              {"validators",
               {{"driver", m_node.driver},
                {"nvrtc", m_node.nvrtc},
                {"store_format", k_store_format_version}}},
              {"connections", m_metrics.connections()},
              {"requests", m_metrics.requests()},
              {"misses",
               {{"total", m_misses.total()}, {"distinct", m_misses.distinct()}, {"top", misses}}}};
}

Dispatcher::Reply Dispatcher::templates(const Json&) {
  Json list = Json::array();
  for (const auto& t : m_templates.all()) {
    const Manifest& m = t->manifest;
    Json params = Json::array();
    for (const auto& p : m.params) params.push_back({{"name", p.name}, {"values", p.values}});
    Json layouts = Json::array();
    for (const auto& [l, _] : m.layouts) layouts.push_back(l);
    list.push_back({{"name", m.name},
                    {"op", m.op},
                    {"version", m.version},
                    {"description", m.description},
                    {"hash", t->hash},
                    {"dims", m.dims},
                    {"dtypes", m.dtypes},
                    {"out_dtypes", m.out_dtypes.empty() ? m.dtypes : m.out_dtypes},
                    {"layouts", layouts},
                    {"min_cc", m.min_cc},
                    {"max_cc", m.max_cc},
                    {"params", params},
                    {"space_size", m.space_size()},
                    {"path", m.path}});
  }
  Json errors = Json::array();
  for (const auto& e : m_templates.errors()) errors.push_back(e.message);
  return Json{{"templates", list}, {"errors", errors}};
}

Dispatcher::Reply Dispatcher::export_table(const Json& body) {
  auto format_name = protocol::get_string(body, "format", false, "json");
  if (!format_name) return std::unexpected(format_name.error());
  auto format = parse_table_format(*format_name);
  if (!format) return protocol::error(ErrorKind::bad_request, format.error().message);
  auto device = protocol::get_string(body, "device", false);
  if (!device) return std::unexpected(device.error());
  auto winners = scan_winners(m_store, *device);
  if (!winners) return protocol::error(ErrorKind::internal, winners.error().message);
  return Json{{"format", *format_name},
              {"count", winners->size()},
              {"content", render_table(*winners, *format)}};
}

Dispatcher::Reply Dispatcher::import_table(const Json& body) {
  auto path = protocol::get_string(body, "path", false);
  if (!path) return std::unexpected(path.error());
  auto table = protocol::get_string(body, "table", false);
  if (!table) return std::unexpected(table.error());
  if (path->empty() == table->empty())
    return protocol::error(
        ErrorKind::bad_request,
        "give exactly one of \"path\" (a file on the daemon's host) or \"table\" (JSON text)");
  auto report = path->empty() ? ktune::import_table(m_store, *table, "request")
                              : import_table_file(m_store, *path);
  if (!report) {
    const auto kind =
        report.error().code == ErrorCode::io_error ? ErrorKind::not_found : ErrorKind::bad_request;
    return protocol::error(kind, report.error().message);
  }
  if (!report->applied()) {
    std::string msg = std::to_string(report->rejected.size()) + " of " +
                      std::to_string(report->total) + " records rejected; nothing imported:";
    for (const auto& r : report->rejected) msg += "\n  " + r.reason;
    return protocol::error(ErrorKind::bad_request, msg);
  }
  for (const auto& w : report->written) m_index.upsert(w);
  log(LogLevel::info, "import",
      {{"source", path->empty() ? std::string("request") : *path},
       {"added", report->added},
       {"replaced", report->replaced},
       {"kept", report->kept}});
  return Json{{"total", report->total},
              {"added", report->added},
              {"replaced", report->replaced},
              {"kept", report->kept}};
}

std::string Dispatcher::metrics_gauges() const {
  std::string s;
  s += "# HELP ktune_winners Winner records in the index.\n# TYPE ktune_winners "
       "gauge\nktune_winners " +
       std::to_string(m_index.size()) + "\n";
  s += "# HELP ktune_templates Templates loaded.\n# TYPE ktune_templates gauge\nktune_templates " +
       std::to_string(m_templates.all().size()) + "\n";
  s += "# HELP ktune_lookup_misses_total Lookups with no exact answer.\n# TYPE "
       "ktune_lookup_misses_total counter\n"
       "ktune_lookup_misses_total " +
       std::to_string(m_misses.total()) + "\n";
  s += "# HELP ktune_gpus GPUs this node tunes on.\n# TYPE ktune_gpus gauge\nktune_gpus " +
       std::to_string(m_node.gpus.size()) + "\n";
  return s;
}

}  // namespace ktune
