// ktune-replay: every strategy against a recorded exhaustive sweep (bench/data/*.json), no GPU.
// For each problem and strategy, over several seeds: the fraction of the sweep's best reached
// after N trials, and the trials needed to reach 98 %. Writes one JSON document (--out).
//
//   ktune-replay --data bench/data/h200_gemm_sweep.json [--seeds 10] [--out
//   bench/results/replay.json]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "config/config.h"
#include "store/table_io.h"
#include "tuner/replay.h"
#include "tuner/strategy/registry.h"

int main(int argc, char** argv) {
  using namespace ktune;
  using Json = nlohmann::ordered_json;
  std::string data, out;
  int seeds = 10;
  CLI::App app{"ktune-replay: strategies against recorded measurements"};
  app.add_option("--data", data, "recorded sweep (ktune-bench --record)")->required();
  app.add_option("--seeds", seeds, "runs per strategy (median reported)")->capture_default_str();
  app.add_option("--out", out, "results JSON");
  CLI11_PARSE(app, argc, argv);
  const auto templates = TemplateRegistry::load({builtin_template_dir()});
  auto problems = load_replay(data, templates);
  if (!problems)
    return std::fprintf(stderr, "ktune-replay: %s\n", problems.error().message.c_str()), 1;
  Json doc = {
      {"benchmark", "replay"}, {"data", data}, {"seeds", seeds}, {"problems", Json::array()}};
  std::printf("%-40s %-10s %6s %8s %8s %8s %8s %10s\n", "problem", "strategy", "space", "@2%",
              "@5%", "@10%", "@20%", "to98%");
  for (const auto& p : *problems) {
    const size_t n = p.candidates.size();
    Json row = {{"problem", p.problem.key()},
                {"configs", n},
                {"best_us", p.best},
                {"strategies", Json::object()}};
    for (const std::string& s : strategy_names()) {
      std::vector<std::vector<double>> curves;
      std::vector<double> to98;
      for (int seed = 1; seed <= seeds; ++seed) {
        auto c = replay(p, s, n, std::uint64_t(seed));
        if (!c) return std::fprintf(stderr, "%s\n", c.error().message.c_str()), 1;
        curves.push_back(c->fraction);
        size_t k = 0;
        while (k < c->fraction.size() && c->fraction[k] < 0.98) ++k;
        to98.push_back(double(k + 1));
      }
      auto median_at = [&](size_t trials) {
        std::vector<double> v;
        for (const auto& c : curves) v.push_back(c.empty() ? 0 : c[std::min(trials, c.size()) - 1]);
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      std::sort(to98.begin(), to98.end());
      Json curve = Json::array();
      for (size_t t = 1; t <= n; t = t < 10 ? t + 1 : size_t(double(t) * 1.25) + 1)
        curve.push_back({t, median_at(t)});
      const auto pct = [&](double f) { return std::max<size_t>(1, size_t(f * double(n))); };
      row["strategies"][s] = {
          {"median_fraction", curve},         {"at_2pct", median_at(pct(0.02))},
          {"at_5pct", median_at(pct(0.05))},  {"at_10pct", median_at(pct(0.10))},
          {"at_20pct", median_at(pct(0.20))}, {"median_trials_to_98pct", to98[to98.size() / 2]}};
      std::printf("%-40s %-10s %6zu %8.3f %8.3f %8.3f %8.3f %10.0f\n", p.problem.key().c_str(),
                  s.c_str(), n, median_at(pct(0.02)), median_at(pct(0.05)), median_at(pct(0.10)),
                  median_at(pct(0.20)), to98[to98.size() / 2]);
    }
    doc["problems"].push_back(row);
  }
  if (!out.empty())
    if (auto ok = write_file_atomic(out, doc.dump(2) + "\n"); !ok)
      return std::fprintf(stderr, "%s\n", ok.error().message.c_str()), 1;
  return 0;
}
