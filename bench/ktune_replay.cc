// ktune-replay: every strategy against a recorded exhaustive sweep (bench/data/*.json), no GPU.
// For each problem and strategy, over several seeds: the fraction of the sweep's best reached
// after N trials, and the trials needed to reach 98 %. With --neighbour-top K instead: each
// problem's search seeded with the K fastest configs of the other problems in the data (as the
// daemon seeds a job with the winners of the nearest tuned shapes), against a cold start (the
// heuristic seed alone). Writes one JSON document (--out).
//
//   ktune-replay --data bench/data/h200_gemm_sweep.json [--seeds 10] [--neighbour-top 1,5,10]
//                [--out bench/results/replay.json]
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>

#include "config/config.h"
#include "store/table_io.h"
#include "tuner/replay.h"
#include "tuner/strategy/registry.h"

namespace {

using namespace ktune;
using Json = nlohmann::ordered_json;

constexpr double k_target = 0.98;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
}

// Runs a strategy once per RNG seed over the whole space.
Result<std::vector<ReplayCurve>> replay_seeds(const ReplayProblem& p, const std::string& strategy,
                                              int runs, const std::vector<Params>& seeds = {}) {
  std::vector<ReplayCurve> out;
  for (int seed = 1; seed <= runs; ++seed) {
    auto c = replay(p, strategy, {.rng_seed = std::uint64_t(seed), .seeds = seeds});
    if (!c) return std::unexpected(c.error());
    out.push_back(std::move(*c));
  }
  return out;
}

// Median over the runs of the fraction of the best reached after `trials`.
double median_at(const std::vector<ReplayCurve>& curves, size_t trials) {
  std::vector<double> v;
  for (const auto& c : curves) v.push_back(c.at(trials));
  return median(v);
}

std::vector<double> trials_to_target(const std::vector<ReplayCurve>& curves) {
  std::vector<double> v;
  for (const auto& c : curves) v.push_back(double(c.trials_to(k_target)));
  return v;
}

// Every strategy from the heuristic seed: the curve, and the fractions at 2-20 % of the space.
Result<Json> strategies_report(const std::vector<ReplayProblem>& problems, int runs) {
  Json out = Json::array();
  std::printf("%-40s %-10s %6s %8s %8s %8s %8s %10s\n", "problem", "strategy", "space", "@2%",
              "@5%", "@10%", "@20%", "to98%");
  for (const auto& p : problems) {
    const size_t n = p.candidates.size();
    Json row = {{"problem", p.problem.key()},
                {"configs", n},
                {"best_us", p.best},
                {"strategies", Json::object()}};
    for (const std::string& s : strategy_names()) {
      auto curves = replay_seeds(p, s, runs);
      if (!curves) return std::unexpected(curves.error());
      Json curve = Json::array();
      for (size_t t = 1; t <= n; t = t < 10 ? t + 1 : size_t(double(t) * 1.25) + 1)
        curve.push_back({t, median_at(*curves, t)});
      const auto at_pct = [&](double f) {
        return median_at(*curves, std::max<size_t>(1, size_t(f * double(n))));
      };
      const double to98 = median(trials_to_target(*curves));
      row["strategies"][s] = {{"median_fraction", curve}, {"at_2pct", at_pct(0.02)},
                              {"at_5pct", at_pct(0.05)},  {"at_10pct", at_pct(0.10)},
                              {"at_20pct", at_pct(0.20)}, {"median_trials_to_98pct", to98}};
      std::printf("%-40s %-10s %6zu %8.3f %8.3f %8.3f %8.3f %10.0f\n", p.problem.key().c_str(),
                  s.c_str(), n, at_pct(0.02), at_pct(0.05), at_pct(0.10), at_pct(0.20), to98);
    }
    out.push_back(row);
  }
  return out;
}

// Trials to 98 % and the early curve of a set of runs.
Json runs_summary(const std::vector<ReplayCurve>& curves) {
  const auto to98 = trials_to_target(curves);
  Json at = Json::object();
  for (size_t t : {1, 6, 16, 32, 64}) at[std::to_string(t)] = median_at(curves, t);
  return {{"mean_trials_to_98pct", mean(to98)},
          {"median_trials_to_98pct", median(to98)},
          {"min_trials_to_98pct", *std::min_element(to98.begin(), to98.end())},
          {"max_trials_to_98pct", *std::max_element(to98.begin(), to98.end())},
          {"trials_to_98pct", to98},
          {"median_fraction_after", at}};
}

// The `top` fastest configs of every problem but `a`, and how fast each one is on `a`.
std::pair<std::vector<Params>, Json> neighbour_seeds(const std::vector<ReplayProblem>& problems,
                                                     size_t a, size_t top) {
  const ReplayProblem& p = problems[a];
  std::vector<Params> seeds;
  Json rows = Json::array();
  for (size_t b = 0; b < problems.size(); ++b) {
    if (b == a) continue;
    const ReplayProblem& q = problems[b];
    for (const Params& params : fastest_configs(q, top)) {
      seeds.push_back(params);
      const auto here = p.candidates.find_all(params);
      const auto there = q.candidates.find_all(params);
      const double us = here.empty() ? 0 : p.value[here.front()];
      rows.push_back({{"from", q.problem.key()},
                      {"params", params_to_string(params)},
                      {"us_there", there.empty() ? 0 : q.value[there.front()]},
                      {"us_here", us},  // 0: not a candidate here (pruned)
                      {"fraction_of_best_here", us > 0 ? p.best / us : 0}});
    }
  }
  return {seeds, rows};
}

