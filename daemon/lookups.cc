#include "daemon/lookups.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "daemon/launch.h"
#include "templates/space.h"

namespace ktune {
namespace {

using protocol::ErrorKind;
using Json = protocol::Json;

// Heap bytes of a string beyond its object (libstdc++ keeps up to 15 chars inline).
size_t heap_bytes(const std::string& s) {
  return s.capacity() > 15 ? s.capacity() + 1 : 0;
}

// What a cached answer holds: the object, its strings and dims, and its shared_ptr block.
size_t answer_bytes(const LookupService::Answer& a) {
  size_t n = sizeof(a) + 32 + heap_bytes(a.result) + heap_bytes(a.provenance) +
             heap_bytes(a.miss_reason) + heap_bytes(a.device.name) + heap_bytes(a.problem.op) +
             heap_bytes(a.problem.dtype) + heap_bytes(a.problem.out_dtype) +
             heap_bytes(a.problem.layout) +
             a.problem.dims.capacity() * sizeof(a.problem.dims.front());
  for (const auto& [name, _] : a.problem.dims) n += heap_bytes(name);
  return n;
}

// An answer (or a line's key) stays valid while the index generation it was made at is current.
auto current(std::uint64_t generation) {
  return [generation](const auto& v) {
    if constexpr (requires { v->generation; })
      return v->generation >= generation;
    else
      return v.generation >= generation;
  };
}

// Expected fraction of a kernel's time tuning saves, by what the lookup could answer.
constexpr double k_gain_heuristic = 0.3;
constexpr double k_gain_stale = 0.1;
double gain_nearest(double distance) {
  return std::min(0.3, 0.05 + 0.05 * distance);
}

std::vector<std::pair<std::string, std::int64_t>> params_list(const Params& p) {
  return {p.begin(), p.end()};
}

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

double work(const Problem& p) {
  double w = 1;
  for (const auto& [_, v] : p.dims) w *= double(v);
  return w;
}

// The request text after the id, when the line has the shape our clients send.
struct SplitLine {
  char version;           // '1' or '2', as written
  std::string_view id;    // the id token as written: echoed verbatim, so always valid JSON
  std::string_view rest;  // from the comma after the id to the end
};
// Only ids that are JSON as written qualify (the rest of the line was validated when its answer
// was remembered): a string of printable ASCII without escapes, or digits without a leading
// zero. Anything else (escapes, control bytes, non-ASCII, "007", 1-2-3) takes the parsing path.
std::optional<SplitLine> split_lookup_line(std::string_view line) {
  constexpr std::string_view head = R"({"v":1,"id":)";  // or {"v":2,"id":
  if (line.size() <= head.size() || !line.starts_with(head.substr(0, 5)) ||
      (line[5] != '1' && line[5] != '2') || line.substr(6, head.size() - 6) != head.substr(6))
    return std::nullopt;
  size_t i = head.size();
  if (i < line.size() && line[i] == '"') {
    for (++i; i < line.size() && line[i] != '"'; ++i) {
      const auto c = static_cast<unsigned char>(line[i]);
      if (c < 0x20 || c > 0x7e || c == '\\') return std::nullopt;
    }
    if (i == line.size()) return std::nullopt;
    ++i;
  } else {
    while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i]))) ++i;
    if (i > head.size() + 1 && line[head.size()] == '0') return std::nullopt;  // "007" is no JSON
  }
  if (i == head.size()) return std::nullopt;
  const std::string_view rest = line.substr(i);
  if (!rest.starts_with(R"(,"op":"lookup",)")) return std::nullopt;
  return SplitLine{line[5], line.substr(head.size(), i - head.size()), rest};
}

}  // namespace

LookupService::LookupService(const DaemonConfig& config, const TemplateRegistry& templates,
                             const Catalog& catalog, const PinTable& pins, const NodeIdentity& node,
                             Metrics& metrics, MissTracker& misses)
    : m_config(config),
      m_templates(templates),
      m_catalog(catalog),
      m_pins(pins),
      m_node(node),
      m_metrics(metrics),
      m_misses(misses),
      m_by_key(size_t(std::max(0, config.answer_cache_bytes)) / 4 * 3),
      m_by_text(size_t(std::max(0, config.answer_cache_bytes)) / 4) {}

