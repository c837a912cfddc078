// SearchSpace: the configs of one template worth trying for one problem on one device.
//
// Enumerates the cartesian product of the param domains depth-first, evaluating each derived
// value and constraint as soon as the params it reads are fixed, so a constraint on BLOCK_M alone
// prunes a whole subtree at once. Reports how many configs each constraint removed. Also turns
// one config into an Instance: the NVRTC name expression, launch geometry, and argument sizes.
//
// Immutable after build(); instantiate() is const but builds its own Evaluator, so a SearchSpace
// can be shared between threads.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "config/problem.h"
#include "templates/registry.h"

namespace ktune {

struct PruneCount {
  std::string why;  // the constraint's "why"
  int line = 0;     // its line in the manifest
  double configs = 0;
};

struct SpaceReport {
  double total = 0;                // product of domain sizes
  double valid = 0;                // configs passing every constraint
  std::vector<PruneCount> pruned;  // per constraint, most first; zero counts omitted
};

struct LaunchGeometry {
  std::array<std::uint32_t, 3> grid{1, 1, 1};
  std::array<std::uint32_t, 3> block{1, 1, 1};
  std::uint32_t smem = 0;
  std::array<std::uint32_t, 3> cluster{1, 1, 1};  // blocks per thread-block cluster
  std::uint32_t cluster_size() const { return cluster[0] * cluster[1] * cluster[2]; }
  friend bool operator==(const LaunchGeometry&, const LaunchGeometry&) = default;
};

// A tensor map's fields evaluated for one problem and config (cuTensorMapEncodeTiled's inputs
// but the base address, which is the mapped buffer's, per input set).
struct TensorMapValue {
  std::string buffer;                  // the buffer argument it maps
  std::vector<std::uint64_t> dims;     // elements, innermost first
  std::vector<std::uint64_t> strides;  // bytes, one per dimension after the first
  std::vector<std::uint32_t> box;      // elements
  std::vector<std::uint32_t> element_strides;
  TensorMapSwizzle swizzle = TensorMapSwizzle::none;
  TensorMapL2Promotion l2_promotion = TensorMapL2Promotion::b256;
  TensorMapOobFill oob_fill = TensorMapOobFill::zeros;
  friend bool operator==(const TensorMapValue&, const TensorMapValue&) = default;
};

// One kernel argument with its values for a given problem and config.
struct ArgValue {
  std::string name;
  ArgKind kind = ArgKind::buffer;
  BufferRole role = BufferRole::in;
  std::string dtype;       // concrete: bf16 fp16 fp32 i32 (tensor_map: its buffer's)
  std::int64_t count = 0;  // elements
  InitSpec init;
  bool pass = true;  // buffers: false = not a kernel parameter (reached through a tensor map)
  WorkspaceZero zero = WorkspaceZero::kept;  // workspaces
  ScalarType scalar = ScalarType::i32;
  double value = 0;
  TensorMapValue map;  // tensor_map only

  bool is_buffer() const { return kind == ArgKind::buffer; }
};

// A template config made concrete for a problem on a device: all the compiler and the worker
// need.
struct Instance {
  Params params;
  std::string name_expression;  // e.g. "ktune_gemm<ktune_bf16, ktune_bf16, 1, 0, 128, ...>"
  LaunchGeometry launch;
  std::vector<ArgValue> args;
  double metric = 0;  // FLOPs or bytes per launch
  MetricSpec::Kind metric_kind = MetricSpec::Kind::bytes;
  // The throughput a launch time gives, as winner records state it: TFLOP/s of a FLOP metric,
  // GB/s of a byte one; 0 for the other kind.
  double tflops_at(double median_us) const {
    return metric_kind == MetricSpec::Kind::flops ? metric / (median_us * 1e6) : 0;
  }
  double gbps_at(double median_us) const {
    return metric_kind == MetricSpec::Kind::bytes ? metric / (median_us * 1e3) : 0;
  }
  // The value launch.grid was evaluated with: the worker's answer when instantiate() was given
  // one, else the no-GPU fallback max(1, floor(sm_count / cluster size)).
  std::int64_t max_active_clusters = 0;
  // Whether launch.grid reads it (a tuner then asks the worker and instantiates again).
  bool grid_reads_max_active_clusters = false;
  // Work units that add partials into one output tile (the manifest's k_slices, for lookups; 1
  // where it is not given, or is not a whole number from 1 to 1e9: it describes a config and
  // never fails one).
  std::int64_t k_slices = 1;
};

// The arch string a template compiles for on a device: "sm_90", or "sm_90a" for arch_suffix "a".
std::string target_arch(const Manifest& manifest, int cc);

class SearchSpace {
 public:
  // Fails when the template does not support the problem, or nothing survives the constraints
  // (naming the constraint that pruned most). `max_configs`: stop at that many valid configs,
  // in enumeration order (1: the first config, found without enumerating the rest; the report
  // then counts only what was visited).
  static Result<SearchSpace> build(const KernelTemplate& tmpl, const Problem& problem,
                                   const DeviceLimits& limits,
                                   size_t max_configs = std::numeric_limits<size_t>::max());

