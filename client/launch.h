// Protocol v2 messages for launching a served kernel: the launch description a v2 lookup entry
// carries ("launch"), and the `kernel` op's request and reply (the cubin, base64 in JSON).
// docs/protocol.md § "Launch descriptions" and § kernel are the spec; this header is their C++
// form, shared by the daemon (to_json) and the clients (the *_from_json parsers).
// Header-only (nlohmann_json). Thread-safety: plain functions and value types.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base64.h"
#include "protocol.h"

namespace ktune::protocol {

// What a kernel parameter is. Spelled on the wire as below; never renamed.
enum class ArgKind {
  in,          // buffer the kernel reads
  out,         // buffer the kernel writes (every element)
  inout,       // buffer read and written
  workspace,   // scratch memory the caller provides; see zero_before_first_use / left_zeroed
  scalar,      // a value passed by copy (dtype i32, i64 or f32)
  tensor_map,  // a CUtensorMap (128 bytes, by value) describing a buffer; its fields are in
               // LaunchArg::tensor_map (gemm_tma; client/tensor_map.h parses them)
};

inline constexpr std::pair<ArgKind, std::string_view> k_arg_kind_names[] = {
    {ArgKind::in, "in"},         {ArgKind::out, "out"},
    {ArgKind::inout, "inout"},   {ArgKind::workspace, "workspace"},
    {ArgKind::scalar, "scalar"}, {ArgKind::tensor_map, "tensor_map"},
};

inline std::string_view to_string(ArgKind k) {
  for (const auto& [kind, name] : k_arg_kind_names)
    if (kind == k) return name;
  return "in";
}

inline bool is_buffer(ArgKind k) {
  return k == ArgKind::in || k == ArgKind::out || k == ArgKind::inout || k == ArgKind::workspace;
}

// Bytes per element of a wire dtype; 0 for an unknown one.
inline int dtype_bytes(std::string_view dtype) {
  if (dtype == "bf16" || dtype == "fp16") return 2;
  if (dtype == "fp32" || dtype == "i32" || dtype == "f32") return 4;
  if (dtype == "i64" || dtype == "fp64") return 8;
  if (dtype == "i8" || dtype == "u8" || dtype == "fp8") return 1;
  return 0;
}

// One kernel parameter (or, with pass == false, memory that is no parameter of its own).
struct LaunchArg {
  std::string name;
  ArgKind kind = ArgKind::in;
  std::string dtype;       // buffers: element type (bf16 fp16 fp32 i32); scalars: i32 i64 f32
  std::int64_t count = 0;  // buffers: elements, for the asked shape
  std::int64_t bytes = 0;  // buffers: count * element size
  double value = 0;        // scalars: the value for the asked shape (callers may override some)
  bool pass = true;        // false: not a kernel parameter (memory a tensor_map argument names)
  bool zero_before_first_use = false;  // workspace: must read zero at the kernel's first launch
  bool left_zeroed = false;            // workspace: reads zero again after every launch
  Json tensor_map;                     // tensor_map: "buffer", "dims", "strides", "box", ...
};

struct LaunchDescription {
  std::string name_expression;  // what NVRTC was asked for
  std::string arch;             // what the cubin is compiled for: sm_80, sm_90, sm_90a
  std::string cubin_id;         // stable hash of what makes the cubin valid (the kernel op's key)
  std::array<std::uint32_t, 3> grid{1, 1, 1};
  std::array<std::uint32_t, 3> block{1, 1, 1};
  std::array<std::uint32_t, 3> cluster{1, 1, 1};  // thread-block cluster; see has_cluster
  bool has_cluster = false;     // the template declares a cluster: launch with the attribute
  std::uint32_t smem = 0;       // dynamic shared memory bytes
  std::vector<LaunchArg> args;  // in the kernel's parameter order
};

inline Json to_json(const LaunchArg& a) {
  Json j = {{"name", a.name}, {"kind", std::string(to_string(a.kind))}, {"dtype", a.dtype}};
  if (is_buffer(a.kind)) {
    j["count"] = a.count;
    j["bytes"] = a.bytes;
  }
  if (a.kind == ArgKind::scalar) {
    if (a.dtype == "f32")
      j["value"] = a.value;
    else
      j["value"] = std::int64_t(a.value);
  }
  if (a.kind == ArgKind::workspace) {
    j["zero_before_first_use"] = a.zero_before_first_use;
    j["left_zeroed"] = a.left_zeroed;
  }
  if (a.kind == ArgKind::tensor_map) j["tensor_map"] = a.tensor_map;
  if (!a.pass) j["pass"] = false;
  return j;
}

inline Json to_json(const LaunchDescription& d) {
  Json args = Json::array();
  for (const auto& a : d.args) args.push_back(to_json(a));
  Json j = {{"name_expression", d.name_expression},
            {"arch", d.arch},
            {"cubin_id", d.cubin_id},
            {"grid", d.grid},
            {"block", d.block}};
  if (d.has_cluster) j["cluster"] = d.cluster;
  j["smem"] = d.smem;
  j["args"] = std::move(args);
  return j;
}

inline Expected<LaunchDescription> launch_from_json(const Json& j) {
  LaunchDescription d;
  try {
    d.name_expression = j.at("name_expression").get<std::string>();
    d.arch = j.at("arch").get<std::string>();
    d.cubin_id = j.at("cubin_id").get<std::string>();
    d.grid = j.at("grid").get<std::array<std::uint32_t, 3>>();
    d.block = j.at("block").get<std::array<std::uint32_t, 3>>();
    if (auto c = j.find("cluster"); c != j.end()) {
      d.cluster = c->get<std::array<std::uint32_t, 3>>();
      d.has_cluster = true;
    }
    d.smem = j.at("smem").get<std::uint32_t>();
    for (const auto& aj : j.at("args")) {
      LaunchArg a;
      a.name = aj.at("name").get<std::string>();
      const std::string kind = aj.at("kind").get<std::string>();
      bool known = false;
      for (const auto& [k, name] : k_arg_kind_names)
        if (name == kind) a.kind = k, known = true;
      if (!known)
        return error(ErrorKind::bad_request,
                     "launch description: argument '" + a.name + "' has unknown kind '" + kind +
                         "' (this client knows in, out, inout, workspace, scalar, tensor_map)");
      a.dtype = aj.at("dtype").get<std::string>();
      a.count = aj.value("count", std::int64_t(0));
      a.bytes = aj.value("bytes", std::int64_t(0));
      a.value = aj.value("value", 0.0);
      a.pass = aj.value("pass", true);
      a.zero_before_first_use = aj.value("zero_before_first_use", false);
      a.left_zeroed = aj.value("left_zeroed", false);
      if (auto t = aj.find("tensor_map"); t != aj.end()) a.tensor_map = *t;
      d.args.push_back(std::move(a));
    }
  } catch (const std::exception& e) {
    return error(ErrorKind::bad_request, std::string("malformed launch description: ") + e.what());
  }
  return d;
}

// ---- op kernel ------------------------------------------------------------------------------

// Which kernel: a template config for a problem on a device class. Either spelled out, or the
// entry a lookup returned ("entry": its template, template_hash, params and kernel.arch).
struct KernelRequest {
  ProblemSpec problem;
  std::string device;  // device class id or unique prefix; "" = this node's GPU
  std::string template_name;
  std::vector<std::pair<std::string, std::int64_t>> params;
  std::string template_hash;  // optional: refuse if the installed template differs (stale entry)
  std::string arch;           // optional: refuse if the device class compiles for another arch
};

inline Json to_json(const KernelRequest& r) {
  Json params = Json::object();
  for (const auto& [n, v] : r.params) params[n] = v;
  Json j = {{"problem", to_json(r.problem)}, {"template", r.template_name}, {"params", params}};
  if (!r.device.empty()) j["device"] = r.device;
  if (!r.template_hash.empty()) j["template_hash"] = r.template_hash;
  if (!r.arch.empty()) j["arch"] = r.arch;
  return j;
}

// The request for the kernel of a lookup entry (what clients send after a v2 lookup).
inline KernelRequest kernel_request_for(const ProblemSpec& problem, const std::string& device,
                                        const LookupEntry& e) {
  KernelRequest r;
  r.problem = problem;
  r.device = device;
  r.template_name = e.template_name;
  r.params = e.params;
  r.template_hash = e.template_hash;
  r.arch = e.arch;
  return r;
}

// A config as a request gives it: a JSON object of param name: integer. `what` names it in errors
// ("\"params\"", "seeds[0]"), `prefix` each of its params ("params.BLOCK_M").
inline Expected<std::vector<std::pair<std::string, std::int64_t>>> config_from_json(
    const Json& j, const std::string& what, const std::string& prefix) {
  if (!j.is_object())
    return error(ErrorKind::bad_request, what + " must be an object of name: integer");
  std::vector<std::pair<std::string, std::int64_t>> out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_number_integer())
      return error(ErrorKind::bad_request, prefix + "." + it.key() + " must be an integer");
    out.emplace_back(it.key(), it.value().get<std::int64_t>());
  }
  return out;
}

