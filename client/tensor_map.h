// A `tensor_map` launch argument (docs/protocol.md § Launch descriptions) parsed once, at
// Kernel::create(), into cuTensorMapEncodeTiled's inputs but the base address — which is the
// address of the buffer it maps, known only at launch. The enum fields hold the driver's values
// (cuda.h's CUtensorMapDataType, ...Swizzle, ...L2promotion, ...FloatOOBfill) as plain integers,
// so this header needs no <cuda.h>; the mapping is the tuner's (tuner/gpu_worker.cc): data type
// from the buffer's dtype, interleave none, OOB fill `nan` = NAN_REQUEST_ZERO_FMA, else none.
// Header-only; plain functions and value types.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "launch.h"

namespace ktune {

struct TensorMapPlan {
  static constexpr std::uint32_t k_max_rank = 5;  // cuTensorMapEncodeTiled's limit
  std::string name;                               // the tensor_map argument
  int buffer = 0;               // which of Kernel::launch()'s buffers it maps (index into them)
  std::uint32_t data_type = 0;  // CUtensorMapDataType
  std::uint32_t rank = 0;
  std::array<std::uint64_t, k_max_rank> dims{};     // elements, innermost first
  std::array<std::uint64_t, k_max_rank> strides{};  // bytes, rank - 1 of them
  std::array<std::uint32_t, k_max_rank> box{};
  std::array<std::uint32_t, k_max_rank> element_strides{};
  std::uint32_t interleave = 0;  // CU_TENSOR_MAP_INTERLEAVE_NONE
  std::uint32_t swizzle = 0;     // CUtensorMapSwizzle
  std::uint32_t l2_promotion = 0;
  std::uint32_t oob_fill = 0;
};

namespace detail {

// CUtensorMapDataType of a wire dtype (cuda.h's values); -1 for one TMA cannot map here.
inline int tensor_map_data_type(std::string_view dtype) {
  if (dtype == "bf16") return 9;  // CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
  if (dtype == "fp16") return 6;  // CU_TENSOR_MAP_DATA_TYPE_FLOAT16
  if (dtype == "fp32") return 7;  // CU_TENSOR_MAP_DATA_TYPE_FLOAT32
  if (dtype == "i32") return 3;   // CU_TENSOR_MAP_DATA_TYPE_INT32
  return -1;
}

// The index of `text` in `names` (the driver enum's order), or -1.
template <size_t N>
int enum_index(std::string_view text, const std::array<std::string_view, N>& names) {
  for (size_t i = 0; i < N; ++i)
    if (names[i] == text) return int(i);
  return -1;
}

}  // namespace detail

// Parses `map` (an argument of kind tensor_map) against the description's `args`: every field
// present and of the right type, rank 1-5, strides rank - 1 of them, box and element_strides
// rank of them, known swizzle / l2_promotion / oob_fill strings, the named buffer an in/out/inout
// argument whose dtype TMA can map and whose bytes the map stays inside. `buffer_names` are
// launch()'s buffers in order (the plan keeps the mapped one's index). bad_request errors name
// the argument.
inline protocol::Expected<TensorMapPlan> parse_tensor_map(
    const protocol::LaunchArg& map, const std::vector<protocol::LaunchArg>& args,
    const std::vector<std::string>& buffer_names) {
  using protocol::ErrorKind;
  auto fail = [&](const std::string& why) {
    return protocol::error(ErrorKind::bad_request,
                           "tensor_map argument '" + map.name + "': " + why);
  };
  const protocol::Json& j = map.tensor_map;
  if (!j.is_object()) return fail("no \"tensor_map\" object");
  TensorMapPlan p;
  p.name = map.name;
  std::string buffer;
  std::vector<std::uint64_t> dims, strides, element_strides;
  std::vector<std::uint32_t> box;
  std::string swizzle = "none", l2 = "256B", oob = "zeros";  // the manifest's defaults
  try {
    buffer = j.at("buffer").get<std::string>();
    dims = j.at("dims").get<std::vector<std::uint64_t>>();
    strides = j.at("strides").get<std::vector<std::uint64_t>>();
    box = j.at("box").get<std::vector<std::uint32_t>>();
    if (auto e = j.find("element_strides"); e != j.end())
      element_strides = e->get<std::vector<std::uint64_t>>();
    else
      element_strides.assign(dims.size(), 1);
    if (auto s = j.find("swizzle"); s != j.end()) swizzle = s->get<std::string>();
    if (auto s = j.find("l2_promotion"); s != j.end()) l2 = s->get<std::string>();
    if (auto s = j.find("oob_fill"); s != j.end()) oob = s->get<std::string>();
  } catch (const std::exception& e) {
    return fail(std::string("malformed: ") + e.what());
  }
  const size_t rank = dims.size();
  if (rank < 1 || rank > TensorMapPlan::k_max_rank)
    return fail("rank " + std::to_string(rank) + " (dims) is not 1 to 5");
  if (strides.size() != rank - 1)
    return fail(std::to_string(strides.size()) + " strides for rank " + std::to_string(rank) +
                " (needs rank - 1)");
  if (box.size() != rank || element_strides.size() != rank)
    return fail("box and element_strides need " + std::to_string(rank) + " entries each (have " +
                std::to_string(box.size()) + " and " + std::to_string(element_strides.size()) +
                ")");
  const int sw =
      detail::enum_index(swizzle, std::array<std::string_view, 4>{"none", "32B", "64B", "128B"});
  if (sw < 0) return fail("unknown swizzle '" + swizzle + "' (none, 32B, 64B, 128B)");
  const int l2p =
      detail::enum_index(l2, std::array<std::string_view, 4>{"none", "64B", "128B", "256B"});
  if (l2p < 0) return fail("unknown l2_promotion '" + l2 + "' (none, 64B, 128B, 256B)");
  if (oob != "zeros" && oob != "nan") return fail("unknown oob_fill '" + oob + "' (zeros, nan)");
  const protocol::LaunchArg* target = nullptr;
  for (const auto& a : args)
    if (a.name == buffer) target = &a;
  if (!target) return fail("maps '" + buffer + "', which is no argument");
  if (target->kind != protocol::ArgKind::in && target->kind != protocol::ArgKind::out &&
      target->kind != protocol::ArgKind::inout)
    return fail("maps '" + buffer + "', which is not an in/out/inout buffer");
  p.buffer = -1;
  for (size_t i = 0; i < buffer_names.size(); ++i)
    if (buffer_names[i] == buffer) p.buffer = int(i);
  if (p.buffer < 0) return fail("maps '" + buffer + "', which is not one of launch()'s buffers");
  const int type = detail::tensor_map_data_type(target->dtype);
  if (type < 0)
    return fail("buffer '" + buffer + "' has dtype '" + target->dtype +
                "', which TMA cannot map here (bf16, fp16, fp32, i32)");
  // The map must not reach past the buffer (TMA would touch memory outside it).
  const std::uint64_t span = rank == 1
                                 ? dims[0] * std::uint64_t(protocol::dtype_bytes(target->dtype))
                                 : strides[rank - 2] * dims[rank - 1];
  if (span > std::uint64_t(target->bytes))
    return fail("spans " + std::to_string(span) + " bytes but '" + buffer + "' holds " +
                std::to_string(target->bytes));
  p.data_type = std::uint32_t(type);
  p.rank = std::uint32_t(rank);
  for (size_t i = 0; i < rank; ++i) {
    p.dims[i] = dims[i];
    p.box[i] = box[i];
    p.element_strides[i] = std::uint32_t(element_strides[i]);
    if (i + 1 < rank) p.strides[i] = strides[i];
  }
  p.swizzle = std::uint32_t(sw);
  p.l2_promotion = std::uint32_t(l2p);
  p.oob_fill = oob == "nan" ? 1u : 0u;  // CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA : NONE
  return p;
}

}  // namespace ktune
