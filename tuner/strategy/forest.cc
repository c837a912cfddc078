#include "tuner/strategy/forest.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

namespace ktune {

void RandomForest::fit(std::span<const std::vector<double>> x, std::span<const double> y,
                       std::mt19937_64& rng) {
  m_trees.clear();
  if (x.empty()) return;
  for (int t = 0; t < m_options.trees; ++t) {
    std::vector<size_t> sample(x.size());
    std::uniform_int_distribution<size_t> pick(0, x.size() - 1);
    for (auto& s : sample) s = pick(rng);
    Tree tree;
    build(tree, x, y, sample, 0, rng);
    m_trees.push_back(std::move(tree));
  }
}

ForestPrediction RandomForest::predict(const std::vector<double>& f) const {
  double sum = 0, sq = 0;
  for (const auto& t : m_trees) {
    const Node* n = &t.nodes[0];
    while (n->feature >= 0)
      n = &t.nodes[size_t(f[size_t(n->feature)] <= n->threshold ? n->left : n->right)];
    sum += n->value;
    sq += n->value * n->value;
  }
  const double k = double(m_trees.size());
  const double mean = sum / k;
  return {mean, std::sqrt(std::max(0.0, sq / k - mean * mean))};
}

int RandomForest::build(Tree& tree, std::span<const std::vector<double>> x,
                        std::span<const double> y, std::vector<size_t> rows, int depth,
                        std::mt19937_64& rng) const {
  const int id = int(tree.nodes.size());
  tree.nodes.push_back({});
  double mean = 0;
  for (size_t r : rows) mean += y[r];
  mean /= double(rows.size());
  tree.nodes[size_t(id)].value = mean;
  if (rows.size() < m_options.min_split || depth >= m_options.max_depth) return id;
  const Split split = best_split(x, y, rows, rng);
  if (split.feature < 0) return id;
  std::vector<size_t> l, r;
  for (size_t row : rows) (x[row][size_t(split.feature)] <= split.threshold ? l : r).push_back(row);
  const int left = build(tree, x, y, std::move(l), depth + 1, rng);
  const int right = build(tree, x, y, std::move(r), depth + 1, rng);
  Node& node = tree.nodes[size_t(id)];
  node.feature = split.feature;
  node.threshold = split.threshold;
  node.left = left;
  node.right = right;
  return id;
}

RandomForest::Split RandomForest::best_split(std::span<const std::vector<double>> x,
                                             std::span<const double> y,
                                             const std::vector<size_t>& rows,
                                             std::mt19937_64& rng) const {
  const size_t d = x[0].size();
  const size_t mtry =
      std::max<size_t>(1, size_t(std::ceil(double(d) * m_options.feature_fraction)));
  std::vector<size_t> features(d);
  std::iota(features.begin(), features.end(), 0);
  std::shuffle(features.begin(), features.end(), rng);
  features.resize(std::min(mtry, d));
  Split best;
  double best_score = 0;
  for (size_t f : features) {
    std::vector<std::pair<double, double>> v;
    for (size_t r : rows) v.emplace_back(x[r][f], y[r]);
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
        best = {int(f), 0.5 * (v[i].first + v[i + 1].first)};
      }
    }
  }
  return best;
}

}  // namespace ktune
