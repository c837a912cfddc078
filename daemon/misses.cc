#include "daemon/misses.h"

#include <algorithm>
#include <cmath>

namespace ktune {
namespace {

// Heap bytes of a string beyond its object (libstdc++ keeps up to 15 chars inline), with the
// allocator's header.
size_t heap_bytes(const std::string& s) {
  return s.capacity() > 15 ? s.capacity() + 1 + 16 : 0;
}

// A hash node (link, cached hash, the key and the slot), a bucket, a set node (three links, a
// colour, the rank) and the allocator's headers of both nodes.
constexpr size_t k_node_overhead = 8 + 8 + 8 + 48 + 32 + 32;

// Worth must order strictly (a NaN would break the rankings' ordering).
double finite_or_zero(double v) {
  return std::isfinite(v) ? v : 0;
}

}  // namespace

MissTracker::MissTracker(size_t max_bytes, std::chrono::milliseconds retry_base)
    : m_max_bytes(max_bytes), m_retry_base(retry_base) {}

std::string MissTracker::key_of(const DeviceClass& device, const Problem& problem) {
  return key_of(device.id(), problem);
}

std::string MissTracker::key_of(std::string_view device_id, const Problem& problem) {
  std::string key(device_id);
  key += '/';
  key += problem.key();
  return key;
}

void MissTracker::record(const DeviceClass& device, const Problem& problem,
                         const std::string& reason, double expected_us, double gain) {
  record(key_of(device, problem), device, problem, reason, expected_us, gain);
}

void MissTracker::record(const std::string& key, const DeviceClass& device, const Problem& problem,
                         const std::string& reason, double expected_us, double gain,
                         std::uint64_t times) {
  if (times == 0) return;
  std::lock_guard lock(m_mutex);
  m_total += times;
  auto [it, inserted] = m_misses.try_emplace(key);
  Slot& slot = it->second;
  Miss& m = slot.miss;
  if (inserted) {
    m.device = device;
    m.problem = problem;
  }
  m.count += times;
  m.reason = reason;
  m.expected_us = finite_or_zero(expected_us);
  m.gain = finite_or_zero(gain);
  m.worth_us = finite_or_zero(double(m.count) * m.expected_us * m.gain);
  if (inserted)
    slot.rank = m_waiting.insert(Rank{m.worth_us, m.count, &it->first}).first;
  else
    rerank_locked(it, m.promoted);
  size_t bytes = sizeof(*it) + k_node_overhead + heap_bytes(it->first) + heap_bytes(m.device.name) +
                 heap_bytes(m.problem.op) + heap_bytes(m.problem.dtype) +
                 heap_bytes(m.problem.out_dtype) + heap_bytes(m.problem.layout) +
                 heap_bytes(m.reason) + m.problem.dims.capacity() * sizeof(m.problem.dims.front()) +
                 16;
  for (const auto& [name, _] : m.problem.dims) bytes += heap_bytes(name);
  m_bytes = m_bytes - slot.bytes + bytes;
  slot.bytes = bytes;
  if (m_bytes > m_max_bytes) evict_locked(&it->first);
}

void MissTracker::rerank_locked(Map::iterator it, bool was_promoted) {
  Slot& slot = it->second;
  Ranking& from = was_promoted ? m_promoted : m_waiting;
  const Rank rank{slot.miss.worth_us, slot.miss.count, &it->first};
  // A repeated miss only gains worth: most keep their place (the one before still ranks ahead),
  // and a hinted insert there costs O(1) instead of a descent of the tree.
  const bool stays =
      &from == &ranking_of(slot) &&
      (slot.rank == from.begin() || MoreWorth{}(*std::prev(slot.rank), rank)) &&
      (std::next(slot.rank) == from.end() || MoreWorth{}(rank, *std::next(slot.rank)));
  const auto next = std::next(slot.rank);
  auto node = from.extract(slot.rank);
  node.value() = rank;
  slot.rank = stays ? ranking_of(slot).insert(next, std::move(node))
                    : ranking_of(slot).insert(std::move(node)).position;
}

void MissTracker::evict_locked(const std::string* keep) {
  // The least worth key of a ranking other than `keep` (at most two steps from its end).
  auto least = [keep](Ranking& r) {
    for (auto it = r.end(); it != r.begin();)
      if ((--it)->key != keep) return it;
    return r.end();
  };
  while (m_bytes > m_max_bytes) {
    const auto waiting = least(m_waiting);
    const auto promoted = least(m_promoted);
    if (waiting == m_waiting.end() && promoted == m_promoted.end()) return;  // only `keep`
    const bool from_promoted = waiting == m_waiting.end() ||
                               (promoted != m_promoted.end() && promoted->worth <= waiting->worth);
    const auto victim = from_promoted ? promoted : waiting;
    const auto slot = m_misses.find(*victim->key);
    m_bytes -= slot->second.bytes;
    (from_promoted ? m_promoted : m_waiting).erase(victim);
    m_misses.erase(slot);
    ++m_evicted;
  }
}

void MissTracker::add_source(const void* owner, std::function<void()> record_pending) {
  std::lock_guard lock(m_fold_mutex);
  m_sources.emplace_back(owner, std::move(record_pending));
}

void MissTracker::remove_source(const void* owner) {
  std::lock_guard lock(m_fold_mutex);
  std::erase_if(m_sources, [owner](const auto& s) { return s.first == owner; });
}

void MissTracker::fold() const {
  std::lock_guard lock(m_fold_mutex);
  for (const auto& [_, record_pending] : m_sources) record_pending();
}

std::vector<MissTracker::Miss> MissTracker::top(size_t n) const {
  fold();
  std::vector<Miss> out;
  std::lock_guard lock(m_mutex);
  out.reserve(std::min(n, m_misses.size()));
  // Merge the two rankings, most worth first.
  auto w = m_waiting.begin();
  auto p = m_promoted.begin();
  while (out.size() < n && (w != m_waiting.end() || p != m_promoted.end())) {
    const bool take_w = p == m_promoted.end() || (w != m_waiting.end() && !MoreWorth{}(*p, *w));
    const Rank& r = *(take_w ? w++ : p++);
    out.push_back(m_misses.find(*r.key)->second.miss);
  }
  return out;
}

std::vector<MissTracker::Miss> MissTracker::due(double threshold_us) {
  fold();
  std::vector<Miss> out;
  std::lock_guard lock(m_mutex);
  // The waiting ranking is in worth order: the due keys are in a prefix of it, less those
  // backing off after a failed job (few: they are skipped, not moved).
  const auto now = std::chrono::steady_clock::now();
  std::vector<Map::iterator> due;
  for (auto r = m_waiting.begin(); r != m_waiting.end() && r->worth >= threshold_us; ++r) {
    const auto it = m_misses.find(*r->key);
    if (it->second.retry_at <= now) due.push_back(it);
  }
  for (const auto it : due) {
    it->second.miss.promoted = true;
    rerank_locked(it, false);
    out.push_back(it->second.miss);
  }
  return out;
}

void MissTracker::release(const std::string& device_id, const Problem& problem) {
  std::lock_guard lock(m_mutex);
  auto it = m_misses.find(key_of(device_id, problem));
  if (it == m_misses.end() || !it->second.miss.promoted) return;
  it->second.miss.promoted = false;
  rerank_locked(it, true);
}

void MissTracker::failed(const std::string& device_id, const Problem& problem) {
  std::lock_guard lock(m_mutex);
  auto it = m_misses.find(key_of(device_id, problem));
  if (it == m_misses.end()) return;
  Slot& slot = it->second;
  slot.failures = std::min(slot.failures + 1, 7);
  slot.retry_at = std::chrono::steady_clock::now() + m_retry_base * (1 << (slot.failures - 1));
  if (!slot.miss.promoted) return;
  slot.miss.promoted = false;
  rerank_locked(it, true);
}

std::optional<std::chrono::steady_clock::time_point> MissTracker::retry_at(
    const std::string& device_id, const Problem& problem) const {
  std::lock_guard lock(m_mutex);
  auto it = m_misses.find(key_of(device_id, problem));
  if (it == m_misses.end() || it->second.retry_at <= std::chrono::steady_clock::now())
    return std::nullopt;
  return it->second.retry_at;
}

std::uint64_t MissTracker::total() const {
  fold();
  std::lock_guard lock(m_mutex);
  return m_total;
}

size_t MissTracker::distinct() const {
  fold();
  std::lock_guard lock(m_mutex);
  return m_misses.size();
}

MissTracker::Stats MissTracker::stats() const {
  fold();
  std::lock_guard lock(m_mutex);
  return {m_total, m_misses.size(), m_bytes, m_max_bytes, m_evicted};
}

}  // namespace ktune
