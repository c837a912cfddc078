#include "daemon/lookups.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <ctime>
#include <optional>
#include <tuple>
#include <utility>

#include "config/text.h"
#include "daemon/launch.h"
#include "daemon/plain_line.h"
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
             heap_bytes(a.miss_reason) + heap_bytes(a.miss_key) + heap_bytes(a.device.name) +
             heap_bytes(a.problem.op) + heap_bytes(a.problem.dtype) +
             heap_bytes(a.problem.out_dtype) + heap_bytes(a.problem.layout) +
             a.problem.dims.capacity() * sizeof(a.problem.dims.front());
  for (const auto& [name, _] : a.problem.dims) n += heap_bytes(name);
  return n;
}

// CPU time of the calling thread, in microseconds: what a build costs, without the time it spent
// preempted (executor threads run at a lower priority).
double thread_cpu_us() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e6 + double(ts.tv_nsec) / 1e3;
}

// Weight of the newest build in an op's average build cost (about the last 8 builds measured).
constexpr double k_build_cost_weight = 1.0 / 8;

// One inline build in this many (per thread) reads the thread's CPU clock before and after: two
// clock_gettime(CLOCK_THREAD_CPUTIME_ID) calls, which are system calls (no vDSO path), cost ~7 %
// of a cold build. An inline build's class is already measured (cheap_locked), so the sample
// only keeps its average current; a build on the executor (a class not measured yet, or not
// cheap) is always measured.
constexpr unsigned k_inline_cpu_sample_every = 4;

// Expected fraction of a kernel's time tuning saves, by what the lookup could answer.
constexpr double k_gain_heuristic = 0.3;
constexpr double k_gain_stale = 0.1;
double gain_nearest(double distance) {
  return std::min(0.3, 0.05 + 0.05 * distance);
}

std::vector<std::pair<std::string, std::int64_t>> params_list(const Params& p) {
  return {p.begin(), p.end()};
}

// A config of `record`, with what it measured and how that was timed.
protocol::LookupEntry measured_entry(const WinnerRecord& record, const RankedConfig& c,
                                     std::string provenance) {
  protocol::LookupEntry e;
  e.provenance = std::move(provenance);
  e.template_name = c.template_name;
  e.template_hash = c.template_hash;
  e.params = params_list(c.params);
  e.median_us = c.median_us;
  if (record.timing_l2 != TimingL2::unknown) e.timing_l2 = to_string(record.timing_l2);
  e.tflops = c.tflops;
  e.gbps = c.gbps;
  return e;
}

// A v1 entry carries no launch description: its instance's args are checked, not kept.
ArgValues arg_values(int version) {
  return version >= 2 ? ArgValues::kept : ArgValues::checked;
}

// A lookup's reply line from its parts as JSON text, appended to `out` after one reservation (the
// answer's text is most of it): the fast path's and the dispatcher's replies are the same bytes.
void append_reply_line(std::string& out, std::string_view version, std::string_view id,
                       std::string_view result) {
  out.reserve(out.size() + result.size() + id.size() + version.size() + 32);
  out += R"({"v":)";
  out += version;
  out += R"(,"id":)";
  out += id;
  out += R"(,"ok":true,"result":)";
  out += result;
  out += "}\n";
}

double work(const Problem& p) {
  double w = 1;
  for (const auto& [_, v] : p.dims) w *= double(v);
  return w;
}

}  // namespace

LookupService::LookupService(const DaemonConfig& config, const TemplateSet& templates,
                             const Catalog& catalog, const PinTable& pins, const NodeIdentity& node,
                             Metrics& metrics, MissTracker& misses)
    : m_config(config),
      m_templates(templates),
      m_catalog(catalog),
      m_pins(pins),
      m_node(node),
      m_metrics(metrics),
      m_misses(misses),
      m_by_key(size_t(std::max(0, config.answer_cache_bytes)) / 2),
      m_by_text(size_t(std::max(0, config.answer_cache_bytes)) / 2) {
  m_misses.add_source(this, [this] { record_unrecorded_misses(); });
}

LookupService::~LookupService() {
  m_misses.remove_source(this);
  record_unrecorded_misses();
}

