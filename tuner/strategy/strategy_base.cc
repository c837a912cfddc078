#include "tuner/strategy/strategy_base.h"

#include <algorithm>

namespace ktune {

StrategyBase::StrategyBase(const CandidateSet& candidates, std::vector<size_t> seeds,
                           std::uint64_t rng_seed)
    : m_c(candidates), m_rng(rng_seed), m_taken(candidates.size(), false) {
  for (size_t s : seeds)
    if (s < candidates.size() && std::find(m_seeds.begin(), m_seeds.end(), s) == m_seeds.end())
      m_seeds.push_back(s);
}

void StrategyBase::observe(const std::vector<Observation>& results) {
  for (const auto& o : results)
    if (o.index < m_taken.size() && !m_taken[o.index]) {
      m_taken[o.index] = true;
      ++m_taken_count;
    }
  learn(results);
}

bool StrategyBase::take(size_t i, std::vector<size_t>& out) {
  if (i >= m_taken.size() || m_taken[i]) return false;
  m_taken[i] = true;
  ++m_taken_count;
  out.push_back(i);
  return true;
}

void StrategyBase::take_seeds(size_t n, std::vector<size_t>& out) {
  while (out.size() < n && m_next_seed < m_seeds.size()) take(m_seeds[m_next_seed++], out);
}

size_t StrategyBase::random_untaken() {
  if (exhausted()) return CandidateSet::npos;
  std::uniform_int_distribution<size_t> pick(0, m_c.size() - 1);
  for (int tries = 0; tries < 64; ++tries)
    if (size_t i = pick(m_rng); !m_taken[i]) return i;
  for (size_t i = 0; i < m_c.size(); ++i)
    if (!m_taken[i]) return i;
  return CandidateSet::npos;
}

size_t StrategyBase::random_untaken_by_template() {
  if (m_families.empty()) {
    m_families.resize(m_c.template_count());
    for (size_t i = 0; i < m_c.size(); ++i) m_families[size_t(m_c[i].features[0])].push_back(i);
  }
  for (size_t attempt = 0; attempt < m_families.size(); ++attempt) {
    const auto& family = m_families[m_next_family++ % m_families.size()];
    std::vector<size_t> open;
    for (size_t i : family)
      if (!m_taken[i]) open.push_back(i);
    if (!open.empty())
      return open[std::uniform_int_distribution<size_t>(0, open.size() - 1)(m_rng)];
  }
  return CandidateSet::npos;
}

}  // namespace ktune
