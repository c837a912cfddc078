#include "tuner/strategy.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

namespace ktune {

// ---- CandidateSet --------------------------------------------------------------------------

void CandidateSet::add_space(const SearchSpace& space) {
  const auto& t = space.template_();
  for (const auto& p : space.configs()) add(&t, t.name(), p, t.manifest.params);
}

void CandidateSet::add(const KernelTemplate* tmpl, std::string template_name, Params params,
                       const std::vector<ParamDomain>& domains) {
  const std::string key = template_name + "/" + params_to_string(params);
  if (m_index.count(key)) return;
  size_t t = std::find(m_templates.begin(), m_templates.end(), template_name) - m_templates.begin();
  if (t == m_templates.size()) {
    m_templates.push_back(template_name);
    m_domains.push_back(domains);
  }
  Candidate c;
  c.tmpl = tmpl;
  c.template_name = std::move(template_name);
  c.params = std::move(params);
  c.features.push_back(double(t));
  for (const auto& d : m_domains[t]) {
    auto it = c.params.find(d.name);
    const auto pos = it == c.params.end() ? d.values.end()
                                          : std::find(d.values.begin(), d.values.end(), it->second);
    const double idx = pos == d.values.end() ? 0 : double(pos - d.values.begin());
    c.features.push_back(d.values.size() > 1 ? idx / double(d.values.size() - 1) : 0);
  }
  m_index.emplace(key, m_items.size());
  m_items.push_back(std::move(c));
  m_neighbours_ready = false;
}

size_t CandidateSet::find(std::string_view template_name, const Params& params) const {
  auto it = m_index.find(std::string(template_name) + "/" + params_to_string(params));
  return it == m_index.end() ? npos : it->second;
}

const std::vector<size_t>& CandidateSet::neighbours(size_t i) const {
  if (!m_neighbours_ready) {
    m_neighbours.assign(m_items.size(), {});
    for (size_t a = 0; a < m_items.size(); ++a) {
      const Candidate& c = m_items[a];
      const size_t t = size_t(c.features[0]);
      for (const auto& d : m_domains[t]) {
        auto it = c.params.find(d.name);
        if (it == c.params.end()) continue;
        const auto pos = std::find(d.values.begin(), d.values.end(), it->second) - d.values.begin();
        for (long step : {-1L, 1L}) {
          const long q = long(pos) + step;
          if (q < 0 || q >= long(d.values.size())) continue;
          Params p = c.params;
          p[d.name] = d.values[size_t(q)];
          if (size_t b = find(c.template_name, p); b != npos) m_neighbours[a].push_back(b);
        }
      }
    }
    m_neighbours_ready = true;
  }
  return m_neighbours[i];
}

namespace {

// Shared bookkeeping: seeds first, never propose twice.
class StrategyBase : public Strategy {
 public:
  StrategyBase(const CandidateSet& c, std::vector<size_t> seeds, std::uint64_t rng_seed)
      : m_c(c), m_rng(rng_seed), m_proposed(c.size(), false) {
    for (size_t s : seeds)
      if (s < c.size() && std::find(m_seeds.begin(), m_seeds.end(), s) == m_seeds.end())
        m_seeds.push_back(s);
  }

 protected:
  bool take(size_t i, std::vector<size_t>& out) {
    if (i >= m_proposed.size() || m_proposed[i]) return false;
    m_proposed[i] = true;
    ++m_proposed_count;
    out.push_back(i);
    return true;
  }
  // Seeds not yet proposed, up to n.
  void take_seeds(size_t n, std::vector<size_t>& out) {
    while (out.size() < n && m_next_seed < m_seeds.size()) take(m_seeds[m_next_seed++], out);
  }
  bool exhausted() const { return m_proposed_count >= m_c.size(); }
  size_t random_unproposed() {
    if (exhausted()) return CandidateSet::npos;
    std::uniform_int_distribution<size_t> pick(0, m_c.size() - 1);
    for (int tries = 0; tries < 64; ++tries)
      if (size_t i = pick(m_rng); !m_proposed[i]) return i;
    for (size_t i = 0; i < m_c.size(); ++i)
      if (!m_proposed[i]) return i;
    return CandidateSet::npos;
  }

  // A random unproposed candidate, taking the templates in turn: when a job searches several
  // templates at once (kernel selection), a small template's space is sampled as often as a
  // large one's instead of in proportion to its size.
  size_t random_unproposed_by_template() {
    if (m_families.empty()) {
      for (size_t i = 0; i < m_c.size(); ++i) {
        const size_t t = size_t(m_c[i].features[0]);
        if (t >= m_families.size()) m_families.resize(t + 1);
        m_families[t].push_back(i);
      }
    }
    for (size_t attempt = 0; attempt < m_families.size(); ++attempt) {
      const auto& family = m_families[m_next_family++ % m_families.size()];
      std::vector<size_t> open;
      for (size_t i : family)
        if (!m_proposed[i]) open.push_back(i);
      if (!open.empty()) return open[std::uniform_int_distribution<size_t>(0, open.size() - 1)(m_rng)];
    }
    return CandidateSet::npos;
  }
  size_t template_count() const {
    size_t n = 0;
    for (size_t i = 0; i < m_c.size(); ++i) n = std::max(n, size_t(m_c[i].features[0]) + 1);
    return n;
  }

