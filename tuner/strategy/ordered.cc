// Exhaustive (candidate order) and random (a shuffled order): the same walk over an order,
// seeds first.
#include <algorithm>
#include <numeric>

#include "tuner/strategy/strategy_base.h"

namespace ktune {
namespace {

enum class Order { candidates, shuffled };

class OrderedSearch final : public StrategyBase {
 public:
  OrderedSearch(const CandidateSet& c, std::vector<size_t> seeds, std::uint64_t rng_seed,
                Order order)
      : StrategyBase(c, std::move(seeds), rng_seed), m_order(c.size()), m_kind(order) {
    std::iota(m_order.begin(), m_order.end(), 0);
    if (order == Order::shuffled) std::shuffle(m_order.begin(), m_order.end(), m_rng);
  }
  std::string_view name() const override {
    return m_kind == Order::shuffled ? "random" : "exhaustive";
  }
  std::vector<size_t> propose(size_t n) override {
    std::vector<size_t> out;
    take_seeds(n, out);
    while (out.size() < n && m_cursor < m_order.size()) take(m_order[m_cursor++], out);
    return out;
  }

 private:
  void learn(const std::vector<Observation>&) override {}

  std::vector<size_t> m_order;
  size_t m_cursor = 0;
  Order m_kind;
};

}  // namespace

std::unique_ptr<Strategy> make_exhaustive(const CandidateSet& candidates, std::vector<size_t> seeds,
                                          std::uint64_t rng_seed) {
  return std::make_unique<OrderedSearch>(candidates, std::move(seeds), rng_seed, Order::candidates);
}

std::unique_ptr<Strategy> make_random(const CandidateSet& candidates, std::vector<size_t> seeds,
                                      std::uint64_t rng_seed) {
  return std::make_unique<OrderedSearch>(candidates, std::move(seeds), rng_seed, Order::shuffled);
}

}  // namespace ktune
