// StrategyBase: the bookkeeping every built-in strategy shares, and their factories.
//
// Seeds are proposed first (in order, unique); no index is proposed twice, nor one that was
// observed without being proposed (a resumed job's earlier measurements). Subclasses choose the
// next index (propose) and learn from results (learn); observe() marks the results measured
// before handing them to learn(). Internal to tuner/strategy/: callers use registry.h.
//
// Thread-compatible, like every Strategy.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "tuner/strategy/strategy.h"

namespace ktune {

class StrategyBase : public Strategy {
 public:
  StrategyBase(const CandidateSet& candidates, std::vector<size_t> seeds, std::uint64_t rng_seed);

  void observe(const std::vector<Observation>& results) final;

 protected:
  // What the strategy learns from results (all of them marked measured already).
  virtual void learn(const std::vector<Observation>& results) = 0;

  // Appends i to `out` and marks it taken; false if it was taken (or measured) already.
  bool take(size_t i, std::vector<size_t>& out);
  // Seeds not yet taken, until `out` holds n.
  void take_seeds(size_t n, std::vector<size_t>& out);
  bool taken(size_t i) const { return m_taken[i]; }
  bool exhausted() const { return m_taken_count >= m_c.size(); }
  size_t taken_count() const { return m_taken_count; }
  // A uniformly random candidate not yet taken, or npos.
  size_t random_untaken();
  // A random candidate not yet taken, taking the templates in turn: when a job searches several
  // templates at once (kernel selection), a small template's space is sampled as often as a
  // large one's instead of in proportion to its size.
  size_t random_untaken_by_template();

  const CandidateSet& m_c;
  std::mt19937_64 m_rng;

 private:
  std::vector<bool> m_taken;  // proposed, or observed without being proposed
  size_t m_taken_count = 0;
  std::vector<size_t> m_seeds;
  size_t m_next_seed = 0;
  std::vector<std::vector<size_t>> m_families;  // candidate indices per template
  size_t m_next_family = 0;
};

// The built-in strategies, one per file (ordered.cc, anneal.cc, model_guided.cc); registry.cc
// lists them.
std::unique_ptr<Strategy> make_exhaustive(const CandidateSet& candidates, std::vector<size_t> seeds,
                                          std::uint64_t rng_seed);
std::unique_ptr<Strategy> make_random(const CandidateSet& candidates, std::vector<size_t> seeds,
                                      std::uint64_t rng_seed);
std::unique_ptr<Strategy> make_anneal(const CandidateSet& candidates, std::vector<size_t> seeds,
                                      std::uint64_t rng_seed);
std::unique_ptr<Strategy> make_model_guided(const CandidateSet& candidates,
                                            std::vector<size_t> seeds, std::uint64_t rng_seed);

}  // namespace ktune
