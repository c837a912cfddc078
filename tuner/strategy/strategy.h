// Search strategies: ask/tell objects that choose which configs to measure next.
//
// A Strategy never compiles or times anything: it proposes candidate indices and is told the
// results (kernel time, or +inf for a config that failed). One Budget stops every strategy.
// The candidates are the union of every template's pruned space for one problem, each with a
// feature vector (its params as positions in their domains) that model-based strategies learn on.
// Seeds (tuner/seeds.h: the heuristic configs, requested configs and neighbouring shapes'
// winners, the other heuristic rules' configs) are proposed first by all of them.
// The built-in strategies and make_strategy() are in registry.h; each lives in its own file here.
//
// Thread-compatible: a strategy and its CandidateSet belong to one tuning job. A strategy keeps a
// reference to the CandidateSet it was made with, which must outlive it.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "templates/space.h"

namespace ktune {

struct Candidate {
  const KernelTemplate* tmpl = nullptr;  // may be null in replay data
  std::string template_name;
  Params params;
  std::vector<double> features;  // in [0, 1]: template index, then each param's domain position
};

// The candidates of a job, with what strategies need to navigate them.
class CandidateSet {
 public:
  // Adds every config of `space` (one template).
  void add_space(const SearchSpace& space);
  // Adds one config. `tmpl` may be null for replay data, where only the name and domains are known.
  void add(const KernelTemplate* tmpl, std::string template_name, Params params,
           const std::vector<ParamDomain>& domains);

  size_t size() const { return m_items.size(); }
  const Candidate& operator[](size_t i) const { return m_items[i]; }
  // Index of (template, params), or npos.
  size_t find(std::string_view template_name, const Params& params) const;
  // Every candidate with exactly these params, one per template that has them, in template
  // order: seeds given as params (a neighbouring shape's winners) match across templates.
  std::vector<size_t> find_all(const Params& params) const;
  // Candidates of the same template differing in one param by one step of its domain.
  const std::vector<size_t>& neighbours(size_t i) const;
  // How many templates the candidates come from (features[0] is below this).
  size_t template_count() const { return m_templates.size(); }

  static constexpr size_t npos = size_t(-1);

 private:
  std::vector<Candidate> m_items;
  std::vector<std::string> m_templates;
  std::vector<std::vector<ParamDomain>> m_domains;  // per template
  mutable std::vector<std::vector<size_t>> m_neighbours;
  mutable bool m_neighbours_ready = false;
  std::unordered_map<std::string, size_t> m_index;
};

struct Observation {
  size_t index = 0;
  double value = std::numeric_limits<double>::infinity();  // microseconds; inf = failed
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string_view name() const = 0;
  // Up to n indices never proposed nor observed before; empty when it has nothing left to try.
  virtual std::vector<size_t> propose(size_t n) = 0;
  // Tells the strategy what was measured. An index it never proposed (measured by an earlier
  // job that this one resumes) counts as measured all the same: it is never proposed afterwards.
  virtual void observe(const std::vector<Observation>& results) = 0;
};

// Stops a job: trials, wall time, or a target time reached. Zero = no limit.
struct Budget {
  int max_trials = 0;
  double max_seconds = 0;
  double target_us = 0;

  bool exhausted(int trials, double elapsed_s, double best_us) const {
    return (max_trials > 0 && trials >= max_trials) ||
           (max_seconds > 0 && elapsed_s >= max_seconds) || (target_us > 0 && best_us <= target_us);
  }
};

}  // namespace ktune
