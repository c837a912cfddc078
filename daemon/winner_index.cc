#include "daemon/winner_index.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <set>

#include <xxhash.h>

namespace ktune {

std::string WinnerIndex::family_key(const std::string& device_id, const Problem& p) {
  std::string k = device_id + "/" + p.op + "|" + p.dtype + "|" + p.out_dtype + "|" + p.layout + "|";
  for (size_t i = 0; i < p.dims.size(); ++i) k += (i ? "," : "") + p.dims[i].first;
  return k;
}

std::uint64_t WinnerIndex::config_hash(const WinnerRecord& record) {
  if (record.ranked.empty()) return 0;
  const RankedConfig& c = record.ranked.front();
  std::string bytes = c.template_name;
  for (const auto& [name, value] : c.params) {
    bytes += '\0';
    bytes += name;
    bytes += '=';
    bytes += std::to_string(value);
  }
  return XXH3_64bits(bytes.data(), bytes.size());
}

namespace {

std::vector<double> log2_dims(const Problem& p) {
  std::vector<double> out;
  out.reserve(p.dims.size());
  for (const auto& [_, v] : p.dims) out.push_back(std::log2(double(v)));
  return out;
}

}  // namespace

WinnerIndex::Family* WinnerIndex::insert_locked(WinnerRecord record) {
  std::string key = record.key();
  auto ptr = std::make_shared<const WinnerRecord>(std::move(record));
  if (auto it = m_by_key.find(key); it != m_by_key.end()) {
    // Same key, same problem: the same point in its family's tree, only the record changes.
    Entry& e = it->second;
    e.family->records[e.slot] = ptr;
    e.family->configs[e.slot] = config_hash(*ptr);
    e.record = std::move(ptr);
    return nullptr;
  }
  const std::string device_id = ptr->device.id();
  if (m_device_ids.insert(device_id).second)
    m_device_ids_version.fetch_add(1, std::memory_order_acq_rel);
  const std::string family_name = family_key(device_id, ptr->problem);
  Family& family = m_families.try_emplace(family_name, ptr->problem.dims.size()).first->second;
  const std::uint32_t slot = family.shapes.add(log2_dims(ptr->problem), ptr->problem.key());
  family.records.push_back(ptr);
  family.configs.push_back(config_hash(*ptr));
  m_by_key.emplace(std::move(key), Entry{std::move(ptr), &family, slot});
  return &family;
}

void WinnerIndex::log_change_locked(const WinnerRecord& record, std::uint64_t generation) {
  m_changes.push_back(
      Change{generation, std::hash<std::string>{}(family_key(record.device.id(), record.problem)),
             log2_dims(record.problem)});
  while (m_changes.size() > k_change_log) {
    // Every change after the dropped one's generation is still logged.
    m_described_since.store(m_changes.front().generation, std::memory_order_release);
    m_changes.pop_front();
  }
}

void WinnerIndex::clear_changes_locked(std::uint64_t generation) {
  m_changes.clear();
  m_described_since.store(generation, std::memory_order_release);
}

void WinnerIndex::load(std::vector<WinnerRecord> records) {
  std::unique_lock lock(m_mutex);
  const std::uint64_t next = m_generation.load(std::memory_order_relaxed) + 1;
  m_by_key.clear();
  m_families.clear();
  m_device_ids.clear();
  m_device_ids_version.fetch_add(1, std::memory_order_acq_rel);
  for (auto& r : records) insert_locked(std::move(r));
  for (auto& [_, family] : m_families) family.shapes.settle();
  clear_changes_locked(next);
  publish_locked(next);
}

void WinnerIndex::upsert(WinnerRecord record) {
  std::unique_lock lock(m_mutex);
  const std::uint64_t next = m_generation.load(std::memory_order_relaxed) + 1;
  if (m_device_ids.contains(record.device.id()))
    log_change_locked(record, next);
  else
    clear_changes_locked(next);
  if (Family* family = insert_locked(std::move(record))) family->shapes.settle();
  publish_locked(next);
}

void WinnerIndex::upsert(std::vector<WinnerRecord> records) {
  if (records.empty()) return;
  std::unique_lock lock(m_mutex);
  const std::uint64_t next = m_generation.load(std::memory_order_relaxed) + 1;
  const bool described =
      records.size() <= k_change_log && std::ranges::all_of(records, [&](const WinnerRecord& r) {
        return m_device_ids.contains(r.device.id());
      });
  if (!described) clear_changes_locked(next);
  std::set<Family*> grown;
  for (auto& r : records) {
    if (described) log_change_locked(r, next);
    if (Family* family = insert_locked(std::move(r))) grown.insert(family);
  }
  for (Family* family : grown) family->shapes.settle();
  publish_locked(next);
}

void WinnerIndex::invalidate_answers() {
  std::unique_lock lock(m_mutex);
  const std::uint64_t next = m_generation.load(std::memory_order_relaxed) + 1;
  clear_changes_locked(next);
  publish_locked(next);
}

std::optional<std::uint64_t> WinnerIndex::untouched_since(const std::string& device_id,
                                                          const Problem& problem,
                                                          std::uint64_t since,
                                                          double radius) const {
  const std::size_t family = std::hash<std::string>{}(family_key(device_id, problem));
  const std::vector<double> point = log2_dims(problem);
  // A little over the radius: a distance summed in another order than the tree's may differ in
  // the last bits, and an answer invalidated in doubt is only rebuilt.
  const double reach = radius + 1e-9 * (1 + radius);
  std::shared_lock lock(m_mutex);
  if (since < m_described_since.load(std::memory_order_relaxed)) return std::nullopt;
  auto it = std::ranges::upper_bound(m_changes, since, {}, &Change::generation);
  for (; it != m_changes.end(); ++it) {
    if (it->family != family || it->dims.size() != point.size()) continue;
    double distance = 0;
    for (size_t i = 0; i < point.size(); ++i) distance += std::abs(it->dims[i] - point[i]);
    if (distance <= reach) return std::nullopt;
  }
  return m_generation.load(std::memory_order_relaxed);
}

std::shared_ptr<const WinnerRecord> WinnerIndex::exact(const std::string& device_id,
                                                       const Problem& problem) const {
  std::shared_lock lock(m_mutex);
  auto it = m_by_key.find(device_id + "/" + problem.key());
  return it == m_by_key.end() ? nullptr : it->second.record;
}

std::vector<WinnerIndex::Near> WinnerIndex::nearest(const std::string& device_id,
                                                    const Problem& problem, double radius,
                                                    size_t max) const {
  const std::vector<double> target = log2_dims(problem);
  const std::string family_name = family_key(device_id, problem);
  std::vector<Near> out;
  std::shared_lock lock(m_mutex);
  auto it = m_families.find(family_name);
  if (it == m_families.end()) return out;
  const Family& family = it->second;
  for (const auto& hit : family.shapes.nearest(target, radius, max))
    out.push_back({family.records[hit.slot], hit.distance, family.configs[hit.slot]});
  return out;
}

size_t WinnerIndex::size() const {
  std::shared_lock lock(m_mutex);
  return m_by_key.size();
}

std::vector<std::shared_ptr<const WinnerRecord>> WinnerIndex::all() const {
  std::vector<std::pair<const std::string*, std::shared_ptr<const WinnerRecord>>> keyed;
  std::shared_lock lock(m_mutex);
  keyed.reserve(m_by_key.size());
  for (const auto& [key, entry] : m_by_key) keyed.emplace_back(&key, entry.record);
  std::sort(keyed.begin(), keyed.end(),
            [](const auto& a, const auto& b) { return *a.first < *b.first; });
  std::vector<std::shared_ptr<const WinnerRecord>> out;
  out.reserve(keyed.size());
  for (auto& [_, r] : keyed) out.push_back(std::move(r));
  return out;
}

std::vector<std::string> WinnerIndex::device_ids() const {
  std::shared_lock lock(m_mutex);
  return {m_device_ids.begin(), m_device_ids.end()};
}

}  // namespace ktune
