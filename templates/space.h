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
  friend bool operator==(const LaunchGeometry&, const LaunchGeometry&) = default;
};

// One kernel argument with its values for a given problem and config.
struct ArgValue {
  std::string name;
  bool is_buffer = true;
  BufferRole role = BufferRole::in;
  std::string dtype;       // concrete: bf16 fp16 fp32 i32
  std::int64_t count = 0;  // elements
  InitSpec init;
  WorkspaceZero zero = WorkspaceZero::kept;  // workspaces
  ScalarType scalar = ScalarType::i32;
  double value = 0;
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
};

// The arch string a template compiles for on a device: "sm_90", or "sm_90a" for arch_suffix "a".
std::string target_arch(const Manifest& manifest, int cc);

class SearchSpace {
 public:
  // Fails when the template does not support the problem, or nothing survives the constraints
  // (naming the constraint that pruned most).
  static Result<SearchSpace> build(const KernelTemplate& tmpl, const Problem& problem,
                                   const DeviceLimits& limits);

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

// Checks `params` against every constraint and makes the Instance. Fails naming the first
// constraint it breaks, or an unknown/missing param.
Result<Instance> instantiate(const KernelTemplate& tmpl, const Problem& problem,
                             const DeviceLimits& limits, const Params& params);

// The reference kernel's Instance (kernel references only; params empty).
Result<Instance> reference_instance(const KernelTemplate& tmpl, const Problem& problem,
                                    const DeviceLimits& limits);

// The first heuristic rule's config whose `when` holds and which passes the constraints; falls
// through to later rules when a rule's config is invalid for this problem.
Result<Params> heuristic_config(const KernelTemplate& tmpl, const Problem& problem,
                                const DeviceLimits& limits);

}  // namespace ktune
