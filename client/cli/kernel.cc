// `ktune kernel`: fetch the cubin ktuned serves for a problem (the lookup's best entry, or a
// config named with --template/--config) and write it to a file, with its launch description.
#include <cstdio>

#include "client/cli/commands.h"
#include "client/cli/output.h"
#include "store/table_io.h"

namespace ktune::cli {

using protocol::Json;

namespace {

// The request for the best entry of a v2 lookup of `problem`.
protocol::Expected<protocol::KernelRequest> best_entry_request(Client& client,
                                                               const protocol::ProblemSpec& problem,
                                                               const std::string& device) {
  auto reply = client.lookup({problem, device, 1});
  if (!reply) return std::unexpected(reply.error());
  return protocol::kernel_request_for(problem, reply->device, reply->entries.front());
}

// "4096", "16777216 elements", "64 elements, zeroed once, left zeroed".
std::string arg_text(const protocol::LaunchArg& a) {
  if (a.kind == protocol::ArgKind::scalar) return Json(a.value).dump();
  std::string s = std::to_string(a.count) + " elements";
  if (a.kind == protocol::ArgKind::workspace)
    s += a.zero_before_first_use ? ", zeroed once, left zeroed" : ", scratch";
  return s;
}

}  // namespace

int cmd_kernel(const Common& c, const KernelArgs& a) {
  auto dims = parse_dims(a.problem.shape);
  if (!dims) return usage(c.json, "--shape: " + dims.error().message);
  const protocol::ProblemSpec problem{a.problem.op, a.problem.dtype, a.problem.out_dtype,
                                      a.problem.layout, *dims};
  Client client(c.client_options());
  protocol::KernelRequest request;
  if (a.template_name.empty()) {
    auto r = best_entry_request(client, problem, a.problem.device);
    if (!r) return report_device_error(c.json, r.error(), a.problem.device);
    request = std::move(*r);
  } else {
    if (a.config.empty())
      return usage(c.json, "--template " + a.template_name +
                               " needs --config, the config's params (e.g. BLOCK_M=128,...)");
    auto params = parse_params(a.config);
    if (!params) return usage(c.json, "--config: " + params.error().message);
    request = {problem, a.problem.device, a.template_name, {params->begin(), params->end()}, "",
               ""};
  }
  auto image = client.kernel(request);
  if (!image) return report_device_error(c.json, image.error(), a.problem.device);
  if (auto ok = write_file_atomic(a.output, image->cubin); !ok)
    return failed(c.json, ok.error().message);
  Json summary = protocol::to_json(*image);
  summary.erase("cubin");
  summary.erase("encoding");
  summary["path"] = a.output;
  if (c.json) return print_json(summary), 0;
  std::printf("%s: %zu bytes, %s %s for %s (cubin %s, %s)\n", a.output.c_str(), image->cubin.size(),
              image->template_name.c_str(), image->launch.name_expression.c_str(),
              image->launch.arch.c_str(), image->launch.cubin_id.c_str(), image->source.c_str());
  std::printf(
      "entry %s, %d registers, %d B static smem; launch grid [%u,%u,%u] block [%u,%u,%u] "
      "smem %u\n",
      image->lowered_name.c_str(), image->registers, image->smem_static, image->launch.grid[0],
      image->launch.grid[1], image->launch.grid[2], image->launch.block[0], image->launch.block[1],
      image->launch.block[2], image->launch.smem);
  for (const auto& arg : image->launch.args)
    std::printf("  %-14s %-9s %-4s %s\n", arg.name.c_str(),
                std::string(protocol::to_string(arg.kind)).c_str(), arg.dtype.c_str(),
                arg_text(arg).c_str());
  return 0;
}

}  // namespace ktune::cli
