#include "tuner/strategy/strategy.h"

#include <algorithm>

namespace ktune {

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

std::vector<size_t> CandidateSet::find_all(const Params& params) const {
  std::vector<size_t> out;
  for (const auto& t : m_templates)
    if (size_t i = find(t, params); i != npos) out.push_back(i);
  return out;
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

}  // namespace ktune
