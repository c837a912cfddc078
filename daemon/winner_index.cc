#include "daemon/winner_index.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <set>

namespace ktune {

std::string WinnerIndex::family_key(const std::string& device_id, const Problem& p) {
  std::string k = device_id + "/" + p.op + "|" + p.dtype + "|" + p.out_dtype + "|" + p.layout + "|";
  for (size_t i = 0; i < p.dims.size(); ++i) k += (i ? "," : "") + p.dims[i].first;
  return k;
}

void WinnerIndex::insert_locked(WinnerRecord record) {
  const std::string key = record.key();
  const std::string device_id = record.device.id();
  const std::string family = family_key(device_id, record.problem);
  m_device_ids.insert(device_id);
  auto ptr = std::make_shared<const WinnerRecord>(std::move(record));
  Entry entry{ptr, {}};
  for (const auto& [_, v] : ptr->problem.dims) entry.log2_dims.push_back(std::log2(double(v)));
  auto& members = m_families[family];
  if (auto it = m_by_key.find(key); it != m_by_key.end()) {
    std::erase_if(members, [&](const Entry& e) { return e.record == it->second; });
    it->second = ptr;
  } else {
    m_by_key.emplace(key, ptr);
  }
  members.push_back(std::move(entry));
}

void WinnerIndex::load(std::vector<WinnerRecord> records) {
  std::unique_lock lock(m_mutex);
  m_by_key.clear();
  m_families.clear();
  m_device_ids.clear();
  for (auto& r : records) insert_locked(std::move(r));
  m_generation.fetch_add(1, std::memory_order_release);
}

void WinnerIndex::upsert(WinnerRecord record) {
  std::unique_lock lock(m_mutex);
  insert_locked(std::move(record));
  m_generation.fetch_add(1, std::memory_order_release);
}

void WinnerIndex::upsert(std::vector<WinnerRecord> records) {
  if (records.empty()) return;
  std::unique_lock lock(m_mutex);
  for (auto& r : records) insert_locked(std::move(r));
  m_generation.fetch_add(1, std::memory_order_release);
}

std::shared_ptr<const WinnerRecord> WinnerIndex::exact(const std::string& device_id,
                                                       const Problem& problem) const {
  std::shared_lock lock(m_mutex);
  auto it = m_by_key.find(device_id + "/" + problem.key());
  return it == m_by_key.end() ? nullptr : it->second;
}

std::vector<WinnerIndex::Near> WinnerIndex::nearest(const std::string& device_id,
                                                    const Problem& problem, double radius,
                                                    size_t max) const {
  std::vector<double> target;
  for (const auto& [_, v] : problem.dims) target.push_back(std::log2(double(v)));
  std::vector<Near> out;
  {
    std::shared_lock lock(m_mutex);
    auto it = m_families.find(family_key(device_id, problem));
    if (it == m_families.end()) return out;
    for (const auto& e : it->second) {
      double d = 0;
      for (size_t i = 0; i < target.size(); ++i) d += std::abs(target[i] - e.log2_dims[i]);
      if (d > 0 && d <= radius) out.push_back({e.record, d});
    }
  }
  std::sort(out.begin(), out.end(), [](const Near& a, const Near& b) {
    if (a.distance != b.distance) return a.distance < b.distance;
    return a.record->problem.key() < b.record->problem.key();
  });
  if (out.size() > max) out.resize(max);
  return out;
}

size_t WinnerIndex::size() const {
  std::shared_lock lock(m_mutex);
  return m_by_key.size();
}

std::vector<std::string> WinnerIndex::device_ids() const {
  std::shared_lock lock(m_mutex);
  return {m_device_ids.begin(), m_device_ids.end()};
}

}  // namespace ktune
