// Manifest: the YAML description of a kernel template (docs/templates.md is the spec).
//
// load_manifest() reads and checks one <name>.yaml: structure, types, names, and every expression
// against the names in scope. Every error is "file:line: where: what is wrong". A loaded Manifest
// is immutable and safe to share between threads.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "config/problem.h"
#include "templates/expression.h"

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
  int line = 0;
};

enum class BufferRole { in, out, inout, workspace };
// What a workspace needs and leaves. kept: zeroed once before the kernel's first launch, and the
// kernel leaves it zeroed (tile counters, tickets). none: scratch the kernel writes before it
// reads (split-K partials); it needs no zeroing and is left holding anything.
enum class WorkspaceZero { kept, none };
enum class ScalarType { i32, i64, f32 };
std::string_view to_string(BufferRole role);
std::string_view to_string(ScalarType type);

struct InitSpec {
  enum class Kind { uniform, normal } kind = Kind::uniform;
  double a = -1;  // uniform: low;  normal: mean
  double b = 1;   // uniform: high; normal: standard deviation
};

struct ArgSpec {
  std::string name;
  bool is_buffer = true;
  // buffer
  BufferRole role = BufferRole::in;
  std::string dtype;  // "in", "out", or a concrete type: bf16 fp16 fp32 i32
  Expression count;
  InitSpec init;
  WorkspaceZero zero = WorkspaceZero::kept;  // workspaces only (`zero:` in the manifest)
  // scalar
  ScalarType scalar = ScalarType::i32;
  Expression value;
  int line = 0;
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
  std::vector<std::string> nvrtc_options;

  std::vector<ParamDomain> params;
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
  // layout constants, device limits.
  SymbolTable symbols;

  const ParamDomain* param(std::string_view name) const;
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

Result<Manifest> load_manifest(const std::string& path);
// For tests: parse manifest text as if it were the file `path` (source and headers are not read).
Result<Manifest> parse_manifest(const std::string& yaml, const std::string& path);

// The C++ storage type of a dtype in kernel source: "ktune_bf16", "ktune_fp16", "float", "int".
std::string cpp_type(std::string_view dtype);

}  // namespace ktune
