#include "client/cli/commands.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "client/cli/output.h"
#include "client/cli/table.h"
#include "config/config.h"
#include "config/text.h"
#include "store/table_io.h"
#include "templates/registry.h"
#include "templates/space.h"
#include "tuner/compiler.h"
#include "tuner/local_tuner.h"

namespace ktune::cli {

using protocol::Json;

namespace {

std::string params_text(const Json& params) {
  std::string s;
  for (auto it = params.begin(); it != params.end(); ++it)
    s += (s.empty() ? "" : " ") + it.key() + "=" + it.value().dump();
  return s;
}

}  // namespace

ClientOptions Common::client_options() const {
  ClientOptions o;
  o.socket_path = socket;
  o.tcp_address = tcp;
  o.token = token;
  o.timeout = std::chrono::milliseconds(timeout_ms);
  // --timeout-ms is every request's deadline, a kernel request's (which may wait for a compile
  // queued behind tuning) included; without it a kernel request keeps the Client's longer one.
  if (timeout_given) o.kernel_timeout = o.timeout;
  o.cache_capacity = 0;
  // No --socket: the Client picks $KTUNE_SOCKET, the per-user default, then the node-wide socket.
  return o;
}

ClientOptions Common::long_op_options() const {
  ClientOptions o = client_options();
  if (!timeout_given) o.timeout = std::chrono::milliseconds(0);
  return o;
}

int cmd_status(const Common& c) {
  Client client(c.client_options());
  auto s = client.status();
  if (!s) return report_error(c.json, s.error());
  if (c.json) return print_json(*s), 0;
  const Json& j = *s;
  std::printf("ktuned %s (protocol %d), pid %d on %s, up %.1f s\n",
              j["version"].get<std::string>().c_str(), j["protocol"].get<int>(),
              j["pid"].get<int>(), j["node_id"].get<std::string>().c_str(),
              j["uptime_s"].get<double>());
  std::printf(
      "  socket       %s%s\n", j["socket"].get<std::string>().c_str(),
      j["tcp"].get<std::string>().empty() ? "" : ("  tcp " + j["tcp"].get<std::string>()).c_str());
  std::printf("  store        %s\n", j["store"].get<std::string>().c_str());
  std::printf("  winners      %zu (device classes: %s)\n", j["winners"].get<size_t>(),
              j["device_classes"].empty() ? "none" : join(j["device_classes"], ", ").c_str());
  std::printf("  templates    %zu loaded%s\n", j["templates"].get<size_t>(),
              j["template_errors"].empty()
                  ? ""
                  : (", " + std::to_string(j["template_errors"].size()) + " skipped").c_str());
  for (const auto& e : j["template_errors"])
    std::printf("               skipped: %s\n", e.get<std::string>().c_str());
  if (j["gpus"].empty()) {
    std::printf("  gpus         none (%s)\n", j["gpu_error"].get<std::string>().c_str());
  } else {
    for (const auto& g : j["gpus"])
      std::printf("  gpu %d        %s  %s\n", g["ordinal"].get<int>(),
                  g["device_class"].get<std::string>().c_str(),
                  g["pci_bus_id"].get<std::string>().c_str());
  }
  const Json& v = j["validators"];
  std::printf("  validators   driver %s, nvrtc %s, store format %d\n",
              v["driver"].get<std::string>().c_str(), v["nvrtc"].get<std::string>().c_str(),
              v["store_format"].get<int>());
  std::printf("  gpu policy   %s\n", j.value("gpu_policy", "").c_str());
  for (const auto& l : j.value("lanes", Json::array())) {
    std::string what = l["state"].get<std::string>();
    if (!l["job"].get<std::string>().empty())
      what += " job " + l["job"].get<std::string>() + " " + l["problem"].get<std::string>() + " (" +
              std::to_string(l["trials"].get<int>()) + "/" +
              std::to_string(l["budget_trials"].get<int>()) + " trials)";
    if (l["state"] != "tuning" && !l["reason"].get<std::string>().empty())
      what += ": " + l["reason"].get<std::string>();
    std::printf("  lane %d       %s\n", l["ordinal"].get<int>(), what.c_str());
  }
  if (j.contains("jobs")) {
    std::string jobs;
    for (auto it = j["jobs"].begin(); it != j["jobs"].end(); ++it)
      jobs += (jobs.empty() ? "" : ", ") + std::to_string(it.value().get<int>()) + " " + it.key();
    std::printf("  jobs         %s\n", jobs.c_str());
  }
  std::printf("  traffic      %lu requests, %ld connections open, %lu lookup misses (%zu keys)\n",
              j["requests"].get<unsigned long>(), j["connections"].get<long>(),
              j["misses"]["total"].get<unsigned long>(), j["misses"]["distinct"].get<size_t>());
  if (const Json f = j.value("fleet", Json::object()); f.value("enabled", false))
    std::printf("  fleet        %s %s as %s%s\n", f.value("redis", "").c_str(),
                f.value("connected", false) ? "connected" : "UNREACHABLE",
                f.value("node", "").c_str(),
                f.value("connected", false)
                    ? ""
                    : (" (serving and tuning alone: " + f.value("error", "") + ")").c_str());
  return 0;
}

int cmd_templates(const Common& c) {
  Client client(c.client_options());
  auto t = client.templates();
  if (!t) return report_error(c.json, t.error());
  if (c.json) return print_json(*t), 0;
  TextTable table(
      {"TEMPLATE", "OP", "DTYPES", "LAYOUTS", "DIMS", "PARAMS", "SPACE", "ARCH", "HASH"});
  for (const auto& x : (*t)["templates"]) {
    std::string params;
    for (const auto& p : x["params"])
      params += (params.empty() ? "" : ",") + p["name"].get<std::string>();
    const int min_cc = x["min_cc"].get<int>(), max_cc = x["max_cc"].get<int>();
    table.add({x["name"].get<std::string>(), x["op"].get<std::string>(), join(x["dtypes"]),
               join(x["layouts"]).empty() ? "-" : join(x["layouts"]), join(x["dims"]), params,
               fixed(x["space_size"].get<double>(), 0),
               "sm_" + std::to_string(min_cc) + (max_cc ? "-" + std::to_string(max_cc) : "+"),
               x["hash"].get<std::string>()});
  }
  std::fputs(table.render().c_str(), stdout);
  for (const auto& e : (*t)["errors"]) std::printf("skipped: %s\n", e.get<std::string>().c_str());
  return 0;
}

int cmd_lookup(const Common& c, const LookupArgs& a) {
  auto dims = parse_dims(a.shape);
  if (!dims) return usage(c.json, "--shape: " + dims.error().message);
  protocol::LookupRequest req;
  req.problem = {a.op, a.dtype, a.out_dtype, a.layout, *dims};
  req.device = a.device;
  req.limit = a.limit;
  req.pin = a.pin;
  Client client(c.client_options());
  auto reply = client.lookup(req);
  if (!reply) return report_device_error(c.json, reply.error(), a.device);
  if (c.json) return print_json(protocol::to_json(*reply)), 0;
  std::printf("%s on %s\n", reply->problem_key.c_str(), reply->device.c_str());
  if (!reply->pin.empty())
    std::printf("answered from pin %s (id %s)\n", reply->pin.c_str(), reply->pin_id.c_str());
  if (!reply->assumed_layout.empty())
    std::printf("layout %s assumed (none given; --layout chooses another)\n",
                reply->assumed_layout.c_str());
  TextTable table({"#", "PROVENANCE", "TEMPLATE", "PARAMS", "TIME_US", "TFLOP/S", "GB/S", "NOTE"});
  int rank = 1;
  for (const auto& e : reply->entries) {
    Json params = Json::object();
    for (const auto& [n, v] : e.params) params[n] = v;
    std::string note = e.provenance == "nearest"
                           ? "from " + e.from + " (distance " + fixed(e.distance, 2) + ")"
                           : e.from;
    table.add({std::to_string(rank++), e.provenance, e.template_name, params_text(params),
               e.median_us > 0 ? fixed(e.median_us, 2) : "-",
               e.tflops > 0 ? fixed(e.tflops, 1) : "-", e.gbps > 0 ? fixed(e.gbps, 0) : "-", note});
  }
  std::fputs(table.render().c_str(), stdout);
  const auto& best = reply->entries.front();
  if (!best.timing_l2.empty())
    std::printf("time of #1 taken %s (docs/tuning.md)\n",
                best.timing_l2 == "flushed" ? "with the L2 flushed before each launch"
                : best.timing_l2 == "rotated"
                    ? "with launches back to back, inputs rotated through 3x L2"
                    : best.timing_l2.c_str());
  if (!best.name_expression.empty())
    std::printf("kernel: %s for %s, grid [%u,%u,%u] block [%u,%u,%u] smem %u\n",
                best.name_expression.c_str(), best.arch.c_str(), best.grid[0], best.grid[1],
                best.grid[2], best.block[0], best.block[1], best.block[2], best.smem);
  return 0;
}

int cmd_export(const Common& c, const std::string& format, const std::string& output,
               const std::string& device) {
  Client client(c.long_op_options());
  auto r = client.export_table(format, device);
  if (!r) return report_error(c.json, r.error());
  const std::string& content = (*r)["content"].get_ref<const std::string&>();
  if (output.empty() || output == "-") {
    std::fputs(content.c_str(), stdout);
    return 0;
  }
  if (auto ok = write_file_atomic(output, content); !ok) return failed(c.json, ok.error().message);
  if (c.json)
    return print_json({{"path", output}, {"format", format}, {"count", (*r)["count"]}}), 0;
  std::printf("exported %zu winners to %s (%s)\n", (*r)["count"].get<size_t>(), output.c_str(),
              format.c_str());
  return 0;
}

int cmd_import(const Common& c, const std::string& file) {
  std::error_code ec;
  const auto abs = std::filesystem::absolute(file, ec);
  // A file that cannot be read is exit 1, as for every command (docs/cli.md).
  if (!std::filesystem::exists(abs, ec)) return failed(c.json, file + ": no such file");
  if (!std::filesystem::is_regular_file(abs, ec)) return failed(c.json, file + ": not a file");
  // Read here (a relative path is fine), so that a file that cannot be read is this command's
  // failure (exit 1), whatever the Client would call it.
  std::ifstream in(abs, std::ios::binary);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  if (!in) return failed(c.json, file + ": cannot read: " + std::strerror(errno));
  Client client(c.long_op_options());
  auto r = client.import_table(text.str(), file);  // errors name the file as given
  if (!r) return report_error(c.json, r.error());
  if (c.json) return print_json(*r), 0;
  std::printf("imported %s: %zu records, %zu added, %zu replaced, %zu kept\n", file.c_str(),
              (*r)["total"].get<size_t>(), (*r)["added"].get<size_t>(),
              (*r)["replaced"].get<size_t>(), (*r)["kept"].get<size_t>());
  return 0;
}

int cmd_tune_standalone(const Common& c, const TuneArgs& a) {
  auto dims = parse_dims(a.problem.shape);
  if (!dims) return usage(c.json, "--shape: " + dims.error().message);
  // The problem is checked against the templates before a GPU is looked for: a misspelt op is
  // the user's to fix whatever this machine has.
  const auto dirs =
      a.template_dirs.empty() ? std::vector<std::string>{builtin_template_dir()} : a.template_dirs;
  const auto reg = TemplateRegistry::load(dirs);
  TuneRequest req;
  req.problem = Problem{
      a.problem.op, a.problem.dtype,
      a.problem.out_dtype.empty() ? a.problem.dtype : a.problem.out_dtype,
      a.problem.layout.empty() ? reg.default_layout(a.problem.op) : a.problem.layout, *dims};
  if (auto ok = validate_problem(req.problem); !ok)
    return report_failure(c.json, Exit::invalid, "invalid_problem", ok.error().message);
  if (auto why = reg.why_unsupported(req.problem, -1); !why.empty())
    return report_failure(c.json, Exit::invalid, "invalid_problem", why);
  for (const auto& name : a.only_templates)
    if (!reg.find(name))
      return report_failure(c.json, Exit::not_found, "not_found",
                            "unknown template '" + name + "' (installed: " +
                                joined(reg.all(), [](const auto& x) { return x->name(); }) + ")");
  // Every flag is checked before the GPU is opened: a typo is the user's to fix on any machine.
  req.strategy = a.strategy;
  req.budget = Budget{a.budget, a.seconds, 0};
  req.templates = a.only_templates;
  for (const auto& text : a.seeds) {
    auto seed = parse_params(text);
    if (!seed) return usage(c.json, "--seed " + text + ": " + seed.error().message);
    req.seeds.push_back(std::move(*seed));
  }
  LocalTunerOptions o;
  o.template_dirs = a.template_dirs;
  o.device = a.gpu;
  o.data_dir = a.data_dir;
  if (o.data_dir.empty()) o.data_dir = default_config().data_dir + "/standalone";
  auto tuner = LocalTuner::open(o);
  if (!tuner) return failed(c.json, tuner.error().message);
  LocalTuner& t = **tuner;
  const bool tty = ::isatty(STDERR_FILENO) && !c.json;
  if (!c.json)
    std::fprintf(stderr, "tuning %s on %s (%s, budget %d trials / %.0f s)\n",
                 req.problem.describe().c_str(), t.gpu().device_class.id().c_str(),
                 a.strategy.c_str(), a.budget, a.seconds);
  auto r = t.tune(req, [&](const TuneProgress& p) {
    if (!tty) return;
    const int width = 30, done = p.budget_trials > 0 ? width * p.trials / p.budget_trials : 0;
    std::fprintf(stderr, "\r[%s%s] %d/%d trials, %d ok  best %s  %s  ETA %s   ",
                 std::string(size_t(done), '=').c_str(),
                 std::string(size_t(width - done), ' ').c_str(), p.trials, p.budget_trials, p.ok,
                 p.best_us > 0 ? (fixed(p.best_us, 2) + " us").c_str() : "-",
                 clock_text(p.elapsed_s).c_str(), clock_text(p.eta_s).c_str());
  });
  if (tty) std::fprintf(stderr, "\n");
  if (!r) return failed(c.json, r.error().message);
  const WinnerRecord& w = r->winner;
  Json result = {{"problem", req.problem.key()},        {"device", w.device.id()},
                 {"trials", r->stats.trials},           {"wall_s", r->stats.wall_s},
                 {"timing_l2", to_string(w.timing_l2)}, {"ranked", Json::array()}};
  for (const auto& rc : w.ranked) {
    Json params = Json::object();
    for (const auto& [n, v] : rc.params) params[n] = v;
    result["ranked"].push_back({{"template", rc.template_name},
                                {"params", params},
                                {"median_us", rc.median_us},
                                {"spread_pct", rc.spread_pct},
                                {"tflops", rc.tflops},
                                {"gbps", rc.gbps}});
  }
  // Hand the winner to a running daemon so its lookups answer "exact" now.
  std::string imported = "no daemon running";
  if (!a.no_import) {
    Client client(c.client_options());
    auto reply = client.call("import", {{"table", render_table({w}, TableFormat::json)}});
    imported =
        reply ? "imported into the running ktuned" : "not imported: " + reply.error().message;
  }
  result["daemon"] = imported;
  if (c.json) return print_json(result), 0;
  TextTable table({"#", "TEMPLATE", "PARAMS", "TIME_US", "SPREAD", "TFLOP/S", "GB/S"});
  int rank = 1;
  for (const auto& rc : w.ranked)
    table.add({std::to_string(rank++), rc.template_name, params_to_string(rc.params),
               fixed(rc.median_us, 2), fixed(rc.spread_pct, 1) + "%",
               rc.tflops > 0 ? fixed(rc.tflops, 1) : "-", rc.gbps > 0 ? fixed(rc.gbps, 0) : "-"});
  std::fputs(table.render().c_str(), stdout);
  const auto& s = r->stats;
  std::printf(
      "%d trials (%d compile errors, %d resource errors, %d wrong, %d crashes, %d timeouts) in "
      "%.1f s; "
      "winner stored in %s; %s\n",
      s.trials, s.compile_errors, s.resource_errors, s.wrong_results, s.crashes, s.timeouts,
      s.wall_s, t.store().describe().c_str(), imported.c_str());
  return 0;
}

}  // namespace ktune::cli
