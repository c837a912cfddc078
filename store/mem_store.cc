#include "store/mem_store.h"

#include <vector>

namespace ktune {

std::string_view table_name(Table table) {
  switch (table) {
    case Table::winners:
      return "winners";
    case Table::trials:
      return "trials";
    case Table::cubins:
      return "cubins";
    case Table::jobs:
      return "jobs";
    case Table::blocklist:
      return "blocklist";
    case Table::meta:
      return "meta";
  }
  return "unknown";
}

Result<std::optional<std::string>> MemStore::get(Table t, std::string_view key) {
  std::lock_guard lock(m_mutex);
  const auto& m = table(t);
  auto it = m.find(key);
  if (it == m.end()) return std::optional<std::string>();
  return std::optional<std::string>(it->second);
}

Result<void> MemStore::put(Table t, std::string_view key, std::string_view value, Durability) {
  std::lock_guard lock(m_mutex);
  table(t).insert_or_assign(std::string(key), std::string(value));
  return {};
}

Result<void> MemStore::remove(Table t, std::string_view key, Durability) {
  std::lock_guard lock(m_mutex);
  auto& m = table(t);
  if (auto it = m.find(key); it != m.end()) m.erase(it);
  return {};
}

Result<void> MemStore::scan(Table t, std::string_view prefix, const ScanFn& fn) {
  // Copy the matching range first so fn runs without the lock (it may read this store).
  std::vector<std::pair<std::string, std::string>> rows;
  {
    std::lock_guard lock(m_mutex);
    const auto& m = table(t);
    for (auto it = m.lower_bound(prefix); it != m.end() && it->first.starts_with(prefix); ++it)
      rows.emplace_back(it->first, it->second);
  }
  for (const auto& [k, v] : rows)
    if (!fn(k, v)) break;
  return {};
}

Result<void> MemStore::write(const WriteBatch& batch, Durability) {
  std::lock_guard lock(m_mutex);
  for (const auto& op : batch.ops()) {
    auto& m = table(op.table);
    if (op.value)
      m.insert_or_assign(op.key, *op.value);
    else if (auto it = m.find(op.key); it != m.end())
      m.erase(it);
  }
  return {};
}

}  // namespace ktune