inline Expected<KernelRequest> kernel_request_from_json(const Json& body) {
  KernelRequest r;
  auto pj = body.find("problem");
  if (pj == body.end()) return error(ErrorKind::bad_request, "missing \"problem\"");
  auto p = problem_from_json(*pj);
  if (!p) return std::unexpected(p.error());
  r.problem = std::move(*p);
  auto device = get_string(body, "device", false);
  if (!device) return std::unexpected(device.error());
  r.device = *device;
  // Fields come from the request itself or from the lookup entry it quotes.
  const Json* src = &body;
  if (auto e = body.find("entry"); e != body.end()) {
    if (!e->is_object()) return error(ErrorKind::bad_request, "\"entry\" must be a lookup entry");
    if (body.contains("template") || body.contains("params"))
      return error(ErrorKind::bad_request, "give \"entry\" or \"template\" + \"params\", not both");
    src = &*e;
    if (auto k = e->find("kernel"); k != e->end() && k->is_object()) {
      auto arch = get_string(*k, "arch", false);
      if (!arch) return std::unexpected(arch.error());
      r.arch = *arch;
    }
  }
  auto name = get_string(*src, "template", true);
  if (!name) return std::unexpected(name.error());
  r.template_name = *name;
  auto hash = get_string(*src, "template_hash", false);
  if (!hash) return std::unexpected(hash.error());
  r.template_hash = *hash;
  if (src == &body) {
    auto arch = get_string(body, "arch", false);
    if (!arch) return std::unexpected(arch.error());
    r.arch = *arch;
  }
  auto params = src->find("params");
  auto config =
      config_from_json(params == src->end() ? Json() : *params, "\"params\"", "params");
  if (!config) return std::unexpected(config.error());
  r.params = std::move(*config);
  return r;
}

