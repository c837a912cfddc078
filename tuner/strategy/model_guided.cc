// Model-guided search: a random forest over log(time) proposes the candidates with the lowest
// lower confidence bound (mean - kappa * spread over trees), after a small random initial design
// drawn from each template in turn. Failed configs are learned as much slower than the worst
// success, so their region is avoided.
#include <algorithm>
#include <cmath>

#include "tuner/strategy/forest.h"
#include "tuner/strategy/strategy_base.h"

namespace ktune {
namespace {

class ModelGuided final : public StrategyBase {
 public:
  ModelGuided(const CandidateSet& c, std::vector<size_t> seeds, std::uint64_t rng_seed)
      : StrategyBase(c, std::move(seeds), rng_seed),
        m_initial(std::max(std::clamp<size_t>(c.size() / 100, 8, 24), 6 * c.template_count())) {}
  std::string_view name() const override { return "model"; }

  std::vector<size_t> propose(size_t n) override {
    std::vector<size_t> out;
    take_seeds(n, out);
    while (out.size() < n && taken_count() < m_initial && !exhausted()) {
      const size_t i = random_untaken_by_template();
      if (i == CandidateSet::npos) break;
      take(i, out);
    }
    if (out.size() >= n || exhausted()) return out;
    if (m_dirty) refit();
    if (m_forest.empty()) {
      while (out.size() < n && !exhausted()) take(random_untaken(), out);
      return out;
    }
    // Score every open candidate; take the best, with one random pick per batch for exploration.
    std::vector<std::pair<double, size_t>> scored;
    for (size_t i = 0; i < m_c.size(); ++i) {
      if (taken(i)) continue;
      const auto p = m_forest.predict(m_c[i].features);
      scored.emplace_back(p.mean - k_kappa * p.spread, i);
    }
    std::sort(scored.begin(), scored.end());
    const size_t want = n - out.size();
    const size_t exploit = want >= 4 ? want - 1 : want;
    for (size_t k = 0; k < scored.size() && out.size() < n - (want - exploit); ++k)
      take(scored[k].second, out);
    while (out.size() < n && !exhausted()) take(random_untaken(), out);
    return out;
  }

 private:
  static constexpr double k_kappa = 1.0;  // weight of the spread in the lower confidence bound

  void learn(const std::vector<Observation>& results) override {
    m_observed.insert(m_observed.end(), results.begin(), results.end());
    m_dirty = true;
  }

  void refit() {
    m_dirty = false;
    double worst = -std::numeric_limits<double>::infinity();
    for (const auto& o : m_observed)
      if (std::isfinite(o.value)) worst = std::max(worst, std::log(o.value));
    if (!std::isfinite(worst)) return;
    std::vector<std::vector<double>> x;
    std::vector<double> y;
    for (const auto& o : m_observed) {
      x.push_back(m_c[o.index].features);
      y.push_back(std::isfinite(o.value) ? std::log(o.value) : worst + 1.0);
    }
    m_forest.fit(x, y, m_rng);
  }

  size_t m_initial;
  std::vector<Observation> m_observed;
  RandomForest m_forest;
  bool m_dirty = false;
};

}  // namespace

std::unique_ptr<Strategy> make_model_guided(const CandidateSet& candidates,
                                            std::vector<size_t> seeds, std::uint64_t rng_seed) {
  return std::make_unique<ModelGuided>(candidates, std::move(seeds), rng_seed);
}

}  // namespace ktune