  const KernelTemplate& template_() const { return *m_template; }
  const Problem& problem() const { return m_problem; }
  const DeviceLimits& limits() const { return m_limits; }
  const std::vector<Params>& configs() const { return m_configs; }
  const SpaceReport& report() const { return m_report; }

 private:
  const KernelTemplate* m_template = nullptr;
  Problem m_problem;
  DeviceLimits m_limits;
  std::vector<Params> m_configs;
  SpaceReport m_report;
};

// What an Instance keeps of its args: every value (what a launch or a v2 lookup's description
// needs), or none, each still evaluated and checked, so a config fails exactly where it would
// with them kept (a v1 lookup entry carries only the name and the launch geometry).
enum class ArgValues { kept, checked };

// Whether the template implements the problem (op, dtype, layout, dims) on the device's compute
// capability; the error names what it implements.
Result<void> check_supported(const KernelTemplate& t, const Problem& p, const DeviceLimits& l);

// Checks `params` against the declared domains and every constraint and makes the Instance.
// Fails naming the first constraint it breaks, a value outside its domain, or an unknown/missing
// param. `max_active_clusters`: what the worker measured for this config's compiled kernel
// (TrialRunner::occupancy); without it launch.grid sees the fallback (see Instance). `params` is
// taken by value and becomes Instance::params (pass a temporary or std::move to spare a copy).
Result<Instance> instantiate(const KernelTemplate& tmpl, const Problem& problem,
                             const DeviceLimits& limits, Params params,
                             std::optional<std::int64_t> max_active_clusters = std::nullopt,
                             ArgValues args = ArgValues::kept);

// The reference kernel's Instance (kernel references only; params empty).
Result<Instance> reference_instance(const KernelTemplate& tmpl, const Problem& problem,
                                    const DeviceLimits& limits);

// The manifest's heuristic_rank for `problem` (0 when it has none, or evaluates to NaN).
// REQUIRES: the template supports the problem (dims in the manifest's order).
double heuristic_rank(const KernelTemplate& tmpl, const Problem& problem);

// The first heuristic rule's config whose `when` holds and which passes the constraints; falls
// through to later rules when a rule's config is invalid for this problem.
Result<Params> heuristic_config(const KernelTemplate& tmpl, const Problem& problem,
                                const DeviceLimits& limits);

// Every heuristic rule's config that passes the constraints for `problem`, whether or not its
// `when` holds: the configs the template's author measured somewhere. Rules in manifest order,
// repeats dropped (a rule and its twin for other outputs often share a config here); empty when
// the template does not support the problem. A tuning job measures them early (tuner/seeds.h), so
// its search starts from every tile family the rules know and not only from the one that fits.
std::vector<Params> rule_configs(const KernelTemplate& tmpl, const Problem& problem,
                                 const DeviceLimits& limits);

// What heuristic_instance() picked. When a rule fit, its config is the rule's own (owned by the
// template's manifest: valid while the template is) and instance.params stays empty, since a
// cold lookup only reads the config (copying a Params map was a fifth of its CPU); when none
// fit, instance.params holds the config found.
struct HeuristicInstance {
  Instance instance;
  const Params* rule = nullptr;
  const Params& config() const { return rule ? *rule : instance.params; }
};

// instantiate(heuristic_config()), evaluating the fitting rule's constraints once (a cold lookup's
// heuristic entries). Fails as either would; config() is the config picked.
Result<HeuristicInstance> heuristic_instance(const KernelTemplate& tmpl, const Problem& problem,
                                             const DeviceLimits& limits,
                                             ArgValues args = ArgValues::kept);

}  // namespace ktune
