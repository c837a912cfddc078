// Manifest: the YAML description of a kernel template (docs/templates.md is the spec).
//
// load_manifest() reads and checks one <name>.yaml: structure, types, names, and every expression
// against the names in scope. Every error is "file:line: where: what is wrong". A loaded Manifest
// is immutable and safe to share between threads.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "config/problem.h"
#include "templates/expression.h"

namespace YAML {
class Node;
}  // namespace YAML

namespace ktune {

struct ParamDomain {
  std::string name;
  std::vector<std::int64_t> values;
  std::vector<std::string> value_names;  // optional names for people, parallel to values
  int line = 0;
};

struct NamedExpr {
  std::string name;
  Expression expr;
  int line = 0;
};

struct Constraint {
  Expression expr;
  std::string why;
  int line = 0;
};

struct LaunchSpec {
  std::array<Expression, 3> grid;
  std::array<Expression, 3> block;
  Expression smem;
  std::array<Expression, 3> cluster;  // thread-block cluster dims ("1" each when not given)
  int line = 0;
};

enum class ArgKind { buffer, scalar, tensor_map };
enum class BufferRole { in, out, inout, workspace };
// What a workspace needs and leaves. kept: zeroed once before the kernel's first launch, and the
// kernel leaves it zeroed (tile counters, tickets). none: scratch the kernel writes before it
// reads (split-K partials); it needs no zeroing and is left holding anything.
enum class WorkspaceZero { kept, none };
enum class ScalarType { i32, i64, f32 };
// The CUtensorMap encoding options a manifest can choose (cuTensorMapEncodeTiled's enums).
enum class TensorMapSwizzle { none, b32, b64, b128 };
enum class TensorMapL2Promotion { none, b64, b128, b256 };
enum class TensorMapOobFill { zeros, nan };
std::string_view to_string(ArgKind kind);
std::string_view to_string(BufferRole role);
std::string_view to_string(ScalarType type);
std::string_view to_string(TensorMapSwizzle swizzle);
std::string_view to_string(TensorMapL2Promotion promotion);
std::string_view to_string(TensorMapOobFill fill);
// Parsers of the manifest spellings above ("128B", "256B", "zeros", ...); nullopt when unknown.
std::optional<TensorMapSwizzle> parse_swizzle(std::string_view text);
std::optional<TensorMapL2Promotion> parse_l2_promotion(std::string_view text);
std::optional<TensorMapOobFill> parse_oob_fill(std::string_view text);
// Bytes of one swizzle span (the most bytes a box row may have); 0 for none.
int swizzle_bytes(TensorMapSwizzle swizzle);

struct InitSpec {
  enum class Kind { uniform, normal } kind = Kind::uniform;
  double a = -1;  // uniform: low;  normal: mean
  double b = 1;   // uniform: high; normal: standard deviation
};

// A TMA tensor map over a buffer argument (docs/templates.md, "Tensor maps"): what
// cuTensorMapEncodeTiled takes, as expressions. The element type is the buffer's dtype.
struct TensorMapSpec {
  std::string buffer;                       // the buffer argument it maps
  std::vector<Expression> dims;             // elements per dimension, innermost first (rank 1..5)
  std::vector<Expression> strides;          // bytes between steps of dims[1..]: rank - 1 of them
  std::vector<Expression> box;              // elements one copy moves, per dimension (1..256)
  std::vector<Expression> element_strides;  // per dimension (1..8), "1" each when not given
  TensorMapSwizzle swizzle = TensorMapSwizzle::none;
  TensorMapL2Promotion l2_promotion = TensorMapL2Promotion::b256;
  TensorMapOobFill oob_fill = TensorMapOobFill::zeros;
};

struct ArgSpec {
  std::string name;
  ArgKind kind = ArgKind::buffer;
  // buffer
  BufferRole role = BufferRole::in;
  std::string dtype;  // "in", "out", or a concrete type: bf16 fp16 fp32 i32
  Expression count;
  InitSpec init;
  bool pass = true;  // false: allocated, filled and verified, but not a kernel parameter
  WorkspaceZero zero = WorkspaceZero::kept;  // workspaces only (`zero:` in the manifest)
  // scalar
  ScalarType scalar = ScalarType::i32;
  Expression value;
  // tensor_map
  TensorMapSpec map;
  int line = 0;