std::optional<std::string> LookupService::fast_reply(std::string_view line) {
  const auto split = split_lookup_line(line);
  if (!split) return std::nullopt;
  const auto t0 = std::chrono::steady_clock::now();
  const std::uint64_t generation = this->generation();
  std::shared_ptr<const Answer> answer;
  {
    std::lock_guard lock(m_mutex);
    const LineEntry* line_entry =
        m_by_text.find(split->version + std::string(split->rest), current(generation));
    if (!line_entry) return std::nullopt;
    const auto* cached = m_by_key.find(line_entry->key, current(generation));
    if (!cached) return std::nullopt;
    answer = *cached;
  }
  m_metrics.count_request("lookup");
  if (answer->miss)
    m_misses.record(answer->device, answer->problem, answer->miss_reason, answer->expected_us,
                    answer->gain);
  m_metrics.count_lookup(
      answer->provenance,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  std::string out;
  out.reserve(answer->result.size() + split->id.size() + 40);
  out += R"({"v":)";
  out += split->version;
  out += R"(,"id":)";
  out += split->id;
  out += R"(,"ok":true,"result":)";
  out += answer->result;
  out += "}\n";
  return out;
}

void LookupService::remember_line(std::string_view line, const std::string& key,
                                  std::uint64_t generation) {
  const auto split = split_lookup_line(line);
  if (!split) return;
  std::lock_guard lock(m_mutex);
  if (split->rest.size() > k_max_cached_line) {
    ++m_lines_too_long;
    return;
  }
  m_by_text.put(split->version + std::string(split->rest), LineEntry{key, generation},
                sizeof(LineEntry) + heap_bytes(key));
}

LookupService::CacheStats LookupService::cache_stats() const {
  std::lock_guard lock(m_mutex);
  return {m_by_key.stats(), m_by_text.stats(), m_lines_too_long, m_built, m_joined};
}

std::string LookupService::reply(const Json& id, const Answer& answer,
                                 std::chrono::steady_clock::time_point t0) {
  if (answer.miss)
    m_misses.record(answer.device, answer.problem, answer.miss_reason, answer.expected_us,
                    answer.gain);
  m_metrics.count_lookup(
      answer.provenance,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return R"({"v":)" + std::to_string(answer.version) + R"(,"id":)" +
         id.dump(-1, ' ', false, Json::error_handler_t::replace) + R"(,"ok":true,"result":)" +
         answer.result + "}\n";
}

protocol::Expected<std::pair<DeviceClass, DeviceLimits>> LookupService::resolve_device(
    const std::string& name) const {
  const WinnerIndex& index = m_catalog.index();
  if (name.empty()) {
    if (m_node.gpus.empty()) {
      std::string known;
      for (const auto& id : index.device_ids()) known += (known.empty() ? "" : ", ") + id;
      // Names no field or flag: the CLI says --device, a wire client "device".
      return protocol::error(ErrorKind::unavailable,
                             "this node has no GPU (" + m_node.gpu_error +
                                 "); name the device class to answer for" +
                                 (known.empty() ? std::string() : " (known: " + known + ")"));
    }
    return std::make_pair(m_node.gpus.front().device_class, m_node.gpus.front().limits);
  }
  // Exact id or unique prefix among this node's GPUs and the classes the index holds.
  std::vector<std::pair<DeviceClass, DeviceLimits>> known;
  for (const auto& g : m_node.gpus) known.emplace_back(g.device_class, g.limits);
  for (const auto& id : index.device_ids()) {
    auto d = parse_device_class_id(id);
    if (d &&
        std::none_of(known.begin(), known.end(), [&](const auto& k) { return k.first.id() == id; }))
      known.emplace_back(*d, m_node.limits_for(*d));
  }
  // An exact id wins; then a prefix that ends where a part of the id ends ("nvidia-h200" is the
  // whole name of nvidia-h200.sm90...), so a known "nvidia-h200-nvl.sm90..." does not make it
  // ambiguous; then a unique prefix of any kind; then a unique substring ("h200", "sm90"), a
  // whole part of the id before any part of one. Case does not matter.
  auto lower = [](std::string s) {
    for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  const std::string want = lower(name);
  auto at_boundary = [](const std::string& id, size_t pos, size_t len) {
    auto sep = [&](size_t i) { return id[i] == '.' || id[i] == '-'; };
    return (pos == 0 || sep(pos - 1)) && (pos + len == id.size() || sep(pos + len));
  };
  std::vector<std::pair<DeviceClass, DeviceLimits>> prefixed, whole, contained, parts;
  for (const auto& k : known) {
    const std::string id = lower(k.first.id());
    if (id == want) return k;
    const size_t at = id.find(want);
    if (at == std::string::npos) continue;
    contained.push_back(k);
    if (at_boundary(id, at, want.size())) parts.push_back(k);
    if (at != 0) continue;
    prefixed.push_back(k);
    if (id[want.size()] == '.') whole.push_back(k);
  }
  for (const auto* tier : {&whole, &prefixed, &parts, &contained}) {
    if (tier->size() == 1) return tier->front();
    if (tier->size() > 1 && tier != &whole) break;  // ambiguous here: no looser tier can decide
  }
  if (auto d = parse_device_class_id(name)) return std::make_pair(*d, m_node.limits_for(*d));
  std::string list;
  for (const auto& k : (contained.empty() ? known : contained))
    list += (list.empty() ? "" : ", ") + k.first.id();
  return protocol::error(ErrorKind::not_found,
                         "device class '" + name + "' " +
                             (contained.empty() ? "is unknown" : "is ambiguous: it matches") +
                             (list.empty()        ? std::string()
                              : contained.empty() ? " (known: " + list + ")"
                                                  : " " + list));
}

protocol::Expected<Problem> LookupService::canonical_problem(
    const protocol::ProblemSpec& spec) const {
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
    if (p.layout.empty()) p.layout = m_templates.default_layout(spec.op);
  } else {
    p.dims = spec.dims;
  }
  if (auto ok = validate_problem(p); !ok)
    return protocol::error(ErrorKind::invalid_problem, ok.error().message);
  return p;
}

bool LookupService::complete_entry(protocol::LookupEntry& e, const Problem& problem,
                                   const DeviceClass& device, const DeviceLimits& limits,
                                   int version) const {
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
  if (inst->launch.cluster_size() > 1)
    e.cluster.assign(inst->launch.cluster.begin(), inst->launch.cluster.end());
  if (version >= 2) e.launch = protocol::to_json(describe_launch(*t, *inst, e.arch));
  return true;
}

double LookupService::estimate_us(const Problem& problem, const DeviceLimits& limits) const {
  // Rates of a current data-centre part by generation; only the order of magnitude matters.
  const double flops_per_us = (limits.cc >= 90 ? 600e12 : 250e12) / 1e6;
  const double bytes_per_us = (limits.cc >= 90 ? 3.5e12 : 1.5e12) / 1e6;
  for (const KernelTemplate* t : m_templates.for_problem(problem, limits.cc)) {
    auto h = heuristic_config(*t, problem, limits);
    if (!h) continue;
    auto inst = instantiate(*t, problem, limits, *h);
    if (!inst) continue;
    return inst->metric_kind == MetricSpec::Kind::flops ? inst->metric / flops_per_us
                                                        : inst->metric / bytes_per_us;
  }
  return 0;
}

protocol::Expected<std::shared_ptr<const LookupService::Answer>> LookupService::lookup(
    const Json& body, Cold cold, std::string_view line, int version) {
  // Read first: what the key and answer are computed from is at least this new.
  const std::uint64_t generation = this->generation();
  auto req = protocol::lookup_from_json(body);
  if (!req) return std::unexpected(req.error());
  std::shared_ptr<const PinTable::Pin> pin;
  if (!req->pin.empty()) {
    pin = m_pins.find(req->pin);
    if (!pin)
      return protocol::error(ErrorKind::not_found,
                             "no pin '" + req->pin + "' (pins: " + m_pins.names() + ")");
  }
  auto problem = canonical_problem(req->problem);
  if (!problem) return std::unexpected(problem.error());
  auto device = resolve_device(req->device);
  if (!device) return std::unexpected(device.error());
  const auto& [dev, limits] = *device;
  // v2 replies say which layout was assumed for a request that named none (v1 replies stay as
  // they were): such an answer is cached apart from the one to a request naming that layout.
  const std::string assumed_layout =
      version >= 2 && req->problem.layout.empty() ? problem->layout : std::string();
  const std::string key = dev.id() + "\n" + problem->key() + "\n" + std::to_string(req->limit) +
                          (version >= 2 ? "\nv2" : "") +
                          (assumed_layout.empty() ? "" : "\nassumed") +
                          (pin ? "\npin:" + req->pin : "");
  std::shared_ptr<const Answer> answer;
  std::shared_ptr<InFlight> flight;
  bool run_it = false;
  {
    std::lock_guard lock(m_mutex);
    if (const auto* cached = m_by_key.find(key, current(generation)))
      answer = *cached;
    else if (cold == Cold::build)
      std::tie(flight, run_it) = join_build_locked(key, generation);
  }
  if (!answer) {
    if (cold == Cold::refuse) return nullptr;
    if (!run_it && m_observer.on_join) m_observer.on_join(key);
    auto built = run_it ? run_build(key, *flight, *problem, dev, limits, req->limit, version,
                                    assumed_layout, pin.get())
                        : flight->result.get();
    if (!built) return built;
    answer = *built;
  }
  if (!line.empty()) remember_line(line, key, generation);
  return answer;
}

std::pair<std::shared_ptr<LookupService::InFlight>, bool> LookupService::join_build_locked(
    const std::string& key, std::uint64_t generation) {
  auto& slot = m_building[key];
  if (slot && slot->generation >= generation) {
    ++m_joined;
    return {slot, false};
  }
  slot = std::make_shared<InFlight>();
  slot->generation = generation;
  return {slot, true};
}

LookupService::Built LookupService::run_build(const std::string& key, InFlight& flight,
                                              const Problem& problem, const DeviceClass& dev,
                                              const DeviceLimits& limits, int limit, int version,
                                              const std::string& assumed_layout,
                                              const PinTable::Pin* pin) {
  if (m_observer.on_build) m_observer.on_build(key);
  // Whatever happens, the flight leaves the table (unless a newer build replaced it) before its
  // waiters wake: a lookup arriving after finds the answer cached or starts afresh.
  auto land = [&](const Built* built) {
    std::lock_guard lock(m_mutex);
    ++m_built;
    if (built && *built) m_by_key.put(key, **built, answer_bytes(***built));
    if (auto it = m_building.find(key); it != m_building.end() && it->second.get() == &flight)
      m_building.erase(it);
  };
  Built built;
  try {
    built = build(problem, dev, limits, limit, version, assumed_layout, pin, flight.generation);
  } catch (...) {
    land(nullptr);
    flight.promise.set_exception(std::current_exception());
    throw;
  }
  land(&built);
  flight.promise.set_value(built);
  return built;
}

LookupService::Built LookupService::build(const Problem& problem, const DeviceClass& dev,
                                          const DeviceLimits& limits, int limit, int version,
                                          const std::string& assumed_layout,
                                          const PinTable::Pin* pin, std::uint64_t generation) {
  // A pinned lookup sees the pin's records only: never a winner that came after the pin.
  const WinnerIndex& index = pin ? pin->index : m_catalog.index();
  const std::string device_id = dev.id();
  auto fresh = std::make_shared<Answer>();
  fresh->generation = generation;
  fresh->version = version;
  fresh->device = dev;
  fresh->problem = problem;
  protocol::LookupReply reply;
  reply.device = device_id;
  reply.problem_key = problem.key();
  reply.assumed_layout = assumed_layout;
  if (pin) {
    reply.pin = pin->info.name;
    reply.pin_id = pin->info.id;
  }
  std::set<std::string> seen;  // template + params already listed
  auto add = [&](protocol::LookupEntry e) {
    if (reply.entries.size() >= size_t(limit)) return false;
    const std::string k =
        e.template_name + "/" + params_to_string(Params(e.params.begin(), e.params.end()));
    if (!seen.insert(k).second) return false;
    if (!complete_entry(e, problem, dev, limits, version)) return false;
    reply.entries.push_back(std::move(e));
    return true;
  };
  const bool own = m_node.owns(device_id);
  bool exact = false;
  if (auto record = index.exact(device_id, problem)) {
    const std::string stale = m_catalog.staleness(*record, own);
    size_t served = 0;
    for (const auto& c : record->ranked) {
      auto e = measured_entry(c, stale.empty() ? "exact" : "stale");
      e.from = stale;
      served += add(std::move(e)) ? 1 : 0;
    }
    // A winner none of whose configs the installed templates can instantiate (written by an
    // older ktune, or imported before imports were checked) answers nothing: the lookup falls
    // back to nearest shapes and heuristics, and counts as a miss so the key is tuned again.
    exact = stale.empty() && served > 0;
    if (!stale.empty()) {
      fresh->miss_reason = "stale: " + stale;
      fresh->expected_us = record->ranked.front().median_us;
      fresh->gain = k_gain_stale;
    } else if (!exact) {
      fresh->miss_reason = "no tuned config of this key is valid for the installed templates";
    }
  }
  if (!exact) {
    if (fresh->miss_reason.empty()) fresh->miss_reason = "no winner";
    for (const auto& near :
         index.nearest(device_id, problem, m_config.nearest_radius, size_t(limit))) {
      if (!m_catalog.staleness(*near.record, own).empty()) continue;
      auto e = measured_entry(near.record->ranked.front(), "nearest");
      e.distance = near.distance;
      e.from = near.record->problem.key();
      if (add(std::move(e)) && fresh->gain == 0) {
        // Scale the measured time by the work ratio of the two shapes.
        fresh->expected_us = near.record->ranked.front().median_us * work(problem) /
                             std::max(1.0, work(near.record->problem));
        fresh->gain = gain_nearest(near.distance);
      }
    }
    for (const KernelTemplate* t : m_templates.for_problem(problem, dev.cc)) {
      auto h = heuristic_config(*t, problem, limits);
      if (!h) continue;
      protocol::LookupEntry e;
      e.provenance = "heuristic";
      e.template_name = t->name();
      e.template_hash = t->hash;
      e.params = params_list(*h);
      add(std::move(e));
    }
    if (fresh->gain == 0) {
      fresh->expected_us = estimate_us(problem, limits);
      fresh->gain = k_gain_heuristic;
    }
  }
  fresh->miss = !exact;
  if (pin && !exact) {
    // The pin answers the same whatever is tuned; the key is worth tuning (for the live table
    // and later pins) only when the live table has no fresh exact winner for it either.
    if (auto live = m_catalog.index().exact(device_id, problem);
        live && m_catalog.staleness(*live, own).empty())
      fresh->miss = false;
  }
  if (reply.entries.empty()) {
    std::string why = m_templates.why_unsupported(problem, dev.cc);
    if (why.empty())
      why = "no template implements " + problem.describe() + " on sm_" + std::to_string(dev.cc);
    return protocol::error(ErrorKind::invalid_problem, why + ", and nothing was tuned for it");
  }
  fresh->provenance = reply.entries.front().provenance;
  fresh->result = protocol::lookup_reply_text(reply);
  return std::shared_ptr<const Answer>(std::move(fresh));
}

}  // namespace ktune
