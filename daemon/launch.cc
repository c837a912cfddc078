#include "daemon/launch.h"

#include "tuner/compiler.h"

namespace ktune {
namespace {

protocol::ArgKind kind_of(const ArgValue& a) {
  if (a.kind == ArgKind::scalar) return protocol::ArgKind::scalar;
  if (a.kind == ArgKind::tensor_map) return protocol::ArgKind::tensor_map;
  switch (a.role) {
    case BufferRole::in:
      return protocol::ArgKind::in;
    case BufferRole::out:
      return protocol::ArgKind::out;
    case BufferRole::inout:
      return protocol::ArgKind::inout;
    case BufferRole::workspace:
      return protocol::ArgKind::workspace;
  }
  return protocol::ArgKind::in;
}

protocol::LaunchArg describe_arg(const ArgValue& a) {
  protocol::LaunchArg out;
  out.name = a.name;
  out.kind = kind_of(a);
  if (a.kind == ArgKind::tensor_map) {
    const TensorMapValue& m = a.map;
    out.dtype = a.dtype;
    out.tensor_map = {{"buffer", m.buffer},
                      {"dims", m.dims},
                      {"strides", m.strides},
                      {"box", m.box},
                      {"element_strides", m.element_strides},
                      {"swizzle", std::string(to_string(m.swizzle))},
                      {"l2_promotion", std::string(to_string(m.l2_promotion))},
                      {"oob_fill", std::string(to_string(m.oob_fill))}};
  } else if (a.is_buffer()) {
    out.pass = a.pass;
    out.dtype = a.dtype;
    out.count = a.count;
    out.bytes = a.count * protocol::dtype_bytes(a.dtype);
    if (a.role == BufferRole::workspace) {
      out.zero_before_first_use = a.zero == WorkspaceZero::kept;
      out.left_zeroed = a.zero == WorkspaceZero::kept;
    }
  } else {
    out.dtype = std::string(to_string(a.scalar));
    out.value = a.value;
  }
  return out;
}

}  // namespace

protocol::LaunchDescription describe_launch(const Instance& instance, const std::string& arch,
                                            const std::string& cubin_id) {
  protocol::LaunchDescription d;
  d.name_expression = instance.name_expression;
  d.arch = arch;
  d.cubin_id = cubin_id;
  d.grid = instance.launch.grid;
  d.block = instance.launch.block;
  d.smem = instance.launch.smem;
  if (instance.launch.cluster_size() > 1) {
    d.has_cluster = true;
    d.cluster = instance.launch.cluster;
  }
  d.args.reserve(instance.args.size());
  for (const auto& a : instance.args) d.args.push_back(describe_arg(a));
  return d;
}

protocol::LaunchDescription describe_launch(const KernelTemplate& tmpl, const Instance& instance,
                                            const std::string& arch) {
  return describe_launch(instance, arch,
                         Compiler::cubin_id({&tmpl, instance.name_expression, arch}));
}

}  // namespace ktune
