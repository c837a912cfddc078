// Simulated annealing over one-step neighbours (CandidateSet::neighbours), in log-time, with
// random restarts when a neighbourhood is used up.
#include <algorithm>
#include <cmath>

#include "tuner/strategy/strategy_base.h"

namespace ktune {
namespace {

class Anneal final : public StrategyBase {
 public:
  using StrategyBase::StrategyBase;
  std::string_view name() const override { return "anneal"; }

  std::vector<size_t> propose(size_t n) override {
    std::vector<size_t> out;
    take_seeds(n, out);
    while (out.size() < n && !exhausted()) {
      size_t next = CandidateSet::npos;
      for (size_t from : {m_current, m_best}) {
        if (from == CandidateSet::npos) continue;
        std::vector<size_t> open;
        for (size_t nb : m_c.neighbours(from))
          if (!taken(nb)) open.push_back(nb);
        if (!open.empty()) {
          next = open[std::uniform_int_distribution<size_t>(0, open.size() - 1)(m_rng)];
          break;
        }
      }
      if (next == CandidateSet::npos) next = random_untaken();
      if (next == CandidateSet::npos || !take(next, out)) break;
    }
    return out;
  }

 private:
  // Moves to a result when it is better, or worse by little enough for the temperature, which
  // falls with every success observed.
  void learn(const std::vector<Observation>& results) override {
    for (const auto& o : results) {
      if (!std::isfinite(o.value)) continue;
      const double v = std::log(o.value);
      if (m_best == CandidateSet::npos || v < m_best_value) {
        m_best = o.index;
        m_best_value = v;
      }
      const double t = 0.3 * std::pow(0.97, double(m_steps++));
      if (m_current == CandidateSet::npos || v < m_current_value ||
          std::uniform_real_distribution<double>(0, 1)(m_rng) <
              std::exp(-(v - m_current_value) / std::max(t, 1e-6))) {
        m_current = o.index;
        m_current_value = v;
      }
    }
  }

  size_t m_current = CandidateSet::npos, m_best = CandidateSet::npos;
  double m_current_value = 0, m_best_value = 0;
  int m_steps = 0;
};

}  // namespace

std::unique_ptr<Strategy> make_anneal(const CandidateSet& candidates, std::vector<size_t> seeds,
                                      std::uint64_t rng_seed) {
  return std::make_unique<Anneal>(candidates, std::move(seeds), rng_seed);
}

}  // namespace ktune
