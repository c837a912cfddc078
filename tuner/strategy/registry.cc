#include "tuner/strategy/registry.h"

#include <array>

#include "tuner/strategy/strategy_base.h"

namespace ktune {
namespace {

constexpr std::array k_strategies = {
    StrategyInfo{"exhaustive", "every candidate in order (seeds first)", make_exhaustive},
    StrategyInfo{"random", "every candidate in a random order (seeds first)", make_random},
    StrategyInfo{"anneal", "simulated annealing over one-step neighbours, random restarts",
                 make_anneal},
    StrategyInfo{"model", "random-forest cost model, lowest lower confidence bound first",
                 make_model_guided},
};

std::string join_names(std::string_view separator) {
  std::string out;
  for (const auto& s : k_strategies) {
    if (!out.empty()) out += separator;
    out += s.name;
  }
  return out;
}

}  // namespace

std::span<const StrategyInfo> strategy_table() {
  return k_strategies;
}

std::vector<std::string> strategy_names() {
  std::vector<std::string> out;
  for (const auto& s : k_strategies) out.emplace_back(s.name);
  return out;
}

std::string strategy_choices() {
  return join_names(" | ");
}

Result<std::unique_ptr<Strategy>> make_strategy(std::string_view name,
                                                const CandidateSet& candidates,
                                                std::vector<size_t> seeds, std::uint64_t rng_seed) {
  for (const auto& s : k_strategies)
    if (s.name == name) return s.make(candidates, std::move(seeds), rng_seed);
  return fail(ErrorCode::invalid_argument,
              "unknown strategy '" + std::string(name) + "' (" + join_names(", ") + ")");
}

}  // namespace ktune
