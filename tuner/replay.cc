#include "tuner/replay.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <sstream>

#include "tuner/strategy/registry.h"

namespace ktune {

Result<std::vector<ReplayProblem>> load_replay(const std::string& path,
                                               const TemplateRegistry& templates) {
  std::ifstream in(path);
  if (!in) return fail(ErrorCode::io_error, path + ": cannot read");
  nlohmann::json doc;
  try {
    in >> doc;
  } catch (const std::exception& e) {
    return fail(ErrorCode::corruption, path + ": " + e.what());
  }
  const int cc =
      doc.value("device_class", std::string()).find(".sm90.") != std::string::npos ? 90 : 80;
  std::vector<ReplayProblem> out;
  for (const auto& p : doc.at("problems")) {
    auto problem = parse_problem_key(p.at("problem").get<std::string>());
    if (!problem) return std::unexpected(problem.error());
    ReplayProblem rp;
    rp.problem = *problem;
    // Domains: the template's own, else the values seen per param.
    std::map<std::string, std::map<std::string, std::set<std::int64_t>>> seen;
    for (const auto& t : p.at("trials"))
      for (auto it = t.at("params").begin(); it != t.at("params").end(); ++it)
        seen[t.at("template").get<std::string>()][it.key()].insert(it.value().get<std::int64_t>());
    std::map<std::string, std::vector<ParamDomain>> domains;
    for (const auto& [tname, params] : seen) {
      if (const KernelTemplate* t = templates.find(tname)) {
        domains[tname] = t->manifest.params;
      } else {
        for (const auto& [pname, values] : params)
          domains[tname].push_back({pname, {values.begin(), values.end()}, {}, 0});
      }
    }
    for (const auto& t : p.at("trials")) {
      Params params;
      for (auto it = t.at("params").begin(); it != t.at("params").end(); ++it)
        params[it.key()] = it.value().get<std::int64_t>();
      const std::string tname = t.at("template").get<std::string>();
      const size_t before = rp.candidates.size();
      rp.candidates.add(templates.find(tname), tname, params, domains[tname]);
      if (rp.candidates.size() == before) continue;  // a duplicate record
      const bool ok = t.at("outcome").get<std::string>() == "ok";
      rp.value.push_back(ok ? t.at("median_us").get<double>()
                            : std::numeric_limits<double>::infinity());
    }
    rp.best = *std::min_element(rp.value.begin(), rp.value.end());
    if (!std::isfinite(rp.best)) continue;
    const DeviceLimits limits = *DeviceLimits::for_arch("sm_" + std::to_string(cc));
    for (const KernelTemplate* t : templates.for_problem(rp.problem, cc))
      add_template_seeds(rp.seeds, rp.candidates, *t, rp.problem, limits);
    out.push_back(std::move(rp));
  }
  return out;
}

Result<ReplayCurve> replay(const ReplayProblem& p, std::string_view strategy_name,
                           const ReplayOptions& options) {
  const size_t max_trials = trial_budget(options.max_trials, p.candidates.size());
  SeedOrder order =
      order_seeds(p.seeds, p.candidates, options.seeds, max_trials, options.rule_seeds);
  auto strategy =
      make_strategy(strategy_name, p.candidates, std::move(order.seeds), options.rng_seed);
  if (!strategy) return std::unexpected(strategy.error());
  ReplayCurve curve;
  curve.strategy = std::string(strategy_name);
  double best = std::numeric_limits<double>::infinity();
  while (curve.fraction.size() < max_trials) {
    auto proposal =
        (*strategy)->propose(std::min(options.batch, max_trials - curve.fraction.size()));
    if (proposal.empty()) break;
    std::vector<Observation> obs;
    for (size_t i : proposal) {
      obs.push_back({i, p.value[i]});
      best = std::min(best, p.value[i]);
      curve.fraction.push_back(std::isfinite(best) ? p.best / best : 0);
    }
    (*strategy)->observe(obs);
  }
  return curve;
}

std::vector<Params> fastest_configs(const ReplayProblem& p, size_t k) {
  std::vector<size_t> order(p.candidates.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return p.value[a] < p.value[b]; });
  std::vector<Params> out;
  for (size_t i = 0; i < std::min(k, order.size()) && std::isfinite(p.value[order[i]]); ++i)
    out.push_back(p.candidates[order[i]].params);
  return out;
}

}  // namespace ktune