  bool is_buffer() const { return kind == ArgKind::buffer; }
};

struct ReferenceSpec {
  std::string builtin;                     // "cublas_gemm", or "" for a kernel reference
  std::string entry;                       // kernel reference: function template
  std::vector<std::string> template_args;  // type symbols, layout constants, dims
  LaunchSpec launch;
};

struct HeuristicRule {
  Expression when;  // empty text: always
  Params params;
  int line = 0;
};

struct MetricSpec {
  enum class Kind { flops, bytes } kind = Kind::bytes;
  Expression amount;
};

// A heuristic rule made ready when the manifest loads: its params as the values their slots are
// bound to (every rule is a whole config within its domains: the parser checks), and what its
// params alone decide folded once (fold(): the derived values they fix, and the constraints they
// settle: `STREAMK == 0 || units > wave_clusters` holds for every problem when STREAMK is 0).
// Trying the rule for a problem then evaluates only the constraints left open and the derived
// values those read (a cold lookup tries rules of every template of its op); the other derived
// values only once it fits.
struct RulePlan {
  std::vector<double> params;   // per Manifest::params
  std::vector<double> derived;  // per Manifest::derived; set where `derived_known`
  std::vector<bool> derived_known;  // per Manifest::derived: decided by the params alone
  std::vector<int> check_derived;   // derived values (indices, in order) the checks read
  std::vector<int> checks;          // constraints (indices) the params leave open
  std::vector<int> rest_derived;    // the other derived values, evaluated once the rule fits
  // Every constraint the params alone decide holds (else the rule never fits).
  bool fixed_constraints_hold = true;
  // Its `when` is the previous rule's text and reads no param or derived value (nothing trying a
  // rule sets): it holds exactly when the previous rule's did (rules come in runs of one `when`).
  bool when_repeats = false;
};

// The value-array slots of the names instantiate() binds on every call, resolved once when the
// manifest loads so that a cold lookup probes no symbol table (see Manifest::symbols).
struct ManifestSlots {
  std::vector<int> params;   // per Manifest::params
  std::vector<int> dims;     // per Manifest::dims
  std::vector<int> derived;  // per Manifest::derived
  std::vector<int> heuristic_values;  // per Manifest::heuristic_values
  int in_bytes = -1;
  int out_bytes = -1;
  std::vector<int> device;  // per k_device_symbols
  int max_active_clusters = -1;
  std::vector<int> layout_constants;  // every layout's constants (0 unless the problem's layout)
  std::map<std::string, std::vector<std::pair<int, std::int64_t>>> layouts;  // by layout name
  std::vector<int> template_args;            // per Manifest::template_args; -1 for T_IN and T_OUT
  std::vector<int> reference_template_args;  // the same for reference.template_args
  std::vector<RulePlan> rules;  // per Manifest::heuristic
};

struct Manifest {
  std::string path;  // the .yaml file
  std::string dir;   // its directory
  std::string name;
  std::string op;
  int version = 1;
  std::string description;
  std::string source;                // path of the .cuh, resolved
  std::vector<std::string> headers;  // paths, resolved
  std::string entry;
  std::vector<std::string> dims;
  std::vector<std::string> dtypes;
  std::vector<std::string> out_dtypes;  // empty: output dtype equals input dtype
  std::map<std::string, std::map<std::string, std::int64_t>> layouts;
  std::string
      default_layout;  // the first layout the manifest lists; used when a problem names none
  int min_cc = 0;
  int max_cc = 0;  // 0: no upper bound
  std::string arch_suffix;
  // Where this template's heuristic stands among those of the other templates of its op that
  // can run a problem: higher first (lookups list heuristic entries, and jobs measure them, in
  // that order; equal ranks keep the registry's order). An expression over the problem alone
  // (dims, in_bytes, out_bytes, layout constants), so a template can rank first only for the
  // shapes its heuristic is good at; empty text: 0. Evaluate with heuristic_rank() (space.h).
  Expression heuristic_rank;
  // Template hashes of earlier versions whose kernel is this one (16 hex digits each): records
  // written under them are served as measured with this kernel (KernelTemplate::same_kernel).
  // For the hashes records carried before 2026-12-06 (kernel hash v1, of every byte), so that
  // no later heuristic edit retires them; outside the kernel hash (docs/templates.md).
  std::vector<std::string> previous_hashes;
  // How many work units add their partial results into one output tile (split-K's k-slices):
  // an expression over params, derived values, dims and device limits; empty text: 1. Lookups
  // read it to tell a split config's tiles from its units (LookupService::idles_here). It
  // changes no kernel: outside the kernel hash.
  Expression k_slices;
  std::vector<std::string> nvrtc_options;

