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

std::unique_ptr<WinnerIndex::State> WinnerIndex::State::copy() const {
  auto out = std::make_unique<State>();
  out->device_ids = device_ids;
  std::unordered_map<const Family*, Family*> moved;
  moved.reserve(families.size());
  for (const auto& [name, family] : families)
    moved.emplace(&family, &out->families.try_emplace(name, family).first->second);
  out->by_key = by_key;  // a copy keeps the buckets: no key is hashed again
  for (auto& [_, entry] : out->by_key) entry.family = moved.at(entry.family);
  return out;
}

WinnerIndex::Family* WinnerIndex::State::insert(WinnerRecord record) {
  std::string key = record.key();
  auto ptr = std::make_shared<const WinnerRecord>(std::move(record));
  if (auto it = by_key.find(key); it != by_key.end()) {
    // Same key, same problem: the same point in its family's tree, only the record changes.
    Entry& e = it->second;
    e.family->records[e.slot] = ptr;
    e.family->configs[e.slot] = config_hash(*ptr);
    e.record = std::move(ptr);
    return nullptr;
  }
  const std::string device_id = ptr->device.id();
  device_ids.insert(device_id);
  const std::string family_name = family_key(device_id, ptr->problem);
  Family& family = families.try_emplace(family_name, ptr->problem.dims.size()).first->second;
  const std::uint32_t slot = family.shapes.add(log2_dims(ptr->problem), ptr->problem.key());
  family.records.push_back(ptr);
  family.configs.push_back(config_hash(*ptr));
  by_key.emplace(std::move(key), Entry{std::move(ptr), &family, slot});
  return &family;
}

WinnerIndex::Change WinnerIndex::change_of(const WinnerRecord& record) {
  return Change{0, std::hash<std::string>{}(family_key(record.device.id(), record.problem)),
                log2_dims(record.problem)};
}

void WinnerIndex::apply(State& state, std::vector<WinnerRecord> records) {
  std::set<Family*> grown;
  for (auto& r : records)
    if (Family* family = state.insert(std::move(r))) grown.insert(family);
  for (Family* family : grown) family->shapes.settle();
}

void WinnerIndex::publish_locked(std::optional<std::vector<Change>> changes, DeviceIds ids) {
  const std::uint64_t next = m_generation.load(std::memory_order_relaxed) + 1;
  if (!changes) {
    clear_changes_locked(next);
  } else {
    for (Change& change : *changes) {
      change.generation = next;
      m_changes.push_back(std::move(change));
    }
    while (m_changes.size() > k_change_log) {
      // Every change after the dropped one's generation is still logged.
      m_described_since.store(m_changes.front().generation, std::memory_order_release);
      m_changes.pop_front();
    }
  }
  if (ids == DeviceIds::changed) m_device_ids_version.fetch_add(1, std::memory_order_acq_rel);
  m_generation.store(next, std::memory_order_release);
}

void WinnerIndex::clear_changes_locked(std::uint64_t generation) {
  m_changes.clear();
  m_described_since.store(generation, std::memory_order_release);
}

void WinnerIndex::load(std::vector<WinnerRecord> records) {
  std::lock_guard writer(m_write_mutex);
  auto state = std::make_unique<State>();
  apply(*state, std::move(records));
  {
    std::unique_lock lock(m_mutex);
    m_state.swap(state);
    publish_locked(std::nullopt, DeviceIds::changed);
  }
  // `state`, the old content, is freed here: outside the readers' lock.
}

void WinnerIndex::upsert(WinnerRecord record) {
  std::vector<WinnerRecord> one;
  one.push_back(std::move(record));
  upsert(std::move(one));
}

void WinnerIndex::upsert(std::vector<WinnerRecord> records) {
  if (records.empty()) return;
  std::lock_guard writer(m_write_mutex);
  // Only writers change m_state, and they hold m_write_mutex: it is read here without m_mutex.
  const State& now = *m_state;
  const size_t known_ids = now.device_ids.size();
  std::optional<std::vector<Change>> changes;
  if (records.size() <= k_change_log && std::ranges::all_of(records, [&](const WinnerRecord& r) {
        return now.device_ids.contains(r.device.id());
      })) {
    changes.emplace();
    changes->reserve(records.size());
    for (const auto& r : records) changes->push_back(change_of(r));
  }
  // A large batch is applied to a copy outside the readers' lock; a small one in place under it.
  std::unique_ptr<State> aside;
  if (records.size() > k_in_place_batch) {
    aside = now.copy();
    apply(*aside, std::move(records));
  }
  {
    std::unique_lock lock(m_mutex);
    if (aside)
      m_state.swap(aside);
    else
      apply(*m_state, std::move(records));
    publish_locked(std::move(changes), m_state->device_ids.size() != known_ids
                                           ? DeviceIds::changed
                                           : DeviceIds::unchanged);
  }
  // `aside`, now the old state if the batch was built aside, is freed here, outside the readers'
  // lock: the records the batch replaced go with it.
}

void WinnerIndex::invalidate_answers() {
  std::unique_lock lock(m_mutex);
  publish_locked(std::nullopt, DeviceIds::unchanged);
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
  auto it = m_state->by_key.find(device_id + "/" + problem.key());
  return it == m_state->by_key.end() ? nullptr : it->second.record;
}

std::vector<WinnerIndex::Near> WinnerIndex::nearest(const std::string& device_id,
                                                    const Problem& problem, double radius,
                                                    size_t max) const {
  const std::vector<double> target = log2_dims(problem);
  const std::string family_name = family_key(device_id, problem);
  std::vector<Near> out;
  std::shared_lock lock(m_mutex);
  auto it = m_state->families.find(family_name);
  if (it == m_state->families.end()) return out;
  const Family& family = it->second;
  for (const auto& hit : family.shapes.nearest(target, radius, max))
    out.push_back({family.records[hit.slot], hit.distance, family.configs[hit.slot]});
  return out;
}

size_t WinnerIndex::size() const {
  std::shared_lock lock(m_mutex);
  return m_state->by_key.size();
}

std::vector<std::shared_ptr<const WinnerRecord>> WinnerIndex::all() const {
  std::vector<std::pair<const std::string*, std::shared_ptr<const WinnerRecord>>> keyed;
  std::shared_lock lock(m_mutex);
  keyed.reserve(m_state->by_key.size());
  for (const auto& [key, entry] : m_state->by_key) keyed.emplace_back(&key, entry.record);
  std::sort(keyed.begin(), keyed.end(),
            [](const auto& a, const auto& b) { return *a.first < *b.first; });
  std::vector<std::shared_ptr<const WinnerRecord>> out;
  out.reserve(keyed.size());
  for (auto& [_, r] : keyed) out.push_back(std::move(r));
  return out;
}

std::vector<std::string> WinnerIndex::device_ids() const {
  std::shared_lock lock(m_mutex);
  return {m_state->device_ids.begin(), m_state->device_ids.end()};
}

}  // namespace ktune
