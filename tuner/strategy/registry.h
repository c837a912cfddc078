// The strategy registry: one table of every search strategy ktune knows, by name.
//
// Each row is {name, one-line description, factory}. make_strategy() builds one by name; the
// names are what `tuning.strategy`, the CLI's --strategy and job records carry. config/ keeps its
// own list of accepted names (it cannot depend on tuner/); tests/tuner/strategy_registry_test.cc
// checks the two agree. Help texts are built from this table, never written by hand.
//
// The table is immutable: every function here is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tuner/strategy/strategy.h"

namespace ktune {

// Builds a strategy over `candidates` (which must outlive it). `seeds` are proposed first, in
// order, once each; `rng_seed` makes every random choice reproducible.
using StrategyFactory = std::unique_ptr<Strategy> (*)(const CandidateSet& candidates,
                                                      std::vector<size_t> seeds,
                                                      std::uint64_t rng_seed);

struct StrategyInfo {
  std::string_view name;
  std::string_view description;  // one line, for help texts
  StrategyFactory make;
};

// Every strategy, in the order help texts list them.
std::span<const StrategyInfo> strategy_table();
std::vector<std::string> strategy_names();
// "exhaustive | random | anneal | model": the names for a help text.
std::string strategy_choices();

// ErrorCode::invalid_argument naming the known strategies when `name` is not one.
Result<std::unique_ptr<Strategy>> make_strategy(std::string_view name,
                                                const CandidateSet& candidates,
                                                std::vector<size_t> seeds, std::uint64_t rng_seed);

}  // namespace ktune
