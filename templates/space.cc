#include "templates/space.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "config/text.h"

namespace ktune {
namespace {

constexpr double k_max_valid_configs = 2'000'000;
// Partial configs an enumeration may visit (a few seconds of constraint checks): a space pruned
// only at its last param (4 params of 100 values x 9, one constraint over all) otherwise walked
// for minutes on a lookup thread, with nothing valid to show for it.
constexpr std::uint64_t k_max_visits = 20'000'000;

// Sets dims, dtype sizes, layout constants and device limits in an evaluator.
// REQUIRES: check_supported() passed (the problem's dims are the manifest's, in order).
void bind_problem(Evaluator& ev, const Manifest& m, const Problem& p, const DeviceLimits& l) {
  const ManifestSlots& slots = m.slots;
  for (size_t i = 0; i < p.dims.size() && i < slots.dims.size(); ++i)
    ev.set(slots.dims[i], double(p.dims[i].second));
  ev.set(slots.in_bytes, dtype_bytes(p.dtype));
  ev.set(slots.out_bytes, dtype_bytes(p.out_dtype));
  // Constants of every layout default to 0; the problem's layout sets its own.
  for (int slot : slots.layout_constants) ev.set(slot, 0);
  if (auto it = slots.layouts.find(p.layout); it != slots.layouts.end())
    for (const auto& [slot, v] : it->second) ev.set(slot, double(v));
  const double limits[] = {double(l.cc),
                           double(l.sm_count),
                           double(l.max_threads_per_block),
                           double(l.max_smem_per_block),
                           double(l.max_regs_per_block),
                           double(l.max_regs_per_thread),
                           double(l.l2_bytes)};
  static_assert(std::size(limits) == std::size(k_device_symbols));
  for (size_t i = 0; i < std::size(limits); ++i) ev.set(slots.device[i], limits[i]);
}

// The manifest's heuristic values for the problem bound in `ev`, in order (each may read the
// ones before). What reads a `when` must call it first: an unbound value reads 0. A value is
// whatever its expression gives, NaN included (ceil_div by a zero SM count); the evaluator
// fails only on a slot outside its table, which a loaded manifest cannot have, and that reads NaN.
void bind_heuristic_values(Evaluator& ev, const Manifest& m) {
  for (size_t i = 0; i < m.heuristic_values.size(); ++i) {
    const auto v = ev.eval(m.heuristic_values[i].expr);
    ev.set(m.slots.heuristic_values[i], v.value_or(std::numeric_limits<double>::quiet_NaN()));
  }
}

bool truthy(const Result<double>& v) {
  return v && !std::isnan(*v) && *v != 0;
}

// The evaluators below name what failed with a `where` callable (returning a std::string): its
// text is built only on failure, so an instance that evaluates cleanly allocates no error text.
template <typename Where>
Result<std::int64_t> as_integer(const Result<double>& v, const Where& where) {
  if (!v) return std::unexpected(v.error());
  if (std::isnan(*v) || std::isinf(*v) || std::floor(*v) != *v)
    return fail(ErrorCode::invalid_argument,
                where() + ": expected an integer, got " + std::to_string(*v));
  return static_cast<std::int64_t>(*v);
}

// A finite number (a scalar argument, a metric): NaN or inf would reach the worker's request and
// the winner's throughput as JSON null.
template <typename Where>
Result<double> as_finite(const Result<double>& v, const Where& where) {
  if (!v) return std::unexpected(v.error());
  if (!std::isfinite(*v))
    return fail(ErrorCode::invalid_argument, where() + ": evaluates to " + std::to_string(*v));
  return *v;
}

// An integer in lo..hi.
template <typename Where>
Result<std::int64_t> eval_in_range(Evaluator& ev, const Expression& e, const Where& where,
                                   std::int64_t lo, std::int64_t hi) {
  auto v = as_integer(ev.eval(e), where);
  if (!v) return std::unexpected(v.error());
  if (*v < lo || *v > hi)
    return fail(ErrorCode::invalid_argument, where() + ": " + std::to_string(*v) +
                                                 " is out of range " + std::to_string(lo) + ".." +
                                                 std::to_string(hi));
  return *v;
}

// "<where>.<field>[<i>]", built on failure only.
template <typename Where>
auto element(const Where& where, const char* field, size_t i) {
  return [&where, field, i] { return where() + field + "[" + std::to_string(i) + "]"; };
}

// The cluster dims, then max_active_clusters (given, or the no-GPU fallback), then the grid,
// which must be whole clusters. `what`: "launch" or "reference.launch", for errors.
Result<LaunchGeometry> eval_launch(Evaluator& ev, const Manifest& m, const LaunchSpec& spec,
                                   const char* what,
                                   std::optional<std::int64_t> max_active_clusters,
                                   std::int64_t* used_max_active_clusters = nullptr) {
  auto where = [&] { return m.path + ": " + what; };
  LaunchGeometry g;
  for (size_t i = 0; i < 3; ++i) {
    auto c = eval_in_range(ev, spec.cluster[i], element(where, ".cluster", i), 1, 16);
    if (!c) return std::unexpected(c.error());
    g.cluster[i] = std::uint32_t(*c);
    auto b = eval_in_range(ev, spec.block[i], element(where, ".block", i), 1, 1024);
    if (!b) return std::unexpected(b.error());
    g.block[i] = std::uint32_t(*b);
  }
  const int sm_count = int(ev.get(m.slots.device[1]));  // k_device_symbols[1]
  const std::int64_t mac =
      max_active_clusters ? *max_active_clusters
                          : std::max<std::int64_t>(1, sm_count / std::int64_t(g.cluster_size()));
  ev.set(m.slots.max_active_clusters, double(mac));
  if (used_max_active_clusters) *used_max_active_clusters = mac;
  for (size_t i = 0; i < 3; ++i) {
    auto gx = eval_in_range(ev, spec.grid[i], element(where, ".grid", i), 1, 0x7fffffff);
    if (!gx) return std::unexpected(gx.error());
    if (*gx % g.cluster[i] != 0)
      return fail(ErrorCode::invalid_argument, element(where, ".grid", i)() + " (" +
                                                   std::to_string(*gx) +
                                                   ") is not a multiple of the cluster's (" +
                                                   std::to_string(g.cluster[i]) + ")");
    g.grid[i] = std::uint32_t(*gx);
  }
  auto smem = as_integer(ev.eval(spec.smem), [&] { return where() + ".smem"; });
  if (!smem) return std::unexpected(smem.error());
  if (*smem < 0 || *smem > (1 << 30))
    return fail(ErrorCode::invalid_argument, where() + ".smem: out of range");
  g.smem = std::uint32_t(*smem);
  return g;
}

std::string concrete_dtype(const std::string& d, const Problem& p) {
  if (d == "in") return p.dtype;
  if (d == "out") return p.out_dtype;
  return d;
}

// `slots`: the args' slots (ManifestSlots::template_args or reference_template_args).
Result<std::string> name_expression(Evaluator& ev, const Problem& p, const std::string& entry,
                                    const std::vector<std::string>& args,
                                    const std::vector<int>& slots) {
  if (args.empty()) return entry;  // a plain (non-template) kernel
  std::string s;
  s.reserve(entry.size() + 2 + args.size() * 8);  // most args are a type or a few digits, ", "
  s += entry;
  s += '<';
  for (size_t i = 0; i < args.size(); ++i) {
    if (i) s.append(", ", 2);
    // Most args are params or derived values (a slot); T_IN and T_OUT have none (ManifestSlots).
    const int slot = i < slots.size() ? slots[i] : -1;
    if (slot < 0) {
      if (args[i] == "T_IN")
        s += cpp_type(p.dtype);
      else if (args[i] == "T_OUT")
        s += cpp_type(p.out_dtype);
      else
        return fail(ErrorCode::internal, "template arg '" + args[i] + "' has no slot");
    } else {
      const double v = ev.get(slot);
      if (std::floor(v) != v)
        return fail(ErrorCode::invalid_argument, "template arg " + args[i] + " is not an integer");
      char digits[24];
      const auto [end, _] =
          std::to_chars(digits, digits + sizeof digits, static_cast<long long>(v));
      s.append(digits, end);
    }
  }
  s += '>';
  return s;
}

// Each expression an integer in lo..hi, appended to `out`; with no `out`, only checked.
template <typename T, typename Where>
Result<void> eval_list(Evaluator& ev, const std::vector<Expression>& exprs, const Where& where,
                       std::int64_t lo, std::int64_t hi, std::vector<T>* out) {
  if (out) out->reserve(exprs.size());
  for (size_t i = 0; i < exprs.size(); ++i) {
    auto v = eval_in_range(ev, exprs[i], element(where, "", i), lo, hi);
    if (!v) return std::unexpected(v.error());
    if (out) out->push_back(T(*v));
  }
  return {};
}

// A tensor map's fields into `v`; the ranges are cuTensorMapEncodeTiled's (finer rules, such as
// 16-byte strides, are the constraints the loader added). With no `v`, only checked.
template <typename Where>
Result<void> eval_map(Evaluator& ev, const TensorMapSpec& t, const Where& where,
                      TensorMapValue* v) {
  if (v) {
    v->buffer = t.buffer;
    v->swizzle = t.swizzle;
    v->l2_promotion = t.l2_promotion;
    v->oob_fill = t.oob_fill;
  }
  auto field = [&](const char* name) { return [&where, name] { return where() + name; }; };
  if (auto ok = eval_list(ev, t.dims, field(".dims"), 1, 1ll << 32, v ? &v->dims : nullptr); !ok)
    return ok;
  if (auto ok = eval_list(ev, t.strides, field(".strides"), 16, (1ll << 40) - 1,
                          v ? &v->strides : nullptr);
      !ok)
    return ok;
  if (auto ok = eval_list(ev, t.box, field(".box"), 1, 256, v ? &v->box : nullptr); !ok) return ok;
  if (auto ok = eval_list(ev, t.element_strides, field(".element_strides"), 1, 8,
                          v ? &v->element_strides : nullptr);
      !ok)
    return ok;
  return {};
}

// The args' values into `out`, in the manifest's order; with no `out`, every value is evaluated
// and checked as it would be, and nothing is built (ArgValues::checked).
Result<void> eval_args(Evaluator& ev, const Manifest& m, const Problem& p,
                       std::vector<ArgValue>* out) {
  if (out) out->reserve(m.args.size());
  for (const auto& a : m.args) {
    auto where = [&] { return "args." + a.name; };
    ArgValue* v = out ? &out->emplace_back() : nullptr;
    if (v) {
      v->name = a.name;
      v->kind = a.kind;
    }
    if (a.kind == ArgKind::buffer) {
      auto count = as_integer(ev.eval(a.count), [&] { return where() + ".count"; });
      if (!count) return std::unexpected(count.error());
      if (*count < 1) return fail(ErrorCode::invalid_argument, where() + ".count < 1");
      if (!v) continue;
      v->role = a.role;
      v->dtype = concrete_dtype(a.dtype, p);
      v->count = *count;
      v->init = a.init;
      v->pass = a.pass;
      v->zero = a.zero;
    } else if (a.kind == ArgKind::scalar) {
      auto value = as_finite(ev.eval(a.value), [&] { return where() + ".value"; });
      if (!value) return std::unexpected(value.error());
      if (!v) continue;
      v->scalar = a.scalar;
      v->value = *value;
    } else {
      if (auto ok = eval_map(ev, a.map, where, v ? &v->map : nullptr); !ok) return ok;
      if (!v) continue;
      for (const auto& b : m.args)
        if (b.is_buffer() && b.name == a.map.buffer) v->dtype = concrete_dtype(b.dtype, p);
    }
  }
  return {};
}

// "BLOCK_M, BLOCK_N, ..." in manifest order.
std::string param_names(const Manifest& m) {
  return joined(m.params, &ParamDomain::name);
}

// "64, 128, 256" (the first 16 values, then how many more).
std::string domain_text(const ParamDomain& p) {
  std::string s =
      joined(p.values | std::views::take(16), [](std::int64_t v) { return std::to_string(v); });
  if (p.values.size() > 16) s += ", ... " + std::to_string(p.values.size() - 16) + " more";
  return s;
}

// Evaluates derived values then constraints for a full config; the first failure is returned.
// `explain`: build the error's text (a caller that only asks whether the config fits, trying
// heuristic rules one after another, skips the allocations).
Result<void> check_config(Evaluator& ev, const Manifest& m, const Params& params,
                          bool explain = true) {
  // A name the template does not have is the likelier slip than a missing one (a typo makes
  // both), so it is named first.
  if (explain)
    for (const auto& [name, _] : params)
      if (!m.param(name))
        return fail(ErrorCode::invalid_argument, "template " + m.name + " has no param " + name +
                                                     " (params: " + param_names(m) + ")");
  for (size_t i = 0; i < m.params.size(); ++i) {
    const ParamDomain& p = m.params[i];
    auto it = params.find(p.name);
    if (it == params.end())
      return fail(ErrorCode::invalid_argument,
                  explain ? "missing param " + p.name + " (params: " + param_names(m) + ")"
                          : std::string());
    // Constraints are written for the declared values only: 7 may pass them and still not be
    // a config the kernel was written for (or overflow an expression).
    if (std::find(p.values.begin(), p.values.end(), it->second) == p.values.end()) {
      if (!explain) return fail(ErrorCode::invalid_argument, std::string());
      return fail(ErrorCode::invalid_argument,
                  "param " + p.name + "=" + std::to_string(it->second) + " is not in its domain (" +
                      domain_text(p) + ")");
    }
    ev.set(m.slots.params[i], double(it->second));
  }
  // Every declared param is in `params` (its keys are distinct): any more is one unknown.
  if (params.size() != m.params.size())
    for (const auto& [name, _] : params)
      if (!m.param(name)) return fail(ErrorCode::invalid_argument, std::string());
  for (size_t i = 0; i < m.derived.size(); ++i) {
    auto v = ev.eval(m.derived[i].expr);
    if (!v) return std::unexpected(v.error());
    ev.set(m.slots.derived[i], *v);
  }
  for (const auto& c : m.constraints)
    if (!truthy(ev.eval(c.expr))) {
      if (!explain) return fail(ErrorCode::invalid_argument, std::string());
      return fail(ErrorCode::invalid_argument,
                  "constraint at " + m.path + ":" + std::to_string(c.line) + " fails: " + c.why);
    }
  return {};
}

}  // namespace

Result<void> check_supported(const KernelTemplate& t, const Problem& p, const DeviceLimits& l) {
  const Manifest& m = t.manifest;
  if (!m.supports(p, l.cc)) {
    std::string dims;
    for (const auto& d : m.dims) dims += (dims.empty() ? "" : ",") + d;
    return fail(ErrorCode::invalid_argument,
                "template " + m.name + " does not implement " + p.describe() + " on sm_" +
                    std::to_string(l.cc) + " (op " + m.op + ", dims " + dims + ", cc " +
                    std::to_string(m.min_cc) + (m.max_cc ? ".." + std::to_string(m.max_cc) : "+") +
                    ")");
  }
  return {};
}

std::string target_arch(const Manifest& manifest, int cc) {
  return "sm_" + std::to_string(cc) + manifest.arch_suffix;
}

Result<SearchSpace> SearchSpace::build(const KernelTemplate& tmpl, const Problem& problem,
                                       const DeviceLimits& limits, size_t max_configs) {
  if (auto ok = check_supported(tmpl, problem, limits); !ok) return std::unexpected(ok.error());
  const Manifest& m = tmpl.manifest;
  SearchSpace space;
  space.m_template = &tmpl;
  space.m_problem = problem;
  space.m_limits = limits;

  Evaluator ev(m.symbols);
  bind_problem(ev, m, problem, limits);

  // The depth (param index) after which each derived value and constraint can be evaluated:
  // the last param it reads, directly or through derived values. -1: reads no params.
  const int n = int(m.params.size());
  std::map<int, int> slot_depth;  // symbol slot -> depth
  for (int i = 0; i < n; ++i) slot_depth[m.symbols.find(m.params[size_t(i)].name)] = i;
  auto depth_of = [&](const Expression& e) {
    int d = -1;
    for (int slot : e.used_slots)
      if (auto it = slot_depth.find(slot); it != slot_depth.end()) d = std::max(d, it->second);
    return d;
  };
  std::vector<std::vector<size_t>> derived_at(size_t(n) + 1);  // indices into m.derived
  for (size_t i = 0; i < m.derived.size(); ++i) {
    const int depth = depth_of(m.derived[i].expr);
    slot_depth[m.slots.derived[i]] = depth;
    derived_at[size_t(depth + 1)].push_back(i);
  }
  std::vector<std::vector<size_t>> constraints_at(size_t(n) + 1);
  for (size_t i = 0; i < m.constraints.size(); ++i)
    constraints_at[size_t(depth_of(m.constraints[i].expr) + 1)].push_back(i);

  // Configs below each depth: pruning at depth i removes suffix[i + 1] configs.
  std::vector<double> suffix(size_t(n) + 1, 1.0);
  for (int i = n - 1; i >= 0; --i)
    suffix[size_t(i)] = suffix[size_t(i) + 1] * double(m.params[size_t(i)].values.size());
  space.m_report.total = suffix[0];

  std::vector<double> pruned(m.constraints.size(), 0.0);
  std::vector<std::int64_t> current(size_t(n), 0);
  std::optional<Error> error;

  std::uint64_t visits = 0;
  // Evaluates what becomes known at `level` (0 = before any param); false if pruned.
  auto settle = [&](int level) -> bool {
    if (++visits > k_max_visits) {
      error = Error{ErrorCode::invalid_argument,
                    "enumerating the space took more than 20M steps (" +
                        std::to_string(std::llround(std::min(suffix[0], 1e18))) +
                        " configs before pruning); add constraints on fewer params, so they "
                        "prune earlier"};
      return false;
    }
    for (size_t di : derived_at[size_t(level)]) {
      auto v = ev.eval(m.derived[di].expr);
      if (!v) {
        error = v.error();
        return false;
      }
      ev.set(m.slots.derived[di], *v);
    }
    for (size_t ci : constraints_at[size_t(level)]) {
      auto v = ev.eval(m.constraints[ci].expr);
      if (!v) {
        error = v.error();
        return false;
      }
      if (std::isnan(*v) || *v == 0) {
        pruned[ci] += suffix[size_t(level)];
        return false;
      }
    }
    return true;
  };

  bool enough = false;  // max_configs found: the search stops
  auto recurse = [&](auto&& self, int depth) -> void {
    if (error || enough) return;
    if (depth == n) {
      if (double(space.m_configs.size()) >= k_max_valid_configs) {
        error = Error{ErrorCode::invalid_argument,
                      m.path + ": more than 2M valid configs; add constraints"};
        return;
      }
      Params p;
      for (int i = 0; i < n; ++i) p[m.params[size_t(i)].name] = current[size_t(i)];
      space.m_configs.push_back(std::move(p));
      enough = space.m_configs.size() >= max_configs;
      return;
    }
    const ParamDomain& dom = m.params[size_t(depth)];
    const int slot = m.slots.params[size_t(depth)];
    for (std::int64_t v : dom.values) {
      current[size_t(depth)] = v;
      ev.set(slot, double(v));
      if (settle(depth + 1)) self(self, depth + 1);
      if (error || enough) return;
    }
  };
  if (settle(0)) recurse(recurse, 0);
  if (error) return std::unexpected(Error{error->code, m.path + ": " + error->message});

  space.m_report.valid = double(space.m_configs.size());
  for (size_t i = 0; i < m.constraints.size(); ++i)
    if (pruned[i] > 0)
      space.m_report.pruned.push_back({m.constraints[i].why, m.constraints[i].line, pruned[i]});
  std::stable_sort(space.m_report.pruned.begin(), space.m_report.pruned.end(),
                   [](const PruneCount& a, const PruneCount& b) { return a.configs > b.configs; });
  if (space.m_configs.empty()) {
    const auto& top = space.m_report.pruned.front();
    return fail(ErrorCode::invalid_argument,
                m.path + ":" + std::to_string(top.line) + ": constraints prune every config for " +
                    problem.describe() + "; most (" + std::to_string(std::int64_t(top.configs)) +
                    " of " + std::to_string(std::int64_t(space.m_report.total)) +
                    ") by: " + top.why);
  }
  return space;
}

namespace {
// instantiate() after the params passed check_config() in `ev`, but for Instance::params, which
// the caller sets where it needs them.
Result<Instance> finish_instance(Evaluator& ev, const Manifest& m, const Problem& problem,
                                 std::optional<std::int64_t> max_active_clusters, ArgValues args);
}  // namespace

Result<Instance> instantiate(const KernelTemplate& tmpl, const Problem& problem,
                             const DeviceLimits& limits, Params params,
                             std::optional<std::int64_t> max_active_clusters, ArgValues args) {
  if (auto ok = check_supported(tmpl, problem, limits); !ok) return std::unexpected(ok.error());
  const Manifest& m = tmpl.manifest;
  Evaluator ev(m.symbols);
  bind_problem(ev, m, problem, limits);
  if (auto ok = check_config(ev, m, params); !ok)
    return fail(ok.error().code,
                m.name + " {" + params_to_string(params) + "}: " + ok.error().message);
  auto inst = finish_instance(ev, m, problem, max_active_clusters, args);
  if (inst) inst->params = std::move(params);
  return inst;
}

namespace {

Result<Instance> finish_instance(Evaluator& ev, const Manifest& m, const Problem& problem,
                                 std::optional<std::int64_t> max_active_clusters, ArgValues args) {
  Instance inst;
  auto name = name_expression(ev, problem, m.entry, m.template_args, m.slots.template_args);
  if (!name) return std::unexpected(name.error());
  inst.name_expression = std::move(*name);
  auto launch =
      eval_launch(ev, m, m.launch, "launch", max_active_clusters, &inst.max_active_clusters);
  if (!launch) return std::unexpected(launch.error());
  inst.launch = *launch;
  inst.grid_reads_max_active_clusters = m.grid_reads_max_active_clusters();
  if (auto ok = eval_args(ev, m, problem, args == ArgValues::kept ? &inst.args : nullptr); !ok)
    return std::unexpected(ok.error());
  auto metric = as_finite(ev.eval(m.metric.amount), [] { return std::string("metric"); });
  if (!metric) return std::unexpected(metric.error());
  inst.metric = *metric;
  inst.metric_kind = m.metric.kind;
  if (!m.k_slices.text.empty()) {
    const auto slices = ev.eval(m.k_slices);
    if (slices && *slices >= 1 && *slices <= 1e9 && *slices == std::floor(*slices))
      inst.k_slices = std::int64_t(*slices);
  }
  return inst;
}

}  // namespace

Result<Instance> reference_instance(const KernelTemplate& tmpl, const Problem& problem,
                                    const DeviceLimits& limits) {
  const Manifest& m = tmpl.manifest;
  if (!m.reference.builtin.empty())
    return fail(ErrorCode::invalid_argument,
                m.name + ": reference is builtin " + m.reference.builtin);
  // Argument sizes may depend on params (e.g. a workspace); take them from the heuristic config,
  // whose buffers the candidate's own are compared against only by output.
  auto heuristic = heuristic_config(tmpl, problem, limits);
  if (!heuristic) return std::unexpected(heuristic.error());
  auto inst = instantiate(tmpl, problem, limits, *heuristic);
  if (!inst) return inst;
  Evaluator ev(m.symbols);
  bind_problem(ev, m, problem, limits);
  auto name = name_expression(ev, problem, m.reference.entry, m.reference.template_args,
                              m.slots.reference_template_args);
  if (!name) return std::unexpected(name.error());
  inst->name_expression = std::move(*name);
  inst->params.clear();
  auto launch = eval_launch(ev, m, m.reference.launch, "reference.launch", {});
  if (!launch) return std::unexpected(launch.error());
  inst->launch = *launch;
  return inst;
}

namespace {
// Whether a heuristic rule's config passes every constraint for the problem bound in `ev`, from
// its plan (manifest.h, RulePlan); `ev` then holds the rule's params and every derived value, as
// after check_config().
bool rule_fits(Evaluator& ev, const Manifest& m, const RulePlan& plan) {
  if (!plan.fixed_constraints_hold) return false;
  const ManifestSlots& s = m.slots;
  for (size_t i = 0; i < plan.params.size(); ++i) ev.set(s.params[i], plan.params[i]);
  for (size_t i = 0; i < m.derived.size(); ++i)
    if (plan.derived_known[i]) ev.set(s.derived[i], plan.derived[i]);
  const auto derive = [&](const std::vector<int>& which) {
    for (int i : which) {
      auto v = ev.eval(m.derived[size_t(i)].expr);
      if (!v) return false;
      ev.set(s.derived[size_t(i)], *v);
    }
    return true;
  };
  if (!derive(plan.check_derived)) return false;
  for (int i : plan.checks)
    if (!truthy(ev.eval(m.constraints[size_t(i)].expr))) return false;
  return derive(plan.rest_derived);
}

// The first heuristic rule whose `when` holds and whose params pass the constraints of the
// problem bound in `ev` (bind_problem; the heuristic values are bound here), or null. `ev` then
// holds what instantiate() would bind and derive for that rule's params.
const HeuristicRule* fitting_rule(Evaluator& ev, const Manifest& m) {
  bind_heuristic_values(ev, m);
  // Planned when the manifest loaded (always, for a parsed one): the same verdict as
  // check_config(explain = false), evaluating only what reads the problem or the device.
  const bool planned = m.slots.rules.size() == m.heuristic.size();
  bool when_held = false;  // the last `when` evaluated: a rule repeating it (RulePlan) reuses it
  for (size_t r = 0; r < m.heuristic.size(); ++r) {
    const HeuristicRule& rule = m.heuristic[r];
    if (!rule.when.text.empty()) {
      when_held = planned && m.slots.rules[r].when_repeats ? when_held : truthy(ev.eval(rule.when));
      if (!when_held) continue;
    }
    if (planned ? rule_fits(ev, m, m.slots.rules[r])
                : bool(check_config(ev, m, rule.params, /*explain=*/false)))
      return &rule;
  }
  return nullptr;
}

// When no heuristic rule fits: the first config of the pruned space, found by a depth-first search
// that stops at the first valid leaf (the same config a full enumeration lists first), or an
// error naming why the space is empty and why each rule did not fit.
Result<Params> first_config(const KernelTemplate& tmpl, const Problem& problem,
                            const DeviceLimits& limits) {
  auto space = SearchSpace::build(tmpl, problem, limits, 1);
  if (space) return space->configs().front();
  const Manifest& m = tmpl.manifest;
  Evaluator ev(m.symbols);
  bind_problem(ev, m, problem, limits);
  bind_heuristic_values(ev, m);
  std::string tried;
  for (const auto& rule : m.heuristic) {
    if (!rule.when.text.empty() && !truthy(ev.eval(rule.when))) continue;
    if (auto ok = check_config(ev, m, rule.params); !ok)
      tried += "\n  rule at line " + std::to_string(rule.line) + ": " + ok.error().message;
  }
  return fail(ErrorCode::invalid_argument, space.error().message + tried);
}
}  // namespace

double heuristic_rank(const KernelTemplate& tmpl, const Problem& problem) {
  const Manifest& m = tmpl.manifest;
  if (m.heuristic_rank.text.empty()) return 0;
  Evaluator ev(m.symbols);
  bind_problem(ev, m, problem, DeviceLimits{});  // the rank reads no device limit (manifest.cc)
  const auto v = ev.eval(m.heuristic_rank);
  return v && !std::isnan(*v) ? *v : 0;
}

Result<Params> heuristic_config(const KernelTemplate& tmpl, const Problem& problem,
                                const DeviceLimits& limits) {
  if (auto ok = check_supported(tmpl, problem, limits); !ok) return std::unexpected(ok.error());
  const Manifest& m = tmpl.manifest;
  Evaluator ev(m.symbols);
  bind_problem(ev, m, problem, limits);
  if (const HeuristicRule* rule = fitting_rule(ev, m)) return rule->params;
  return first_config(tmpl, problem, limits);
}

std::vector<Params> rule_configs(const KernelTemplate& tmpl, const Problem& problem,
                                 const DeviceLimits& limits) {
  std::vector<Params> out;
  if (!check_supported(tmpl, problem, limits)) return out;
  const Manifest& m = tmpl.manifest;
  Evaluator ev(m.symbols);
  bind_problem(ev, m, problem, limits);
  for (const HeuristicRule& rule : m.heuristic)
    if (std::find(out.begin(), out.end(), rule.params) == out.end() &&
        check_config(ev, m, rule.params, /*explain=*/false))
      out.push_back(rule.params);
  return out;
}

Result<HeuristicInstance> heuristic_instance(const KernelTemplate& tmpl, const Problem& problem,
                                             const DeviceLimits& limits, ArgValues args) {
  if (auto ok = check_supported(tmpl, problem, limits); !ok) return std::unexpected(ok.error());
  const Manifest& m = tmpl.manifest;
  Evaluator ev(m.symbols);
  bind_problem(ev, m, problem, limits);
  if (const HeuristicRule* rule = fitting_rule(ev, m)) {
    auto inst = finish_instance(ev, m, problem, {}, args);
    if (!inst) return std::unexpected(inst.error());
    return HeuristicInstance{std::move(*inst), &rule->params};
  }
  auto params = first_config(tmpl, problem, limits);
  if (!params) return std::unexpected(params.error());
  auto inst = instantiate(tmpl, problem, limits, *params, {}, args);
  if (!inst) return std::unexpected(inst.error());
  return HeuristicInstance{std::move(*inst), nullptr};
}

}  // namespace ktune