  const CandidateSet& m_c;
  std::mt19937_64 m_rng;
  std::vector<std::vector<size_t>> m_families;  // candidate indices per template
  size_t m_next_family = 0;
  std::vector<bool> m_proposed;
  size_t m_proposed_count = 0;
  std::vector<size_t> m_seeds;
  size_t m_next_seed = 0;
};

// Exhaustive (candidate order) and random (a shuffled order): the same walk over an order.
class OrderedSearch final : public StrategyBase {
 public:
  OrderedSearch(const CandidateSet& c, std::vector<size_t> seeds, std::uint64_t rng_seed,
                bool shuffle)
      : StrategyBase(c, std::move(seeds), rng_seed), m_order(c.size()), m_shuffled(shuffle) {
    std::iota(m_order.begin(), m_order.end(), 0);
    if (shuffle) std::shuffle(m_order.begin(), m_order.end(), m_rng);
  }
  std::string_view name() const override { return m_shuffled ? "random" : "exhaustive"; }
  std::vector<size_t> propose(size_t n) override {
    std::vector<size_t> out;
    take_seeds(n, out);
    while (out.size() < n && m_cursor < m_order.size()) take(m_order[m_cursor++], out);
    return out;
  }
  void observe(const std::vector<Observation>&) override {}

 private:
  std::vector<size_t> m_order;
  size_t m_cursor = 0;
  bool m_shuffled;
};

// Simulated annealing over one-step neighbours, in log-time, with random restarts when a
// neighbourhood is used up.
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
          if (!m_proposed[nb]) open.push_back(nb);
        if (!open.empty()) {
          next = open[std::uniform_int_distribution<size_t>(0, open.size() - 1)(m_rng)];
          break;
        }
      }
      if (next == CandidateSet::npos) next = random_unproposed();
      if (next == CandidateSet::npos || !take(next, out)) break;
    }
    return out;
  }
  void observe(const std::vector<Observation>& results) override {
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

 private:
  size_t m_current = CandidateSet::npos, m_best = CandidateSet::npos;
  double m_current_value = 0, m_best_value = 0;
  int m_steps = 0;
};

// A small random forest regressor over the candidates' features.
class Forest {
 public:
  void fit(const std::vector<const std::vector<double>*>& x, const std::vector<double>& y,
           std::mt19937_64& rng, int trees = 32) {
    m_trees.clear();
    if (x.empty()) return;
    const size_t d = x[0]->size();
    const size_t mtry = std::max<size_t>(1, size_t(std::ceil(double(d) * 0.6)));
    for (int t = 0; t < trees; ++t) {
      std::vector<size_t> sample(x.size());
      std::uniform_int_distribution<size_t> pick(0, x.size() - 1);
      for (auto& s : sample) s = pick(rng);
      Tree tree;
      build(tree, x, y, sample, 0, mtry, rng);
      m_trees.push_back(std::move(tree));
    }
  }
  // Mean and standard deviation over the trees.
  std::pair<double, double> predict(const std::vector<double>& f) const {
    double sum = 0, sq = 0;
    for (const auto& t : m_trees) {
      int n = 0;
      while (t.nodes[size_t(n)].feature >= 0)
        n = f[size_t(t.nodes[size_t(n)].feature)] <= t.nodes[size_t(n)].threshold
                ? t.nodes[size_t(n)].left
                : t.nodes[size_t(n)].right;
      const double v = t.nodes[size_t(n)].value;
      sum += v;
      sq += v * v;
    }
    const double k = double(m_trees.size());
    const double mean = sum / k;
    return {mean, std::sqrt(std::max(0.0, sq / k - mean * mean))};
  }
  bool empty() const { return m_trees.empty(); }

 private:
  struct Node {
    int feature = -1;  // -1: leaf
    double threshold = 0;
    int left = -1, right = -1;
    double value = 0;
  };
  struct Tree {
    std::vector<Node> nodes;
  };

