// ktune-table-bench: what tuning tables of many winners cost to write and read, in one process.
//
//   ktune-table-bench --winners 50000 --write t.json        # a JSON table of distinct winners
//   ktune-table-bench --winners 50000 --render yaml         # time render_table in memory
//   ktune-table-bench --yaml-load t.yaml                    # time yaml-cpp loading a YAML table
//
// Prints one JSON object: what ran, seconds, bytes, and the process's peak RSS (getrusage), so a
// run under /usr/bin/time -v and the object agree. bench/table_export.sh drives the daemon side.
#include <sys/resource.h>
#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "store/table_io.h"

namespace ktune {
namespace {

// Distinct gemm shapes on one device class, each with two ranked configs, as a node collects them.
std::vector<WinnerRecord> synthetic_winners(int n) {
  std::vector<WinnerRecord> out;
  out.reserve(size_t(n));
  for (int i = 0; i < n; ++i) {
    WinnerRecord w;
    w.device = DeviceClass{"NVIDIA H200", 90, 132, 140};
    w.problem = Problem{"gemm", "bf16", "bf16", "rr", {{"M", 16 + i}, {"N", 4096}, {"K", 4096}}};
    w.validators = Validators{"580.159.03", "13.0", k_store_format_version};
    RankedConfig c;
    c.template_name = "gemm";
    c.template_hash = "0123456789abcdef";
    c.params = {{"BLOCK_M", 128}, {"BLOCK_N", 256}, {"BLOCK_K", 32}, {"STAGES", 4}};
    c.median_us = 10.0 + i % 97;
    c.spread_pct = 1.5;
    c.tflops = 2.0 * (16.0 + i) * 4096 * 4096 / (c.median_us * 1e6);
    w.ranked.push_back(c);
    c.params["STAGES"] = 3;
    c.median_us *= 1.05;
    w.ranked.push_back(c);
    w.ref_error = 3e-3;
    w.sm_clock_mhz = 1755;
    w.mem_clock_mhz = 3201;
    w.power_w = 612.5;
    w.node_id = "node-a";
    w.timestamp = 1'790'000'000 + i;
    w.trials = 300;
    w.strategy = "model";
    out.push_back(std::move(w));
  }
  return out;
}

long peak_rss_kib() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

}  // namespace
}  // namespace ktune

int main(int argc, char** argv) {
  using namespace ktune;
  int winners = 50'000;
  std::string write_path, render_format, yaml_path;
  CLI::App app{"ktune-table-bench — tuning table export/import cost"};
  app.add_option("--winners", winners, "winners in the synthetic table")->capture_default_str();
  app.add_option("--write", write_path, "write a JSON table of --winners winners here");
  app.add_option("--render", render_format, "render --winners winners in memory: json|yaml|csv");
  app.add_option("--yaml-load", yaml_path, "load a YAML table with yaml-cpp");
  CLI11_PARSE(app, argc, argv);

  nlohmann::ordered_json out;
  auto t0 = std::chrono::steady_clock::now();  // of the measured step
  if (!yaml_path.empty()) {
    const YAML::Node doc = YAML::LoadFile(yaml_path);
    out = {{"yaml_load", yaml_path}, {"winners", doc["winners"].size()}};
  } else {
    const auto records = synthetic_winners(winners);
    const auto t1 = std::chrono::steady_clock::now();
    out["winners"] = winners;
    out["build_s"] = std::chrono::duration<double>(t1 - t0).count();
    t0 = t1;
    if (!write_path.empty()) {
      auto ok = write_file_atomic(write_path, render_table(records, TableFormat::json));
      if (!ok) return std::fprintf(stderr, "%s\n", ok.error().message.c_str()), 1;
      out["wrote"] = write_path;
    } else {
      auto format = parse_table_format(render_format.empty() ? "json" : render_format);
      if (!format) return std::fprintf(stderr, "%s\n", format.error().message.c_str()), 2;
      const std::string text = render_table(records, *format);
      out["render"] = render_format;
      out["bytes"] = text.size();
    }
  }
  out["seconds"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out["peak_rss_mib"] = double(peak_rss_kib()) / 1024.0;
  std::puts(out.dump().c_str());
  return 0;
}
