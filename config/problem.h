// The vocabulary every layer shares: what is computed (Problem), with which knobs (Params), on
// which silicon (DeviceClass, DeviceLimits). Plain value types, cheap to copy, no I/O.
//
// Three things are kept apart, as in CUTLASS's library: *what* (op, dtypes, layout, dims: the
// Problem), *where* (DeviceClass and its limits), and *how* (a template and its Params).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/error.h"

namespace ktune {

// Element types ktune knows. Spelled as on the wire: "bf16", "fp16", "fp32".
bool is_known_dtype(std::string_view dtype);
// Bytes per element of a known dtype; 0 for an unknown one.
int dtype_bytes(std::string_view dtype);

// What a lookup or tuning job names.
struct Problem {
  std::string op;         // functional key: "gemm", "softmax", ...
  std::string dtype;      // input element type
  std::string out_dtype;  // output element type; equal to dtype unless the op converts
  std::string layout;     // op-specific, e.g. "rr" (A row-major, B row-major) for gemm; "" if none
  std::vector<std::pair<std::string, std::int64_t>>
      dims;  // in the op's order: M, N, K / rows, cols

  // Canonical text key: "gemm|bf16|bf16|rr|M=4096,N=4096,K=4096". Stable; persisted.
  std::string key() const;
  // Value of a dim, or -1 when the problem has no such dim.
  std::int64_t dim(std::string_view name) const;
  // "gemm bf16 rr M=4096 N=4096 K=4096", for people.
  std::string describe() const;

  friend bool operator==(const Problem&, const Problem&) = default;
};

// Parses Problem::key() back. Fails on anything key() would not produce.
Result<Problem> parse_problem_key(std::string_view key);

// Checks a problem a client sent: known dtypes, named dims, each dim in [1, 2^31), the product of
// the dims under 2^48 (no overflow in element counts).
Result<void> validate_problem(const Problem& problem);

// Parses "M=4096,N=4096,K=4096" (also accepts 'x'-free spaces) into ordered dims.
Result<std::vector<std::pair<std::string, std::int64_t>>> parse_dims(std::string_view text);

// A template's knob values, by param name. Ordered, so equal params print and hash equally.
using Params = std::map<std::string, std::int64_t>;

// "BLOCK_M=128,BLOCK_N=128,..." in name order; the canonical text form of Params.
std::string params_to_string(const Params& params);
Result<Params> parse_params(std::string_view text);

// Nodes of one class share tuning tables: same GPU model, compute capability, SM count, memory.
struct DeviceClass {
  std::string name;    // driver's name, e.g. "NVIDIA H200"
  int cc = 0;          // compute capability as major*10 + minor, e.g. 90
  int sm_count = 0;    // streaming multiprocessors
  int memory_gib = 0;  // total device memory, rounded to GiB

  // "nvidia-h200.sm90.132sm.140gib": lowercase, '-' for spaces. Stable; persisted in keys.
  std::string id() const;
  friend bool operator==(const DeviceClass&, const DeviceClass&) = default;
};

// Parses DeviceClass::id() back (the name comes back lowercased, as in the id).
Result<DeviceClass> parse_device_class_id(std::string_view id);

// What the constraints of a template may test about the device. Defaults: an H100/H200-class
// sm_90 part, used when compiling without a GPU.
struct DeviceLimits {
  int cc = 90;
  int sm_count = 132;
  int max_threads_per_block = 1024;
  int max_smem_per_block = 232448;  // opt-in limit (227 KiB) on sm_90
  int max_regs_per_block = 65536;
  int max_regs_per_thread = 255;
  int l2_bytes = 50 * 1024 * 1024;

  // Limits of a named arch without a device ("sm_80", "sm_90", "sm_90a").
  static Result<DeviceLimits> for_arch(std::string_view arch);
};

}  // namespace ktune