  int build(Tree& tree, const std::vector<const std::vector<double>*>& x,
            const std::vector<double>& y, std::vector<size_t> rows, int depth, size_t mtry,
            std::mt19937_64& rng) {
    const int id = int(tree.nodes.size());
    tree.nodes.push_back({});
    double mean = 0;
    for (size_t r : rows) mean += y[r];
    mean /= double(rows.size());
    tree.nodes[size_t(id)].value = mean;
    if (rows.size() < 3 || depth >= 14) return id;
    const size_t d = x[0]->size();
    std::vector<size_t> features(d);
    std::iota(features.begin(), features.end(), 0);
    std::shuffle(features.begin(), features.end(), rng);
    features.resize(std::min(mtry, d));
    double best_score = 0;
    int best_feature = -1;
    double best_threshold = 0;
    for (size_t f : features) {
      std::vector<std::pair<double, double>> v;
      for (size_t r : rows) v.emplace_back((*x[r])[f], y[r]);
      std::sort(v.begin(), v.end());
      double left_sum = 0, left_sq = 0, total = 0, total_sq = 0;
      for (const auto& [_, yy] : v) {
        total += yy;
        total_sq += yy * yy;
      }
      for (size_t i = 0; i + 1 < v.size(); ++i) {
        left_sum += v[i].second;
        left_sq += v[i].second * v[i].second;
        if (v[i].first == v[i + 1].first) continue;
        const double nl = double(i + 1), nr = double(v.size() - i - 1);
        const double right_sum = total - left_sum, right_sq = total_sq - left_sq;
        // Reduction of the sum of squared errors.
        const double sse =
            (left_sq - left_sum * left_sum / nl) + (right_sq - right_sum * right_sum / nr);
        const double score = (total_sq - total * total / double(v.size())) - sse;
        if (score > best_score + 1e-12) {
          best_score = score;
          best_feature = int(f);
          best_threshold = 0.5 * (v[i].first + v[i + 1].first);
        }
      }
    }
    if (best_feature < 0) return id;
    std::vector<size_t> l, r;
    for (size_t row : rows)
      ((*x[row])[size_t(best_feature)] <= best_threshold ? l : r).push_back(row);
    const int left = build(tree, x, y, std::move(l), depth + 1, mtry, rng);
    const int right = build(tree, x, y, std::move(r), depth + 1, mtry, rng);
    tree.nodes[size_t(id)].feature = best_feature;
    tree.nodes[size_t(id)].threshold = best_threshold;
    tree.nodes[size_t(id)].left = left;
    tree.nodes[size_t(id)].right = right;
    return id;
  }

  std::vector<Tree> m_trees;
};

// Model-guided search: a random forest over log(time) proposes the candidates with the lowest
// lower confidence bound (mean - kappa * spread over trees), after a small random initial design.
// Failed configs are learned as much slower than the worst success, so their region is avoided.
class ModelGuided final : public StrategyBase {
 public:
  ModelGuided(const CandidateSet& c, std::vector<size_t> seeds, std::uint64_t rng_seed)
      : StrategyBase(c, std::move(seeds), rng_seed),
        m_initial(std::max(std::clamp<size_t>(c.size() / 100, 8, 24), 6 * template_count())) {}
  std::string_view name() const override { return "model"; }

  std::vector<size_t> propose(size_t n) override {
    std::vector<size_t> out;
    take_seeds(n, out);
    while (out.size() < n && m_proposed_count < m_initial && !exhausted()) {
      const size_t i = random_unproposed_by_template();
      if (i == CandidateSet::npos) break;
      take(i, out);
    }
    if (out.size() >= n || exhausted()) return out;
    if (m_dirty) refit();
    if (m_forest.empty()) {
      while (out.size() < n && !exhausted()) take(random_unproposed(), out);
      return out;
    }
    // Score every open candidate; take the best, with one random pick per batch for exploration.
    std::vector<std::pair<double, size_t>> scored;
    for (size_t i = 0; i < m_c.size(); ++i) {
      if (m_proposed[i]) continue;
      const auto [mean, spread] = m_forest.predict(m_c[i].features);
      scored.emplace_back(mean - 1.0 * spread, i);
    }
    std::sort(scored.begin(), scored.end());
    const size_t want = n - out.size();
    const size_t exploit = want >= 4 ? want - 1 : want;
    for (size_t k = 0; k < scored.size() && out.size() < n - (want - exploit); ++k)
      take(scored[k].second, out);
    while (out.size() < n && !exhausted()) take(random_unproposed(), out);
    return out;
  }

  void observe(const std::vector<Observation>& results) override {
    for (const auto& o : results) m_observed.push_back(o);
    m_dirty = true;
  }

 private:
  void refit() {
    m_dirty = false;
    double worst = -std::numeric_limits<double>::infinity();
    for (const auto& o : m_observed)
      if (std::isfinite(o.value)) worst = std::max(worst, std::log(o.value));
    if (!std::isfinite(worst)) return;
    std::vector<const std::vector<double>*> x;
    std::vector<double> y;
    for (const auto& o : m_observed) {
      x.push_back(&m_c[o.index].features);
      y.push_back(std::isfinite(o.value) ? std::log(o.value) : worst + 1.0);
    }
    m_forest.fit(x, y, m_rng);
  }

  size_t m_initial;
  std::vector<Observation> m_observed;
  Forest m_forest;
  bool m_dirty = false;
};

}  // namespace

Result<std::unique_ptr<Strategy>> make_strategy(std::string_view name,
                                                const CandidateSet& candidates,
                                                std::vector<size_t> seeds, std::uint64_t rng_seed) {
  if (name == "exhaustive" || name == "random")
    return std::make_unique<OrderedSearch>(candidates, std::move(seeds), rng_seed,
                                           name == "random");
  if (name == "anneal") return std::make_unique<Anneal>(candidates, std::move(seeds), rng_seed);
  if (name == "model") return std::make_unique<ModelGuided>(candidates, std::move(seeds), rng_seed);
  return fail(ErrorCode::invalid_argument,
              "unknown strategy '" + std::string(name) + "' (exhaustive, random, anneal, model)");
}

}  // namespace ktune