void LookupService::record_unrecorded_misses() {
  // Taken under the lock, recorded after it (the tracker has its own): the I/O threads' hits
  // never wait on the tracker. The answers are released here too, outside the lock.
  std::vector<std::shared_ptr<const Answer>> answers;
  std::vector<std::uint64_t> counts;
  {
    std::lock_guard lock(m_mutex);
    answers.swap(m_unrecorded);
    counts.reserve(answers.size());
    for (const auto& a : answers) counts.push_back(std::exchange(a->unrecorded_misses, 0));
  }
  for (size_t i = 0; i < answers.size(); ++i) record_misses(*answers[i], counts[i]);
}

void LookupService::record_misses(const Answer& answer, std::uint64_t times) {
  m_misses.record(answer.miss_key, answer.device, answer.problem, answer.miss_reason,
                  answer.expected_us, answer.gain, times);
}

bool LookupService::fast_reply(std::string_view line, std::string& out) {
  const auto split = split_lookup_line(line);
  // Longer text is never remembered (remember_line).
  if (!split || split->rest.size() > k_max_cached_line) return false;
  const auto t0 = std::chrono::steady_clock::now();
  const std::uint64_t generation = this->generation();
  // The text key in a buffer this thread reuses: a cached hit allocates only its reply.
  thread_local std::string text;
  text.assign(1, split->version);
  text.append(split->rest);
  std::shared_ptr<const Answer> answer;
  bool record_now = false;
  {
    std::lock_guard lock(m_mutex);
    // One probe: the line's entry holds its answer.
    const auto* cached =
        m_by_text.find(text, [&](CachedAnswer& c) { return still_valid_locked(c, generation); });
    if (!cached) return false;
    answer = cached->answer;
    // Counted here, recorded at the tracker's next fold (before any read of it); past
    // k_max_unrecorded answers waiting, recorded now, as before folds existed.
    if (answer->miss) {
      if (answer->unrecorded_misses > 0) {
        ++answer->unrecorded_misses;
      } else if (m_unrecorded.size() < k_max_unrecorded) {
        answer->unrecorded_misses = 1;
        m_unrecorded.push_back(answer);
      } else {
        record_now = true;
      }
    }
  }
  m_metrics.count_request("lookup");
  if (record_now) record_misses(*answer, 1);
  m_metrics.count_lookup(
      answer->provenance,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  append_reply_line(out, std::string_view(&split->version, 1), split->id, answer->result);
  return true;
}

void LookupService::remember_line(std::string_view line, std::shared_ptr<const Answer> answer,
                                  std::uint64_t generation) {
  const auto split = split_lookup_line(line);
  if (!split) return;
  // Allocations and frees stay outside the lock the I/O threads' fast path takes.
  std::string text;
  size_t bytes = 0;
  if (split->rest.size() <= k_max_cached_line) {
    text = split->version + std::string(split->rest);
    bytes = sizeof(CachedAnswer) + answer_bytes(*answer);  // in full: it may outlive m_by_key's
  }
  ByteLru<CachedAnswer>::Graveyard dead;
  std::lock_guard lock(m_mutex);
  if (text.empty()) {
    ++m_lines_too_long;
    return;
  }
  m_by_text.put(text, CachedAnswer(std::move(answer), generation), bytes, &dead);
}

LookupService::CacheStats LookupService::cache_stats() const {
  std::lock_guard lock(m_mutex);
  CacheStats stats{m_by_key.stats(),
                   m_by_text.stats(),
                   m_lines_too_long,
                   m_built,
                   m_joined,
                   m_built_inline,
                   {m_build_cpu_us.begin(), m_build_cpu_us.end()},
                   m_kept};
  std::sort(stats.build_cpu_us.begin(), stats.build_cpu_us.end());
  return stats;
}

std::optional<double> LookupService::build_cpu_us(const std::string& op) const {
  std::lock_guard lock(m_mutex);
  if (auto it = m_build_cpu_us.find(op); it != m_build_cpu_us.end()) return it->second;
  return std::nullopt;
}

std::string LookupService::cost_class(const Problem& p) {
  // Heuristic rules and nearest-shape searches switch on dim thresholds: shapes whose dims have
  // the same power of two build at about the same cost. A few thousand classes per family at most.
  std::string c = p.op + "|" + p.dtype + "|" + p.out_dtype + "|" + p.layout;
  for (const auto& [name, v] : p.dims)
    c += "|" +
         std::to_string(std::bit_width(static_cast<std::uint64_t>(std::max<std::int64_t>(v, 0))));
  return c;
}

bool LookupService::cheap_locked(const std::string& key, const std::string& cost_key, int limit,
                                 std::uint64_t generation) const {
  if (m_config.inline_build_us <= 0 || limit > k_inline_max_limit) return false;
  if (auto it = m_building.find(key);
      it != m_building.end() && it->second->generation >= generation)
    return false;  // joining would wait for another thread
  const auto cost = m_class_cpu_us.find(cost_key);
  return cost != m_class_cpu_us.end() && cost->second <= double(m_config.inline_build_us);
}

bool LookupService::still_valid_locked(CachedAnswer& cached, std::uint64_t generation) {
  if (cached.valid_through >= generation) return true;  // no change since: the common case
  // The answer was built from the index at valid_through or newer (its generation is read before
  // its templates and the index), so a change after it that could alter it is in the log.
  const Answer& a = *cached.answer;
  const auto through = m_catalog.index().untouched_since(
      a.device.id(), a.problem, cached.valid_through, m_config.nearest_radius);
  if (!through) return false;
  cached.valid_through = *through;
  ++m_kept;
  return true;
}

std::string LookupService::reply(const Json& id, const Answer& answer,
                                 std::chrono::steady_clock::time_point t0) {
  if (answer.miss) record_misses(answer, 1);
  m_metrics.count_lookup(
      answer.provenance,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  std::string out;
  append_reply_line(out, std::to_string(answer.version),
                    id.dump(-1, ' ', false, Json::error_handler_t::replace), answer.result);
  return out;
}

protocol::Expected<std::shared_ptr<const LookupService::ResolvedDevice>>
LookupService::resolve_device_cached(const std::string& name) const {
  // Read before resolving: a class added meanwhile moves it, so this resolution is not kept past
  // that change.
  const std::uint64_t version = m_catalog.index().device_ids_version();
  {
    std::lock_guard lock(m_resolved_mutex);
    if (m_resolved_for != version) {
      m_resolved.clear();
      m_resolved_for = version;
    }
    if (auto it = m_resolved.find(name); it != m_resolved.end()) return it->second;
  }
  auto resolved = resolve_device(name);
  if (!resolved) return std::unexpected(resolved.error());
  auto out = std::make_shared<const ResolvedDevice>(
      ResolvedDevice{resolved->first, resolved->second, resolved->first.id()});
  std::lock_guard lock(m_resolved_mutex);
  if (m_resolved_for == version) {
    if (m_resolved.size() >= k_max_resolved_names) m_resolved.clear();
    m_resolved.emplace(name, out);
  }
  return out;
}

protocol::Expected<std::pair<DeviceClass, DeviceLimits>> LookupService::resolve_device(
    const std::string& name) const {
  const WinnerIndex& index = m_catalog.index();
  if (name.empty()) {
    if (m_node.gpus.empty()) {
      const std::string known = joined(index.device_ids());
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
  // An exact id wins; then a prefix followed by a '.' in the id, whole leading parts ("nvidia-h200"
  // is the whole name of nvidia-h200.sm90...), so a known "nvidia-h200-nvl.sm90..." does not make
  // it ambiguous; then a unique prefix of any kind; then a unique substring ("h200", "sm90"), a
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
  const std::string list =
      joined(contained.empty() ? known : contained, [](const auto& k) { return k.first.id(); });
  return protocol::error(ErrorKind::not_found,
                         "device class '" + name + "' " +
                             (contained.empty() ? "is unknown" : "is ambiguous: it matches") +
                             (list.empty()        ? std::string()
                              : contained.empty() ? " (known: " + list + ")"
                                                  : " " + list));
}

protocol::Expected<Problem> LookupService::canonical_problem(
    const protocol::ProblemSpec& spec) const {
  return canonical_problem(spec, *m_templates.current());
}

protocol::Expected<Problem> LookupService::canonical_problem(
    const protocol::ProblemSpec& spec, const TemplateRegistry& templates) const {
  Problem p;
  p.op = spec.op;
  p.dtype = spec.dtype;
  p.out_dtype = spec.out_dtype.empty() ? spec.dtype : spec.out_dtype;
  p.layout = spec.layout;
  // The op's dims order and default layout come from its templates.
  const KernelTemplate* first = nullptr;
  for (const auto& t : templates.all())
    if (t->manifest.op == spec.op) {
      first = t.get();
      break;
    }
  if (first) {
    const auto& names = first->manifest.dims;
    // The given names are distinct and, as a set, the op's: compared in place (a handful of
    // names), as every lookup asks.
    auto given_has = [&](const std::string& n, size_t before) {
      for (size_t j = 0; j < before; ++j)
        if (spec.dims[j].first == n) return true;
      return false;
    };
    bool same = true;
    for (size_t i = 0; i < spec.dims.size() && same; ++i)
      same = !given_has(spec.dims[i].first, i) &&
             std::find(names.begin(), names.end(), spec.dims[i].first) != names.end();
    for (size_t i = 0; i < names.size() && same; ++i) same = given_has(names[i], spec.dims.size());
    if (!same) {
      return protocol::error(ErrorKind::invalid_problem, spec.op + " takes dims " + joined(names));
    }
    for (const auto& n : names)
      for (const auto& d : spec.dims)
        if (d.first == n) p.dims.push_back(d);
    if (p.layout.empty()) p.layout = templates.default_layout(spec.op);
  } else {
    p.dims = spec.dims;
  }
  if (auto ok = validate_problem(p); !ok)
    return protocol::error(ErrorKind::invalid_problem, ok.error().message);
  return p;
}

bool LookupService::complete_entry(const TemplateRegistry& templates, protocol::LookupEntry& e,
                                   const Problem& problem, const DeviceClass& device,
                                   const DeviceLimits& limits, int version,
                                   const Instance* ready) const {
  // A template not installed here (removed by a reload, or never here) is not offered: nothing
  // here could compile its config, and the kernel op would refuse it.
  const KernelTemplate* t = templates.find(e.template_name);
  if (!t) return false;
  std::optional<Instance> made;
  if (!ready) {
    auto r = instantiate(*t, problem, limits, Params(e.params.begin(), e.params.end()), {},
                         arg_values(version));
    if (!r) return false;
    ready = &made.emplace(std::move(*r));
  }
  const Instance* inst = ready;
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

namespace {

std::int64_t grid_blocks(const auto& grid) {
  return std::int64_t(grid[0]) * std::int64_t(grid[1]) * std::int64_t(grid[2]);
}

// A config's work at `p` in waves, where lookups can count them without the GPU: its work units
// and the blocks of one wave, taken as one block a SM. That holds for a persistent grid (the
// no-GPU max_active_clusters; its units are the grid it launches with no cap on resident
// clusters), and for a grid of one block per unit whose blocks each take more than half of the
// per-block shared-memory limit (the SM holds little more than that limit). nullopt for other
// one-block-per-unit grids (how many blocks share a SM depends on registers the lookup does not
// know), for stream-K (every wave full by construction: its grid reads nothing else; a grid of
// 2^26 units or more would read as one, which takes M * N >= 2^40) and where the config does not
// instantiate.
struct Waves {
  std::int64_t units = 0;
  std::int64_t wave = 1;
  bool persistent = false;  // a grid of max_active_clusters clusters walking the units
  std::int64_t slices = 1;  // units that add partials into one output tile (k_slices)
  std::int64_t count() const { return (units + wave - 1) / wave; }
  double fill() const { return double(units) / double(count() * wave); }
};

// A block over half the per-block shared-memory limit: the SM holds one (it holds little more
// than that limit), whatever its registers.
bool one_block_a_sm(std::int64_t smem, const DeviceLimits& limits) {
  return 2 * smem > limits.max_smem_per_block;
}

std::optional<Waves> waves_at(const KernelTemplate& t, const Problem& p, const DeviceLimits& limits,
                              const Params& params, int version) {
  constexpr std::int64_t k_uncapped = std::int64_t(1) << 26;  // x 16 blocks still a valid grid
  auto all = instantiate(t, p, limits, params, k_uncapped, arg_values(version));
  if (!all) return std::nullopt;
  const std::int64_t cluster = all->launch.cluster_size();
  Waves w;
  w.units = grid_blocks(all->launch.grid);
  w.wave = std::max<std::int64_t>(1, limits.sm_count / cluster) * cluster;
  w.slices = all->k_slices;
  if (w.units >= k_uncapped * cluster) return std::nullopt;  // stream-K
  if (!t.manifest.grid_reads_max_active_clusters()) {
    if (!one_block_a_sm(all->launch.smem, limits)) return std::nullopt;
    return w;
  }
  auto one = instantiate(t, p, limits, params, 1, arg_values(version));
  if (!one) return std::nullopt;
  // One block per unit (the same grid with a cap of one cluster): counted as any such grid is.
  w.persistent = w.units != grid_blocks(one->launch.grid);
  if (!w.persistent && !one_block_a_sm(all->launch.smem, limits)) return std::nullopt;
  return w;
}

}  // namespace

bool LookupService::idles_here(const TemplateRegistry& templates, const protocol::LookupEntry& e,
                               const Problem& problem, const Problem& tuned,
                               const DeviceLimits& limits, int version) {
  if (e.grid.size() != 3) return false;
  const std::int64_t here = grid_blocks(e.grid);
  const KernelTemplate* t = templates.find(e.template_name);
  if (!t) return false;
  const Params params(e.params.begin(), e.params.end());
  if (here < limits.sm_count) {
    auto there = instantiate(*t, tuned, limits, params, {}, arg_values(version));
    if (!there) return false;  // not valid at its own shape any more: nothing to compare
    return here < grid_blocks(there->launch.grid);
  }
  // Where the waves can be counted (waves_at), a config's measurement says little here when its
  // work units fill their waves 1.1 times worse than where it was measured (4096^3's 128x256
  // tiles: 512 in four waves of 132 there, 0.97 full; 160 in two at 1280x4096x4096, 0.61): the
  // idle part of its last wave was not in it. Nor a config that ran one wave of units there and
  // needs several here when it is persistent (split-K sized to fill the SMs at 128 rows, its
  // units doubled at 256: its slices wait for each other across waves), or when it sums k-slices
  // (k_slices) of tiles that alone fill over half a wave here, so that not even two slices of
  // each fit one wave: the slices buy no parallelism and cost the partials' traffic and a wave
  // (256x4096x4096's two slices at 512 rows). A whole-tile config grown from one wave to two as
  // full keeps its place (1024^3's tiles at 1024x2048x2048, where the heuristics' larger tiles
  // fill half a wave), as does a sliced one whose tiles still leave most SMs idle.
  constexpr double k_worse = 1.1;
  // Blocks that fit two a SM on a template whose grid is one block per unit (most mma.sync
  // configs): nothing to count, and no instance made.
  if (!t->manifest.grid_reads_max_active_clusters() && !one_block_a_sm(e.smem, limits))
    return false;
  const auto there = waves_at(*t, tuned, limits, params, version);
  if (!there) return false;
  const auto now = waves_at(*t, problem, limits, params, version);
  if (!now) return false;
  if (there->fill() > k_worse * now->fill()) return true;
  const bool sliced_tiles_fill = there->slices > 1 && 2 * (now->units / there->slices) > now->wave;
  return there->count() == 1 && now->count() > 1 && (now->persistent || sliced_tiles_fill);
}

double LookupService::kernel_us(const Instance& inst, const DeviceLimits& limits) {
  // Rates of a current data-centre part by generation; only the order of magnitude matters.
  const double flops_per_us = (limits.cc >= 90 ? 600e12 : 250e12) / 1e6;
  const double bytes_per_us = (limits.cc >= 90 ? 3.5e12 : 1.5e12) / 1e6;
  return inst.metric_kind == MetricSpec::Kind::flops ? inst.metric / flops_per_us
                                                     : inst.metric / bytes_per_us;
}

double LookupService::estimate_us(const TemplateRegistry& templates, const Problem& problem,
                                  const DeviceLimits& limits) const {
  for (const KernelTemplate* t : templates.for_problem(problem, limits.cc)) {
    auto h = heuristic_config(*t, problem, limits);
    if (!h) continue;
    auto inst = instantiate(*t, problem, limits, std::move(*h), {}, ArgValues::checked);
    if (!inst) continue;
    return kernel_us(*inst, limits);
  }
  return 0;
}

protocol::Expected<std::shared_ptr<const LookupService::Answer>> LookupService::lookup(
    const Json& body, Cold cold, std::string_view line, int version) {
  auto req = protocol::lookup_from_json(body);
  if (!req) return std::unexpected(req.error());
  return lookup(*req, cold, line, version);
}

protocol::Expected<std::shared_ptr<const LookupService::Answer>> LookupService::lookup(
    const protocol::LookupRequest& request, Cold cold, std::string_view line, int version) {
  // Read first: what the key and answer are computed from (the index, then the templates) is at
  // least this new.
  const std::uint64_t generation = this->generation();
  const TemplateSet::Snapshot templates = m_templates.current();
  std::shared_ptr<const PinTable::Pin> pin;
  if (!request.pin.empty()) {
    pin = m_pins.find(request.pin);
    if (!pin)
      return protocol::error(ErrorKind::not_found,
                             "no pin '" + request.pin + "' (pins: " + m_pins.names() + ")");
  }
  auto problem = canonical_problem(request.problem, *templates);
  if (!problem) return std::unexpected(problem.error());
  auto device = resolve_device_cached(request.device);
  if (!device) return std::unexpected(device.error());
  const ResolvedDevice& resolved = **device;
  // v2 replies say which layout was assumed for a request that named none (v1 replies stay as
  // they were): such an answer is cached apart from the one to a request naming that layout.
  const std::string assumed_layout =
      version >= 2 && request.problem.layout.empty() ? problem->layout : std::string();
  std::string key = resolved.id;
  key += '\n';
  key += problem->key();
  key += '\n';
  key += std::to_string(request.limit);
  if (version >= 2) key += "\nv2";
  if (!assumed_layout.empty()) key += "\nassumed";
  if (pin) key += "\npin:" + request.pin;
  std::shared_ptr<const Answer> answer;
  std::shared_ptr<InFlight> flight;
  bool run_it = false;
  bool inline_build = false;
  // Built before the lock (an allocation), only where cheap_locked() may read it; run_build()
  // makes it otherwise.
  std::string cost_key = cold == Cold::build_if_cheap ? cost_class(*problem) : std::string();
  {
    std::lock_guard lock(m_mutex);
    if (const auto* cached = m_by_key.find(
            key, [&](CachedAnswer& c) { return still_valid_locked(c, generation); })) {
      answer = cached->answer;
    } else if (cold == Cold::build || (cold == Cold::build_if_cheap &&
                                       cheap_locked(key, cost_key, request.limit, generation))) {
      inline_build = cold == Cold::build_if_cheap;
      std::tie(flight, run_it) = join_build_locked(key, generation);
    }
  }
  if (!answer) {
    if (!flight) return nullptr;  // refuse, or not cheap enough to build here
    if (!run_it && m_observer.on_join) m_observer.on_join(key);
    auto built = run_it ? run_build(key, *flight, {generation, *templates, pin.get()}, *problem,
                                    resolved, request.limit, version, assumed_layout, inline_build,
                                    std::move(cost_key))
                        : flight->result.get();
    if (!built) return built;
    answer = *built;
  }
  if (!line.empty()) remember_line(line, answer, generation);
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
                                              const BuildInput& in, const Problem& problem,
                                              const ResolvedDevice& device, int limit, int version,
                                              const std::string& assumed_layout,
                                              bool inline_build, std::string cost_key) {
  if (m_observer.on_build) m_observer.on_build(key);
  thread_local unsigned inline_builds = 0;
  const bool timed = !inline_build || inline_builds++ % k_inline_cpu_sample_every == 0;
  const double cpu0 = timed ? thread_cpu_us() : 0;
  if (cost_key.empty()) cost_key = cost_class(problem);
  // Whatever happens, the flight leaves the table (unless a newer build replaced it) before its
  // waiters wake: a lookup arriving after finds the answer cached or starts afresh.
  auto land = [&](const Built* built) {
    const double cpu = timed ? thread_cpu_us() - cpu0 : 0;
    // Declared before the lock: what the caches evict is freed after it is released, so the
    // I/O threads' fast path never waits on an executor thread's frees (nor on a preempted one).
    ByteLru<CachedAnswer>::Graveyard dead;
    std::lock_guard lock(m_mutex);
    ++m_built;
    if (inline_build) ++m_built_inline;
    if (timed && limit <= k_inline_max_limit && built && *built) {  // ops that answered: bounded
      auto [it, first] = m_build_cpu_us.try_emplace(problem.op, cpu);
      if (!first) it->second += (cpu - it->second) * k_build_cost_weight;
      if (auto c = m_class_cpu_us.find(cost_key); c != m_class_cpu_us.end())
        c->second += (cpu - c->second) * k_build_cost_weight;
      else if (m_class_cpu_us.size() < k_max_cost_classes)
        m_class_cpu_us.emplace(cost_key, cpu);
    }
    if (built && *built) m_by_key.put(key, **built, answer_bytes(***built), &dead);
    if (auto it = m_building.find(key); it != m_building.end() && it->second.get() == &flight)
      m_building.erase(it);
  };
  Built built;
  try {
    built = build(in, problem, device, limit, version, assumed_layout);
  } catch (...) {
    land(nullptr);
    flight.promise.set_exception(std::current_exception());
    throw;
  }
  land(&built);
  flight.promise.set_value(built);
  return built;
}

LookupService::Built LookupService::build(const BuildInput& in, const Problem& problem,
                                          const ResolvedDevice& device, int limit, int version,
                                          const std::string& assumed_layout) {
  // A pinned lookup sees the pin's records only: never a winner that came after the pin.
  const WinnerIndex& index = in.pin ? in.pin->index : m_catalog.index();
  const TemplateRegistry& templates = in.templates;
  const DeviceClass& dev = device.device;
  const DeviceLimits& limits = device.limits;
  const std::string& device_id = device.id;
  auto fresh = std::make_shared<Answer>();
  // Not the index's generation now: the templates were read before it, and an answer is only
  // valid at a generation no newer than what it was built from.
  fresh->generation = in.generation;
  fresh->version = version;
  fresh->device = dev;
  fresh->problem = problem;
  protocol::LookupReply reply;
  reply.device = device_id;
  reply.problem_key = problem.key();
  reply.assumed_layout = assumed_layout;
  const PinTable::Pin* pin = in.pin;
  if (pin) {
    reply.pin = pin->info.name;
    reply.pin_id = pin->info.id;
  }
  // Template + params already offered: listed, or refused by complete_entry (kept apart, rare).
  // A handful, so linear scans. Every entry's params come from a Params map (params_list):
  // sorted, distinct.
  std::vector<protocol::LookupEntry> refused;
  const auto listed_in = [](const std::vector<protocol::LookupEntry>& list,
                            const protocol::LookupEntry& e) {
    return std::any_of(list.begin(), list.end(), [&](const protocol::LookupEntry& s) {
      return s.template_name == e.template_name && s.params == e.params;
    });
  };
  auto add = [&](protocol::LookupEntry e, const Instance* ready = nullptr) {
    if (reply.entries.size() >= size_t(limit)) return false;
    if (listed_in(reply.entries, e) || listed_in(refused, e)) return false;
    if (!complete_entry(templates, e, problem, dev, limits, version, ready)) {
      refused.push_back(std::move(e));
      return false;
    }
    reply.entries.push_back(std::move(e));
    return true;
  };
  const bool own = m_node.owns(device_id);
  bool exact = false;
  if (auto record = index.exact(device_id, problem)) {
    const std::string stale = m_catalog.staleness(*record, own, templates);
    size_t served = 0;
    for (const auto& c : record->ranked) {
      auto e = measured_entry(*record, c, stale.empty() ? "exact" : "stale");
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
    // Configs of neighbours already handed to add(). Neighbours often share one (3 in 4 of the
    // nearest 4 in ktune-memory-bench's cold_live); add() would turn such a one away, so its
    // record is not read (its staleness, params and key: cache misses on a large index).
    std::vector<std::uint64_t> offered;
    // Neighbours' configs that would leave SMs idle here (idles_here): listed after the heuristics.
    std::vector<protocol::LookupEntry> idle;
    std::optional<std::pair<double, double>> idle_estimate;  // the first one's: expected_us, gain
    for (const auto& near :
         index.nearest(device_id, problem, m_config.nearest_radius, size_t(limit))) {
      if (std::find(offered.begin(), offered.end(), near.config) != offered.end()) continue;
      if (!m_catalog.staleness(*near.record, own, templates).empty()) continue;
      offered.push_back(near.config);
      auto e = measured_entry(*near.record, near.record->ranked.front(), "nearest");
      e.distance = near.distance;
      e.from = near.record->problem.key();
      if (!add(std::move(e))) continue;
      // Scales the measured time by the work ratio of the two shapes.
      const double scaled_us = near.record->ranked.front().median_us * work(problem) /
                               std::max(1.0, work(near.record->problem));
      if (idles_here(templates, reply.entries.back(), problem, near.record->problem, limits,
                     version)) {
        idle.push_back(std::move(reply.entries.back()));
        reply.entries.pop_back();
        if (!idle_estimate) idle_estimate.emplace(scaled_us, gain_nearest(near.distance));
        continue;
      }
      if (fresh->gain == 0) {
        fresh->expected_us = scaled_us;
        fresh->gain = gain_nearest(near.distance);
      }
    }
    // estimate_us() is the first template's heuristic config, instantiated: the instances below,
    // in the same order, so it is taken from there (when the loop runs for the same cc).
    std::optional<double> estimate;
    // Nearest shapes filled the reply and gave the estimate: a heuristic entry could only be
    // refused by add(), so none is computed.
    const bool full = reply.entries.size() >= size_t(limit) && fresh->gain != 0;
    for (const KernelTemplate* t :
         full ? std::vector<const KernelTemplate*>{} : templates.for_problem(problem, dev.cc)) {
      // heuristic_config() and instantiate() sharing one evaluation of the rule's constraints.
      auto picked = heuristic_instance(*t, problem, limits, arg_values(version));
      if (!picked) continue;
      if (!estimate && dev.cc == limits.cc) estimate = kernel_us(picked->instance, limits);
      protocol::LookupEntry e;
      e.provenance = "heuristic";
      e.template_name = t->name();
      e.template_hash = t->hash;
      e.params = params_list(picked->config());
      add(std::move(e), &picked->instance);
    }
    // A demoted neighbour answers first only when no heuristic could be listed: then it is valued
    // as the nearest answer it is.
    const bool idle_first = reply.entries.empty() && !idle.empty();
    for (auto& e : idle)  // completed already
      if (reply.entries.size() < size_t(limit) && !listed_in(reply.entries, e))
        reply.entries.push_back(std::move(e));
    if (idle_first && fresh->gain == 0) std::tie(fresh->expected_us, fresh->gain) = *idle_estimate;
    if (fresh->gain == 0) {
      fresh->expected_us = estimate ? *estimate : estimate_us(templates, problem, limits);
      fresh->gain = k_gain_heuristic;
    }
  }
  fresh->miss = !exact;
  if (fresh->miss) fresh->miss_key = MissTracker::key_of(device_id, problem);
  if (pin && !exact) {
    // The pin answers the same whatever is tuned; the key is worth tuning (for the live table
    // and later pins) only when the live table has no fresh exact winner for it either.
    if (auto live = m_catalog.index().exact(device_id, problem);
        live && m_catalog.staleness(*live, own, templates).empty())
      fresh->miss = false;
  }
  if (reply.entries.empty()) {
    std::string why = templates.why_unsupported(problem, dev.cc);
    if (why.empty())
      why = "no template implements " + problem.describe() + " on sm_" + std::to_string(dev.cc);
    return protocol::error(ErrorKind::invalid_problem, why + ", and nothing was tuned for it");
  }
  fresh->provenance = reply.entries.front().provenance;
  fresh->result = protocol::lookup_reply_text(reply);
  return std::shared_ptr<const Answer>(std::move(fresh));
}

}  // namespace ktune
