// RandomForest: a small random-forest regressor, the cost model of model-guided search.
//
// Bagged regression trees (bootstrap rows, a random subset of features per split, splits that
// most reduce the squared error). predict() gives the mean over the trees and their spread (the
// standard deviation across trees), which a search reads as its uncertainty. Feature vectors are
// plain doubles (a Candidate's features); the forest copies nothing it is not asked to keep.
//
// Thread-compatible: fit() mutates; predict() is const and may run concurrently with itself.
#pragma once

#include <cstddef>
#include <random>
#include <span>
#include <vector>

namespace ktune {

struct ForestOptions {
  int trees = 32;
  int max_depth = 14;
  size_t min_split = 3;           // a node with fewer rows is a leaf
  double feature_fraction = 0.6;  // features tried per split (at least one)
};

struct ForestPrediction {
  double mean = 0;
  double spread = 0;  // standard deviation over the trees
};

class RandomForest {
 public:
  explicit RandomForest(ForestOptions options = {}) : m_options(options) {}

  // Replaces the model with one fitted to rows x (all the same length) and targets y.
  // Randomness (bootstrap, feature subsets) comes from `rng`, so a caller's seed decides the fit.
  // An empty x leaves the forest empty.
  void fit(std::span<const std::vector<double>> x, std::span<const double> y, std::mt19937_64& rng);
  // REQUIRES: !empty(); features as long as the fitted rows.
  ForestPrediction predict(const std::vector<double>& features) const;
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
  struct Split {
    int feature = -1;  // -1: no split reduces the error
    double threshold = 0;
  };

  // Grows the subtree for `rows` and returns its node's index.
  int build(Tree& tree, std::span<const std::vector<double>> x, std::span<const double> y,
            std::vector<size_t> rows, int depth, std::mt19937_64& rng) const;
  Split best_split(std::span<const std::vector<double>> x, std::span<const double> y,
                   const std::vector<size_t>& rows, std::mt19937_64& rng) const;

  ForestOptions m_options;
  std::vector<Tree> m_trees;
};

}  // namespace ktune