// The kernel op's result: everything needed to load and launch the kernel without compiling.
struct KernelImage {
  std::string template_name;
  std::string template_hash;
  std::vector<std::pair<std::string, std::int64_t>> params;
  std::string device;        // the device class answered for
  std::string problem_key;   // canonical key of the problem
  std::string nvrtc;         // NVRTC version that compiled the cubin
  std::string lowered_name;  // the mangled entry symbol to load (cuModuleGetFunction)
  int registers = 0;         // per thread (ptxas)
  int smem_static = 0;       // static shared memory bytes (ptxas)
  int spill_bytes = 0;       // spill stores + loads (ptxas)
  double compile_ms = 0;     // NVRTC time when it was compiled
  std::string source;        // cache | compiled | shared (joined a compile already running)
  LaunchDescription launch;  // arch and cubin_id are here
  std::string cubin;         // the ELF image (raw bytes; base64 on the wire)
};

inline Json to_json(const KernelImage& k) {
  Json params = Json::object();
  for (const auto& [n, v] : k.params) params[n] = v;
  return {{"template", k.template_name},
          {"template_hash", k.template_hash},
          {"params", params},
          {"device", k.device},
          {"problem_key", k.problem_key},
          {"arch", k.launch.arch},
          {"cubin_id", k.launch.cubin_id},
          {"nvrtc", k.nvrtc},
          {"lowered_name", k.lowered_name},
          {"name_expression", k.launch.name_expression},
          {"registers", k.registers},
          {"smem_static", k.smem_static},
          {"spill_bytes", k.spill_bytes},
          {"compile_ms", k.compile_ms},
          {"source", k.source},
          {"launch", to_json(k.launch)},
          {"cubin_bytes", k.cubin.size()},
          {"encoding", "base64"},
          {"cubin", base64_encode(k.cubin)}};
}

inline Expected<KernelImage> kernel_image_from_json(const Json& j) {
  KernelImage k;
  try {
    k.template_name = j.at("template").get<std::string>();
    k.template_hash = j.value("template_hash", "");
    for (auto it = j.at("params").begin(); it != j.at("params").end(); ++it)
      k.params.emplace_back(it.key(), it.value().get<std::int64_t>());
    k.device = j.value("device", "");
    k.problem_key = j.value("problem_key", "");
    k.nvrtc = j.value("nvrtc", "");
    k.lowered_name = j.at("lowered_name").get<std::string>();
    k.registers = j.value("registers", 0);
    k.smem_static = j.value("smem_static", 0);
    k.spill_bytes = j.value("spill_bytes", 0);
    k.compile_ms = j.value("compile_ms", 0.0);
    k.source = j.value("source", "");
    if (j.value("encoding", "") != "base64")
      return error(ErrorKind::bad_request, "kernel reply: unknown cubin encoding");
    auto launch = launch_from_json(j.at("launch"));
    if (!launch) return std::unexpected(launch.error());
    k.launch = std::move(*launch);
    auto cubin = base64_decode(j.at("cubin").get<std::string>());
    if (!cubin || cubin->size() != j.at("cubin_bytes").get<size_t>())
      return error(ErrorKind::bad_request, "kernel reply: the cubin is not the base64 of " +
                                               j.at("cubin_bytes").dump() + " bytes");
    k.cubin = std::move(*cubin);
  } catch (const std::exception& e) {
    return error(ErrorKind::bad_request, std::string("malformed kernel reply: ") + e.what());
  }
  return k;
}

}  // namespace ktune::protocol
