// ktune-bench: tunes a suite of problems on this machine's GPU and times each winner side by side
// with its ceiling in the same worker process: cuBLAS for GEMM (interleaved re-timing of the two),
// the device-to-device copy for memory-bound ops. Writes bench/results/*.json with the GPU,
// driver, clocks and date. `--record` also writes every trial (the replay data of bench/data/).
//
//   ktune-bench --suite gemm|membound|smoke [--strategy model] [--budget 200] [--out FILE]
//   ktune-bench --problem gemm:bf16:rc:M=4096,N=4096,K=4096 --strategy exhaustive --record FILE
//   ktune-bench --suite tma --template gemm_tma      (issue 13's shapes, one template)
//   ktune-bench ... --seed BLOCK_M=64,BLOCK_N=256,...  (measure this config first, where valid)
//   ktune-bench ... --cubins DIR     (each winner's cubin, for cuobjdump --dump-sass there)
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "config/log.h"
#include "store/table_io.h"
#include "templates/space.h"
#include "tuner/local_tuner.h"
#include "tuner/strategy/registry.h"

namespace {

using namespace ktune;
using Json = nlohmann::ordered_json;

Problem gemm(std::int64_t m, std::int64_t n, std::int64_t k) {
  return Problem{"gemm", "bf16", "bf16", "rc", {{"M", m}, {"N", n}, {"K", k}}};
}

std::vector<Problem> suite(const std::string& name) {
  if (name == "gemm")
    return {gemm(8192, 8192, 8192),  gemm(4096, 4096, 4096),  gemm(1024, 1024, 1024),
            gemm(4096, 14336, 4096), gemm(4096, 4096, 14336), gemm(64, 14336, 4096),
            gemm(16, 4096, 4096),    gemm(8192, 8192, 512)};
  if (name == "tma")  // issue 13's shapes
    return {gemm(8192, 8192, 8192),    gemm(4096, 4096, 4096),   gemm(2048, 2048, 2048),
            gemm(4096, 14336, 4096),   gemm(4096, 4096, 14336),  gemm(8192, 8192, 512),
            gemm(1024, 1024, 65536),   gemm(2048, 2048, 16384),  gemm(512, 1024, 32768),
            gemm(4000, 6000, 3000)};
  if (name == "membound")
    return {Problem{"softmax", "bf16", "bf16", "", {{"rows", 32768}, {"cols", 4096}}},
            Problem{"layernorm", "bf16", "bf16", "", {{"rows", 32768}, {"cols", 4096}}},
            Problem{"rmsnorm", "bf16", "bf16", "", {{"rows", 32768}, {"cols", 4096}}},
            Problem{"reduce_sum", "fp32", "fp32", "", {{"n", 100'000'000}}},
            Problem{"transpose", "fp32", "fp32", "", {{"rows", 16384}, {"cols", 16384}}}};
  if (name == "smoke")
    return {gemm(1024, 1024, 1024),
            Problem{"softmax", "bf16", "bf16", "", {{"rows", 4096}, {"cols", 4096}}}};
  return {};
}

// "op:dtype:layout:dims", e.g. gemm:bf16:rc:M=64,N=14336,K=4096 or softmax:bf16::rows=8,cols=8
Result<Problem> parse_problem_arg(const std::string& s) {
  std::vector<std::string> f;
  size_t start = 0;
  for (int i = 0; i < 3; ++i) {
    const size_t c = s.find(':', start);
    if (c == std::string::npos)
      return fail(ErrorCode::invalid_argument, "expected op:dtype:layout:dims, got " + s);
    f.push_back(s.substr(start, c - start));
    start = c + 1;
  }
  auto dims = parse_dims(s.substr(start));
  if (!dims) return std::unexpected(dims.error());
  Problem p{f[0], f[1], f[1], f[2], *dims};
  if (auto ok = validate_problem(p); !ok) return std::unexpected(ok.error());
  return p;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// A file name from a problem key: letters, digits, '.', '_' and '-' only.
std::string file_stem(const std::string& key) {
  std::string s = key;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  return s;
}

// A config as a JSON object of its parameters (an empty object for none).
Json params_json(const Params& params) {
  Json j = Json::object();
  for (const auto& [n, v] : params) j[n] = v;
  return j;
}

Json trial_json(const TrialRecord& t) {
  Json j = {{"template", t.template_name},
            {"params", params_json(t.params)},
            {"outcome", std::string(to_string(t.outcome))},
            {"median_us", t.median_us},
            {"spread_pct", t.spread_pct},
            {"ref_error", storable_ref_error(t.ref_error)},
            {"registers", t.registers},
            {"compile_ms", t.compile_ms}};
  if (t.sm_clock_mhz != 0) j["sm_clock_mhz"] = t.sm_clock_mhz;  // read while timing (NVML)
  if (t.power_w != 0) j["power_w"] = t.power_w;
  if (t.sm_clock_counted_mhz != 0) j["sm_clock_counted_mhz"] = t.sm_clock_counted_mhz;
  if (t.mem_clock_mhz != 0) j["mem_clock_mhz"] = t.mem_clock_mhz;
  if (t.timing_l2 != TimingL2::unknown) j["timing_l2"] = std::string(to_string(t.timing_l2));
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  std::string suite_name, strategy = "model", out, record, data_dir, export_table, cubin_dir;
  std::vector<std::string> problems, templates, seed_args;
  int budget = 200, device = 0, finalists = 5;
  double seconds = 0, target_ms = 100;
  std::string l2_name = "flushed";
  bool warm_repeat = false, verbose = false;
  CLI::App app{"ktune-bench: tune a suite and time each winner against its ceiling"};
  app.add_option("--suite", suite_name, "gemm | tma | membound | smoke");
  app.add_option("--problem", problems, "op:dtype:layout:dims (repeatable)");
  app.add_option("--template", templates,
                 "tune only these templates (repeatable; default: every template for the op)");
  app.add_option("--strategy", strategy, strategy_choices())->capture_default_str();
  app.add_option("--seed", seed_args,
                 "a config (NAME=V,...) to measure first in every problem whose space holds it, "
                 "after the heuristic's (repeatable)");
  app.add_option("--budget", budget, "trials per problem (0 = the whole space)")
      ->capture_default_str();
  app.add_option("--seconds", seconds, "wall-clock budget per problem (0 = none)");
  app.add_option("--target-ms", target_ms, "measured time per candidate")->capture_default_str();
  app.add_option("--l2", l2_name,
                 "L2 when a timed launch starts: flushed (a write over 2x L2 before it, as "
                 "triton's do_bench) | rotated (back to back, inputs rotated)")
      ->check([](const std::string& s) {
        return parse_timing_l2(s) ? std::string() : "flushed or rotated, not '" + s + "'";
      })
      ->capture_default_str();
  app.add_option("--finalists", finalists, "re-timed interleaved at the end")
      ->capture_default_str();
  app.add_option("--device", device, "GPU ordinal")->capture_default_str();
  app.add_option("--data-dir", data_dir,
                 "RocksDB store (winners, trials, cubin cache); default: in memory");
  app.add_option("--out", out, "results JSON");
  app.add_option("--record", record, "also write every trial here (replay data)");
  app.add_option("--cubins", cubin_dir,
                 "write each winner's cubin to DIR/<problem>.cubin (for a SASS check)");
  app.add_option("--export", export_table,
                 "export every winner in the store as a table (JSON) here");
  app.add_flag("--warm-repeat", warm_repeat,
               "tune each problem a second time with the cubin cache warm");
  app.add_flag("-v,--verbose", verbose, "log failed trials");
  CLI11_PARSE(app, argc, argv);
  const TimingL2 l2 = *parse_timing_l2(l2_name);
  if (verbose) log_setup(LogLevel::debug, LogFormat::text);

  std::vector<Problem> todo = suite(suite_name);
  for (const auto& s : problems) {
    auto p = parse_problem_arg(s);
    if (!p) return std::fprintf(stderr, "ktune-bench: %s\n", p.error().message.c_str()), 2;
    todo.push_back(*p);
  }
  if (todo.empty() && export_table.empty())
    return std::fprintf(stderr, "ktune-bench: give --suite, --problem or --export\n"), 2;
  std::vector<Params> seeds;
  for (const auto& s : seed_args) {
    auto params = parse_params(s);
    if (!params)
      return std::fprintf(stderr, "ktune-bench: --seed: %s\n", params.error().message.c_str()), 2;
    seeds.push_back(std::move(*params));
  }

  LocalTunerOptions options;
  options.data_dir = data_dir;
  options.device = device;
  auto tuner = LocalTuner::open(options);
  if (!tuner) return std::fprintf(stderr, "ktune-bench: %s\n", tuner.error().message.c_str()), 1;
  LocalTuner& t = **tuner;
  const auto& hello = t.runner().hello();
  Json doc = {{"benchmark", "ktune-bench"},
              {"date", utc_now()},
              {"gpu", t.gpu().device_class.name},
              {"device_class", t.gpu().device_class.id()},
              {"driver", t.context().driver},
              {"nvrtc", t.context().nvrtc},
              {"node", t.context().node_id},
              {"telemetry_at_start", hello.value("telemetry", Json::object())},
              {"strategy", strategy},
              {"seeds", seed_args},
              {"templates", templates.empty() ? Json("all") : Json(templates)},
              {"budget_trials", budget},
              {"compile_threads", t.compiler().threads()},
              {"results", Json::array()}};
  Json recorded = {{"gpu", t.gpu().device_class.name},
                   {"device_class", t.gpu().device_class.id()},
                   {"driver", t.context().driver},
                   {"nvrtc", t.context().nvrtc},
                   {"date", utc_now()},
                   {"strategy", strategy},
                   {"problems", Json::array()}};
  int failures = 0;
  std::printf("%-44s %10s %9s %12s %9s %7s %8s %8s\n", "problem", "ktune_us", "TFLOP/s", "GB/s",
              "base_us", "ratio", "trials", "tune_s");
  for (const Problem& p : todo) {
    TuneRequest req;
    req.problem = p;
    req.strategy = strategy;
    req.templates = templates;
    req.seeds = seeds;
    req.budget = Budget{budget, seconds, 0};
    req.finalists = finalists;
    req.timing.target_ms = target_ms;
    req.timing.l2 = l2;
    auto tuned = t.tune(req);
    if (!tuned) {
      std::printf("%-44s FAILED: %s\n", p.key().c_str(), tuned.error().message.c_str());
      doc["results"].push_back({{"problem", p.key()}, {"error", tuned.error().message}});
      ++failures;
      continue;
    }
    const WinnerRecord& w = tuned->winner;
    const RankedConfig& best = w.ranked.front();
    Json row = {{"problem", p.key()},
                {"template", best.template_name},
                {"params", params_json(best.params)},
                {"median_us", best.median_us},
                {"spread_pct", best.spread_pct},
                {"tflops", best.tflops},
                {"gbps", best.gbps},
                {"ref_error", w.ref_error},
                {"sm_clock_mhz", w.sm_clock_mhz},
                {"mem_clock_mhz", w.mem_clock_mhz},
                {"power_w", w.power_w}};
    // The finalists as the interleaved re-time ranked them (what picked the winner).
    row["finalists"] = Json::array();
    for (const RankedConfig& r : w.ranked) {
      row["finalists"].push_back({{"template", r.template_name},
                                  {"params", params_json(r.params)},
                                  {"median_us", r.median_us},
                                  {"spread_pct", r.spread_pct}});
    }
    const auto& s = tuned->stats;
    row["tuning"] = {{"candidates", s.candidates},
                     {"space_total", s.space_total},
                     {"trials", s.trials},
                     {"rule_seeds_queued", s.rule_seeds_queued},
                     {"compile_errors", s.compile_errors},
                     {"resource_errors", s.resource_errors},
                     {"wrong_results", s.wrong_results},
                     {"crashes", s.crashes},
                     {"timeouts", s.timeouts},
                     {"cache_hits", s.cache_hits},
                     {"compile_s", s.compile_s},
                     {"measure_s", s.measure_s},
                     {"wall_s", s.wall_s},
                     {"respawns", s.respawns}};
    // The ceiling, measured now in the same worker.
    TimingOptions timing;
    timing.target_ms = target_ms;
    timing.l2 = l2;
    double base_us = 0, ratio = 0;
    if (p.op == "gemm") {
      auto both = t.runner().retime({tuned->winner_trial_id}, 7, timing, cublas_problem(p));
      if (both) {
        double ours = 0;
        for (const auto& [id, tm] : *both) (id == ~0ull ? base_us : ours) = tm.median_us;
        const double flops = 2.0 * double(p.dim("M")) * double(p.dim("N")) * double(p.dim("K"));
        row["interleaved"] = {{"ktune_us", ours},
                              {"cublas_us", base_us},
                              {"ktune_tflops", flops / (ours * 1e6)},
                              {"cublas_tflops", flops / (base_us * 1e6)}};
        ratio = base_us / ours;  // > 1: ktune faster
        row["vs_cublas"] = ratio;
      } else {
        row["baseline_error"] = both.error().message;
      }
    } else {
      const double bytes = std::max(best.gbps * best.median_us * 1e3 / 2, 256.0 * (1 << 20));
      auto copy = t.runner().time_copy(std::size_t(bytes), timing);
      if (copy) {
        base_us = copy->first.median_us;
        ratio = best.gbps / copy->second;
        row["copy"] = {
            {"bytes", std::size_t(bytes)}, {"median_us", base_us}, {"gbps", copy->second}};
        row["vs_copy"] = ratio;
      } else {
        row["baseline_error"] = copy.error().message;
      }
    }
    if (!cubin_dir.empty()) {  // a cubin cache hit (the store caches what the search compiled)
      const KernelTemplate* tmpl = t.templates().find(best.template_name);
      const DeviceLimits& limits = t.context().limits;
      auto inst = tmpl ? instantiate(*tmpl, p, limits, best.params)
                       : fail(ErrorCode::not_found, "no template " + best.template_name);
      if (inst) {
        auto c = t.compiler().compile(
            {tmpl, inst->name_expression, target_arch(tmpl->manifest, limits.cc)});
        const std::string path = cubin_dir + "/" + file_stem(p.key()) + ".cubin";
        if (c.ok() && write_file_atomic(path, c.kernel.cubin))
          row["cubin"] = {{"path", path},
                          {"registers", c.kernel.registers},
                          {"spill_stores", c.kernel.spill_stores},
                          {"spill_loads", c.kernel.spill_loads},
                          {"stack_bytes", c.kernel.stack_bytes}};
        else
          row["cubin_error"] = c.ok() ? "cannot write " + path : c.log.substr(0, 500);
      } else {
        row["cubin_error"] = inst.error().message;
      }
    }
    if (warm_repeat) {
      auto again = t.tune(req);
      if (again)
        row["tuning_warm"] = {{"wall_s", again->stats.wall_s},
                              {"cache_hits", again->stats.cache_hits},
                              {"trials", again->stats.trials},
                              {"compile_s", again->stats.compile_s}};
    }
    std::printf("%-44s %10.2f %9.1f %12.1f %9.2f %7.3f %8d %8.1f\n", p.key().c_str(),
                best.median_us, best.tflops, best.gbps, base_us, ratio, s.trials, s.wall_s);
    std::fflush(stdout);
    doc["results"].push_back(row);
    if (!record.empty()) {
      Json trials = Json::array();
      for (const auto& tr : tuned->trials) trials.push_back(trial_json(tr));
      recorded["problems"].push_back({{"problem", p.key()}, {"trials", trials}});
    }
  }
  doc["telemetry_at_end"] = to_json(t.runner().last_telemetry());
  if (!out.empty())
    if (auto ok = write_file_atomic(out, doc.dump(2) + "\n"); !ok)
      std::fprintf(stderr, "ktune-bench: %s\n", ok.error().message.c_str());
  if (!record.empty())
    if (auto ok = write_file_atomic(record, recorded.dump(1) + "\n"); !ok)
      std::fprintf(stderr, "ktune-bench: %s\n", ok.error().message.c_str());
  if (!export_table.empty()) {
    auto all = scan_winners(t.store());
    if (!all) return std::fprintf(stderr, "ktune-bench: %s\n", all.error().message.c_str()), 1;
    if (auto ok = write_file_atomic(export_table, render_table(*all, TableFormat::json)); !ok)
      std::fprintf(stderr, "ktune-bench: %s\n", ok.error().message.c_str());
    std::printf("exported %zu winners to %s\n", all->size(), export_table.c_str());
  }
  return failures ? 1 : 0;
}
