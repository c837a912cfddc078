// ShapeTree: nearest-shape search over one family of tuned problems, in log2-dims space.
//
// Points are problems' dims in log2 (one coordinate per dim, all points of a tree have the same
// number), each named by its problem key. nearest() returns the points at L1 distance
// 0 < d <= radius, nearest first, ties by key — exactly what scanning every point would return,
// with the same distances to the bit: each distance is summed over the dims in the same order,
// and a subtree is skipped only when a lower bound on its distances (computed with the same
// rounding, so never above any of them) exceeds the radius or the current max-th best.
//
// A k-d tree (median splits on the widest dim, leaves of up to k_leaf points, a bounding box per
// node) over the points added up to the last build, plus the points added since, scanned
// linearly. settle() rebuilds once the unbuilt tail outgrows ~2 sqrt(n), so adds cost amortized
// O(sqrt(n)) and a search about O(log n + the tail). Slots (a point's index) never change.
//
// Thread-compatible: WinnerIndex serializes writers (add, settle) against readers (nearest).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ktune {

class ShapeTree {
 public:
  struct Hit {
    std::uint32_t slot = 0;
    double distance = 0;
  };

  explicit ShapeTree(size_t dims) : m_dims(dims) {}

  size_t dims() const { return m_dims; }
  size_t size() const { return m_keys.size(); }
  const std::string& key(std::uint32_t slot) const { return m_keys[slot]; }

  // Adds a point named `key`; returns its slot. REQUIRES: point.size() == dims().
  std::uint32_t add(std::span<const double> point, std::string key);
  // Rebuilds the tree over every point when enough were added since the last build.
  void settle();
  // What one search touched (tests check the work stays sub-linear).
  struct Work {
    size_t nodes = 0;   // tree nodes visited
    size_t points = 0;  // distances computed
  };
  // The points within `radius` of `target` (excluding distance 0), nearest first, ties by key;
  // at most `max`. REQUIRES: target.size() == dims().
  std::vector<Hit> nearest(std::span<const double> target, double radius, size_t max,
                           Work* work = nullptr) const;

 private:
  static constexpr std::uint32_t k_leaf = 16;
  struct Node {
    std::uint32_t begin = 0, end = 0;   // its points: m_order[begin, end)
    std::uint32_t left = 0, right = 0;  // children; 0 for a leaf (node 0 is the root)
  };
  class Search;

  void build();
  std::uint32_t build_node(std::uint32_t begin, std::uint32_t end);
  const double* point(std::uint32_t slot) const { return &m_points[size_t(slot) * m_dims]; }

  size_t m_dims;
  std::vector<double> m_points;        // by slot, m_dims each
  std::vector<std::string> m_keys;     // by slot
  std::vector<std::uint32_t> m_order;  // the built slots, in tree order
  std::vector<double> m_ordered;       // their points in the same order (scanned by leaves)
  std::vector<Node> m_nodes;
  std::vector<double> m_boxes;  // per node: m_dims lows then m_dims highs
};

}  // namespace ktune
