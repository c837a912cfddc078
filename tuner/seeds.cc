#include "tuner/seeds.h"

#include <algorithm>

namespace ktune {

void add_template_seeds(TemplateSeeds& seeds, const CandidateSet& candidates,
                        const KernelTemplate& tmpl, const Problem& problem,
                        const DeviceLimits& limits) {
  if (auto h = heuristic_config(tmpl, problem, limits))
    if (size_t i = candidates.find(tmpl.name(), *h); i != CandidateSet::npos)
      seeds.heuristic.push_back(i);
  auto& rules = seeds.rules.emplace_back();
  for (const Params& p : rule_configs(tmpl, problem, limits))
    if (size_t i = candidates.find(tmpl.name(), p); i != CandidateSet::npos) rules.push_back(i);
}

size_t trial_budget(size_t max_trials, size_t candidates) {
  return max_trials > 0 ? std::min(max_trials, candidates) : candidates;
}

SeedOrder order_seeds(const TemplateSeeds& templates, const CandidateSet& candidates,
                      const std::vector<Params>& requested, size_t trials, RuleSeeds rule_seeds) {
  SeedOrder out;
  auto add = [&](size_t i) {
    if (std::find(out.seeds.begin(), out.seeds.end(), i) != out.seeds.end()) return false;
    out.seeds.push_back(i);
    return true;
  };
  for (size_t i : templates.heuristic) add(i);
  for (const Params& p : requested)
    for (size_t i : candidates.find_all(p)) add(i);
  const size_t cap = rule_seeds == RuleSeeds::included ? trials / k_rule_seed_divisor : 0;
  for (size_t k = 0, more = 1; more && out.rule_configs < cap; ++k) {
    more = 0;
    for (const auto& rules : templates.rules) {
      if (k >= rules.size() || out.rule_configs == cap) continue;
      more = 1;
      out.rule_configs += add(rules[k]);
    }
  }
  return out;
}

}  // namespace ktune