  std::vector<ParamDomain> params;
  // Named expressions over the problem and the device only (dims, dtype sizes, layout constants,
  // device limits, earlier heuristic values), bound with the problem before any config: what
  // several heuristic `when`s compare (tile counts, waves) is written once.
  std::vector<NamedExpr> heuristic_values;
  std::vector<NamedExpr> derived;
  std::vector<Constraint> constraints;
  std::vector<std::string> template_args;
  LaunchSpec launch;
  std::vector<ArgSpec> args;
  ReferenceSpec reference;
  std::map<std::string, double> tolerance;  // by output dtype
  MetricSpec metric;
  std::vector<HeuristicRule> heuristic;

  // Every name an expression may read, with fixed slots: params, derived, dims, dtype sizes,
  // layout constants, device limits, heuristic values.
  SymbolTable symbols;
  ManifestSlots slots;  // filled from `symbols` by the parser, after every name is added

  const ParamDomain* param(std::string_view name) const;
  // Whether launch.grid reads max_active_clusters (so a tuner asks the worker for it).
  bool grid_reads_max_active_clusters() const;
  // Whether this template serves the problem's dtypes and layout on a device of compute
  // capability `cc` (dims are checked by the constraints).
  bool supports(const Problem& problem, int cc) const;
  // Product of the param domain sizes.
  double space_size() const;
};

// The device-limit names every manifest may read, in slot order after the template's own names.
inline constexpr const char* k_device_symbols[] = {"cc",
                                                   "sm_count",
                                                   "max_threads_per_block",
                                                   "max_smem_per_block",
                                                   "max_regs_per_block",
                                                   "max_regs_per_thread",
                                                   "l2_bytes"};
// The one name only launch.grid may read: how many clusters of the config's launch.cluster (one
// block each when no cluster is given) can be resident at once. The worker asks the driver
// (cuOccupancyMaxActiveClusters on the compiled kernel); without a GPU it is
// max(1, floor(sm_count / cluster size)), i.e. one block per SM.
inline constexpr const char* k_max_active_clusters = "max_active_clusters";

Result<Manifest> load_manifest(const std::string& path);
// The manifest `path` from its text, already read (the registry hashes the same bytes it parses).
// `document`, when given, receives the parsed YAML (the registry's kernel hash reads it again).
Result<Manifest> load_manifest(const std::string& path, const std::string& text,
                               YAML::Node* document = nullptr);
// For tests: parse manifest text as if it were the file `path` (source and headers are not read).
Result<Manifest> parse_manifest(const std::string& yaml, const std::string& path);

// The C++ storage type of a dtype in kernel source: "ktune_bf16", "ktune_fp16", "float", "int".
std::string cpp_type(std::string_view dtype);

}  // namespace ktune