// Each problem seeded with the `top` fastest configs of every other problem (for each `top`),
// against the heuristic seed alone, for every strategy.
Result<Json> seeding_report(const std::vector<ReplayProblem>& problems, int runs,
                            const std::vector<size_t>& tops) {
  Json out = Json::array();
  std::printf("%-40s %-10s %4s %12s %12s %12s %12s\n", "problem", "strategy", "top", "cold mean",
              "seeded mean", "cold median", "seeded med.");
  for (size_t a = 0; a < problems.size(); ++a) {
    const ReplayProblem& p = problems[a];
    Json row = {{"problem", p.problem.key()},
                {"configs", p.candidates.size()},
                {"best_us", p.best},
                {"cold", Json::object()},
                {"seeded", Json::object()}};
    for (const std::string& s : strategy_names()) {
      auto cold = replay_seeds(p, s, runs);
      if (!cold) return std::unexpected(cold.error());
      row["cold"][s] = runs_summary(*cold);
    }
    for (size_t top : tops) {
      auto [seeds, seed_rows] = neighbour_seeds(problems, a, top);
      Json seeded = {{"seeds", seed_rows}, {"strategies", Json::object()}};
      for (const std::string& s : strategy_names()) {
        auto curves = replay_seeds(p, s, runs, seeds);
        if (!curves) return std::unexpected(curves.error());
        const Json c = row["cold"][s], w = runs_summary(*curves);
        seeded["strategies"][s] = w;
        std::printf(
            "%-40s %-10s %4zu %12.1f %12.1f %12.0f %12.0f\n", p.problem.key().c_str(), s.c_str(),
            top, c["mean_trials_to_98pct"].get<double>(), w["mean_trials_to_98pct"].get<double>(),
            c["median_trials_to_98pct"].get<double>(), w["median_trials_to_98pct"].get<double>());
      }
      row["seeded"][std::to_string(top)] = seeded;
    }
    out.push_back(row);
  }
  return out;
}

// Where the data was measured, from the sweep's header.
Json recorded_on(const std::string& path) {
  std::ifstream in(path);
  const Json doc = Json::parse(in, nullptr, false);
  if (doc.is_discarded()) return Json::object();
  Json out = Json::object();
  for (const char* k : {"gpu", "device_class", "driver", "nvrtc", "date"})
    if (doc.contains(k)) out[k] = doc[k];
  return out;
}

// Where this replay ran (a CPU: no GPU is used).
Json replayed_on() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  char date[32] = {};
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return {{"host", host}, {"cpu_threads", std::thread::hardware_concurrency()}, {"date", date}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string data, out;
  int runs = 10;
  std::vector<size_t> neighbour_top;
  CLI::App app{"ktune-replay: strategies against recorded measurements"};
  app.add_option("--data", data, "recorded sweep (ktune-bench --record)")->required();
  app.add_option("--seeds", runs, "runs per strategy, one per RNG seed")->capture_default_str();
  app.add_option("--neighbour-top", neighbour_top,
                 "seed each problem with the K fastest configs of the other problems and compare "
                 "with a cold start (one or more K)")
      ->delimiter(',');
  app.add_option("--out", out, "results JSON");
  CLI11_PARSE(app, argc, argv);
  const auto templates = TemplateRegistry::load({builtin_template_dir()});
  auto problems = load_replay(data, templates);
  if (!problems)
    return std::fprintf(stderr, "ktune-replay: %s\n", problems.error().message.c_str()), 1;

  Json doc;
  if (neighbour_top.empty()) {
    auto rows = strategies_report(*problems, runs);
    if (!rows) return std::fprintf(stderr, "%s\n", rows.error().message.c_str()), 1;
    doc = {{"benchmark", "replay"}, {"data", data}, {"seeds", runs}, {"problems", *rows}};
  } else {
    auto rows = seeding_report(*problems, runs, neighbour_top);
    if (!rows) return std::fprintf(stderr, "%s\n", rows.error().message.c_str()), 1;
    const Json recorded = recorded_on(data), replayed = replayed_on();
    const auto day = [](const Json& j) { return j.value("date", std::string("?")).substr(0, 10); };
    doc = {{"benchmark", "seeding-replay"},
           {"note", "CPU replay of recorded GPU data: every time was measured on " +
                        recorded.value("gpu", std::string("the GPU")) + " on " + day(recorded) +
                        " (exhaustive sweep, " + data + "); the searches were replayed on host '" +
                        replayed.value("host", std::string("?")) + "' (" +
                        std::to_string(replayed.value("cpu_threads", 0)) +
                        " CPU threads, no GPU) on " + day(replayed)},
           {"data", data},
           {"recorded", recorded},
           {"replayed", replayed},
           {"target_fraction", k_target},
           {"seeds", runs},
           {"batch", ReplayOptions{}.batch},
           {"neighbour_top", neighbour_top},
           {"cold", "the heuristic config as the only seed"},
           {"seeded",
            "the heuristic config, then the K fastest configs of every other problem in "
            "the data, for each K in neighbour_top"},
           {"problems", *rows}};
  }
  if (!out.empty())
    if (auto ok = write_file_atomic(out, doc.dump(2) + "\n"); !ok)
      return std::fprintf(stderr, "%s\n", ok.error().message.c_str()), 1;
  return 0;
}
