#include "daemon/shape_tree.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ktune {
namespace {

// The distance as every caller of nearest() has always seen it: summed over the dims in order,
// |target - point| each.
double distance(const double* target, const double* point, size_t dims) {
  double d = 0;
  for (size_t i = 0; i < dims; ++i) d += std::abs(target[i] - point[i]);
  return d;
}

// A lower bound on distance(target, p) for every p in the box [lo, hi]: the same sum with each
// term replaced by the gap between target and the box along that dim. Rounding is monotonic, so
// no term (lo - t <= p - t when t < lo <= p) and no partial sum exceeds its counterpart in
// distance(): the bound holds exactly, not just up to rounding.
double gap(const double* target, const double* lo, const double* hi, size_t dims) {
  double d = 0;
  for (size_t i = 0; i < dims; ++i) {
    if (target[i] < lo[i])
      d += lo[i] - target[i];
    else if (target[i] > hi[i])
      d += target[i] - hi[i];
  }
  return d;
}

}  // namespace

// One nearest() call: the best `max` hits so far in a heap whose front is the worst of them.
class ShapeTree::Search {
  // Nearest first, then by key.
  struct Before {
    const std::vector<std::string>* keys;
    bool operator()(const Hit& a, const Hit& b) const {
      if (a.distance != b.distance) return a.distance < b.distance;
      return (*keys)[a.slot] < (*keys)[b.slot];
    }
  };
  Before before() const { return Before{&m_tree.m_keys}; }

 public:
  Search(const ShapeTree& tree, std::span<const double> target, double radius, size_t max)
      : m_tree(tree), m_target(target.data()), m_radius(radius), m_max(max) {}

  Work work;

  void consider(std::uint32_t slot, double d) {
    ++work.points;
    if (!(d > 0) || d > m_radius) return;
    const Hit hit{slot, d};
    if (m_best.size() < m_max) {
      m_best.push_back(hit);
      std::push_heap(m_best.begin(), m_best.end(), before());
    } else if (before()(hit, m_best.front())) {
      std::pop_heap(m_best.begin(), m_best.end(), before());
      m_best.back() = hit;
      std::push_heap(m_best.begin(), m_best.end(), before());
    }
  }

  // Visits a node whose box is `lower` away, skipping it when nothing in it can make the list:
  // farther than the radius, or than the current max-th best (at equal distance a smaller key
  // could still win, so equal is visited).
  void visit(std::uint32_t id, double lower) {
    if (lower > bound()) return;
    ++work.nodes;
    const Node& node = m_tree.m_nodes[id];
    const size_t dims = m_tree.m_dims;
    if (node.left == 0) {
      for (std::uint32_t i = node.begin; i < node.end; ++i)
        consider(m_tree.m_order[i], distance(m_target, &m_tree.m_ordered[size_t(i) * dims], dims));
      return;
    }
    const double left = box_gap(node.left);
    const double right = box_gap(node.right);
    if (left <= right) {
      visit(node.left, left);
      visit(node.right, right);
    } else {
      visit(node.right, right);
      visit(node.left, left);
    }
  }

  double box_gap(std::uint32_t id) const {
    const double* box = &m_tree.m_boxes[size_t(id) * 2 * m_tree.m_dims];
    return gap(m_target, box, box + m_tree.m_dims, m_tree.m_dims);
  }

  std::vector<Hit> sorted() {
    std::sort(m_best.begin(), m_best.end(), before());
    return std::move(m_best);
  }

 private:
  double bound() const { return m_best.size() < m_max ? m_radius : m_best.front().distance; }

  const ShapeTree& m_tree;
  const double* m_target;
  double m_radius;
  size_t m_max;
  std::vector<Hit> m_best;
};

std::uint32_t ShapeTree::add(std::span<const double> point, std::string key) {
  m_points.insert(m_points.end(), point.begin(), point.end());
  m_keys.push_back(std::move(key));
  return std::uint32_t(m_keys.size() - 1);
}

void ShapeTree::settle() {
  // Scanning the unbuilt tail costs about as much as the tree's search once it passes ~2 sqrt(n);
  // rebuilding then costs O(n log n) per ~2 sqrt(n) adds.
  const size_t built = m_order.size();
  const size_t tail = size() - built;
  if (tail > 32 && tail * tail > 4 * built) build();
}

void ShapeTree::build() {
  const auto n = std::uint32_t(size());
  m_order.resize(n);
  std::iota(m_order.begin(), m_order.end(), 0u);
  m_nodes.clear();
  m_boxes.clear();
  m_nodes.reserve(2 * (n / k_leaf + 1));
  m_boxes.reserve(m_nodes.capacity() * 2 * m_dims);
  if (n > 0) build_node(0, n);
  m_ordered.resize(size_t(n) * m_dims);
  for (std::uint32_t i = 0; i < n; ++i)
    std::copy_n(point(m_order[i]), m_dims, &m_ordered[size_t(i) * m_dims]);
}

std::uint32_t ShapeTree::build_node(std::uint32_t begin, std::uint32_t end) {
  const auto id = std::uint32_t(m_nodes.size());
  m_nodes.push_back(Node{begin, end, 0, 0});
  const size_t box = m_boxes.size();
  m_boxes.resize(box + 2 * m_dims);
  double* lo = &m_boxes[box];
  double* hi = lo + m_dims;
  std::copy_n(point(m_order[begin]), m_dims, lo);
  std::copy_n(point(m_order[begin]), m_dims, hi);
  for (std::uint32_t i = begin + 1; i < end; ++i)
    for (size_t d = 0; d < m_dims; ++d) {
      lo[d] = std::min(lo[d], point(m_order[i])[d]);
      hi[d] = std::max(hi[d], point(m_order[i])[d]);
    }
  if (end - begin <= k_leaf) return id;
  size_t widest = 0;
  for (size_t d = 1; d < m_dims; ++d)
    if (hi[d] - lo[d] > hi[widest] - lo[widest]) widest = d;
  if (!(hi[widest] > lo[widest])) return id;  // every point the same: one leaf
  const std::uint32_t mid = begin + (end - begin) / 2;
  std::nth_element(
      m_order.begin() + begin, m_order.begin() + mid, m_order.begin() + end,
      [&](std::uint32_t a, std::uint32_t b) { return point(a)[widest] < point(b)[widest]; });
  const std::uint32_t left = build_node(begin, mid);
  const std::uint32_t right = build_node(mid, end);
  m_nodes[id].left = left;
  m_nodes[id].right = right;
  return id;
}

std::vector<ShapeTree::Hit> ShapeTree::nearest(std::span<const double> target, double radius,
                                               size_t max, Work* work) const {
  if (max == 0 || m_keys.empty()) return {};
  Search search(*this, target, radius, max);
  if (!m_nodes.empty()) search.visit(0, search.box_gap(0));
  for (auto slot = std::uint32_t(m_order.size()); slot < m_keys.size(); ++slot)
    search.consider(slot, distance(target.data(), point(slot), m_dims));
  if (work) *work = search.work;
  return search.sorted();
}

}  // namespace ktune
